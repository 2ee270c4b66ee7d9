"""GA session fields a strict client sends are accepted, honoured or ignored as docs/PROTOCOL.md §17 says,
and what the session reports still validates as the SDK's own session type. Pure: no sockets, no model."""

from __future__ import annotations

import json

import pytest
from openai.types.realtime import RealtimeSessionCreateRequest

from gateway.realtime import protocol as p
from tests.realtime.test_session import USER, ev, make

AGENTS_SDK_UPDATE = {  # the fields the Agents SDK and the openai SDK may send, all at once
    "type": "realtime",
    "tracing": "auto",
    "prompt": {"id": "pmpt_123", "variables": {"city": "Paris"}, "version": "2"},
    "include": ["item.input_audio_transcription.logprobs"],
    "reasoning": {"effort": "low"},
    "max_output_tokens": "inf",
    "audio": {
        "input": {
            "noise_reduction": {"type": "near_field"},
            "transcription": {"model": "gpt-4o-mini-transcribe", "language": "en"},
            "turn_detection": {"type": "semantic_vad", "interrupt_response": True},
        }
    },
    "truncation": {"type": "retention_ratio", "retention_ratio": 0.8, "token_limits": {"post_instructions": 1000}},
}


def test_every_ga_field_is_accepted_and_the_echo_is_a_valid_session():
    s = make()
    out = s.handle(ev(json.dumps({"type": "session.update", "session": AGENTS_SDK_UPDATE}))).events
    assert [e["type"] for e in out] == ["session.updated"]
    session = out[0]["session"]
    RealtimeSessionCreateRequest.model_validate(session)  # what a strict client parses it as
    assert session["tracing"] == "auto" and session["max_output_tokens"] == "inf"
    assert session["truncation"]["retention_ratio"] == 0.8
    assert "prompt" not in session and "reasoning" not in session  # ignored, so not claimed


def test_max_output_tokens_inf_is_the_server_cap():
    s = make()
    s.handle(ev(USER))
    start = s.handle(ev('{"type":"response.create","response":{"max_output_tokens":"inf"}}')).actions[0]
    assert start.sampling.max_tokens == 64  # make()'s session.max_output_tokens


def test_legacy_modalities_is_read_as_output_modalities():
    s = make()
    out = s.handle(ev('{"type":"session.update","session":{"modalities":["text"]}}')).events
    assert out[0]["session"]["output_modalities"] == ["text"]
    s.handle(ev(USER))
    created = s.handle(ev('{"type":"response.create","response":{"modalities":["text"]}}')).events[0]
    assert created["response"]["output_modalities"] == ["text"]
    both = p.parse('{"type":"session.update","session":{"modalities":["audio"],"output_modalities":["text"]}}')
    assert both.session.output_modalities == ["text"]  # the GA name wins


def test_bad_values_of_accepted_fields_are_refused_naming_the_field():
    for session, param in (
        ({"tracing": 5}, "session.tracing"),
        ({"truncation": {"type": "retention_ratio", "retention_ratio": -1}}, "session.truncation"),
        ({"parallel_tool_calls": "maybe"}, "session.parallel_tool_calls"),
    ):
        try:
            p.parse(json.dumps({"type": "session.update", "event_id": "e9", "session": session}))
        except p.ProtocolError as exc:
            assert exc.code == "invalid_value" and exc.param.startswith(param) and exc.event_id == "e9", exc.param
        else:
            raise AssertionError(f"{session} was accepted")


def test_noise_reduction_and_echo_cancellation_are_echoed_and_a_bad_type_names_the_field():
    s = make()
    audio = {"input": {"noise_reduction": {"type": "far_field"}, "echo_cancellation": {"type": "client"}}}
    out = s.handle(ev(json.dumps({"type": "session.update", "session": {"audio": audio}}))).events
    assert out[0]["type"] == "session.updated"
    assert out[0]["session"]["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    assert out[0]["session"]["audio"]["input"]["echo_cancellation"] == {"type": "client"}
    for field, value in (("noise_reduction", "hallway"), ("echo_cancellation", "both")):
        bad = {"audio": {"input": {field: {"type": value}}}}
        with pytest.raises(p.ProtocolError) as refused:  # the connection sends it as an error event
            p.parse(json.dumps({"type": "session.update", "session": bad}))
        assert refused.value.param == f"session.audio.input.{field}.type"
