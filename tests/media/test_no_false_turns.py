"""No false turns: background noise alone (white, babble at 10 dB SNR) never starts a turn, speech in
that noise is one turn where it is, and a pause shorter than the silence window never ends a turn.
Real espeak-ng speech and silero-vad; the noise gate unit-tested on synthetic levels."""

from __future__ import annotations

import numpy as np
import pytest

from processors.vad import (
    SILENCE_DBFS,
    WINDOW,
    NoiseGate,
    ServerVad,
    ServerVadConfig,
    SpeechStarted,
    SpeechStopped,
    percentile,
)
from testkit.espeak import at_snr, babble, silence, speak, white_noise
from tests.conftest import requires_espeak
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient

SENTENCE = "Please open the kitchen window and turn on the lights."


# ---------------------------------------------------------------- the gate (synthetic levels)


def windows(level: float, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(WINDOW) * level).astype(np.float32) for _ in range(n)]


def test_gate_passes_everything_in_a_quiet_room():
    gate = NoiseGate()
    for w in windows(1e-4, 30):
        gate(w, 0.0)
    assert all(gate(w, 0.9) == 0.9 for w in windows(0.05, 5, seed=1))


def test_gate_blocks_steady_noise_and_passes_what_stands_10_db_above_it():
    gate = NoiseGate()
    assert [gate(w, 0.9) for w in windows(0.03, 100)].count(0.9) == 0
    loud = windows(0.03 * 10 ** (14 / 20), 6, seed=2)  # 14 dB above the noise
    assert [gate(w, 0.9) for w in loud][-3:] == [0.9, 0.9, 0.9]


class SaysSpeech:
    """A speech model that says 0.9 to everything."""

    def __call__(self, window: np.ndarray) -> float:
        return 0.9

    def reset(self) -> None:
        pass


def test_a_window_below_the_silence_level_is_silence_whatever_the_model_says():
    vad = ServerVad(ServerVadConfig(), model=SaysSpeech(), noise_gate_db=None)
    faint = 10 ** ((SILENCE_DBFS - 10) / 20)  # 80 dB below full scale: digital silence, a codec's fade-out
    assert vad.feed(np.concatenate(windows(faint, 20))) == []
    audible = 10 ** ((SILENCE_DBFS + 20) / 20)
    assert isinstance(vad.feed(np.concatenate(windows(audible, 10, seed=1)))[0], SpeechStarted)
    events = vad.feed(np.concatenate(windows(faint, 17, seed=2)))  # 544 ms: the 500 ms window ends the turn
    assert [type(e) for e in events] == [SpeechStopped]


def test_the_gates_percentile_is_numpys():
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 17, 156):
        values = list(rng.normal(-60, 15, n))
        assert percentile(values, 10) == pytest.approx(float(np.percentile(values, 10)), abs=1e-9)


# ---------------------------------------------------------------- silero + gate on real audio


def turns(audio: np.ndarray) -> list[tuple[str, int]]:
    vad = ServerVad(ServerVadConfig())
    out = []
    for i in range(0, audio.size, 640):  # 40 ms frames
        for ev in vad.feed(audio[i : i + 640]):
            if isinstance(ev, SpeechStarted):
                out.append(("start", ev.audio_start_ms))
            elif isinstance(ev, SpeechStopped):
                out.append(("stop", ev.audio_end_ms))
    return out


@requires_espeak
@pytest.mark.parametrize("kind", ["white", "babble"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_alone_at_10_db_snr_starts_no_turn(kind: str, seed: int):
    speech = speak(SENTENCE)
    noise = white_noise(20, seed) if kind == "white" else babble(20, seed=seed)
    assert turns(at_snr(noise, speech, 10)) == []


@requires_espeak
@pytest.mark.parametrize("kind", ["white", "babble"])
def test_speech_in_noise_at_10_db_snr_is_one_turn_where_it_is(kind: str):
    speech = speak(SENTENCE)
    clean = np.concatenate([silence(3), speech, silence(2)])
    noise = white_noise(clean.size / 16_000, 3) if kind == "white" else babble(clean.size / 16_000, seed=3)
    found = turns(clean + at_snr(noise, speech, 10))
    assert [k for k, _ in found] == ["start", "stop"], found
    begin, end = 3000, 3000 + speech.size / 16
    assert begin - 300 - 200 <= found[0][1] <= begin  # detected near the onset, with its prefix padding
    # it holds all the speech (a quiet last syllable under the noise may count as the silence's start)
    assert end < found[1][1] <= end + 500 + 300


@requires_espeak
@pytest.mark.parametrize("pause_s", [0.15, 0.3, 0.4])
def test_a_pause_shorter_than_the_window_keeps_one_turn(pause_s: float):
    audio = np.concatenate(
        [
            silence(0.5),
            speak("Please open the kitchen window"),
            silence(pause_s),
            speak("and turn on the lights."),
            silence(1),
        ]
    )
    assert [k for k, _ in turns(audio)] == ["start", "stop"]


@requires_espeak
async def test_babble_streamed_to_the_server_gets_no_turn_and_no_response(tiny_backend, server_factory):
    noise = at_snr(babble(10, seed=4), speak(SENTENCE), 10)
    with server_factory(tiny_backend) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await stream(c, pcm24(noise))
        # events come out in order: anything the audio caused is sent before this update's answer
        await c.update_session({"instructions": "marker"})
        assert [e["type"] for e in c.events] == ["session.created", "session.updated"]
        await c.close()
