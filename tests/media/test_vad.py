"""processors.vad: the pure server_vad state machine (fake probabilities), the streaming segmenter
(a fake model that reads the audio's level), and silero-vad on real espeak-ng speech."""

from __future__ import annotations

import numpy as np
import pytest

from processors.audio import AudioError
from processors.vad import (
    PAUSE_PASS_MS,
    WINDOW,
    WINDOW_MS,
    ServerVad,
    ServerVadConfig,
    SileroVad,
    SpeechPaused,
    SpeechStarted,
    SpeechStopped,
    VadStateMachine,
)
from testkit.espeak import silence, speak
from tests.conftest import requires_espeak

CFG = ServerVadConfig(threshold=0.5, prefix_padding_ms=96, silence_duration_ms=128)  # 3 and 4 windows


def run(machine: VadStateMachine, probs: list[float]) -> list[tuple[int, object]]:
    """Feed ``probs``; return ``(window index, event)`` for each event."""
    return [(i, ev) for i, p in enumerate(probs) if (ev := machine.step(p)) is not None]


def summary(events: list[tuple[int, object]]) -> list[tuple[str, int, int]]:
    out = []
    for i, ev in events:
        if isinstance(ev, SpeechStarted):
            out.append(("start", i, ev.audio_start_ms))
        else:
            assert isinstance(ev, SpeechStopped)
            out.append(("stop", i, ev.audio_end_ms))
    return out


# ---------------------------------------------------------------- pure state machine


def test_speech_starts_at_first_window_reaching_threshold_with_prefix_padding():
    events = run(VadStateMachine(CFG), [0.1] * 10 + [0.5])
    assert summary(events) == [("start", 10, 10 * WINDOW_MS - 96)]


def test_prefix_padding_is_clamped_at_the_start_of_the_stream():
    events = run(VadStateMachine(CFG), [0.0, 0.9])
    assert summary(events) == [("start", 1, 0)]


def test_speech_stops_after_silence_duration_and_includes_it():
    probs = [0.0] * 5 + [0.9] * 6 + [0.0] * 10
    events = run(VadStateMachine(CFG), probs)
    # last speech window is 10 (ends at 352 ms); silence windows 11..14 make 128 ms
    assert summary(events) == [("start", 5, 5 * 32 - 96), ("stop", 14, 15 * 32)]
    stop = events[1][1]
    assert isinstance(stop, SpeechStopped) and stop.audio_start_ms == 64


def test_pause_shorter_than_silence_duration_does_not_end_the_turn():
    probs = [0.9] * 3 + [0.0] * 3 + [0.9] * 3 + [0.0] * 4
    events = run(VadStateMachine(CFG), probs)
    assert [kind for kind, _, _ in summary(events)] == ["start", "stop"]
    assert summary(events)[1] == ("stop", 12, 13 * 32)


def test_probability_between_thresholds_does_not_start_a_turn():
    assert run(VadStateMachine(CFG), [0.45] * 50) == []  # below 0.5 but above 0.35


def test_probability_between_thresholds_keeps_a_turn_going():
    probs = [0.9] + [0.4] * 20  # 0.4 is above neg_threshold 0.35: not silence
    events = run(VadStateMachine(CFG), probs)
    assert summary(events) == [("start", 0, 0)]


def test_probability_between_thresholds_does_not_reset_counted_silence():
    probs = [0.9, 0.1, 0.1, 0.4, 0.1]  # silence counting began at window 1; 0.4 continues it
    events = run(VadStateMachine(CFG), probs)
    assert summary(events)[-1] == ("stop", 4, 5 * 32)


def test_speech_above_threshold_resets_counted_silence():
    probs = [0.9, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1]
    events = run(VadStateMachine(CFG), probs)
    assert summary(events) == [("start", 0, 0), ("stop", 8, 9 * 32)]


def test_next_turn_prefix_never_reaches_into_the_previous_turn():
    probs = [0.9] + [0.0] * 4 + [0.9]  # turn 1 ends at 160 ms, turn 2 detected at window 5
    events = run(VadStateMachine(CFG), probs)
    assert summary(events) == [("start", 0, 0), ("stop", 4, 160), ("start", 5, 160)]


def test_reset_drops_the_turn_in_progress():
    machine = VadStateMachine(CFG)
    run(machine, [0.0] * 3 + [0.9] * 3)
    assert machine.in_speech
    machine.reset()
    assert not machine.in_speech
    events = run(machine, [0.0] * 4 + [0.9])  # no stop for the dropped turn; new prefix floors at reset
    assert summary(events) == [("start", 4, 6 * 32 + 4 * 32 - 96)]


