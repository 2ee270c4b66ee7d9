"""Traces of a real voice turn, received by a real OTLP/HTTP receiver; the turn latency in response.done.

espeak-ng speech in, server VAD, Whisper, a fake model that answers in words, the Piper voice out;
spans exported by the OpenTelemetry SDK to ``testkit.otlp.OtlpReceiver`` on a loopback port.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from gateway.core.config import TracingConfig
from gateway.core.telemetry import start_tracing
from gateway.realtime.turnlatency import TurnLatency, stage_sum
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from testkit.live_server import free_port
from testkit.otlp import OtlpReceiver, Span, tree
from tests.conftest import requires_espeak
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient

TRACED = {"workflow_name": "kitchen-assistant", "group_id": "household-7", "metadata": {"room": "kitchen", "n": 3}}


@pytest.fixture
def fast_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's standard variable: batches leave every 50 ms instead of 5 s."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def traced(endpoint: str, **more: object) -> dict[str, object]:
    return {
        "tracing.enabled": True,
        "tracing.endpoint": endpoint,
        "speculative.drafter": "none",
        "server.grace_period_s": 0,  # the socket's close ends the session (and its span) at once
        **more,
    }


async def voice_turn(addr: str, speculation_ms: int = 0) -> tuple[RealtimeClient, dict]:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created")
    td = {"type": "server_vad", "transcription_interval_ms": 0, "speculation_ms": speculation_ms}
    await c.update_session(
        {"output_modalities": ["audio"], "audio": {"input": {"turn_detection": td}}, "tracing": TRACED}
    )
    await stream(c, pcm24(np.concatenate([silence(0.3), speak("Please open the kitchen window."), silence(1.2)])))
    return c, await c.until("response.done")


SHOWN = (
    "gen_ai.conversation.id",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "stream_omni.asr.pass",
    "stream_omni.tts.index",
    "stream_omni.vad.settle_ms",
)


async def flushed(addr: object) -> None:
    """The stopped server's last export is over: what it logs is logged in this test, not a later one."""
    closing = addr.services.tracing.closing  # type: ignore[attr-defined]
    assert closing is not None  # the app closed its tracing
    await asyncio.to_thread(closing.join, 30)
    assert not closing.is_alive()


def children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.parent_id == parent.span_id]


@requires_espeak
async def test_a_voice_turn_is_one_trace_of_its_stages(server_factory, fast_export):
    with OtlpReceiver() as rx:
        with server_factory(FakeBackend(answer_tokens=30), **traced(rx.endpoint)) as addr:
            c, done = await voice_turn(addr)
            assert done["response"]["status"] == "completed"
            await c.close()
            (session,) = await asyncio.to_thread(rx.wait_for, "session")  # ends as the session closes
        await flushed(addr)
    spans = rx.spans
    print(tree(spans, SHOWN))  # docs/OPERATING.md "Traces" shows this (pytest -s)
    assert len({s.trace_id for s in spans}) == 1, "every span of the session is in one trace"
    assert session.parent_id == "" and session.resource["service.name"] == "stream-omni"
    conv = session.attributes["gen_ai.conversation.id"]
    assert conv.startswith("conv_") and session.attributes["gen_ai.request.model"] == "fake"
    assert session.attributes["stream_omni.tracing.workflow_name"] == "kitchen-assistant"
    assert session.attributes["stream_omni.tracing.metadata.n"] == "3"

    (turn,) = children(spans, session)
    assert turn.name == "turn"
    stages = {s.name: s for s in children(spans, turn)}
    assert {"vad turn", "transcription", "whisper pass", f"chat {'fake'}"} <= set(stages)
    vad, asr, chat = stages["vad turn"], stages["transcription"], stages["chat fake"]
    # in the order they happened: speech, its transcript, the reply
    assert turn.start_ns == vad.start_ns < vad.end_ns <= asr.start_ns < asr.end_ns <= chat.start_ns
    assert chat.end_ns <= turn.end_ns <= session.end_ns
    a = chat.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.conversation.id"] == conv
    assert a["gen_ai.response.id"] == done["response"]["id"]
    assert a["gen_ai.response.finish_reasons"] == ("stop",) and a["stream_omni.response.status"] == "completed"
    usage = done["response"]["usage"]  # the model's tokens (the audio's are the wire's convention on top)
    assert a["gen_ai.usage.input_tokens"] == usage["input_tokens"]
    assert a["gen_ai.usage.output_tokens"] == usage["output_token_details"]["text_tokens"] == 30
    assert a["stream_omni.tracing.group_id"] == "household-7"

    model = {s.name: s for s in children(spans, chat)}
    assert {"queue", "prefill", "decode", "tts chunk"} <= set(model)
    q, pre, dec = model["queue"], model["prefill"], model["decode"]
    assert chat.start_ns <= q.start_ns <= q.end_ns <= pre.start_ns < pre.end_ns <= dec.start_ns < dec.end_ns
    tts = sorted((s for s in children(spans, chat) if s.name == "tts chunk"), key=lambda s: s.start_ns)
    assert [s.attributes["stream_omni.tts.index"] for s in tts] == list(range(len(tts)))
    assert all(pre.end_ns <= s.start_ns < s.end_ns <= chat.end_ns for s in tts), [
        (s.start_ns - pre.end_ns, s.ms, chat.end_ns - s.end_ns) for s in tts
    ]
    # no content unless asked: no transcript, prompt or reply text anywhere
    said = "kitchen window"
    assert not any(said in str(v).lower() for s in spans for v in s.attributes.values() if isinstance(v, str))


