"""The MCP items and server events of a Realtime session, in GA shapes. Pure."""

from __future__ import annotations

import secrets
from typing import Any

from ..realtime import server_events as se

Item = dict[str, Any]
ARG_PIECE = 16  # characters of arguments per delta event, as for function calls


def new_id() -> str:
    return f"item_{secrets.token_hex(8)}"


def list_item(item_id: str, label: str, tools: list[dict[str, Any]]) -> Item:
    return {"id": item_id, "type": "mcp_list_tools", "server_label": label, "tools": tools}


def list_started(item_id: str) -> list[dict[str, Any]]:
    return [se.mcp_list_in_progress(item_id)]


def list_finished(item: Item, previous_item_id: str | None, ok: bool) -> list[dict[str, Any]]:
    """The listing's item joins the conversation (empty when it failed), then completed / failed."""
    return [
        se.item_added(previous_item_id, item),
        se.item_done(item, previous_item_id),
        se.mcp_list_completed(item["id"]) if ok else se.mcp_list_failed(item["id"]),
    ]


def call_item(label: str, name: str, arguments: str, approval_request_id: str | None = None) -> Item:
    return {
        "id": new_id(),
        "type": "mcp_call",
        "server_label": label,
        "name": name,
        "arguments": arguments,
        "approval_request_id": approval_request_id,
        "output": None,
        "error": None,
    }


def call_announced(
    response_id: str, item: Item, index: int, previous_item_id: str | None, stream_arguments: bool
) -> list[dict[str, Any]]:
    """A call the model made (or an approved one) enters the response and the conversation; its
    arguments stream as ``response.mcp_call_arguments.delta`` / ``.done`` when the model wrote them."""
    added = {**item, "arguments": "" if stream_arguments else item["arguments"]}
    events = [
        se.output_item_added(response_id, index, added),
        se.item_added(previous_item_id, added),
    ]
    if stream_arguments:
        args = item["arguments"]
        events += [
            se.mcp_arguments_delta(response_id, item["id"], index, args[i : i + ARG_PIECE])
            for i in range(0, len(args), ARG_PIECE)
        ]
        events.append(se.mcp_arguments_done(response_id, item["id"], index, args))
    return events


def call_started(item: Item, index: int) -> list[dict[str, Any]]:
    return [se.mcp_call_in_progress(item["id"], index)]


def call_finished(response_id: str, item: Item, index: int) -> list[dict[str, Any]]:
    ended = se.mcp_call_failed if item.get("error") else se.mcp_call_completed
    return [
        ended(item["id"], index),
        se.output_item_done(response_id, index, item),
        se.item_done(item),
    ]


def approval_request(
    response_id: str, label: str, name: str, arguments: str, index: int, previous_item_id: str | None
) -> tuple[Item, list[dict[str, Any]]]:
    item = {"id": new_id(), "type": "mcp_approval_request", "server_label": label, "name": name, "arguments": arguments}
    return item, [
        se.output_item_added(response_id, index, item),
        se.item_added(previous_item_id, item),
        se.output_item_done(response_id, index, item),
        se.item_done(item, previous_item_id),
    ]


def approval_response(item_id: str | None, request_id: str, approve: bool, reason: str | None) -> Item:
    return {
        "id": item_id or new_id(),
        "type": "mcp_approval_response",
        "approval_request_id": request_id,
        "approve": approve,
        "reason": reason,
    }


def tool_error(kind: str, message: str) -> dict[str, Any]:
    """An ``mcp_call`` item's ``error``: ``protocol_error`` (bad answer), ``tool_execution_error`` (the
    tool said it failed, or timed out) or ``http_error`` (the server could not be reached)."""
    if kind == "http_error":
        return {"type": "http_error", "code": 502, "message": message}
    if kind == "protocol_error":
        return {"type": "protocol_error", "code": -32603, "message": message}
    return {"type": "tool_execution_error", "message": message}


def messages(item: Item, requests: dict[str, Item]) -> list[dict[str, Any]]:
    """How an MCP item reads to the model: a call and its result (or why there is none); a denied
    approval as the call it asked for and a refusal for its answer; listings and requests are not text.
    ``requests``: the conversation's ``mcp_approval_request`` items by id."""
    kind = item.get("type")
    if kind == "mcp_call":
        call = {"name": item["name"], "arguments": item["arguments"] or "{}"}
        if item.get("error"):
            result = f"Error: {item['error'].get('message', 'the tool failed')}"
        elif item.get("output") is not None:
            result = item["output"]
        else:
            result = "Error: the call did not finish"
        return [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": result}]
    request = requests.get(item.get("approval_request_id") or "")
    if kind == "mcp_approval_response" and not item.get("approve") and request is not None:
        why = f" ({item['reason']})" if item.get("reason") else ""
        call = {"name": request["name"], "arguments": request["arguments"] or "{}"}
        refusal = f"The user denied this call{why}. It did not run; do not retry it."
        return [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": refusal}]
    return []