def test_custom_threshold_is_honoured():
    machine = VadStateMachine(ServerVadConfig(threshold=0.8, prefix_padding_ms=0, silence_duration_ms=64))
    assert run(machine, [0.7] * 5) == []
    # neg_threshold is 0.65: 0.7 keeps the turn going, 0.5 is silence, 0.6 cannot start a new turn
    probs = [0.85, 0.7, 0.7, 0.5, 0.5, 0.6]
    assert summary(run(machine, probs)) == [("start", 0, 5 * 32), ("stop", 4, 10 * 32)]


# ---------------------------------------------------------------- config from the wire


def test_turn_detection_defaults_match_openai():
    cfg = ServerVadConfig.from_turn_detection({"type": "server_vad"})
    assert (cfg.threshold, cfg.prefix_padding_ms, cfg.silence_duration_ms) == (0.5, 300, 500)


def test_turn_detection_fields_are_read():
    cfg = ServerVadConfig.from_turn_detection(
        {
            "type": "server_vad",
            "threshold": 0.7,
            "prefix_padding_ms": 100,
            "silence_duration_ms": 250,
            "create_response": False,
            "unknown_field": 1,
        }
    )
    assert (cfg.threshold, cfg.prefix_padding_ms, cfg.silence_duration_ms, cfg.create_response) == (
        0.7,
        100,
        250,
        False,
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"threshold": 1.5},
        {"threshold": "high"},
        {"prefix_padding_ms": -1},
        {"silence_duration_ms": 2.5},
        {"silence_duration_ms": True},
        {"create_response": "yes"},
        {"type": "magic_vad"},
    ],
)
def test_bad_turn_detection_is_an_invalid_value_error(raw: dict):
    with pytest.raises(AudioError) as exc:
        ServerVadConfig.from_turn_detection(raw)
    assert exc.value.code == "invalid_value"


# ---------------------------------------------------------------- streaming segmenter (fake model)


class LevelModel:
    """Fake: a window is speech when its mean magnitude exceeds 0.1."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, window: np.ndarray) -> float:
        assert window.shape == (WINDOW,)
        self.calls += 1
        return float(np.abs(window).mean() > 0.1)

    def reset(self) -> None:
        pass


def bursty_signal(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Noise bursts (speech) at known samples between quiet stretches; random values to spot misalignment."""
    spans = [(8_000, 24_000), (40_000, 44_800)]
    audio = rng.uniform(-0.01, 0.01, 64_000).astype(np.float32)
    for a, b in spans:
        audio[a:b] = rng.uniform(-0.9, 0.9, b - a)
    return audio, spans


def feed_in_frames(vad: ServerVad, audio: np.ndarray, sizes: list[int]) -> list:
    events, i, k = [], 0, 0
    while i < audio.size:
        n = sizes[k % len(sizes)]
        events += vad.feed(audio[i : i + n])
        i, k = i + n, k + 1
    return events


def timeline(events: list) -> list[tuple[str, int | None, int | None]]:
    return [(type(e).__name__, getattr(e, "audio_start_ms", None), getattr(e, "audio_end_ms", None)) for e in events]


def test_segmenter_events_do_not_depend_on_frame_size():
    audio, _ = bursty_signal(np.random.default_rng(1))
    cfg = ServerVadConfig(prefix_padding_ms=300, silence_duration_ms=500)
    whole = timeline(ServerVad(cfg, LevelModel()).feed(audio))
    assert [name for name, _, _ in whole] == ["SpeechStarted", "SpeechStopped"] * 2
    for sizes in ([320], [1600], [320, 1600, 480, 960, 1111]):  # 20 ms, 100 ms, mixed and ragged
        assert timeline(feed_in_frames(ServerVad(cfg, LevelModel()), audio, sizes)) == whole


def test_segment_audio_is_exactly_the_input_between_start_and_end():
    audio, spans = bursty_signal(np.random.default_rng(2))
    vad = ServerVad(ServerVadConfig(prefix_padding_ms=300, silence_duration_ms=500), LevelModel())
    stops = [e for e in feed_in_frames(vad, audio, [480, 1600, 320]) if isinstance(e, SpeechStopped)]
    assert len(stops) == len(spans)
    for stop, (a, _b) in zip(stops, spans, strict=True):
        lo, hi = stop.audio_start_ms * 16, stop.audio_end_ms * 16
        np.testing.assert_array_equal(stop.audio, audio[lo:hi])
        assert lo <= a - 300 * 16 + WINDOW  # the prefix padding reaches back before the speech


