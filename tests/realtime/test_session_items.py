"""Item lifecycle of the sans-I/O session as the GA API and the Agents SDKs expect it. No sockets, no model.

A function call is in the conversation from the moment it is announced; ``response.output`` lists items in
the order they were produced; a forced call is one call with no stray message; items can be retrieved;
the transcript's ``completed`` event carries ``usage``.
"""

from __future__ import annotations

import json

from gateway.realtime import protocol as p
from gateway.realtime.actions import StartResponse
from tests.realtime.test_session import USER, ev, make

TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def _with_tools(**session):
    s = make()
    s.handle(ev(json.dumps({"type": "session.update", "session": {"tools": [TOOL], **session}})))
    s.handle(ev(USER))
    return s


def _start(s, **response) -> str:
    out = s.handle(ev(json.dumps({"type": "response.create", "response": response})))
    start = out.actions[0]
    assert isinstance(start, StartResponse)
    return start.response_id


def _output(s, event_id: str = "e1", call_id: str | None = None) -> list[dict]:
    item = {"type": "function_call_output", "call_id": call_id, "output": '{"temp": 21}'}
    return s.handle(ev(json.dumps({"type": "conversation.item.create", "event_id": event_id, "item": item}))).events


def test_a_call_is_in_the_conversation_when_announced_so_its_output_is_accepted_before_response_done():
    s = _with_tools()
    rid = _start(s)
    events = s.on_tool_call(rid, CALL).events
    done = next(e for e in events if e["type"] == "response.output_item.done")
    assert done["item"]["status"] == "completed"  # the Agents SDKs run the tool now ...
    call_id = done["item"]["call_id"]
    assert s.items[-1]["call_id"] == call_id
    acked = _output(s, call_id=call_id)  # ... and send the output at once, before response.done
    assert [e["type"] for e in acked] == ["conversation.item.added", "conversation.item.done"]
    assert acked[0]["previous_item_id"] == done["item"]["id"]
    final = s.on_done(rid, "stop", {"tokens": 9}, {}).events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["function_call"]
    assert [i["type"] for i in s.items] == ["message", "function_call", "function_call_output"]  # no duplicate
    start = s.handle(ev('{"type":"response.create"}')).actions[0]  # the follow-up sees call and output
    assert start.messages[-1] == {"role": "tool", "content": '{"temp": 21}'}
    assert start.messages[-2]["tool_calls"] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]


def test_an_unknown_call_id_is_still_refused_with_the_field_named():
    s = _with_tools()
    err = _output(s, call_id="call_nope", event_id="mine")[-1]
    assert err["type"] == "error" and err["error"]["param"] == "item.call_id" and err["error"]["event_id"] == "mine"


