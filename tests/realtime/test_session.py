"""gateway.realtime.session, sans-I/O: events in, events + actions out. No sockets, no model."""

from __future__ import annotations

import itertools

from gateway.realtime import protocol as p
from gateway.realtime.actions import CancelResponse, StartResponse
from gateway.realtime.session import Session, SessionDefaults
from models import toolcalls


def make() -> Session:
    counter = itertools.count()

    def stamp(ev):
        ev["seq"] = next(counter)
        return ev

    return Session(SessionDefaults(model="m", max_output_tokens=64), stamp)


def ev(raw: str):
    return p.parse(raw)


USER = (
    '{"type":"conversation.item.create",'
    '"item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}'
)


def test_response_lifecycle_and_contiguous_seq():
    s = make()
    events = s.created().events
    events += s.handle(ev(USER)).events
    out = s.handle(ev('{"type":"response.create"}'))
    events += out.events
    start = out.actions[0]
    assert isinstance(start, StartResponse)
    assert start.messages[-1] == {"role": "user", "content": "hi"}
    assert start.sampling.max_tokens == 64
    events += s.on_chunk(start.response_id, "Hel").events
    events += s.on_chunk(start.response_id, "lo").events
    events += s.on_done(start.response_id, "stop", {"tokens": 2}, {"output_tokens": 2}).events
    types = [e["type"] for e in events]
    assert types[-1] == "response.done"
    assert types.count("response.output_text.delta") == 2
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert s.items[-1]["role"] == "assistant" and s.items[-1]["content"][0]["text"] == "Hello"


def test_cancel_keeps_delivered_text_and_drops_late_chunks():
    s = make()
    s.handle(ev(USER))
    rid = s.handle(ev('{"type":"response.create"}')).actions[0].response_id
    s.on_chunk(rid, "Partial")
    out = s.handle(ev('{"type":"response.cancel"}'))
    assert isinstance(out.actions[0], CancelResponse)
    done = out.events[-1]
    assert done["type"] == "response.done" and done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    assert s.on_chunk(rid, " more").events == []  # late chunk after done: dropped
    assert s.on_done(rid, "cancelled", {}, {}).events == []
    assert s.messages()[-1] == {"role": "assistant", "content": "Partial"}


def test_cancel_with_nothing_active_is_an_error_and_changes_nothing():
    s = make()
    out = s.handle(ev('{"type":"response.cancel","event_id":"x"}'))
    assert out.events[0]["error"]["code"] == "response_cancel_not_active"
    assert out.events[0]["error"]["event_id"] == "x" and not out.actions
    # OpenAI's message word for word: LiveKit Agents ignores an error starting "Cancellation failed" (the race of
    # its interrupt's response.cancel with the server's own cancel on speech_started) and logs any other one
    assert out.events[0]["error"]["message"] == "Cancellation failed: no active response found"


def test_length_limit_ends_incomplete():
    s = make()
    rid = s.handle(ev('{"type":"response.create","response":{"max_output_tokens":3}}')).actions[0].response_id
    s.on_chunk(rid, "a b c")
    done = s.on_done(rid, "length", {}, {}).events[-1]
    assert done["response"]["status"] == "incomplete"
    assert done["response"]["status_details"]["reason"] == "max_output_tokens"


def test_session_update_merges_scheduler_and_instructions():
    s = make()
    s.handle(ev('{"type":"session.update","session":{"scheduler":{"strategy":"fast"}}}'))
    s.handle(ev('{"type":"session.update","session":{"instructions":"Be brief","scheduler":{"max_chunk_tokens":9}}}'))
    start = s.handle(ev('{"type":"response.create"}')).actions[0]
    assert (start.scheduler.strategy, start.scheduler.max_chunk_tokens) == ("fast", 9)
    assert start.messages[0] == {"role": "system", "content": "Be brief"}
    assert s.session_view()["scheduler"] == {"strategy": "fast", "max_chunk_tokens": 9}


def test_a_responses_scheduler_options_win_over_the_sessions_and_null_clears_the_sessions():
    s = make()
    s.handle(ev('{"type":"session.update","session":{"scheduler":{"strategy":"quality","max_chunk_tokens":9}}}'))
    create = '{"type":"response.create","response":{"scheduler":{"strategy":"fast","min_chunk_tokens":3}}}'
    start = s.handle(ev(create)).actions[0]
    assert isinstance(start, StartResponse)
    cfg = start.scheduler
    assert (cfg.strategy, cfg.min_chunk_tokens, cfg.max_chunk_tokens, cfg.beam_width) == ("fast", 3, 9, 1)
    s.on_done(start.response_id, "stop", {"tokens": 0}, {"output_tokens": 0, "total_tokens": 0})
    s.handle(ev('{"type":"session.update","session":{"scheduler":null}}'))
    again = s.handle(ev('{"type":"response.create"}')).actions[0]
    assert isinstance(again, StartResponse) and again.scheduler.max_chunk_tokens != 9  # the preset's again
    assert "scheduler" not in s.session_view()


def test_previous_item_id_must_exist():
    s = make()
    raw = USER.replace('"item":', '"previous_item_id":"ghost","item":')
    out = s.handle(ev(raw))
    assert out.events[0]["error"]["code"] == "item_not_found" and not s.items


def test_system_items_reach_the_prompt_in_order():
    s = make()
    s.handle(ev(USER.replace('"role":"user"', '"role":"system"').replace('"hi"', '"rules"')))
    s.handle(ev(USER))
    start = s.handle(ev('{"type":"response.create"}')).actions[0]
    assert [m["role"] for m in start.messages] == ["system", "user"]