def test_segmenter_keeps_bounded_audio_while_idle():
    vad = ServerVad(ServerVadConfig(prefix_padding_ms=300), LevelModel())
    for _ in range(200):  # 20 s of quiet in 100 ms frames
        assert vad.feed(np.zeros(1600, np.float32)) == []
    assert sum(c.size for c in vad._chunks) <= 300 * 16 + 2 * WINDOW
    assert vad.now_ms == 20_000


def test_segmenter_reset_drops_the_turn_in_progress():
    vad = ServerVad(ServerVadConfig(prefix_padding_ms=0, silence_duration_ms=64), LevelModel())
    quiet_then_loud = np.concatenate([np.zeros(WINDOW * 2, np.float32), np.full(WINDOW * 4, 0.5, np.float32)])
    events = vad.feed(quiet_then_loud)  # (the noise gate needs a floor to stand out from)
    assert isinstance(events[0], SpeechStarted) and vad.in_speech
    vad.reset()
    assert not vad.in_speech
    assert vad.feed(np.zeros(WINDOW * 4, np.float32)) == []  # no speech_stopped for the dropped turn


# ---------------------------------------------------------------- silero-vad on real speech


def test_silero_gives_silence_a_low_probability():
    model = SileroVad()
    probs = [model(np.zeros(WINDOW, np.float32)) for _ in range(20)]
    assert max(probs) < 0.1


@requires_espeak
def test_silero_gives_speech_a_high_probability():
    model = SileroVad()
    audio = speak("Open the door and turn on the lights in the kitchen.")
    probs = np.array([model(audio[i : i + WINDOW]) for i in range(0, audio.size - WINDOW + 1, WINDOW)])
    assert np.mean(probs > 0.5) > 0.6


@requires_espeak
def test_two_utterances_one_second_apart_make_two_turns_at_their_offsets():
    first = speak("Open the door and turn on the lights in the kitchen.")
    second = speak("Please send me the weather report for tomorrow morning.")
    audio = np.concatenate([silence(0.5), first, silence(1.0), second, silence(1.0)])
    s1, e1 = 500, 500 + first.size / 16
    s2, e2 = e1 + 1000, e1 + 1000 + second.size / 16
    cfg = ServerVadConfig()  # OpenAI defaults: threshold 0.5, prefix 300 ms, silence 500 ms
    events = feed_in_frames(ServerVad(cfg), audio, [320, 800, 1600, 480])  # 20–100 ms frames
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped, SpeechStarted, SpeechStopped]
    for (start, stop), (s, e) in zip([events[0:2], events[2:4]], [(s1, e1), (s2, e2)], strict=True):
        # detection lands within a few windows of the speech onset; the turn begins 300 ms before that
        assert s - 300 - WINDOW_MS <= start.audio_start_ms <= s - 300 + 200
        # the turn ends after 500 ms of silence following the last speech
        assert e + 500 - WINDOW_MS <= stop.audio_end_ms <= e + 500 + 300
        assert stop.audio_start_ms == start.audio_start_ms
        assert stop.audio.size == (stop.audio_end_ms - stop.audio_start_ms) * 16


# ---------------------------------------------------------------- semantic_vad, pauses (speculation)


def test_semantic_vad_maps_eagerness_to_silence_windows():
    windows = {
        e: ServerVadConfig.from_turn_detection({"type": "semantic_vad", "eagerness": e}).silence_duration_ms
        for e in ("low", "medium", "high", "auto")
    }
    assert windows["high"] < windows["medium"] == windows["auto"] < windows["low"]
    cfg = ServerVadConfig.from_turn_detection({"type": "semantic_vad"})
    assert cfg.semantic and cfg.eagerness == "auto"


def test_bad_eagerness_is_an_invalid_value_error():
    with pytest.raises(AudioError) as exc:
        ServerVadConfig.from_turn_detection({"type": "semantic_vad", "eagerness": "eager"})
    assert exc.value.code == "invalid_value"


def test_view_reports_every_field_of_its_type():
    server = ServerVadConfig.from_turn_detection({"type": "server_vad", "silence_duration_ms": 700})
    assert server.view() == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 700,
        "create_response": True,
        "interrupt_response": True,
        "speculation_ms": 200,
        "transcription_interval_ms": 500,
        "model": "none",
        "backchannel_ms": 0,
        "reopen_ms": 0,
    }
    semantic = ServerVadConfig.from_turn_detection({"type": "semantic_vad", "eagerness": "low"}).view()
    assert semantic["eagerness"] == "low" and "silence_duration_ms" not in semantic
    assert semantic["model"] == "smart_turn" and semantic["backchannel_ms"] == 700


PAUSING = ServerVadConfig(threshold=0.5, prefix_padding_ms=0, silence_duration_ms=160, speculation_ms=64)


