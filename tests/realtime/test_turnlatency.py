"""The per-turn latency record on a fake clock: stages measured where they happen, their sum against end-to-end."""

from __future__ import annotations

import pytest

from gateway.realtime.turnlatency import TurnLatency, TurnTimer, stage_sum


def ev(kind: str, **fields: object) -> dict[str, object]:
    return {"type": kind, **fields}


def created(rid: str) -> dict[str, object]:
    return ev("response.created", response={"id": rid})


def voice_turn(t: TurnTimer, item: str = "item_1") -> None:
    """Speech, then the VAD closes the turn at 11.2 s after its 500 ms silence window (``audio_end_ms``
    includes it), having analysed 20 ms past it by then; the transcript comes 300 ms later."""
    t.observe([ev("input_audio_buffer.speech_started", item_id=item, audio_start_ms=100)], 10.0)
    t.whisper_pass(item, "partial", 10.4, 10.6)
    t.observe([ev("input_audio_buffer.speech_stopped", item_id=item, audio_end_ms=2080)], 11.2, 2100, silence_ms=480)
    t.whisper_pass(item, "final", 11.2, 11.5)
    t.observe([ev("conversation.item.input_audio_transcription.completed", item_id=item, transcript="hi")], 11.5)


ENGINE = {"queue_ms": 20.0, "prefill_ms": 80.0, "ttft_ms": 150.0, "tokens": 12}


def test_a_spoken_reply_is_timed_stage_by_stage():
    t = TurnTimer()
    voice_turn(t)
    t.observe([created("resp_1")], 11.51)
    t.submitted("resp_1", 11.53)  # 30 ms of tokenizing after the transcript
    # the engine's first text reaches the loop 150 ms after submission (+ 2 ms hand-off)
    t.observe([ev("response.content_part.added", response_id="resp_1")], 11.682)
    t.observe([ev("response.output_audio.delta", response_id="resp_1")], 11.782)
    t.observe([ev("response.output_audio.delta", response_id="resp_1")], 11.9)  # not the first: ignored
    marks, lat = t.finish("resp_1", ENGINE) or pytest.fail("no record")
    assert lat == TurnLatency(
        vad_settle_ms=500.0,
        transcription_ms=pytest.approx(300.0),
        queue_ms=pytest.approx(30.0 + 20.0),
        prefill_ms=80.0,
        first_token_ms=pytest.approx(150.0 - 20.0 - 80.0),
        first_audio_ms=pytest.approx(100.0),
        end_to_end_ms=pytest.approx(500.0 + 582.0),
        prepared=False,
    )
    # the stages leave out only the 2 ms hand-off of the first text from the engine to the loop
    assert lat.end_to_end_ms - stage_sum(lat) == pytest.approx(2.0)
    assert [p[0] for p in marks.spoken.passes] == ["partial", "final"]  # type: ignore[union-attr]
    assert t.responses == {} and t.turns == {}  # nothing kept once answered


def test_a_text_reply_is_timed_from_response_created():
    t = TurnTimer()
    t.observe([created("resp_1")], 5.0)
    t.submitted("resp_1", 5.01)
    t.observe([ev("response.output_text.delta", response_id="resp_1")], 5.16)
    _, lat = t.finish("resp_1", ENGINE) or pytest.fail("no record")
    assert (lat.vad_settle_ms, lat.transcription_ms, lat.first_audio_ms) == (None, None, None)
    assert lat.queue_ms == pytest.approx(10.0 + 20.0)
    assert lat.end_to_end_ms == pytest.approx(160.0)
    assert stage_sum(lat) == pytest.approx(160.0)


def test_a_reply_prepared_during_the_pause_is_flagged_and_queues_nothing():
    t = TurnTimer()
    voice_turn(t)
    t.observe([created("resp_1")], 11.51)
    t.adopted("resp_1", 11.3)  # its job went in during the pause, before the transcript
    t.observe([ev("response.content_part.added", response_id="resp_1")], 11.52)
    _, lat = t.finish("resp_1", ENGINE) or pytest.fail("no record")
    assert lat.prepared and lat.queue_ms == pytest.approx(20.0)  # only the engine's own wait
    # its model stages ran inside the turn: their sum overruns the end-to-end time
    assert stage_sum(lat) > lat.end_to_end_ms


