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
from dataclasses import replace
from typing import Any

from models import constrain, toolcalls, toolplan
from models.toolcalls import ParsedCall, Tool
from models.toolplan import Declared, ToolPlan, ToolPlanError

from .error_bodies import ApiError
from .schemas import ChatRequest, NamedToolChoice, ToolDef


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, "invalid_value", message, param)


def _declared(req: ChatRequest) -> list[Declared]:
    """The request's function tools (an ``mcp`` entry's tools come listed, as ``plan``'s ``extra``)."""
    return [
        Declared(t.function.name, t.function.description, t.function.parameters, f"tools[{i}].function")
        for i, t in enumerate(req.tools or [])
        if isinstance(t, ToolDef)
    ]


def check_budget(req: ChatRequest) -> None:
    """The tools' and response_format's schemas within ``models.schema_budget`` (cheap: before any
    compilation); else ``invalid_request_error`` naming the field."""
    fmt = req.response_format
    more: list[tuple[str, Any]] = []
    if fmt is not None and fmt.json_schema is not None and fmt.json_schema.schema_ is not None:
        more.append(("response_format.json_schema.schema", fmt.json_schema.schema_))
    try:
        toolplan.check_budget(_declared(req), "tools", more, count=len(req.tools or []))
    except ToolPlanError as exc:
        raise ApiError(400, "schema_too_complex", exc.message, exc.param) from None


def plan(req: ChatRequest, extra: list[Tool] | None = None) -> ToolPlan:
    """Check tools, tool_choice, response_format and tool-call history; ``ApiError`` names the field.
    ``extra``: more tools to offer (MCP servers' tools, gateway.tools.chat), checked already.
    Compiles the schemas (cached by hash): run it off the event loop (``gateway.core.grammars``)."""
    check_budget(req)
    for i, m in enumerate(req.messages):
        for j, c in enumerate(m.tool_calls or []):
            try:
                ok = isinstance(json.loads(c.function.arguments), dict)
            except (ValueError, RecursionError):
                ok = False
            if not ok:
                raise _bad("arguments must be a JSON object", f"messages[{i}].tool_calls[{j}].function.arguments")
    try:
        tools = toolplan.check(_declared(req)) + (extra or [])
        choice = req.tool_choice or ("auto" if tools else "none")
        named = choice.function.name if isinstance(choice, NamedToolChoice) else None
        chosen = toolplan.choose(
            tools, str(choice), named, "tool_choice", req.parallel_tool_calls, forced_parallel=req.parallel_tool_calls
        )
    except ToolPlanError as exc:
        raise _bad(exc.message, exc.param) from None
    # no forced call: the answer follows response_format, if it asks for one
    return chosen if chosen.grammar is not None else replace(chosen, grammar=_format_grammar(req))


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
