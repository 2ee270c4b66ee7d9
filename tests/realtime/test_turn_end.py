"""The end-of-turn policy and the backchannel classifier: pure, fake signals and a fake clock."""

from __future__ import annotations

import pytest

from gateway.voice.spoken_turn import PauseSignals
from processors.backchannel import HeldBargeIn, classify, keeps_reply, words
from processors.turn_end import EAGERNESS_WINDOWS, EndOfTurn, Windows, server_vad_windows, windows_for
from processors.vad import EAGERNESS_SILENCE_MS, ServerVadConfig

MEDIUM = EAGERNESS_WINDOWS["medium"]


def paused_with(p: float | None, text: str | None, windows: Windows = MEDIUM) -> EndOfTurn:
    end = EndOfTurn(windows)
    probe = end.paused()
    if p is not None:
        end.scored(probe.probe, p)
    if text is not None:
        end.transcribed(text)
    return end


# ---------------------------------------------------------------- the window


def test_a_turn_ends_early_only_when_the_model_and_the_transcript_both_say_complete():
    assert paused_with(0.9, "Please open the kitchen window.").window_ms == MEDIUM.complete_ms == 200
    assert paused_with(0.9, "please open the window").window_ms == MEDIUM.complete_ms  # no punctuation: unknown
    # the transcript is not in yet: a late Whisper pass on a loaded box must not let the model alone cut
    # (a bench run at load 12 with a shorter window here cut 3 of 12 paused turns, all in this case)
    assert paused_with(0.9, None).window_ms == MEDIUM.unsure_ms
    assert paused_with(None, "Please open the kitchen window.").window_ms == MEDIUM.unsure_ms  # the model is not
    assert paused_with(0.2, "I'd like to book.").window_ms == MEDIUM.unsure_ms  # Whisper's period on a pause


def test_a_trailing_conjunction_waits_for_the_eagerness_limit_whatever_the_model_says():
    for p in (0.99, 0.1, None):
        assert paused_with(p, "I need some eggs and").window_ms == MEDIUM.continuing_ms == 4_000
        assert paused_with(p, "Can you tell me about the").window_ms == MEDIUM.continuing_ms


def test_before_the_first_pause_the_turn_waits_the_unsure_window():
    end = EndOfTurn(MEDIUM)
    assert end.window_ms == MEDIUM.unsure_ms and not end.complete


def test_speech_resuming_forgets_the_pause_and_a_late_answer_to_it_is_ignored():
    end = EndOfTurn(MEDIUM)
    first = end.paused()
    end.transcribed("I'd like to book a table.")
    end.resumed()
    assert end.window_ms == MEDIUM.unsure_ms
    assert end.scored(first.probe, 0.99) == MEDIUM.unsure_ms  # the model heard the old pause
    second = end.paused()
    end.transcribed("I'd like to book a table for two.")
    assert end.scored(second.probe, 0.99) == MEDIUM.complete_ms and end.complete
    assert end.probes == 2
    assert end.answers(second.probe) and not end.answers(first.probe)  # the glue times only counted answers


def test_a_new_pause_replaces_the_last_ones_signals():
    end = paused_with(0.9, "Set a timer.")
    assert end.complete
    end.paused()  # the turn went on and paused again: nothing known about this pause yet
    assert end.window_ms == MEDIUM.unsure_ms and end.probability is None and end.ending is None


def test_eagerness_orders_the_windows_and_auto_is_medium():
    hi, med, lo = (EAGERNESS_WINDOWS[e] for e in ("high", "medium", "low"))
    for field in ("complete_ms", "unsure_ms", "continuing_ms"):
        assert getattr(hi, field) < getattr(med, field) < getattr(lo, field)
    assert EAGERNESS_WINDOWS["auto"] == med
    assert (hi.continuing_ms, med.continuing_ms, lo.continuing_ms) == (2_000, 4_000, 8_000)  # OpenAI's limits
    assert med.unsure_ms > 900  # the longest mid-sentence pause the bench speaks
    for e, w in (("high", hi), ("medium", med), ("low", lo)):  # around the heuristic's window, either side
        assert w.complete_ms < EAGERNESS_SILENCE_MS[e] < w.unsure_ms < w.continuing_ms


def test_server_vad_with_a_model_keeps_its_silence_unless_both_say_complete():
    w = server_vad_windows(500)
    assert w == Windows(200, 500, 500)
    assert paused_with(0.9, None, w).window_ms == 500
    assert paused_with(0.9, "Open the window.", w).window_ms == 200
    assert paused_with(0.1, "Open the window.", w).window_ms == 500
    assert server_vad_windows(120).complete_ms == 120  # never longer than the configured silence
    assert windows_for(True, "high", 500) == EAGERNESS_WINDOWS["high"]
    assert windows_for(False, "auto", 700) == server_vad_windows(700)