def test_response_output_lists_items_in_the_order_produced():
    s = _with_tools()
    rid = _start(s)
    call_events = s.on_tool_call(rid, CALL).events
    text_events = s.on_chunk(rid, "It is sunny.").events
    final = s.on_done(rid, "stop", {"tokens": 9}, {}).events
    call_index = next(e for e in call_events if e["type"] == "response.output_item.added")["output_index"]
    text_index = next(e for e in text_events if e["type"] == "response.output_item.added")["output_index"]
    assert (call_index, text_index) == (0, 1)
    assert all(e["output_index"] == 1 for e in text_events + final if e.get("item_id") == s.items[-1]["id"])
    output = final[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["function_call", "message"]
    assert [i["type"] for i in s.items[-2:]] == ["function_call", "message"]  # the conversation's order too
    assert s.items[-1]["content"] == [{"type": "output_text", "text": "It is sunny."}]


def test_whitespace_between_forced_calls_opens_no_message():
    s = _with_tools(tool_choice="required")
    rid = _start(s)
    events = s.on_tool_call(rid, CALL).events + s.on_chunk(rid, "\n").events
    final = s.on_done(rid, "stop", {"tokens": 9}, {}).events
    assert not [e for e in events + final if e.get("item", {}).get("type") == "message"]
    assert [o["type"] for o in final[-1]["response"]["output"]] == ["function_call"]
    assert [i["type"] for i in s.items] == ["message", "function_call"]  # the user's message, then the call


def test_text_after_held_whitespace_keeps_it():
    s = _with_tools()
    rid = _start(s)
    assert s.on_chunk(rid, " ").events == []
    deltas = [e["delta"] for e in s.on_chunk(rid, "Hi").events if e["type"] == "response.output_text.delta"]
    assert deltas == [" Hi"]


def test_parallel_tool_calls_false_keeps_the_first_call_only():
    s = _with_tools(parallel_tool_calls=False)
    rid = _start(s)
    first = s.on_tool_call(rid, CALL).events
    assert first and s.on_tool_call(rid, CALL).events == []
    final = s.on_done(rid, "stop", {"tokens": 9}, {}).events[-1]["response"]
    assert len(final["output"]) == 1
    rid = _start(s, parallel_tool_calls=True)  # a response may allow them again
    assert s.on_tool_call(rid, CALL).events and s.on_tool_call(rid, CALL).events


def test_forced_calls_decode_as_exactly_one_call():
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        s = _with_tools(tool_choice=choice)
        start = s.handle(ev('{"type":"response.create"}')).actions[0]
        assert start.tools.grammar is not None and start.tools.parallel is False
        rid = start.response_id
        assert s.on_tool_call(rid, CALL).events and s.on_tool_call(rid, CALL).events == []


def test_item_retrieve_answers_the_item_as_it_stands_or_item_not_found():
    s = make()
    s.handle(ev(USER))
    item_id = s.items[0]["id"]
    out = s.handle(ev(json.dumps({"type": "conversation.item.retrieve", "item_id": item_id}))).events
    assert [e["type"] for e in out] == ["conversation.item.retrieved"] and out[0]["item"] == s.items[0]
    err = s.handle(ev('{"type":"conversation.item.retrieve","item_id":"nope","event_id":"r1"}')).events[0]
    assert err["error"]["code"] == "item_not_found" and err["error"]["param"] == "item_id"
    assert err["error"]["event_id"] == "r1"
    assert isinstance(p.parse('{"type":"conversation.item.retrieve","item_id":"x"}'), p.ItemRetrieve)


def test_transcription_completed_carries_usage_and_the_item_follows():
    s = make()
    s.audio_committed("item_a")
    out = s.transcript_done("item_a", "hello", 1.5).events
    assert out[0]["usage"] == {"type": "duration", "seconds": 1.5}
    retrieved = s.handle(ev('{"type":"conversation.item.retrieve","item_id":"item_a"}')).events[0]["item"]
    assert retrieved["status"] == "completed" and retrieved["content"][0]["transcript"] == "hello"


def test_a_reply_of_whitespace_alone_is_still_sent_when_no_call_follows():
    s = _with_tools()
    rid = _start(s)
    assert s.on_chunk(rid, "\n").events == []
    final = s.on_done(rid, "stop", {"tokens": 1}, {}).events
    deltas = [e["delta"] for e in final if e["type"] == "response.output_text.delta"]
    assert deltas == ["\n"] and [o["type"] for o in final[-1]["response"]["output"]] == ["message"]
    assert final[-1]["type"] == "response.done"


def test_out_of_band_response_runs_on_its_input_and_adds_nothing():
    s = make()
    s.handle(ev('{"type":"session.update","session":{"instructions":"Classify."}}'))
    s.handle(ev(USER))
    user_id = s.items[0]["id"]
    before = [dict(i) for i in s.items]
    inline = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "is it a greeting?"}]}
    body = {
        "conversation": "none",
        "metadata": {"topic": "classify"},
        "input": [{"type": "item_reference", "id": user_id}, inline],
    }
    out = s.handle(ev(json.dumps({"type": "response.create", "response": body})))
    start = out.actions[0]
    assert start.messages == [
        {"role": "system", "content": "Classify."},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "is it a greeting?"},
    ]
    assert out.events[0]["response"]["metadata"] == {"topic": "classify"}
    events = s.on_chunk(start.response_id, "yes").events
    events += s.on_done(start.response_id, "stop", {"tokens": 1}, {}).events
    assert not [e for e in events if e["type"].startswith("conversation.")]  # never in the conversation
    done = events[-1]["response"]
    assert done["metadata"] == {"topic": "classify"} and done["output"][0]["content"][0]["text"] == "yes"
    assert s.items == before  # nothing entered the conversation

    empty = s.handle(ev('{"type":"response.create","response":{"conversation":"none","input":[]}}')).actions[0]
    assert empty.messages == [{"role": "system", "content": "Classify."}]  # an empty context


def test_out_of_band_input_errors_name_the_field():
    s = make()
    body = '{"conversation":"none","input":[{"type":"item_reference","id":"nope"}]}'
    err = s.handle(ev('{"type":"response.create","event_id":"o1","response":' + body + "}")).events[0]["error"]
    assert (err["code"], err["param"], err["event_id"]) == ("item_not_found", "response.input[0].id", "o1")
    assert s.response is None  # no response was started
    big = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 50}]}
    raw = json.dumps({"type": "response.create", "response": {"input": [big]}})
    try:
        p.check_sizes(p.parse(raw), max_item_chars=10, max_instructions_chars=10)
    except p.ProtocolError as exc:
        assert exc.code == "input_too_large" and exc.param == "response.input[0]"
    else:
        raise AssertionError("an over-long input item was accepted")
