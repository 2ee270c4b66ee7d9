"""MCP tools in the sans-I/O Realtime session: events in, GA events and MCP actions out. No sockets, no
model: listings and call results are fed in as the runner would. Every event is validated against
``openai.types.realtime``."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from gateway.cluster.snapshot import snapshot
from gateway.realtime import protocol as p
from gateway.realtime.actions import StartResponse
from gateway.realtime.session import Session, SessionDefaults
from gateway.tools.state import McpPolicy
from gateway.tools.tool_actions import CallTool, ListTools
from tests.sdk_events import SERVER_EVENT

URL = "http://127.0.0.1:8123/mcp"
ADD = {
    "name": "add",
    "description": "Add two integers",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
LOOKUP = {
    "name": "lookup",
    "description": "Capital of a country",
    "input_schema": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]},
}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock | None = None, **policy: Any) -> tuple[Session, list[dict[str, Any]]]:
    counter = itertools.count()
    sent: list[dict[str, Any]] = []

    def stamp(ev: dict[str, Any]) -> dict[str, Any]:
        ev["seq"] = next(counter)
        sent.append(ev)
        return ev

    pol = McpPolicy(allowed_urls=(URL,), **policy)
    s = Session(SessionDefaults(model="m", max_output_tokens=64, mcp=pol), stamp)
    if clock is not None:
        s.mcp.clock = clock
    return s, sent


def send(s: Session, event: dict[str, Any]):
    return s.handle(p.parse(json.dumps(event)))


def mcp_tool(**extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "calc", "server_url": URL, "require_approval": "never", **extra}


def valid(events: list[dict[str, Any]]) -> None:
    for e in events:
        SERVER_EVENT.validate_python(e)


def listed(s: Session, tools: list[dict[str, Any]] | None = None):
    """session.update with the calc server, its listing done."""
    out = send(s, {"type": "session.update", "session": {"tools": [mcp_tool()]}})
    [action] = out.actions
    assert isinstance(action, ListTools) and action.server.url == URL
    s.mcp_listed("calc", action.item_id, tools if tools is not None else [ADD, LOOKUP], None)
    assert s.settle("mcp-list-calc") is None
    return action


def user(s: Session, text: str = "2+3?") -> None:
    send(
        s,
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
        },
    )


def test_update_lists_tools_and_keeps_secrets_out_of_events_and_snapshots():
    s, sent = make()
    tool = mcp_tool(headers={"X-Api-Key": "hunter2"}, authorization="tok-secret")
    out = send(s, {"type": "session.update", "session": {"tools": [tool]}})
    types = [e["type"] for e in out.events]
    assert types == ["session.updated", "mcp_list_tools.in_progress"]
    [action] = out.actions
    assert isinstance(action, ListTools) and action.item_id == out.events[1]["item_id"]
    assert s.mcp.secrets["calc"] == {"X-Api-Key": "hunter2", "Authorization": "Bearer tok-secret"}
    done = s.mcp_listed("calc", action.item_id, [ADD], None)
    assert [e["type"] for e in done.events] == [
        "conversation.item.added",
        "conversation.item.done",
        "mcp_list_tools.completed",
    ]
    assert done.events[0]["item"]["tools"][0]["name"] == "add"
    valid(sent)
    text = json.dumps(sent) + json.dumps(snapshot(s, 99, 1)) + json.dumps(s.session_view())
    assert "hunter2" not in text and "tok-secret" not in text


def test_a_url_off_the_allow_list_is_refused_before_any_action():
    s, sent = make()
    out = send(s, {"type": "session.update", "session": {"tools": [mcp_tool(server_url="http://10.0.0.1/mcp")]}})
    assert out.actions == [] and [e["type"] for e in out.events] == ["error"]
    assert out.events[0]["error"]["param"] == "session.tools[0].server_url"
    assert s.options.tools is None  # the session keeps its options
    out = send(s, {"type": "session.update", "session": {"tools": [{"type": "mcp", "server_label": "nope"}]}})
    assert "is configured (tools.mcp_servers)" in out.events[0]["error"]["message"] and out.actions == []


def test_forced_call_runs_then_the_same_response_continues_with_the_result():
    s, sent = make()
    listed(s)
    user(s)
    out = send(
        s,
        {
            "type": "response.create",
            "response": {"tool_choice": {"type": "mcp", "server_label": "calc", "name": "add"}},
        },
    )
    [start] = out.actions
    assert isinstance(start, StartResponse) and start.tools.grammar is not None
    assert {t.name for t in start.tools.tools} == {"add", "lookup"}
    rid = start.response_id
    out = s.on_tool_call(rid, '{"name": "add", "arguments": {"a": 2, "b": 3}}')
    types = [e["type"] for e in out.events]
    assert types[:2] == ["response.output_item.added", "conversation.item.added"]
    assert types[-1] == "response.mcp_call_arguments.done" and "response.mcp_call_arguments.delta" in types
    assert out.actions == []
    out = s.on_done(rid, "stop", {}, {})  # the model's turn ends: the call runs, the response goes on
    [call] = out.actions
    assert isinstance(call, CallTool) and (call.name, json.loads(call.arguments)) == ("add", {"a": 2, "b": 3})
    assert [e["type"] for e in out.events] == ["response.mcp_call.in_progress"] and s.response is not None
    out = s.mcp_result(rid, call.item_id, "5", None)
    assert [e["type"] for e in out.events][0] == "response.mcp_call.completed"
    [cont] = out.actions
    assert isinstance(cont, StartResponse) and cont.response_id == rid and cont.tools.grammar is None
    assert cont.messages[-2]["tool_calls"][0]["name"] == "add" and cont.messages[-1] == {"role": "tool", "content": "5"}
    s.on_chunk(rid, "It is 5.")
    done = s.on_done(rid, "stop", {}, {}).events[-1]
    assert done["type"] == "response.done" and done["response"]["status"] == "completed"
    kinds = [o["type"] for o in done["response"]["output"]]
    assert sorted(kinds) == ["mcp_call", "message"]
    mcp_call = next(o for o in done["response"]["output"] if o["type"] == "mcp_call")
    assert mcp_call["output"] == "5" and mcp_call["error"] is None
    assert [i["type"] for i in s.items] == ["mcp_list_tools", "message", "mcp_call", "message"]
    valid(sent)


def test_a_failed_call_is_told_to_the_model():
    s, sent = make()
    listed(s)
    user(s)
    rid = send(s, {"type": "response.create"}).actions[0].response_id
    s.on_tool_call(rid, '{"name": "lookup", "arguments": {"country": "Atlantis"}}')
    call = s.on_done(rid, "stop", {}, {}).actions[0]
    out = s.mcp_result(rid, call.item_id, None, {"type": "tool_execution_error", "message": "no such country"})
    assert out.events[0]["type"] == "response.mcp_call.failed"
    cont = out.actions[0]
    assert cont.messages[-1] == {"role": "tool", "content": "Error: no such country"}
    valid(sent)


def test_calls_run_in_order_and_the_cap_fails_the_extra_ones():
    s, sent = make(max_calls_per_response=2)
    listed(s)
    user(s)
    rid = send(s, {"type": "response.create"}).actions[0].response_id
    for n in range(3):
        s.on_tool_call(rid, json.dumps({"name": "add", "arguments": {"a": n, "b": 1}}))
    failed = [e for e in sent if e["type"] == "response.mcp_call.failed"]
    assert len(failed) == 1  # the third, at once
    first = s.on_done(rid, "stop", {}, {}).actions[0]
    assert json.loads(first.arguments) == {"a": 0, "b": 1}
    second = s.mcp_result(rid, first.item_id, "1", None).actions[0]
    assert isinstance(second, CallTool) and json.loads(second.arguments) == {"a": 1, "b": 1}
    cont = s.mcp_result(rid, second.item_id, "2", None).actions[0]
    assert isinstance(cont, StartResponse) and cont.tools.tools == []  # the cap is reached: no more tools
    valid(sent)


def test_approval_denied_then_granted_survives_in_the_conversation():
    s, sent = make()
    out = send(
        s,
        {
            "type": "session.update",
            "session": {"tools": [mcp_tool(require_approval={"never": {"tool_names": ["lookup"]}})]},
        },
    )
    s.mcp_listed("calc", out.actions[0].item_id, [ADD, LOOKUP], None)
    s.settle("mcp-list-calc")
    user(s)
    rid = send(s, {"type": "response.create"}).actions[0].response_id
    s.on_tool_call(rid, '{"name": "add", "arguments": {"a": 2, "b": 3}}')
    done = s.on_done(rid, "stop", {}, {})
    assert done.actions == [] and done.events[-1]["type"] == "response.done"  # nothing runs without approval
    [request] = [o for o in done.events[-1]["response"]["output"] if o["type"] == "mcp_approval_request"]
    bad = send(
        s,
        {
            "type": "conversation.item.create",
            "item": {"type": "mcp_approval_response", "approval_request_id": "nope", "approve": True},
        },
    )
    assert bad.events[0]["type"] == "error"
    send(
        s,
        {
            "type": "conversation.item.create",
            "item": {
                "type": "mcp_approval_response",
                "approval_request_id": request["id"],
                "approve": False,
                "reason": "not now",
            },
        },
    )
    again = send(
        s,
        {
            "type": "conversation.item.create",
            "item": {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True},
        },
    )
    assert again.events[0]["type"] == "error"  # answered once
    start = send(s, {"type": "response.create"}).actions[0]
    assert isinstance(start, StartResponse)  # denied: nothing runs, the model is told
    assert "denied" in start.messages[-1]["content"] and start.messages[-2]["tool_calls"][0]["name"] == "add"
    s.on_done(start.response_id, "stop", {}, {})

    # a second request, granted: the call runs first in the next response
    user(s, "and 4+4?")
    rid = send(s, {"type": "response.create"}).actions[0].response_id
    s.on_tool_call(rid, '{"name": "add", "arguments": {"a": 4, "b": 4}}')
    req2 = [
        o
        for o in s.on_done(rid, "stop", {}, {}).events[-1]["response"]["output"]
        if o["type"] == "mcp_approval_request"
    ][0]
    send(
        s,
        {
            "type": "conversation.item.create",
            "item": {"type": "mcp_approval_response", "approval_request_id": req2["id"], "approve": True},
        },
    )
    snap_items = snapshot(s, 1, 1)["items"]  # what another replica would continue from
    assert any(i.get("approval_request_id") == req2["id"] for i in snap_items)
    out = send(s, {"type": "response.create"})
    call = next(a for a in out.actions if isinstance(a, CallTool))
    assert json.loads(call.arguments) == {"a": 4, "b": 4}
    cont = s.mcp_result(out.events[0]["response"]["id"], call.item_id, "8", None).actions[0]
    assert cont.messages[-1] == {"role": "tool", "content": "8"}
    valid(sent)


def test_a_response_waits_for_a_listing_and_the_ttl_relists():
    clock = Clock()
    s, sent = make(clock, list_ttl_s=60)
    out = send(s, {"type": "session.update", "session": {"tools": [mcp_tool()]}})
    item_id = out.actions[0].item_id
    user(s)
    create = p.parse('{"type": "response.create"}')
    assert s.want_response(create) is None  # held while the listing runs
    s.mcp_listed("calc", item_id, [ADD], None)
    assert s.settle("mcp-list-calc") is create
    assert isinstance(s.handle(create).actions[0], StartResponse)
    s.on_done(s.response.id, "stop", {}, {})
    clock.now = 61
    out = s.handle(p.parse('{"type": "response.create"}'))  # stale: listed again first, the response waits
    assert [type(a) for a in out.actions] == [ListTools] and s.response is None
    valid(sent)


def test_a_failed_listing_offers_nothing_and_reports_it():
    s, sent = make()
    out = send(s, {"type": "session.update", "session": {"tools": [mcp_tool()]}})
    done = s.mcp_listed("calc", out.actions[0].item_id, None, "the server could not be reached")
    assert [e["type"] for e in done.events][-2:] == ["mcp_list_tools.failed", "error"]
    s.settle("mcp-list-calc")
    user(s)
    out = send(
        s,
        {
            "type": "response.create",
            "response": {"tool_choice": {"type": "mcp", "server_label": "calc", "name": "add"}},
        },
    )
    assert out.events[0]["type"] == "error" and out.events[0]["error"]["param"] == "response.tool_choice"
    valid(sent)


@pytest.mark.parametrize(
    "bad", [{"type": "mcp", "server_label": "calc", "name": "nope"}, {"type": "mcp", "server_label": "x"}]
)
def test_a_forced_choice_naming_nothing_offered_is_an_error(bad):
    s, _ = make()
    listed(s)
    out = send(s, {"type": "response.create", "response": {"tool_choice": bad}})
    assert out.events[0]["type"] == "error" and s.response is None


def test_a_cancel_mid_call_drops_the_late_result_and_marks_the_call():
    s, sent = make()
    listed(s)
    user(s)
    rid = send(s, {"type": "response.create"}).actions[0].response_id
    s.on_tool_call(rid, '{"name": "add", "arguments": {"a": 1, "b": 1}}')
    call = s.on_done(rid, "stop", {}, {}).actions[0]
    done = s.cancel("client_cancelled").events[-1]
    assert done["response"]["status"] == "cancelled"
    [item] = [o for o in done["response"]["output"] if o["type"] == "mcp_call"]
    assert item["error"]["type"] == "tool_execution_error"
    assert s.mcp_result(rid, call.item_id, "2", None).events == []
    valid(sent)