def test_only_the_next_response_answers_a_turn():
    t = TurnTimer()
    voice_turn(t)
    t.observe([created("resp_1")], 11.6)
    t.observe([created("resp_2")], 12.0)  # e.g. a response.create of the client's own afterwards
    for rid, at in (("resp_1", 11.7), ("resp_2", 12.1)):
        t.observe([ev("response.output_text.delta", response_id=rid)], at)
    _, first = t.finish("resp_1", ENGINE) or pytest.fail("no record")
    _, second = t.finish("resp_2", ENGINE) or pytest.fail("no record")
    assert first.transcription_ms is not None and second.transcription_ms is None
    assert second.end_to_end_ms == pytest.approx(100.0)


def test_no_text_no_record_and_unknown_responses_are_ignored():
    t = TurnTimer()
    t.observe([created("resp_1")], 1.0)
    t.observe([ev("response.output_audio.delta", response_id="resp_x")], 1.1)  # not a response we know
    marks, lat = t.finish("resp_1", {"error_code": "server_busy"}) or pytest.fail("no marks")
    assert lat is None and marks.created_at == 1.0  # cancelled before any text: marks, no latency
    assert t.finish("resp_1", None) is None and t.responses == {}


def test_a_turn_no_response_claims_is_handed_out_once_when_the_next_is_transcribed():
    t = TurnTimer()
    voice_turn(t, "item_1")
    assert t.take_unanswered() == []  # a response may still answer it
    voice_turn(t, "item_2")  # transcribed with no response between: item_1 stays unanswered
    (first,) = t.take_unanswered()
    assert first.item_id == "item_1" and [p[0] for p in first.passes] == ["partial", "final"]
    assert t.take_unanswered() == []
    t.observe([created("resp_1")], 12.0)
    assert t.responses["resp_1"].spoken is not None and t.responses["resp_1"].spoken.item_id == "item_2"


def test_a_failed_transcription_and_a_closing_session_leave_their_turns_to_draw():
    t = TurnTimer()
    t.observe([ev("input_audio_buffer.speech_started", item_id="item_1", audio_start_ms=0)], 1.0)
    t.observe([ev("input_audio_buffer.speech_stopped", item_id="item_1", audio_end_ms=900)], 2.0, 920, 500)
    t.observe([ev("conversation.item.input_audio_transcription.failed", item_id="item_1")], 2.4)
    (failed,) = t.take_unanswered()
    assert failed.failed and failed.transcribed_at == 2.4 and t.turns == {}
    voice_turn(t, "item_2")  # transcribed, not yet answered
    t.observe([ev("input_audio_buffer.speech_started", item_id="item_3", audio_start_ms=3000)], 13.0)  # mid-speech
    assert [v.item_id for v in t.pending()] == ["item_2", "item_3"]
    assert t.pending() == [] and t.turns == {}


def test_turns_that_never_end_are_not_kept_without_bound():
    t = TurnTimer()
    for i in range(100):  # e.g. backchannels: speech that starts and is discarded, never transcribed
        t.observe([ev("input_audio_buffer.speech_started", item_id=f"item_{i}", audio_start_ms=i)], float(i))
    assert len(t.turns) == 16 and "item_99" in t.turns and "item_0" not in t.turns


def test_the_wire_form_rounds_and_keeps_every_stage():
    lat = TurnLatency(1.23456, None, 2.0, 3.0, 4.0, None, 10.0)
    assert lat.wire() == {
        "vad_settle_ms": 1.23,
        "transcription_ms": None,
        "queue_ms": 2.0,
        "prefill_ms": 3.0,
        "first_token_ms": 4.0,
        "first_audio_ms": None,
        "end_to_end_ms": 10.0,
        "prepared": False,
    }