@requires_espeak
async def test_the_turn_latency_adds_up_to_the_measured_end_to_end(server_factory, fast_export):
    with OtlpReceiver() as rx:
        with server_factory(FakeBackend(answer_tokens=30), **traced(rx.endpoint)) as addr:
            c, done = await voice_turn(addr)
            await c.close()
        await flushed(addr)
    lat = TurnLatency(**done["response"]["metrics"]["turn_latency"])
    print(done["response"]["metrics"]["turn_latency"])  # docs/OPERATING.md "Turn latency" shows one (pytest -s)
    assert not lat.prepared
    assert all(v is not None for v in (lat.vad_settle_ms, lat.transcription_ms, lat.prefill_ms, lat.first_audio_ms))
    assert lat.vad_settle_ms >= 500  # server_vad's default silence window is what settles the turn
    assert lat.transcription_ms > 0 and lat.first_audio_ms > 0
    # the stages are measured separately, so their sum is a real check on end-to-end
    assert abs(stage_sum(lat) - lat.end_to_end_ms) <= 10, lat


async def test_an_unreachable_collector_loses_spans_not_turns(tiny_backend, server_factory, fast_export):
    dead = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    cfg = traced(dead, **{"tracing.export_timeout_s": 0.5})
    with server_factory(tiny_backend, **cfg) as addr:  # the loop watch fails this test on any stall
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        for i in range(3):
            await c.say(f"count to {i + 3}")
            await c.send({"type": "response.create", "response": {"max_output_tokens": 8}})
            done = await c.until("response.done", timeout=60)
            assert done["response"]["status"] in ("completed", "incomplete")
            assert done["response"]["metrics"]["turn_latency"]["end_to_end_ms"] > 0
        assert addr.services.tracing is not None  # type: ignore[attr-defined]
        await c.close()
    await flushed(addr)


def test_tracing_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch):
    assert start_tracing(TracingConfig(), "m") is None
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")  # the standard switch wins over the config
    assert start_tracing(TracingConfig(enabled=True, endpoint="http://127.0.0.1:9/v1/traces"), "m") is None


CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}  # W3C Trace Context


