"""Realtime function calling, pure: checking ``tools`` / ``tool_choice``, the grammar of forced calls, and the
``function_call`` output items and events of a call the model made.

A call reaches the session whole — the chunk scheduler cuts the model's ``<tool_call>{…}</tool_call>``
out of the text only once it is closed — so a cancel never leaves half a call in the conversation.
Its arguments still stream as ``response.function_call_arguments.delta`` fragments before ``.done``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from models import toolcalls, toolplan
from models.toolcalls import ParsedCall
from models.toolplan import Declared, ToolPlan, ToolPlanError

from . import protocol as p
from . import server_events as se
from .conversation import Item

ARG_PIECE = 16  # characters of arguments per delta event


ToolError = ToolPlanError  # its message and the field it names ("session.tools[0].parameters")


def plan(
    tools: list[p.FunctionTool] | None, choice: p.ToolChoice | None, where: str, parallel: bool = True
) -> ToolPlan:
    """``where``: "session" or "response" (the field prefix in errors). Raises ``ToolError``.

    A forced call (``required`` or a named tool) is exactly one call: a small model under a grammar that
    allowed more wrote the same call twice, and the client ran its tool twice."""
    declared = [Declared(t.name, t.description, t.parameters, f"{where}.tools[{i}]") for i, t in enumerate(tools or [])]
    toolplan.check_budget(declared, f"{where}.tools")
    named = choice.name if isinstance(choice, p.NamedTool) else None
    mode = choice if isinstance(choice, str) else "auto"
    return toolplan.choose(
        toolplan.check(declared), mode, named, f"{where}.tool_choice", parallel, forced_parallel=False
    )


def call_ids(items: list[Item]) -> set[str]:
    return {i["call_id"] for i in items if i.get("type") == "function_call"}


def call_item(call_id: str, name: str, arguments: str, status: str, item_id: str | None = None) -> Item:
    return {
        "id": item_id or f"item_{secrets.token_hex(8)}",
        "object": "realtime.item",
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def output_item(item: p.FunctionCallOutputItem) -> Item:
    return {
        "id": item.id or f"item_{secrets.token_hex(8)}",
        "object": "realtime.item",
        "type": "function_call_output",
        "status": "completed",
        "call_id": item.call_id,
        "output": item.output,
    }


def parse(body: str, known: frozenset[str]) -> ParsedCall | None:
    return toolcalls.parse_call(body, set(known))


def call_events(
    response_id: str, call: ParsedCall, take_index: Callable[[str], int], previous_item_id: str | None
) -> tuple[Item, list[dict[str, Any]]]:
    """The finished call item and every event that announces it, in order (``take_index``: its output_index)."""
    call_id = f"call_{secrets.token_hex(12)}"
    added = call_item(call_id, call.name, "", "in_progress")
    item = call_item(call_id, call.name, call.arguments, "completed", added["id"])
    index = take_index(item["id"])
    args = call.arguments
    events = [
        se.output_item_added(response_id, index, added),
        se.item_added(previous_item_id, added),
        *(
            se.function_arguments_delta(response_id, item["id"], index, call_id, args[i : i + ARG_PIECE])
            for i in range(0, len(args), ARG_PIECE)
        ),
        se.function_arguments_done(response_id, item["id"], index, call_id, call.name, args),
        se.output_item_done(response_id, index, item),
        se.item_done(item, previous_item_id),
    ]
    return item, events
