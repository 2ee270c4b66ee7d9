"""The internal inputs of ``Session.handle``: each its own frozen type, each answered as its shell needs.

Pure: no sockets, no engine. A reply the server asks for itself (a VAD turn, the idle timeout) is its
own input, held behind pending transcripts like a client's ``response.create``, and refused ``server_busy``
when the engine has no room, exactly as the client's would be.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import typing
from typing import Any

import pytest

from gateway.core.keylimits import KeyLimits
from gateway.realtime import inputs as i
from gateway.realtime import protocol as p
from gateway.realtime.actions import CancelResponse, Refused, StartResponse
from gateway.realtime.session import Session, SessionDefaults
from gateway.tools.state import McpPolicy
from gateway.tools.tool_actions import ListTools
from models.image_events import Generating

URL = "http://127.0.0.1:8123/mcp"


def make(room: bool = True, **defaults: Any) -> Session:
    counter = itertools.count()
    base = SessionDefaults(model="m", max_output_tokens=64, has_room=lambda: room, **defaults)
    return Session(base, lambda e: {**e, "seq": next(counter)})


def types(out) -> list[str]:
    return [e["type"] for e in out.events]


def said(s: Session, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    s.handle(p.parse(json.dumps({"type": "conversation.item.create", "item": item})))


def test_every_internal_input_is_a_frozen_dataclass_and_none_is_a_client_event():
    kinds = typing.get_args(i.Internal)
    assert len(kinds) == len(set(kinds)) >= 20
    for kind in kinds:
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, kind  # type: ignore[attr-defined]
        assert not hasattr(kind, "type"), kind  # no wire "type": never mistaken for (or sent as) a client event
    with pytest.raises(dataclasses.FrozenInstanceError):
        i.TurnEnded("item_1").respond = True  # type: ignore[misc]


def test_a_voice_turn_that_asks_for_a_reply_starts_one():
    s = make()
    assert types(s.handle(i.VoiceStarted("item_v", 100))) == ["input_audio_buffer.speech_started"]
    assert types(s.handle(i.VoiceStopped("item_v", 900))) == ["input_audio_buffer.speech_stopped"]
    committed = s.handle(i.AudioCommitted("item_v"))
    assert types(committed) == ["input_audio_buffer.committed", "conversation.item.added"]
    assert types(s.handle(i.TranscriptDelta("item_v", "hel"))) == ["conversation.item.input_audio_transcription.delta"]
    done = s.handle(i.TranscriptDone("item_v", "hello", 0.8))
    assert types(done) == ["conversation.item.input_audio_transcription.completed", "conversation.item.done"]
    out = s.handle(i.TurnEnded("item_v", respond=True))
    assert types(out) == ["response.created"]
    [start] = out.actions
    assert isinstance(start, StartResponse) and start.messages[-1] == {"role": "user", "content": "hello"}


def test_a_turn_not_asking_for_a_reply_starts_none():
    s = make()
    s.handle(i.AudioCommitted("item_v"))
    s.handle(i.TranscriptDone("item_v", "hello"))
    assert s.handle(i.TurnEnded("item_v")).events == [] and s.response is None


def test_a_response_create_waits_for_the_committed_turns_transcript():
    s = make()
    s.handle(i.AudioCommitted("item_v"))  # its transcript is still being made
    assert s.handle(p.parse('{"type":"response.create","event_id":"r1"}')).events == []
    s.handle(i.TranscriptDone("item_v", "what time is it"))
    out = s.handle(i.TurnEnded("item_v", respond=True))  # the turn's own reply and the client's: one response
    assert types(out) == ["response.created"] and len(out.actions) == 1
    assert out.actions[0].messages[-1]["content"] == "what time is it"


def test_a_failed_transcript_still_releases_the_held_response():
    s = make()
    s.handle(i.AudioCommitted("item_v"))
    s.handle(p.parse('{"type":"response.create"}'))
    failed = s.handle(i.TranscriptFailed("item_v", "transcription_failed", "could not transcribe audio"))
    assert types(failed) == ["conversation.item.input_audio_transcription.failed"]
    assert types(s.handle(i.TurnEnded("item_v"))) == ["response.created"]


def test_the_servers_own_reply_is_refused_busy_when_the_engine_is_full():
    s = make(room=False)
    s.handle(i.AudioCommitted("item_v"))
    s.handle(i.TranscriptDone("item_v", "hello"))
    out = s.handle(i.TurnEnded("item_v", respond=True))
    assert [e["error"]["code"] for e in out.events] == ["server_busy"]
    assert out.actions == [Refused("server_busy")] and s.response is None


def test_the_idle_timeout_triggers_a_reply_unless_one_is_in_progress():
    s = make()
    said(s, "are you there?")
    out = s.handle(i.IdleTimedOut("item_idle", 7000))
    assert types(out) == ["input_audio_buffer.timeout_triggered", "response.created"]
    assert out.events[0]["audio_end_ms"] == 7000 and isinstance(out.actions[0], StartResponse)
    assert s.handle(i.IdleTimedOut("item_idle2", 9000)).events == []  # a reply runs: the user is listening


def test_the_idle_reply_waits_behind_a_pending_transcript():
    s = make()
    s.handle(i.AudioCommitted("item_v"))
    assert types(s.handle(i.IdleTimedOut("item_idle", 5000))) == ["input_audio_buffer.timeout_triggered"]
    s.handle(i.TranscriptDone("item_v", "hm"))
    assert types(s.handle(i.TurnEnded("item_v"))) == ["response.created"]


def test_engine_results_stream_a_text_response_to_its_end():
    s = make()
    said(s, "hi")
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    first = s.handle(i.EngineChunk(rid, "Hel"))
    assert types(first)[-1] == "response.output_text.delta" and first.events[-1]["delta"] == "Hel"
    assert types(s.handle(i.EngineChunk(rid, "lo"))) == ["response.output_text.delta"]
    assert s.handle(i.EngineChunk("resp_other", "x")).events == []  # a late chunk of another response: dropped
    done = s.handle(i.Finished(rid, "stop", {"tokens": 2}, {"total_tokens": 5}))
    assert types(done)[-1] == "response.done" and done.events[-1]["response"]["status"] == "completed"
    assert s.response is None


@pytest.mark.parametrize(("message", "expected"), [(None, ["response.done"]), ("too long", ["error", "response.done"])])
def test_a_response_that_could_not_start_ends_failed_with_its_code(message, expected):
    s = make()
    said(s, "hi")
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    out = s.handle(i.StartFailed(rid, "context_length_exceeded", message))
    assert types(out) == expected
    response = out.events[-1]["response"]
    assert response["status"] == "failed"
    assert response["status_details"]["error"]["code"] == "context_length_exceeded"


def test_cancel_and_abandon_end_the_response_differently():
    s = make()
    said(s, "hi")
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    s.handle(i.EngineChunk(rid, "Hello"))
    cancelled = s.handle(i.Cancel("turn_detected"))
    assert cancelled.actions[0] == CancelResponse(rid)
    assert cancelled.events[-1]["response"]["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert s.handle(i.Cancel("turn_detected")).events == []  # nothing left to cancel
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    abandoned = s.handle(i.Abandon("server_error"))
    assert abandoned.actions == [] and abandoned.events[-1]["response"]["status"] == "incomplete"


def test_an_image_request_opens_an_item_and_its_progress_is_reported():
    s = make()
    said(s, "draw")
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    opened = s.handle(i.ImageRequested(rid, "a cat"))
    assert types(opened) == ["response.output_item.added", "response.image_generation_call.in_progress"]
    item_id = opened.actions[0].item_id
    assert types(s.handle(i.ImageProgressed(rid, item_id, Generating(4)))) == [
        "response.image_generation_call.generating"
    ]


def test_a_report_is_an_error_event_naming_the_field():
    out = make().handle(i.Report("rate_limited", "slow down", "e1", "audio"))
    [error] = out.events
    assert error["type"] == "error" and error["error"]["code"] == "rate_limited"
    assert (error["error"]["event_id"], error["error"]["param"]) == ("e1", "audio")


def test_opened_announces_the_session_with_its_extra_fields():
    s = make()
    [created] = s.handle(i.Opened({"token": "t"})).events
    assert created["type"] == "session.created" and created["session"]["id"] == s.id
    assert created["resume"] == {"token": "t"}


def test_a_preset_fixes_the_grants_config_id_and_budgets_before_the_session_opens():
    s = make()
    limiter = KeyLimits(1, None, 60.0, lambda: 0.0).bound("k")
    update = p.SessionUpdate(type="session.update", session=p.SessionOptions(instructions="be brief"))
    assert s.handle(i.Preset(limiter, "sess_granted", update)).events == []
    assert (s.id, s.options.instructions, s.limiter) == ("sess_granted", "be brief", limiter)
    assert "instructions" in s.locked and "model" in s.locked
    s.handle(p.parse('{"type":"session.update","session":{"instructions":"other"}}'))
    assert s.options.instructions == "be brief"  # locked by the grant


def test_a_preset_the_server_cannot_serve_is_refused_and_changes_no_option():
    s = make()
    update = p.SessionUpdate(type="session.update", session=p.SessionOptions(model="not-served"))
    out = s.handle(i.Preset(None, None, update))
    assert [e["error"]["code"] for e in out.events] == ["model_not_found"]
    assert s.options.model == "m" and s.locked == frozenset()


def test_an_mcp_listing_releases_the_response_that_waited_for_it():
    s = make(mcp=McpPolicy(allowed_urls=(URL,)))
    tool = {"type": "mcp", "server_label": "calc", "server_url": URL, "require_approval": "never"}
    listing = s.handle(p.parse(json.dumps({"type": "session.update", "session": {"tools": [tool]}})))
    [action] = listing.actions
    assert isinstance(action, ListTools)
    said(s, "2+3?")
    assert s.handle(p.parse('{"type":"response.create"}')).events == []  # waits for the listing
    add = {"name": "add", "description": "add", "input_schema": {"type": "object", "properties": {}}}
    out = s.handle(i.McpListed("calc", action.item_id, [add], None, None))
    assert "mcp_list_tools.completed" in types(out) and types(out)[-1] == "response.created"
    assert isinstance(out.actions[-1], StartResponse)