async def test_a_callers_traceparent_parents_the_session_and_each_http_completion(
    tiny_backend, server_factory, fast_export
):
    with OtlpReceiver() as rx:
        with server_factory(tiny_backend, **traced(rx.endpoint, **{"audio.enabled": False})) as addr:
            c = await RealtimeClient.connect(addr, additional_headers=TRACEPARENT)
            await c.until("session.created")
            await c.say("hello")
            await c.send({"type": "response.create", "response": {"max_output_tokens": 4}})
            await c.until("response.done", timeout=60)
            await c.close()
            async with httpx.AsyncClient(timeout=120) as h:
                chat = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                streamed = {**chat, "stream": True}
                text = {"model": "tiny-llama", "prompt": "once", "max_tokens": 4}
                base = f"http://{addr}/v1"
                for url, payload, headers in [
                    ("/chat/completions", chat, TRACEPARENT),
                    ("/chat/completions", streamed, TRACEPARENT),
                    ("/completions", text, TRACEPARENT),
                    ("/chat/completions", chat, {"traceparent": "not-a-trace"}),  # malformed: a trace of its own
                ]:
                    r = await h.post(base + url, json=payload, headers=headers)
                    assert r.status_code == 200, r.text
            await asyncio.to_thread(rx.wait_for, "chat tiny-llama", count=4)  # the Realtime reply and 3 HTTP ones
            await asyncio.to_thread(rx.wait_for, "text_completion tiny-llama")
            await asyncio.to_thread(rx.wait_for, "session")
        await flushed(addr)
    spans = rx.spans
    (session,) = [s for s in spans if s.name == "session"]
    assert (session.trace_id, session.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    http = [s for s in spans if s.parent_id == CALLER_SPAN and s.name != "session"]
    assert sorted(s.name for s in http) == ["chat tiny-llama", "chat tiny-llama", "text_completion tiny-llama"]
    for s in http:
        assert s.trace_id == CALLER_TRACE and s.attributes["gen_ai.usage.output_tokens"] > 0
        assert s.attributes["gen_ai.operation.name"] == s.name.split()[0]
        assert s.attributes["gen_ai.response.id"].startswith(("chatcmpl-", "cmpl-"))
        stages = {k.name: k for k in spans if k.parent_id == s.span_id}
        assert set(stages) == {"queue", "prefill", "decode"}
        assert s.start_ns <= stages["queue"].start_ns <= stages["prefill"].start_ns <= stages["decode"].end_ns
        assert stages["decode"].end_ns <= s.end_ns
    alone = [s for s in spans if s.name == "chat tiny-llama" and s.parent_id == ""]
    assert len(alone) == 1 and alone[0].trace_id != CALLER_TRACE


@requires_espeak
async def test_a_transcription_sessions_turns_are_traced_with_no_response(tiny_backend, server_factory, fast_export):
    with OtlpReceiver() as rx:
        with server_factory(tiny_backend, **traced(rx.endpoint)) as addr:
            c = await RealtimeClient.connect(addr, query="intent=transcription")
            await c.until("session.created")
            said = [speak("Please open the kitchen window."), speak("My favorite color is blue.")]
            await stream(c, pcm24(np.concatenate([silence(0.3), said[0], silence(1.5), said[1], silence(1.5)])))
            for _ in said:
                await c.until("conversation.item.input_audio_transcription.completed")
            first = await asyncio.to_thread(rx.wait_for, "turn")  # drawn once the next turn was transcribed
            await c.close()
            turns = await asyncio.to_thread(rx.wait_for, "turn", count=2)  # the last: when the session ended
            (session,) = await asyncio.to_thread(rx.wait_for, "session")
        await flushed(addr)
    spans = rx.spans
    assert len(first) == 1 and not any(s.name.startswith("chat") for s in spans)
    for turn in turns:
        assert turn.parent_id == session.span_id
        stages = {s.name: s for s in children(spans, turn)}
        assert {"vad turn", "transcription", "whisper pass"} <= set(stages)
        assert turn.start_ns == stages["vad turn"].start_ns < stages["transcription"].end_ns <= turn.end_ns
    # the one drawn first is the first spoken (audio sent faster than real time: the turns overlap in wall time)
    early, late = sorted(turns, key=lambda s: s.start_ns)
    assert first[0].span_id == early.span_id and early.end_ns < late.end_ns
