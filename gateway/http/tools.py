"""Chat Completions ``tools`` / ``tool_choice`` / ``response_format``: checking them, the prompt, the grammar,
and the ``tool_calls`` the answer carries. Pure except for ``constraint`` (runs in a worker thread).

* ``auto``: the tools are described in the system prompt; calls the model writes in its own markup
  (``<tool_call>{…}</tool_call>``) are cut out of the text by the chunk scheduler and returned as
  ``tool_calls``; one that does not parse or names no offered tool is dropped (never shown as text).
* ``required`` / a named function: the answer is decoded under a grammar of calls, so it always is
  one (or, with ``parallel_tool_calls``, several) well-formed call whose arguments validate.
* ``none``: no tools in the prompt; markup is still cut out, calls are dropped.
* ``response_format`` ``json_schema`` / ``json_object``: the answer is decoded under the schema.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from models import constrain, schema_budget, toolcalls
from models.toolcalls import ParsedCall, Tool

from .errors import ApiError
from .schemas import ChatRequest, NamedToolChoice, ToolDef


@dataclass(frozen=True)
class ToolPlan:
    tools: list[Tool] = field(default_factory=list)  # described to the model in the prompt
    known: frozenset[str] = frozenset()  # names a call may carry
    grammar: str | None = None  # the whole answer decodes under it (forced calls, response_format)
    intercept: bool = False  # cut tool-call markup out of the text


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, "invalid_value", message, param)


def check_budget(req: ChatRequest) -> None:
    """The tools' and response_format's schemas within ``models.schema_budget`` (cheap: before any
    compilation); else ``invalid_request_error`` naming the field."""
    schemas: list[tuple[str, Any]] = [
        (f"tools[{i}].function.parameters", t.function.parameters)
        for i, t in enumerate(req.tools or [])
        if isinstance(t, ToolDef) and t.function.parameters is not None
    ]
    fmt = req.response_format
    if fmt is not None and fmt.json_schema is not None and fmt.json_schema.schema_ is not None:
        schemas.append(("response_format.json_schema.schema", fmt.json_schema.schema_))
    try:
        schema_budget.check(schemas, schema_budget.SchemaBudget(), len(req.tools or []), "tools")
    except schema_budget.TooComplex as exc:
        raise ApiError(400, "schema_too_complex", exc.message, exc.param) from None


def plan(req: ChatRequest, extra: list[Tool] | None = None) -> ToolPlan:
    """Check tools, tool_choice, response_format and tool-call history; ``ApiError`` names the field.
    ``extra``: more tools to offer (MCP servers' tools, gateway.tools.chat), checked already.
    Compiles the schemas (cached by hash): run it off the event loop (``gateway.grammars``)."""
    check_budget(req)
    tools: list[Tool] = []
    for i, t in enumerate(req.tools or []):
        if not isinstance(t, ToolDef):  # an mcp server: its tools come in extra
            continue
        params = t.function.parameters if t.function.parameters is not None else {"type": "object", "properties": {}}
        where = f"tools[{i}].function.parameters"
        try:
            constrain.check_schema(params, where)
        except constrain.GrammarError as exc:
            raise _bad(str(exc), where) from None
        if any(x.name == t.function.name for x in tools):
            raise _bad(f"two tools are named {t.function.name!r}", f"tools[{i}].function.name")
        tools.append(Tool(t.function.name, t.function.description, params))
    tools += extra or []
    for i, m in enumerate(req.messages):
        for j, c in enumerate(m.tool_calls or []):
            try:
                ok = isinstance(json.loads(c.function.arguments), dict)
            except (ValueError, RecursionError):
                ok = False
            if not ok:
                raise _bad("arguments must be a JSON object", f"messages[{i}].tool_calls[{j}].function.arguments")
    choice = req.tool_choice or ("auto" if tools else "none")
    known = frozenset(t.name for t in tools)
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in known:
            raise _bad(f"tool_choice names {choice.function.name!r}, which is not in tools", "tool_choice")
        chosen = [t for t in tools if t.name == choice.function.name]
        grammar = constrain.tool_call_grammar([t.spec() for t in chosen], parallel=False)
        return ToolPlan(tools, known, grammar, True)
    if choice == "required":
        if not tools:
            raise _bad("tool_choice 'required' needs tools", "tool_choice")
        return ToolPlan(
            tools, known, constrain.tool_call_grammar([t.spec() for t in tools], req.parallel_tool_calls), True
        )
    return ToolPlan(
        tools if choice == "auto" else [], known if choice == "auto" else frozenset(), _format_grammar(req), True
    )


def _format_grammar(req: ChatRequest) -> str | None:
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return constrain.json_grammar(None)
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise _bad("response_format json_schema needs json_schema.schema", "response_format.json_schema.schema")
    try:
        constrain.check_schema(fmt.json_schema.schema_, "response_format.json_schema.schema")
    except constrain.GrammarError as exc:
        raise _bad(str(exc), "response_format.json_schema.schema") from None
    return constrain.json_grammar(fmt.json_schema.schema_)


def messages(turns: list[dict[str, Any]], p: ToolPlan) -> list[dict[str, str]]:
    """The request's turns with tools, calls and results in the model's own markup."""
    return toolcalls.render(turns, p.tools)


def constraint(backend: Any, p: ToolPlan) -> Any:
    """The response's grammar mask (builds the vocabulary once per backend: run it off the event loop)."""
    if p.grammar is None:
        return None
    try:
        return constrain.constraint_for(backend, p.grammar)
    except constrain.GrammarError as exc:
        raise ApiError(400, "unsupported_value", f"structured output is not available here: {exc}") from None


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def parse(bodies: list[str], p: ToolPlan) -> list[ParsedCall]:
    out = []
    for body in bodies:
        call = toolcalls.parse_call(body, set(p.known))
        if call is not None:
            out.append(call)
    return out


def message_calls(calls: list[ParsedCall]) -> list[dict[str, Any]]:
    """``message.tool_calls`` of a non-streamed answer."""
    return [
        {"id": new_call_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
    ]


def delta_calls(index: int, call: ParsedCall, piece: int = 16) -> list[dict[str, Any]]:
    """Streamed ``delta.tool_calls`` for one call: its id and name, then its arguments in fragments."""
    out: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {
                    "index": index,
                    "id": new_call_id(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
            ]
        }
    ]
    args = call.arguments
    for i in range(0, len(args), piece):
        out.append({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + piece]}}]})
    return out