def test_pause_then_resume_then_stop():
    machine = VadStateMachine(PAUSING, pauses=True)
    probs = [0.9] * 3 + [0.0] * 3 + [0.9] * 2 + [0.0] * 5
    kinds = [(i, type(ev).__name__) for i, ev in run(machine, probs)]
    # silence from window 3: 64 ms reached at window 4; speech back at window 6; 160 ms of silence at window 12
    assert kinds == [
        (0, "SpeechStarted"),
        (4, "SpeechPaused"),
        (6, "SpeechResumed"),
        (9, "SpeechPaused"),
        (12, "SpeechStopped"),
    ]


def test_pause_reports_where_the_silence_began():
    machine = VadStateMachine(PAUSING, pauses=True)
    events = run(machine, [0.9] * 3 + [0.0] * 2)
    assert isinstance(events[-1][1], SpeechPaused) and events[-1][1].silence_start_ms == 3 * 32


def test_no_pause_events_without_pauses_or_with_speculation_off():
    probs = [0.9] * 3 + [0.0] * 3 + [0.9] * 2 + [0.0] * 5
    assert len(run(VadStateMachine(PAUSING), probs)) == 2
    off = ServerVadConfig(prefix_padding_ms=0, silence_duration_ms=160, speculation_ms=0)
    assert len(run(VadStateMachine(off, pauses=True), probs)) == 2


def test_a_pause_is_reported_after_pause_pass_ms_even_when_speculation_ms_is_longer():
    cfg = ServerVadConfig(threshold=0.5, prefix_padding_ms=0, silence_duration_ms=320, speculation_ms=200)
    events = run(VadStateMachine(cfg, pauses=True), [0.9] * 3 + [0.0] * 10)
    # silence from window 3: 64 ms of it at window 4 (200 ms would be window 9): Whisper starts then
    kinds = [(i, type(ev).__name__) for i, ev in events]
    assert kinds == [(0, "SpeechStarted"), (4, "SpeechPaused"), (12, "SpeechStopped")]
    assert PAUSE_PASS_MS == 64


def test_silence_target_overrides_the_window_for_one_turn():
    machine = VadStateMachine(PAUSING)
    run(machine, [0.9])
    machine.silence_target_ms = 64
    assert summary(run(machine, [0.0] * 2)) == [("stop", 1, 3 * 32)]
    run(machine, [0.9])  # the next turn is back on the configured 160 ms
    assert summary(run(machine, [0.0] * 5)) == [("stop", 4, 9 * 32)]


def test_the_silence_a_turn_ended_after_is_kept_after_it_ends():
    # the latency record reads it once speech_stopped goes out, when the turn's own target is gone
    machine = VadStateMachine(PAUSING)
    run(machine, [0.9])
    machine.silence_target_ms = 64
    run(machine, [0.0] * 2)
    assert machine.silence_target_ms is None and machine.ended_silence_ms == 64
    run(machine, [0.9] + [0.0] * 5)
    assert machine.ended_silence_ms == 160
    # a window that shrinks below the silence already heard ends the turn at once, after all that silence
    run(machine, [0.9])
    machine.silence_target_ms = 1_000
    assert run(machine, [0.0] * 6) == []
    machine.silence_target_ms = 64
    assert [kind for kind, _, _ in summary(run(machine, [0.0]))] == ["stop"]
    assert machine.ended_silence_ms == 7 * 32


def test_segmenter_hands_out_the_turn_audio_so_far():
    vad = ServerVad(ServerVadConfig(prefix_padding_ms=0, silence_duration_ms=640), LevelModel())
    assert vad.turn_audio().size == 0
    loud = np.full(WINDOW * 3, 0.5, np.float32)
    vad.feed(np.concatenate([np.zeros(WINDOW * 2, np.float32), loud]))
    np.testing.assert_array_equal(vad.turn_audio(), loud)


def test_checking_voice_settings_refuses_what_configure_would_and_loads_no_model(monkeypatch):
    """A session.update or a client secret is checked on the event loop: loading silero there was a
    100-200 ms stall the first time."""
    from gateway.voice.voice_input import VoiceInput
    from processors.audio import AudioError, AudioLimits

    def no_model(*_a: object) -> None:
        raise AssertionError("the VAD model was loaded to check settings")

    monkeypatch.setattr("processors.vad.SileroVad.__init__", no_model)
    limits = AudioLimits()
    VoiceInput.check(limits, {"type": "server_vad", "silence_duration_ms": 300}, 24_000)
    VoiceInput.check(limits, None, 16_000)
    with pytest.raises(AudioError):
        VoiceInput.check(limits, None, 44_100)
    with pytest.raises(AudioError):
        VoiceInput.check(limits, {"type": "server_vad", "threshold": 7}, 24_000)