# ---------------------------------------------------------------------- responses wait for pending items


def test_a_response_create_waits_for_every_pending_item_then_starts_once():
    s = make()
    create = ev('{"type":"response.create","event_id":"client"}')
    s.item_pending("transcript-1")
    s.item_pending("image-2")
    assert s.want_response(create) is None  # held: a transcript is still being made
    auto = p.ResponseCreate(type="response.create")
    assert s.want_response(auto) is None  # a second one for the same batch is dropped, not queued
    assert s.settle("transcript-1") is None  # the image is still pending
    assert s.settle("image-2") is create  # the first held one starts, once
    assert s.settle("image-2") is None


def test_with_nothing_pending_a_response_create_starts_at_once():
    s = make()
    create = ev('{"type":"response.create"}')
    assert s.want_response(create) is create
    s.item_pending("t")
    assert s.settle("t") is None  # nothing was held


def test_the_conversation_is_bounded_and_keeps_system_items():
    s = Session(SessionDefaults(model="m", max_items=3), lambda e: e)
    s.handle(ev(USER.replace('"user"', '"system"').replace('"hi"', '"rules"')))
    for i in range(5):
        s.handle(ev(USER.replace('"hi"', f'"hi {i}"')))
    assert [m["content"] for m in s.messages()] == ["rules", "hi 3", "hi 4"]


def test_preview_response_is_the_generation_the_committed_turn_asks_for():
    s = make()
    s.handle(ev('{"type":"session.update","session":{"instructions":"be brief","temperature":0.3}}'))
    s.handle(ev(USER))
    seq_before = len(s.created().events)  # previews send nothing and keep no state
    preview = s.preview_response("open the window")
    assert preview is not None and s.response is None
    assert [i["id"] for i in s.items] == [s.items[0]["id"]]
    s.audio_committed("item_voice")
    s.transcript_done("item_voice", "open the window")
    start = s.handle(ev('{"type":"response.create"}')).actions[0]
    assert isinstance(start, StartResponse)
    assert (start.messages, start.sampling, start.scheduler, start.output_modalities) == (
        preview.messages,
        preview.sampling,
        preview.scheduler,
        preview.output_modalities,
    )
    assert start.response_id != preview.response_id and seq_before == 1
    # a reply prepared unseen hides the model's tool-call markup as the response it becomes does
    assert preview.scheduler.tool_intercept == start.scheduler.tool_intercept == toolcalls.TOOL_TAGS


def test_no_preview_while_a_response_runs_or_an_item_is_pending():
    s = make()
    s.handle(ev(USER))
    s.handle(ev('{"type":"response.create"}'))
    assert s.preview_response("more") is None
    s2 = make()
    s2.item_pending("item_x")
    assert s2.preview_response("more") is None


def test_response_created_and_done_echo_metadata_and_conversation_id_as_openai_does():
    """LiveKit Agents 1.8.9 matches a reply to its response.create by response.metadata.client_event_id."""
    s = make()
    s.handle(ev(USER))
    meta = {"client_event_id": "evt_lk_1", "topic": "x"}
    out = s.handle(ev('{"type":"response.create","response":{"metadata":{"client_event_id":"evt_lk_1","topic":"x"}}}'))
    created = out.events[0]["response"]
    rid = out.actions[0].response_id
    assert created["metadata"] == meta and created["conversation_id"].startswith("conv_")
    s.on_chunk(rid, "ok")
    done = s.on_done(rid, "stop", {"tokens": 1}, {}).events[-1]["response"]
    assert done["metadata"] == meta and done["conversation_id"] == created["conversation_id"]
    out = s.handle(ev('{"type":"response.create","response":{"conversation":"none"}}'))
    oob = out.events[0]["response"]
    assert oob["metadata"] is None and oob["conversation_id"] is None  # out-of-band: no conversation
    cancelled = s.handle(ev('{"type":"response.cancel"}')).events[-1]["response"]
    assert cancelled["metadata"] is None and cancelled["conversation_id"] is None


def test_tool_choice_may_come_before_its_tools_and_is_checked_when_a_response_uses_it():
    """LiveKit sends ``tool_choice`` in its first session.update and its tools in a later one."""
    s = make()
    out = s.handle(ev('{"type":"session.update","session":{"tool_choice":"required"}}'))
    assert [e["type"] for e in out.events] == ["session.updated"]
    s.handle(ev(USER))
    err = s.handle(ev('{"type":"response.create"}')).events[-1]  # still no tools: now it is an error
    assert err["type"] == "error" and err["error"]["param"] == "session.tool_choice"
    tool = '{"type":"function","name":"f","parameters":{"type":"object","properties":{}}}'
    out = s.handle(ev('{"type":"session.update","session":{"tools":[' + tool + "]}}"))
    assert [e["type"] for e in out.events] == ["session.updated"]
    start = s.handle(ev('{"type":"response.create"}')).actions[0]
    assert isinstance(start, StartResponse) and start.tools.grammar is not None  # the forced call's grammar
    bad = '{"type":"function","name":"g","parameters":{"type":"nope"}}'
    err = s.handle(ev('{"type":"session.update","session":{"tools":[' + bad + "]}}")).events[-1]
    assert err["type"] == "error" and err["error"]["param"] == "session.tools[0].parameters"  # schemas still now
