"""gateway.voice.turntaking: every ordering of VAD events and Whisper results, on a fake clock (ms)."""

from __future__ import annotations

from gateway.voice.turntaking import (
    Drop,
    Prepare,
    Reopen,
    Reopener,
    SetSilence,
    ShowDelta,
    Transcribe,
    TurnCompleted,
    TurnConfig,
    TurnStopped,
    TurnTaker,
)

PARTIAL_ONLY = TurnConfig(interval_ms=500, speculate=False)


def only(actions: list, kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def test_partial_passes_run_per_interval_one_at_a_time_and_whisper_rests_half_an_interval():
    t = TurnTaker(PARTIAL_ONLY, start_ms=1000)
    assert t.heard(1400) == []
    [p1] = t.heard(1500)
    assert p1 == Transcribe(1, 1500, "partial")
    assert t.heard(2100) == []  # one pass at a time
    assert t.transcribed(1, "Leave a") == []  # back at 2100: Whisper rests until 2350
    assert t.heard(2300) == []
    [p2] = t.heard(2350)
    assert p2.kind == "partial" and p2.upto_ms == 2350
    assert t.heard(2400) == []
    t.transcribed(p2.pass_id, "Leave a light")  # back at 2400, fast: the interval decides (2850)
    assert t.heard(2800) == []
    assert t.heard(2850) == [Transcribe(3, 2850, "partial")]


def test_agreed_words_are_shown_while_the_user_speaks():
    t = TurnTaker(PARTIAL_ONLY, start_ms=0)
    shown = []
    for now, text in [(500, "Please open"), (1000, "Please open the kit"), (1500, "Please open the kitchen window")]:
        [p] = t.heard(now)
        shown += [a.delta for a in only(t.transcribed(p.pass_id, text), ShowDelta)]
    assert shown == ["Please open", " the"]


def test_final_pass_at_stop_completes_the_shown_words():
    t = TurnTaker(PARTIAL_ONLY, start_ms=0)
    for now, text in [(500, "Please open the"), (1000, "Please open the kitchen")]:
        [p] = t.heard(now)
        t.transcribed(p.pass_id, text)
    stop = t.stopped(2000)
    assert stop[0] == TurnStopped(2000) and stop[1] == Transcribe(3, 2000, "final")
    [done] = t.transcribed(3, " Please open the kitchen window.")
    assert done == TurnCompleted("Please open the kitchen window.", " kitchen window.", True, None)
    assert t.agreement.text + done.delta == done.transcript


def test_stop_during_a_partial_pass_waits_for_it_then_runs_the_final_pass():
    t = TurnTaker(PARTIAL_ONLY, start_ms=0)
    [p] = t.heard(500)
    assert t.stopped(1200) == [TurnStopped(1200)]
    assert t.transcribed(p.pass_id, "Hello") == [Transcribe(2, 1200, "final")]
    [done] = t.transcribed(2, "Hello there.")
    assert done.transcript == "Hello there." and done.delta == "Hello there."


def test_final_text_that_contradicts_the_shown_words_is_kept_and_flagged():
    t = TurnTaker(PARTIAL_ONLY, start_ms=0)
    for now, text in [(500, "Leave open"), (1000, "Leave open the")]:
        [p] = t.heard(now)
        t.transcribed(p.pass_id, text)
    _, final = t.stopped(1500)
    [done] = t.transcribed(final.pass_id, "Please open the door.")
    assert done.transcript == "Please open the door." and not done.consistent and done.delta == ""


def test_empty_transcript_is_not_answered():
    t = TurnTaker(TurnConfig(interval_ms=0), start_ms=0)
    _, final = t.stopped(900)
    [done] = t.transcribed(final.pass_id, "")
    assert done.transcript == "" and not done.respond


def test_failed_final_pass_fails_the_transcript():
    t = TurnTaker(TurnConfig(interval_ms=0), start_ms=0)
    _, final = t.stopped(900)
    assert t.failed(final.pass_id) == [TurnCompleted(None, "", False, None)]


# ---------------------------------------------------------------- speculation

SPEC = TurnConfig(interval_ms=0, speculate=True)


def test_pause_prepares_the_reply_and_stop_commits_it_at_once():
    t = TurnTaker(SPEC, start_ms=0)
    [p] = t.paused(1200)
    assert p == Transcribe(1, 1200, "pause")
    assert t.transcribed(1, "Open the window.") == [Prepare(2, "Open the window.")]
    stop = t.stopped(1500)
    assert stop == [TurnStopped(1500), TurnCompleted("Open the window.", "Open the window.", True, 2)]
    assert t.discarded == 0


def test_speech_resuming_drops_the_prepared_reply():
    t = TurnTaker(SPEC, start_ms=0)
    [p] = t.paused(1200)
    [prep] = t.transcribed(p.pass_id, "Open the")
    assert t.resumed() == [Drop(prep.speculation)]
    assert t.discarded == 1
    [p2] = t.paused(2400)
    [prep2] = only(t.transcribed(p2.pass_id, "Open the window."), Prepare)
    assert prep2.transcript == "Open the window." and prep2.speculation != prep.speculation
    _, done = t.stopped(2700)
    assert done.speculation == prep2.speculation and done.transcript == "Open the window."


def test_speech_resuming_before_the_pause_pass_returns_prepares_nothing():
    t = TurnTaker(SPEC, start_ms=0)
    [p] = t.paused(1200)
    assert t.resumed() == []  # nothing prepared yet: nothing to drop
    assert t.transcribed(p.pass_id, "Open the") == []  # the text only feeds the agreement
    assert t.discarded == 0


def test_stop_before_the_pause_pass_returns_uses_its_text_without_speculation():
    t = TurnTaker(SPEC, start_ms=0)
    [p] = t.paused(1200)
    assert t.stopped(1500) == [TurnStopped(1500)]
    [done] = t.transcribed(p.pass_id, "Open the window.")
    assert done == TurnCompleted("Open the window.", "Open the window.", True, None)


def test_pause_during_a_partial_pass_runs_the_pause_pass_after_it():
    t = TurnTaker(TurnConfig(interval_ms=500, speculate=True), start_ms=0)
    [p] = t.heard(500)
    assert t.paused(900) == []
    actions = t.transcribed(p.pass_id, "Open")
    assert actions == [Transcribe(2, 900, "pause")]
    assert only(t.transcribed(2, "Open the window."), Prepare)


def test_no_speculation_without_create_response_but_the_pause_text_is_still_the_transcript():
    t = TurnTaker(TurnConfig(interval_ms=0, speculate=True, respond=False), start_ms=0)
    [p] = t.paused(1200)
    assert t.transcribed(p.pass_id, "Open the window.") == []
    _, done = t.stopped(1500)
    assert done == TurnCompleted("Open the window.", "Open the window.", False, None)


def test_partial_passes_wait_while_paused():
    t = TurnTaker(TurnConfig(interval_ms=100, speculate=False), start_ms=0)
    t.paused(1000)
    assert t.heard(2000) == []
    t.resumed()
    assert t.heard(2000) == [Transcribe(1, 2000, "partial")]


def test_abandon_drops_the_prepared_reply_and_ignores_late_results():
    t = TurnTaker(SPEC, start_ms=0)
    [p] = t.paused(1200)
    [prep] = t.transcribed(p.pass_id, "Open the window.")
    assert t.abandon() == [Drop(prep.speculation)]
    assert t.stopped(1500) == [] and t.paused(1600) == []


def test_semantic_vad_sets_the_window_from_the_pause_text():
    finished = TurnTaker(TurnConfig(interval_ms=0, eagerness="auto"), start_ms=0)
    [p] = finished.paused(1000)
    [short] = only(finished.transcribed(p.pass_id, "Open the window."), SetSilence)
    trailing = TurnTaker(TurnConfig(interval_ms=0, eagerness="auto"), start_ms=0)
    [p] = trailing.paused(1000)
    [long] = only(trailing.transcribed(p.pass_id, "Open the window and"), SetSilence)
    assert short.ms < 500 < long.ms


# ---------------------------------------------------------------- the pause pass starts early, the reply waits

EARLY = TurnConfig(interval_ms=500, speculate=True, prepare_after_ms=200)


def test_a_running_pass_that_heard_the_silence_begin_stands_for_the_pause_pass():
    t = TurnTaker(EARLY, start_ms=0)
    [p] = t.heard(1500)  # started 32 ms into the silence that began at 1468
    assert t.paused(1532, silence_start_ms=1468) == []  # no second pass queued behind it
    assert t.transcribed(p.pass_id, "Open the window.") == []  # 64 ms of silence: the reply waits
    [prep] = t.heard(1668)
    assert prep == Prepare(2, "Open the window.")
    assert t.stopped(1968) == [TurnStopped(1968), TurnCompleted("Open the window.", "Open the window.", True, 2)]


def test_a_running_pass_that_ends_before_the_silence_is_followed_by_a_pause_pass():
    t = TurnTaker(EARLY, start_ms=0)
    [p] = t.heard(1480)  # 12 ms into the silence: it may have cut the last word
    assert t.paused(1532, silence_start_ms=1468) == []
    assert t.transcribed(p.pass_id, "Open the win") == [Transcribe(2, 1532, "pause")]


def test_the_pause_pass_starts_at_the_pause_and_the_reply_at_prepare_after_ms():
    t = TurnTaker(EARLY, start_ms=0)
    [p] = t.paused(1064, silence_start_ms=1000)
    assert p == Transcribe(1, 1064, "pause")
    assert t.transcribed(1, "Open the window.") == []
    assert t.heard(1192) == []
    assert t.heard(1200) == [Prepare(2, "Open the window.")]
    assert t.heard(1232) == []  # once
    _, done = t.stopped(1500)
    assert done.speculation == 2 and done.transcript == "Open the window."


def test_a_pause_text_in_before_the_window_closes_is_the_transcript_even_unprepared():
    t = TurnTaker(TurnConfig(interval_ms=0, prepare_after_ms=400), start_ms=0)
    [p] = t.paused(1064, silence_start_ms=1000)
    assert t.transcribed(p.pass_id, "Open the window.") == []
    assert t.stopped(1300) == [TurnStopped(1300), TurnCompleted("Open the window.", "Open the window.", True, None)]


def test_speech_resuming_before_the_reply_is_due_prepares_nothing():
    t = TurnTaker(EARLY, start_ms=0)
    [p] = t.paused(1064, silence_start_ms=1000)
    t.transcribed(p.pass_id, "Open the")
    assert t.resumed() == []
    assert t.heard(1600) == [Transcribe(2, 1600, "partial")]  # partial passes go on; nothing prepared
    assert t.discarded == 0


# ---------------------------------------------------------------- reopening a turn


def test_speech_soon_after_a_turn_ended_reopens_it_once():
    r = Reopener(reopen_ms=1500)
    r.answered("item_a", end_ms=2000)
    assert r.started(2900) == [Reopen("item_a", 900)]
    assert r.started(3000) == []  # the turn it reopened is spoken again, not reopened twice
    assert r.reopened == 1


def test_speech_after_the_reopen_window_is_a_turn_of_its_own():
    r = Reopener(reopen_ms=1500)
    r.answered("item_a", end_ms=2000)
    assert r.started(3501) == []
    r.answered("item_b", end_ms=5000)
    assert r.started(6500) == [Reopen("item_b", 1500)]  # the window's edge still reopens


def test_a_heard_reply_closes_the_turn():
    r = Reopener(reopen_ms=1500)
    r.answered("item_a", end_ms=2000)
    r.closed()  # the reply's first audio went out
    assert r.started(2100) == []


def test_closing_another_turn_leaves_the_open_one_open():
    r = Reopener(reopen_ms=1500)
    r.answered("item_b", end_ms=2000)
    r.closed("item_a")  # an earlier turn's transcript came out unanswered
    assert r.started(2100) == [Reopen("item_b", 100)]
    r.answered("item_c", end_ms=4000)
    r.closed("item_c")  # this one will not be answered (an acknowledgement, an empty transcript)
    assert r.started(4100) == []


def test_reopening_is_off_by_default_as_in_openais_api():
    r = Reopener()
    r.answered("item_a", end_ms=2000)
    assert r.started(2001) == []


def test_speech_whose_padding_reaches_back_before_the_end_has_no_negative_gap():
    r = Reopener(reopen_ms=500)
    r.answered("item_a", end_ms=2000)
    assert r.started(1800) == [Reopen("item_a", 0)]  # prefix padding starts the new turn's audio early


# ---------------------------------------------------------------- a confident pause


def test_a_confident_pause_prepares_the_reply_before_prepare_after_ms():
    t = TurnTaker(TurnConfig(interval_ms=0, prepare_after_ms=200, pause_text=True), start_ms=0)
    [p] = t.paused(1064, silence_start_ms=1000)
    assert t.heard(1120) == []
    assert only(t.transcribed(p.pass_id, "Turn off the lights."), Prepare) == []  # 120 ms of silence < 200
    [prep] = t.confident()  # the model and the text say complete
    assert prep == Prepare(2, "Turn off the lights.")
    assert t.confident() == [] and t.heard(1300) == []  # prepared once
    done = t.stopped(1200)
    assert done[1] == TurnCompleted("Turn off the lights.", "Turn off the lights.", True, 2)


def test_confidence_before_the_text_prepares_when_the_text_comes_and_resuming_forgets_it():
    t = TurnTaker(TurnConfig(interval_ms=0, prepare_after_ms=200, pause_text=True), start_ms=0)
    [p] = t.paused(1064, silence_start_ms=1000)
    assert t.confident() == []  # no text yet: nothing to prepare
    assert only(t.transcribed(p.pass_id, "Set a timer"), Prepare) == [Prepare(2, "Set a timer")]
    assert t.resumed() == [Drop(2)]
    [p2] = t.paused(2064, silence_start_ms=2000)
    assert only(t.transcribed(p2.pass_id, "Set a timer for ten minutes."), Prepare) == []  # this pause: not yet
    assert only(t.heard(2200), Prepare) == [Prepare(4, "Set a timer for ten minutes.")]  # at prepare_after_ms
