"""Which tools a response offers and which call it must make, checked the same way for both APIs. Pure.

A request declares function tools (Chat Completions ``tools[i].function``, Realtime ``session.tools[i]``)
and a ``tool_choice``. ``check`` turns the declarations into ``Tool``s: their schemas within
``models.schema_budget`` (a bounded walk, before anything compiles), each one a grammar can follow, names
unique. ``choose`` turns a choice into a ``ToolPlan``: the tools described in the prompt, the names a
call may carry and, for a forced call, the grammar the whole answer decodes under. Each API maps a
``ToolPlanError`` onto its own error, naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import constrain, schema_budget
from .toolcalls import Tool

NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class ToolPlanError(Exception):
    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.message, self.param = message, param


@dataclass(frozen=True)
class Declared:
    """One function tool as a request declares it; ``path`` is where it is in the request."""

    name: str
    description: str | None
    parameters: dict[str, Any] | None
    path: str  # "tools[0].function" (Chat Completions), "session.tools[0]" (Realtime)


@dataclass(frozen=True)
class ToolPlan:
    tools: list[Tool] = field(default_factory=list)  # described to the model in the prompt
    known: frozenset[str] = frozenset()  # names a call may carry
    grammar: str | None = None  # the whole answer decodes under it (a forced call, a response format)
    parallel: bool = True  # several calls in one answer (parallel_tool_calls)


def check_budget(
    declared: Sequence[Declared], where: str, more: Sequence[tuple[str, Any]] = (), count: int | None = None
) -> None:
    """The declared schemas (and ``more``: (field, schema)) within the budget; ``count``: the tools
    the request lists, when it lists more than these (``where``: their field)."""
    schemas = [(f"{d.path}.parameters", d.parameters) for d in declared if d.parameters is not None]
    try:
        schema_budget.check(
            [*schemas, *more], schema_budget.SchemaBudget(), len(declared) if count is None else count, where
        )
    except schema_budget.TooComplex as exc:
        raise ToolPlanError(exc.message, exc.param) from None


def check(declared: Sequence[Declared]) -> list[Tool]:
    """Each declaration as a ``Tool`` whose schema a grammar can follow (the check is cached by the
    schema's hash: a session's tools cost nothing again at each response)."""
    tools: list[Tool] = []
    for d in declared:
        params = d.parameters if d.parameters is not None else NO_PARAMETERS
        try:
            constrain.check_schema(params, f"{d.path}.parameters")
        except constrain.GrammarError as exc:
            raise ToolPlanError(str(exc), f"{d.path}.parameters") from None
        if any(t.name == d.name for t in tools):
            raise ToolPlanError(f"two tools are named {d.name!r}", f"{d.path}.name")
        tools.append(Tool(d.name, d.description or "", params))
    return tools


def choose(
    tools: list[Tool], choice: str, named: str | None, param: str, parallel: bool, forced_parallel: bool
) -> ToolPlan:
    """``choice``: "auto" | "none" | "required" (ignored when ``named`` names a tool to call);
    ``param``: the choice's field. A named call is one call; ``required`` is several when
    ``forced_parallel`` (a small model under a grammar that allowed more wrote the same call twice,
    so the Realtime API forces exactly one)."""
    known = frozenset(t.name for t in tools)
    if named is not None:
        if named not in known:
            raise ToolPlanError(f"tool_choice names {named!r}, which is not in tools", param)
        chosen = [t.spec() for t in tools if t.name == named]
        return ToolPlan(tools, known, constrain.tool_call_grammar(chosen, parallel=False), parallel=False)
    if choice == "required":
        if not tools:
            raise ToolPlanError("tool_choice 'required' needs tools", param)
        grammar = constrain.tool_call_grammar([t.spec() for t in tools], parallel=forced_parallel)
        return ToolPlan(tools, known, grammar, parallel=forced_parallel)
    if choice == "none":
        return ToolPlan(parallel=parallel)
    return ToolPlan(tools, known, parallel=parallel)
