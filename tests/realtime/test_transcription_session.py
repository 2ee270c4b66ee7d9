"""Transcription sessions in the sans-I/O session: the GA transcription-session shape, and no way to a reply.

Pure: no sockets, no model. Every event checked here is validated as the pinned ``openai`` SDK's
``RealtimeServerEvent``, as a strict client (the Agents SDK) does before it acts on one.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from openai.types.realtime import RealtimeTranscriptionSessionCreateRequest

from gateway.realtime import protocol as p
from gateway.realtime import transcription
from gateway.realtime.actions import StartResponse
from gateway.realtime.session import Session, SessionDefaults
from tests.realtime.test_session import USER, ev
from tests.sdk_events import SERVER_EVENT


def make(transcribe: bool) -> Session:
    counter = itertools.count()

    def stamp(e: dict[str, Any]) -> dict[str, Any]:
        e["seq"] = next(counter)
        return e

    return Session(SessionDefaults(model="m", max_output_tokens=64), stamp, transcribe)


def valid(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for e in events:
        SERVER_EVENT.validate_python(e)
    return events


def _update(s: Session, session: dict[str, Any]) -> list[dict[str, Any]]:
    return valid(s.handle(ev(json.dumps({"type": "session.update", "session": session}))).events)


def test_a_transcription_session_is_created_in_the_ga_transcription_shape():
    s = make(transcribe=True)
    (created,) = valid(s.created().events)
    session = created["session"]
    RealtimeTranscriptionSessionCreateRequest.model_validate(session)
    assert session["type"] == "transcription" and session["object"] == "realtime.transcription_session"
    assert session["id"] == s.id
    for realtime_only in ("instructions", "output_modalities", "tools", "model", "max_output_tokens"):
        assert realtime_only not in session


def test_response_create_is_refused_with_the_ga_error_shape_and_starts_nothing():
    s = make(transcribe=True)
    s.handle(ev(USER))
    out = s.handle(ev('{"type":"response.create","event_id":"r1"}'))
    assert out.actions == []
    (err,) = valid(out.events)
    assert err["type"] == "error"
    assert err["error"]["code"] == "unsupported_event" and err["error"]["event_id"] == "r1"
    assert err["error"]["param"] == "type" and "transcription" in err["error"]["message"]
    assert s.response is None


def test_a_response_create_is_never_held_behind_a_transcript_in_a_transcription_session():
    s = make(transcribe=True)
    s.item_pending("item_x")  # a transcript on its way
    create = p.ResponseCreate(type="response.create")
    assert s.want_response(create) is create  # refused now, not answered later
    assert s.settle("item_x") is None


def test_session_update_turns_a_realtime_session_into_a_transcription_session_and_back():
    s = make(transcribe=False)
    assert s.created().events[0]["session"]["type"] == "realtime"
    (updated,) = _update(
        s,
        {
            "type": "transcription",
            "include": [transcription.LOGPROBS],
            "audio": {"input": {"transcription": {"model": "gpt-4o-transcribe", "language": "en"}}},
        },
    )
    session = updated["session"]
    RealtimeTranscriptionSessionCreateRequest.model_validate(session)
    assert session["include"] == [transcription.LOGPROBS]
    assert session["audio"]["input"]["transcription"] == {"model": "gpt-4o-transcribe", "language": "en"}
    s.handle(ev(USER))
    assert s.handle(ev('{"type":"response.create"}')).actions == []
    (back,) = _update(s, {"type": "realtime"})
    assert back["session"]["type"] == "realtime"
    assert isinstance(s.handle(ev('{"type":"response.create"}')).actions[0], StartResponse)


def test_a_session_does_not_become_a_transcription_session_during_a_response():
    s = make(transcribe=False)
    s.handle(ev(USER))
    s.handle(ev('{"type":"response.create"}'))
    (err,) = _update(s, {"type": "transcription"})
    assert err["type"] == "error" and err["error"]["param"] == "session.type"
    assert s.options.type == "realtime"


def test_an_unknown_include_value_is_refused_naming_the_field():
    with pytest.raises(p.ProtocolError) as caught:
        p.parse(json.dumps({"type": "session.update", "session": {"type": "transcription", "include": ["words"]}}))
    assert caught.value.code == "invalid_value" and caught.value.param == "session.include.0"


def test_turn_detection_of_a_transcription_session_never_replies():
    td = {"type": "server_vad", "create_response": True, "interrupt_response": True, "idle_timeout_ms": 6000}
    out = transcription.turn_detection(td)
    assert out == {"type": "server_vad", "create_response": False, "interrupt_response": False}
    assert td["create_response"] is True  # the client's settings are not changed in place
    assert transcription.turn_detection(None) is None
    semantic = transcription.turn_detection({"type": "semantic_vad", "eagerness": "high"})
    assert semantic == {
        "type": "semantic_vad",
        "eagerness": "high",
        "create_response": False,
        "interrupt_response": False,
    }


def test_the_view_keeps_the_effective_audio_input_and_drops_what_needs_replies():
    realtime_view = {
        "type": "transcription",
        "id": "sess_1",
        "instructions": "be brief",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "turn_detection": {"type": "server_vad", "create_response": False, "idle_timeout_ms": 5000},
            },
            "output": {"voice": "alloy"},
        },
    }
    view = transcription.view(realtime_view)
    RealtimeTranscriptionSessionCreateRequest.model_validate(view)
    assert view["audio"] == {
        "input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "turn_detection": {"type": "server_vad", "create_response": False},
        }
    }
    assert "instructions" not in view


def test_intents():
    assert transcription.intent_error("transcription") is None
    why = transcription.intent_error("translation" * 20)
    assert why is not None and "not known" in why and len(why) < 200


def test_no_reply_is_prepared_unseen_in_a_transcription_session():
    s = make(transcribe=True)
    assert s.preview_response("what time is it") is None
    assert make(transcribe=False).preview_response("what time is it") is not None
