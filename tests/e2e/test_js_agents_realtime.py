"""The OpenAI Agents SDK for JS (``@openai/agents-realtime``, pinned in tests/e2e/js) under Node drives
/v1/realtime unmodified: ``RealtimeSession`` over ``OpenAIRealtimeWebSocket({url})`` with the SDK's own
defaults otherwise (it asks for ``gpt-realtime-2.1``, served here as a ``model.aliases`` entry; audio out;
semantic VAD). Each scenario is one ``node js/agents_realtime.mjs`` run; its report lists the server
events, the SDK's session history and its errors. The SDK ignores, silently, an event of a type it knows
that fails its own schema, so the script checks each one against that schema (``dropped``).

Tool turns run on the scripted model of the Python SDK's tests (tests/e2e/test_agents_sdk_realtime.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.conftest import requires_espeak
from tests.e2e.node_clients import run_scenario
from tests.e2e.test_agents_sdk_realtime import DialogueBackend, weather_dialogue

SDK_MODEL = "gpt-realtime-2.1"  # DEFAULT_OPENAI_REALTIME_MODEL of @openai/agents-realtime 0.20.0
SCRIPT = "agents_realtime.mjs"


def _config(**extra: Any) -> dict[str, Any]:
    # text-only: a server with no voice answers the SDK's audio request in text and says so
    return {"audio.enabled": False, "audio.output.enabled": False, "model.aliases": [SDK_MODEL], **extra}


def _url(addr: str) -> str:
    return f"ws://{addr}/v1/realtime?model={SDK_MODEL}"


def _no_errors(report: dict[str, Any]) -> None:
    assert report["errors"] == [], report["errors"]  # the SDK's `error` events: server errors, socket errors
    assert report["dropped"] == [], report["dropped"]  # events the SDK would have ignored
    assert "session.updated" in report["serverEvents"]  # the SDK's session config was taken


def _messages(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [h for h in report["history"] if h["type"] == "message" and h["role"] == role]


def test_a_text_turn(js_clients, tiny_backend, server_factory):
    with server_factory(tiny_backend, **_config()) as addr:
        report = run_scenario(SCRIPT, "text", _url(addr))
    _no_errors(report)
    assert report["serverEvents"].count("response.done") == 1
    (reply,) = _messages(report, "assistant")
    assert reply["text"] and reply["text"] == report["agentEnds"][0]["output"]  # whole, in the SDK's history
    assert [m["text"] for m in _messages(report, "user")] == ["Hello"]


def test_a_tool_call_and_the_answer_that_uses_its_output(js_clients, tiny_backend, server_factory):
    model = DialogueBackend(tiny_backend, weather_dialogue, step_s=0.03)
    with server_factory(model, **_config(**{"speculative.drafter": "none"})) as addr:
        report = run_scenario(SCRIPT, "tool", _url(addr))
    _no_errors(report)
    assert report["toolCalls"] == ["Paris"]  # parsed arguments, one call
    (call,) = [h for h in report["history"] if h["type"] == "function_call"]
    assert call["name"] == "get_weather" and call["output"] == "sunny, 21 degrees in Paris"
    events = report["serverEvents"]
    # sent when the call was done and accepted at once, before the call's response ended
    assert events.index("conversation.item.added/function_call_output") < events.index("response.done")
    assert any("sunny, 21 degrees in Paris" in p for p in model.prompts)  # the model saw the output
    assert "sunny and 21" in _messages(report, "assistant")[-1]["text"]


@requires_espeak
def test_a_voice_turn(js_clients, tiny_backend, server_factory, tmp_path):
    from processors.asr import word_error_rate
    from testkit.espeak import silence, speak
    from tests.media.test_realtime_voice import pcm24

    question = "What is the weather like in Paris today?"
    pcm = tmp_path / "question.pcm"
    pcm.write_bytes(pcm24(np.concatenate([silence(0.4), speak(question), silence(2.5)])))
    with server_factory(tiny_backend, **{"model.aliases": [SDK_MODEL]}) as addr:
        report = run_scenario(SCRIPT, "voice", _url(addr), str(pcm), timeout_s=180)
    _no_errors(report)
    events = report["serverEvents"]
    assert "input_audio_buffer.speech_started" in events and "input_audio_buffer.committed" in events
    # the SDK fetches each finished transcript with conversation.item.retrieve; the history has it from there
    assert "conversation.item.retrieved/message" in events
    (user,) = _messages(report, "user")
    assert word_error_rate(question, user["text"]) <= 0.25, user["text"]
    assert report["agentEnds"] and _messages(report, "assistant")  # a reply to the spoken question