def test_turn_detection_model_and_backchannel_defaults_and_bad_values():
    semantic = ServerVadConfig.from_turn_detection({"type": "semantic_vad"})
    server = ServerVadConfig.from_turn_detection({"type": "server_vad"})
    assert (semantic.model, semantic.backchannel_ms) == ("smart_turn", 700)
    assert (server.model, server.backchannel_ms) == ("none", 0)  # OpenAI's server_vad, unchanged
    assert ServerVadConfig.from_turn_detection({"type": "server_vad", "model": "smart_turn"}).model == "smart_turn"
    assert semantic.view()["model"] == "smart_turn" and server.view()["backchannel_ms"] == 0
    for bad in ({"model": "gpt"}, {"backchannel_ms": -1}, {"backchannel_ms": "long"}, {"model": 3}):
        with pytest.raises(Exception, match="turn_detection"):
            ServerVadConfig.from_turn_detection({"type": "semantic_vad", **bad})


def test_reopen_ms_is_off_by_default_and_checked():
    for kind in ("server_vad", "semantic_vad"):
        assert ServerVadConfig.from_turn_detection({"type": kind}).reopen_ms == 0  # OpenAI's semantics
        cfg = ServerVadConfig.from_turn_detection({"type": kind, "reopen_ms": 1500})
        assert cfg.reopen_ms == 1500 and cfg.view()["reopen_ms"] == 1500
    for bad in (-1, 10_001, "soon", 1.5, True):
        with pytest.raises(Exception, match="turn_detection.reopen_ms"):
            ServerVadConfig.from_turn_detection({"type": "server_vad", "reopen_ms": bad})


# ---------------------------------------------------------------- backchannels


@pytest.mark.parametrize(
    "text",
    [
        "Mm-hmm.",
        "Yeah.",
        "Okay.",
        "Right.",
        "Uh-huh",
        "Oh, okay, I see.",
        "Got it.",
        "Yeah, yeah.",
        "Mhm",
        "Nmm.",
        "MM",
    ],
)
def test_acknowledgements_are_backchannels(text):
    assert classify(text, 500) == "backchannel"


@pytest.mark.parametrize(
    "text", ["Wait, stop.", "Okay, but what about Paris?", "No.", "Actually, make it three.", "Yeah, the red one"]
)
def test_anything_else_interrupts(text):
    assert classify(text, 500) == "interruption"


def test_long_speech_interrupts_before_its_words_are_known_and_silence_is_a_false_start():
    assert classify(None, 400) == "undecided"
    assert classify(None, 701) == "interruption" and classify("Mm-hmm.", 701) == "interruption"
    assert classify("", 300) == "false_start" and classify(" . ", 300) == "false_start"
    assert classify("yeah", 900, max_ms=1000) == "backchannel"
    assert keeps_reply("backchannel") and keeps_reply("false_start") and not keeps_reply("interruption")
    assert words("Mm-hmm, all right. I see") == ["mmhmm", "alright", "isee"]


def test_a_held_barge_in_counts_speech_to_its_pause_not_the_silence_after():
    held = HeldBargeIn("item", start_ms=1_000, max_ms=700)
    assert held.verdict(1_400) == "undecided"
    held.paused(1_450)
    assert held.verdict(3_000) == "undecided"  # 450 ms of speech, however long the silence since
    assert held.verdict(3_000, "Okay.") == "backchannel"
    held.resumed()
    assert held.verdict(1_800) == "interruption"  # speech again: 800 ms now
    stopped = HeldBargeIn("item", start_ms=0, max_ms=700)
    stopped.stopped(600)  # no pause was reported: the turn's end bounds it
    assert stopped.verdict(5_000, "Yeah.") == "backchannel"


def test_webrtc_playback_is_cut_at_speech_or_with_backchannels_judged_at_the_cancel():
    from gateway.webrtc.peer import _barges_in

    started = {"type": "input_audio_buffer.speech_started"}
    cancelled = {
        "type": "response.done",
        "response": {"status": "cancelled", "status_details": {"reason": "turn_detected"}},
    }
    by_client = {
        "type": "response.done",
        "response": {"status": "cancelled", "status_details": {"reason": "client_cancelled"}},
    }
    assert _barges_in(started, judged=False) and not _barges_in(cancelled, judged=False)
    assert not _barges_in(started, judged=True) and _barges_in(cancelled, judged=True)
    assert not _barges_in(by_client, judged=True)  # a client's own cancel is not a barge-in (as before)


def test_a_pause_summary_times_each_signal_from_the_pause():
    signals = PauseSignals(paused_at=10.0, scored_at=10.12, model_s=0.03)
    assert signals.summary(10.3) == "model +120 ms (30 ms compute), text not in, stop +300 ms"
    assert PauseSignals().summary(1.0) == "model not in, text not in, stop not in"  # no pause: the configured window
