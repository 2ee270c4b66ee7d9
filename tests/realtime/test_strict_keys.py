"""Unknown keys in session.update / response.create get OpenAI's ``unknown_parameter`` error naming the key;
the GA keys a strict client sends, our extensions and the documented accepted-and-ignored keys still parse."""

from __future__ import annotations

import json

import pytest
from openai.types.realtime import (
    RealtimeResponseCreateParams,
    RealtimeSessionCreateRequest,
    RealtimeTranscriptionSessionCreateRequest,
)

from gateway.realtime import protocol as p
from gateway.realtime.strict_keys import ACCEPTED_IGNORED
from tests.realtime.test_ga_options import AGENTS_SDK_UPDATE
from tests.wsclient import RealtimeClient


def refused(event: dict) -> p.ProtocolError:
    with pytest.raises(p.ProtocolError) as e:
        p.parse(json.dumps(event))
    return e.value


@pytest.mark.parametrize(
    ("event", "param"),
    [
        ({"type": "session.update", "session": {"temprature": 0}}, "session.temprature"),
        ({"type": "session.update", "session": {"audio": {"input": {"vad": True}}}}, "session.audio.input.vad"),
        (
            {"type": "session.update", "session": {"audio": {"output": {"format": {"type": "audio/pcm", "bits": 8}}}}},
            "session.audio.output.format.bits",
        ),
        (
            {"type": "session.update", "session": {"audio": {"input": {"turn_detection": {"silence_ms": 300}}}}},
            "session.audio.input.turn_detection.silence_ms",
        ),
        (
            {
                "type": "session.update",
                "session": {
                    "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g", "strict": True}]
                },
            },
            "session.tools[1].strict",
        ),
        (
            {"type": "session.update", "session": {"tools": [{"type": "mcp", "server_label": "s", "tunnel_id": "t"}]}},
            "session.tools[0].tunnel_id",
        ),
        (
            {
                "type": "session.update",
                "session": {"truncation": {"type": "retention_ratio", "retention_ratio": 0.5, "ratio": 1}},
            },
            "session.truncation.ratio",
        ),
        ({"type": "response.create", "response": {"max_tokens": 5}}, "response.max_tokens"),
        (
            {"type": "response.create", "response": {"audio": {"output": {"voice": "alloy", "pitch": 2}}}},
            "response.audio.output.pitch",
        ),
        (
            {"type": "response.create", "response": {"tool_choice": {"type": "function", "name": "f", "x": 1}}},
            "response.tool_choice.x",
        ),
        ({"type": "response.create", "respone": {}}, "respone"),
    ],
)
def test_an_unknown_key_is_unknown_parameter_naming_its_path(event, param):
    err = refused({**event, "event_id": "ev_7"})
    assert (err.code, err.param, err.event_id) == ("unknown_parameter", param, "ev_7")
    assert err.message == f"Unknown parameter: '{param}'."


def test_known_keys_extensions_and_accepted_ignored_keys_parse():
    session = {
        **AGENTS_SDK_UPDATE,  # every GA field a strict client may send
        "instructions": "You are a helpful assistant.",
        "temperature": 0,
        "top_p": 0.9,
        "seed": 3,
        "frequency_penalty": 0.5,
        "dry_multiplier": 0.8,
        "scheduler": {"strategy": "balanced"},
        "modalities": ["text"],
        "audio": {
            **AGENTS_SDK_UPDATE["audio"],
            "input": {**AGENTS_SDK_UPDATE["audio"]["input"], "echo_cancellation": {"type": "client"}},
            "output": {"voice": {"id": "v"}, "speed": 1.0, "format": {"type": "audio/pcm", "rate": 24000}},
        },
        "tools": [
            {"type": "function", "name": "f", "description": "", "parameters": {"type": "object", "whatever": 1}}
        ],
    }
    assert isinstance(p.parse(json.dumps({"type": "session.update", "session": session})), p.SessionUpdate)
    response = {
        "prompt": {"id": "pmpt_1"},
        "reasoning": {"effort": "low"},
        "modalities": ["text"],
        "metadata": {"any": "key"},  # free-form pairs: not checked
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "min_p": 0.05,
    }
    assert isinstance(p.parse(json.dumps({"type": "response.create", "response": response})), p.ResponseCreate)


@pytest.mark.parametrize(
    ("sdk_model", "ours"),
    [
        (RealtimeSessionCreateRequest, p.SessionOptions),
        (RealtimeTranscriptionSessionCreateRequest, p.SessionOptions),
        (RealtimeResponseCreateParams, p.ResponseOptions),
    ],
)
def test_every_top_level_key_of_the_openai_sdks_types_is_known_or_accepted(sdk_model, ours):
    """A field the installed SDK can send is never refused at the top level: a new one fails this test
    until it is implemented or listed as accepted and ignored."""
    known = set(ours.model_fields) | {key for model, key in ACCEPTED_IGNORED if model == ours.__name__}
    assert set(sdk_model.model_fields) <= known, set(sdk_model.model_fields) - known


async def test_the_server_answers_an_unknown_key_with_an_error_event_and_keeps_the_session(
    tiny_backend, server_factory
):
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.send({"type": "session.update", "event_id": "e1", "session": {"instructions": "x", "voise": "alloy"}})
        err = await c.until("error")
        assert err["error"] == {
            "type": "invalid_request_error",
            "code": "unknown_parameter",
            "message": "Unknown parameter: 'session.voise'.",
            "param": "session.voise",
            "event_id": "e1",
        }
        await c.send({"type": "session.update", "session": {"instructions": "Be brief."}})
        updated = await c.until("session.updated")
        assert updated["session"]["instructions"] == "Be brief."  # the session goes on
        await c.send({"type": "response.create", "event_id": "e2", "response": {"max_tokens": 4}})
        err = await c.until("error")
        assert (err["error"]["code"], err["error"]["param"]) == ("unknown_parameter", "response.max_tokens")
        done = await c.ask("still there?", max_output_tokens=4)
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()
