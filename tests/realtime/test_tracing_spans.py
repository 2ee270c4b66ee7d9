"""The spans a session's trace draws from its marks: tool calls, images, content capture, session.tracing.

The SDK's in-memory exporter sits beside the OTLP one (which points at a port nothing listens on);
the timeline is a fake clock's. A real server's voice turn is tests/media/test_tracing.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.core.config import TracingConfig
from gateway.core.telemetry import Tracing
from gateway.realtime.response_ending import ResponseEnding
from gateway.realtime.tracing import SessionTrace, finish_reason, tracing_attributes
from gateway.realtime.turnlatency import TurnTimer
from testkit.live_server import free_port


@pytest.fixture
def traced() -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    def make(capture: bool = False) -> tuple[Tracing, InMemorySpanExporter]:
        dead = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens: a short export timeout
        cfg = TracingConfig(enabled=True, endpoint=dead, capture_content=capture, export_timeout_s=0.5)
        t = Tracing(cfg, "smol")
        memory = InMemorySpanExporter()
        t.provider.add_span_processor(SimpleSpanProcessor(memory))
        made.append(t)
        return t, memory

    made: list[Tracing] = []
    yield make  # type: ignore[misc]
    for t in made:  # the exporter's failures are logged here, not in a later test
        t.close().join(30)


def ev(kind: str, **fields: object) -> dict[str, object]:
    return {"type": kind, **fields}


def test_an_mcp_call_and_an_image_are_spans_of_their_response_and_session(traced):
    tracing, memory = traced()
    options = {"workflow_name": "support", "metadata": {"tier": "gold"}}
    trace = SessionTrace(tracing, "sess_abc", lambda: options, 1.0)
    timer = TurnTimer()
    trace.image(1.1, 1.3, 2)
    call = {"id": "mcp_1", "type": "mcp_call", "name": "lookup"}
    sent = [
        (1.5, [ev("response.created", response={"id": "resp_1"})]),
        (1.6, [ev("response.output_item.added", response_id="resp_1", item=call)]),
        (1.7, [ev("response.mcp_call.in_progress", item_id="mcp_1")]),
        (1.9, [ev("response.mcp_call.completed", item_id="mcp_1")]),
        (2.0, [ev("response.output_text.delta", response_id="resp_1")]),
    ]
    for now, events in sent:
        timer.observe(events, now)
        trace.observe(events, now)
    metrics = {"queue_ms": 1.0, "prefill_ms": 10.0, "ttft_ms": 20.0, "tokens": 5, "prompt_tokens": 9, "e2e_s": 0.6}
    trace.response("resp_1", ResponseEnding.completed({}, metrics), timer.finish("resp_1", metrics), 2.2)
    trace.close(3.0)
    spans = {s.name: s for s in memory.get_finished_spans()}
    session, chat = spans["session"], spans["chat smol"]
    tool, image = spans["execute_tool lookup"], spans["image processing"]
    assert image.parent.span_id == session.context.span_id and image.attributes["stream_omni.images"] == 2
    assert chat.parent.span_id == session.context.span_id  # a text turn: no turn span
    assert tool.parent.span_id == chat.context.span_id
    assert tool.attributes["gen_ai.tool.name"] == "lookup" and tool.attributes["gen_ai.tool.call.id"] == "mcp_1"
    assert (tool.end_time - tool.start_time) == pytest.approx(0.2e9, abs=1e3)  # in_progress → completed
    assert chat.attributes["stream_omni.tracing.workflow_name"] == "support"
    assert session.attributes["stream_omni.tracing.metadata.tier"] == "gold"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 9 and chat.attributes["gen_ai.usage.output_tokens"] == 5
    assert {"queue", "prefill", "decode"} <= set(spans)


def test_transcripts_are_recorded_only_when_content_capture_is_on(traced):
    for capture in (False, True):
        tracing, memory = traced(capture)
        trace = SessionTrace(tracing, "sess_x", lambda: "auto", 0.0)
        timer = TurnTimer()
        sent = [
            (0.1, [ev("input_audio_buffer.speech_started", item_id="item_1", audio_start_ms=0)]),
            (0.9, [ev("input_audio_buffer.speech_stopped", item_id="item_1", audio_end_ms=800)]),
            (1.2, [ev("conversation.item.input_audio_transcription.completed", item_id="item_1", transcript="hi")]),
            (1.3, [ev("response.created", response={"id": "r"})]),
            (1.4, [ev("response.content_part.added", response_id="r")]),
        ]
        for now, events in sent:
            timer.observe(events, now)
            trace.observe(events, now)
        trace.response("r", ResponseEnding.completed({}, {}), timer.finish("r", {}), 1.5)
        (asr,) = [s for s in memory.get_finished_spans() if s.name == "transcription"]
        assert ("stream_omni.transcript" in asr.attributes) is capture
        assert not any("stream_omni.tracing" in k for s in memory.get_finished_spans() for k in s.attributes)


def test_session_tracing_becomes_bounded_string_attributes():
    many = {f"k{i}": i for i in range(40)}
    attrs = tracing_attributes({"workflow_name": "w" * 5000, "group_id": 7, "metadata": many})
    assert len(attrs["stream_omni.tracing.workflow_name"]) == 512
    assert "stream_omni.tracing.group_id" not in attrs  # not a string: not recorded
    assert sum(k.startswith("stream_omni.tracing.metadata.") for k in attrs) == 16
    assert tracing_attributes("auto") == {} and tracing_attributes(None) == {}


def test_a_turn_no_response_answers_is_drawn_alone_and_a_failed_one_is_an_error(traced):
    tracing, memory = traced()
    trace = SessionTrace(tracing, "sess_t", lambda: None, 0.0)
    timer = TurnTimer()
    sent = [
        (0.1, [ev("input_audio_buffer.speech_started", item_id="item_1", audio_start_ms=0)]),
        (0.9, [ev("input_audio_buffer.speech_stopped", item_id="item_1", audio_end_ms=800)]),
        (1.2, [ev("conversation.item.input_audio_transcription.completed", item_id="item_1", transcript="a")]),
        (2.0, [ev("input_audio_buffer.speech_started", item_id="item_2", audio_start_ms=1900)]),
        (2.5, [ev("input_audio_buffer.speech_stopped", item_id="item_2", audio_end_ms=2400)]),
        (2.8, [ev("conversation.item.input_audio_transcription.failed", item_id="item_2")]),
        (3.0, [ev("input_audio_buffer.speech_started", item_id="item_3", audio_start_ms=2900)]),
        (3.5, [ev("input_audio_buffer.speech_stopped", item_id="item_3", audio_end_ms=3400)]),
        (3.9, [ev("conversation.item.input_audio_transcription.completed", item_id="item_3", transcript="b")]),
    ]
    for now, events in sent:  # what SessionTiming does with each batch it sees go out
        timer.observe(events, now)
        for spoken in timer.take_unanswered():
            trace.unanswered(spoken, now)
    assert len([s for s in memory.get_finished_spans() if s.name == "turn"]) == 2  # item_3 may still be answered
    for spoken in timer.pending():  # the session closes
        trace.unanswered(spoken, 4.0)
    trace.close(4.0)
    spans = memory.get_finished_spans()
    session = next(s for s in spans if s.name == "session")
    turns = sorted((s for s in spans if s.name == "turn"), key=lambda s: s.start_time)
    assert [t.parent.span_id for t in turns] == [session.context.span_id] * 3
    ends = [(t.end_time - t.start_time) / 1e9 for t in turns]
    assert ends == [pytest.approx(1.1), pytest.approx(0.8), pytest.approx(0.9)]  # speech start → transcript
    failed = [s for s in spans if s.attributes.get("error.type") == "transcription_failed"]
    assert {s.name for s in failed} == {"turn", "transcription"}
    assert all(s.status.status_code.name == "ERROR" for s in failed)
    assert not any(s.name.startswith("chat") for s in spans)


def test_a_response_that_only_calls_a_function_is_drawn_with_its_model_stages(traced):
    tracing, memory = traced()
    trace = SessionTrace(tracing, "sess_f", lambda: None, 0.0)
    timer = TurnTimer()
    for now, events in [
        (1.0, [ev("response.created", response={"id": "resp_f"})]),
        (1.3, [ev("response.function_call_arguments.delta", response_id="resp_f", delta="{")]),
    ]:
        timer.observe(events, now)
        trace.observe(events, now)
    metrics = {"queue_ms": 2.0, "prefill_ms": 30.0, "ttft_ms": 50.0, "tokens": 9, "prompt_tokens": 40, "e2e_s": 0.4}
    timed = timer.finish("resp_f", metrics)
    assert timed is not None and timed[1] is None  # no text: no latency record on the wire
    trace.response("resp_f", ResponseEnding.completed({}, metrics), timed, 1.5)
    spans = {s.name: s for s in memory.get_finished_spans()}
    chat = spans["chat smol"]
    assert chat.attributes["gen_ai.usage.output_tokens"] == 9
    assert not any(k.startswith("stream_omni.latency.") for k in chat.attributes)
    assert {spans[n].parent.span_id for n in ("queue", "prefill", "decode")} == {chat.context.span_id}
    # refused before reaching the engine: the response alone
    for now, events in [(2.0, [ev("response.created", response={"id": "resp_x"})])]:
        timer.observe(events, now)
    trace.response("resp_x", ResponseEnding.failed("server_busy"), timer.finish("resp_x", None), 2.1)
    names = [s.name for s in memory.get_finished_spans()]
    assert names.count("chat smol") == 2 and names.count("decode") == 1
    refused = [s for s in memory.get_finished_spans() if s.attributes.get("gen_ai.response.id") == "resp_x"][0]
    assert refused.attributes["error.type"] == "server_busy" and refused.status.status_code.name == "ERROR"
    assert refused.attributes["gen_ai.response.finish_reasons"] == ("error",)
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)


@pytest.mark.parametrize(
    ("ending", "reason"),
    [
        (ResponseEnding.completed({}, None), "stop"),
        (ResponseEnding.incomplete("max_output_tokens"), "length"),
        (ResponseEnding.incomplete("content_filter"), "content_filter"),
        (ResponseEnding.cancelled("turn_detected"), "turn_detected"),
        (ResponseEnding.failed(None), "error"),
    ],
)
def test_finish_reasons_use_the_chat_words_where_there_are_some(ending, reason):
    assert finish_reason(ending) == reason
