"""`stream-omni bench voice_replay`: the bench voice clips replayed on a fake clock, Whisper's time fixed.

``bench voice`` measures the real thing, but on a shared 2-core machine a Whisper pass takes
0.45 s when the machine is quiet and 1.3 s when it is not, so two runs of it compare machines as
much as code. Here the clock is the audio clock: the clips go through the real VAD (silero-vad)
in 40 ms frames, the real ``TurnTaker`` decides, real Whisper supplies each pass's text, and a
pass takes exactly ``P`` ms; the reply's first text comes ``LLM_MS`` after it starts (measured on
the quiet run of ``bench voice``: transcript → first text 270-330 ms). Same clips, same texts,
only the turn-taking differs between rows:

- *pause pass at speculation_ms, Whisper back to back*: as on main before this change (the VAD
  reported the pause at 200 ms of silence, the pause pass queued behind any running partial;
  partial passes ran an interval apart, from their start);
- *pause pass at 64 ms, back to back*: Whisper starts at the first 64 ms of silence, and a pass
  already running that heard the silence begin stands for the pause pass;
- *pause pass at 64 ms, Whisper rests* (the default now): plus half an interval of rest.

Writes bench/results/voice_replay.{json,md}. Needs espeak-ng.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import numpy as np

import processors.vad as vad_mod
from bench.common import machine, markdown_table, median, write
from bench.voice import UTTERANCES, utterance_audio
from gateway.voice.turntaking import (
    PassKind,
    Prepare,
    ShowDelta,
    Transcribe,
    TurnAction,
    TurnCompleted,
    TurnConfig,
    TurnStopped,
    TurnTaker,
)
from processors.asr import AsrConfig, load_asr, word_error_rate
from processors.vad import ServerVad, ServerVadConfig, SpeechPaused, SpeechResumed, SpeechStarted, SpeechStopped

LLM_MS = 280
FRAME = 640  # 40 ms at 16 kHz
LEAD_S, TAIL_S = 0.5, 2.0


class BackToBack(TurnTaker):
    """The partial-pass cadence before the rest: the next pass an interval after the last one started."""

    def _finish(self, pass_id: int) -> PassKind | None:
        if self._running is None or self._running[0] != pass_id:
            return None
        kind = self._running[1]
        self._running = None
        return kind


class Before(BackToBack):
    """As on main before: a pause pass always queued behind a running partial, even one that heard the silence."""

    def paused(self, now_ms: int, silence_start_ms: int | None = None) -> list[TurnAction]:
        if self._busy:
            return []
        self._paused, self._pause_ms, self._now = True, now_ms, max(self._now, now_ms)
        self._silence_from = now_ms if silence_start_ms is None else silence_start_ms
        if self._running is not None:
            self._want = "pause"
            return []
        return [self._start("pause", now_ms)]


@functools.cache
def _clip(index: int) -> np.ndarray:
    text, parts = UTTERANCES[index]
    speech = utterance_audio(text, parts)
    lead: np.ndarray = np.zeros(int(16_000 * LEAD_S), np.float32)
    tail: np.ndarray = np.zeros(int(16_000 * TAIL_S), np.float32)
    out: np.ndarray = np.concatenate([lead, speech, tail]).astype(np.float32)  # float32 [n] at 16 kHz
    return out


@functools.cache
def _text(index: int, lo_ms: int, hi_ms: int) -> str:
    return load_asr(AsrConfig()).transcribe(_clip(index)[lo_ms * 16 : hi_ms * 16])


def replay(index: int, pass_ms: int, early: bool, rest: bool) -> dict[str, Any]:
    """One clip, one turn-taking variant (``early``: this change's pause handling; ``rest``: its cadence)."""
    audio = _clip(index)
    text, _ = UTTERANCES[index]
    eos = len(audio) / 16 - TAIL_S * 1000  # ms: where the speech ends
    vad_mod.PAUSE_PASS_MS = 64 if early else 10_000  # 10 s: the pause at speculation_ms, as before
    cfg = ServerVadConfig()  # the defaults: 500 ms window, speculation_ms 200, interval 500
    vad = ServerVad(cfg, pauses=True)
    taker: TurnTaker | None = None
    start_ms, stop_end = 0, 0
    running: tuple[float, int, int, int] | None = None  # (finish time, pass id, lo, hi)
    got: dict[str, Any] = {"deltas": 0, "prepare": None, "stop": None, "done": None, "spec": None, "text": ""}

    def act(actions: list[TurnAction], t: float) -> None:
        nonlocal running
        for a in actions:
            if isinstance(a, Transcribe):
                hi = vad.now_ms if got["stop"] is None else stop_end  # the glue takes all it has
                running = (t + pass_ms, a.pass_id, start_ms, hi)
            elif isinstance(a, ShowDelta) and got["stop"] is None:
                got["deltas"] += 1
            elif isinstance(a, Prepare):
                got["prepare"] = t
            elif isinstance(a, TurnStopped):
                got["stop"] = t
            elif isinstance(a, TurnCompleted):
                got.update(done=t, spec=a.speculation, text=a.transcript or "")

    try:
        for i in range(0, len(audio), FRAME):
            t = (i + FRAME) / 16
            while taker is not None and running is not None and running[0] <= t:
                done_at, pass_id, lo, hi = running
                running = None
                act(taker.transcribed(pass_id, _text(index, lo, hi)), done_at)
                if vad.in_speech:
                    act(taker.heard(vad.now_ms), done_at)
            for ev in vad.feed(audio[i : i + FRAME]):
                if isinstance(ev, SpeechStarted) and taker is None:
                    start_ms = ev.audio_start_ms
                    turn = TurnConfig(interval_ms=cfg.transcription_interval_ms, prepare_after_ms=cfg.speculation_ms)
                    taker = (TurnTaker if rest else BackToBack if early else Before)(turn, start_ms)
                elif taker is not None and isinstance(ev, SpeechPaused):
                    act(taker.paused(vad.now_ms, ev.silence_start_ms), t)
                elif taker is not None and isinstance(ev, SpeechResumed):
                    act(taker.resumed(), t)
                elif taker is not None and isinstance(ev, SpeechStopped):
                    stop_end = ev.audio_end_ms
                    act(taker.stopped(ev.audio_end_ms), t)
            if taker is not None and vad.in_speech:
                act(taker.heard(vad.now_ms), t)
            if got["done"] is not None:
                break
    finally:
        vad_mod.PAUSE_PASS_MS = 64
    adopted = got["spec"] is not None
    first = max(got["stop"], got["prepare"] + LLM_MS) if adopted else got["done"] + LLM_MS
    return {
        "stop_ms": got["stop"] - eos,
        "transcript_ms": got["done"] - eos,
        "first_text_ms": first - eos,
        "prepared": got["prepare"] is not None,
        "adopted": adopted,
        "deltas": got["deltas"],
        "wer": word_error_rate(text, got["text"]),
        "transcript": got["text"],
    }


VARIANTS = [
    ("pause pass at speculation_ms, Whisper back to back (before)", False, False),
    ("pause pass at 64 ms, back to back", True, False),
    ("pause pass at 64 ms, Whisper rests (now)", True, True),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pass-ms", default="300,450,600", help="Whisper pass times to replay, comma-separated")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    for pass_ms in [int(p) for p in args.pass_ms.split(",")]:
        for label, early, rest in VARIANTS:
            runs = [replay(i, pass_ms, early, rest) for i in range(len(UTTERANCES))]
            raw[f"{pass_ms} {label}"] = runs
            rows.append(
                {
                    "Whisper pass ms": pass_ms,
                    "turn-taking": label,
                    "eos→speech_stopped ms": median([r["stop_ms"] for r in runs]),
                    "eos→transcript ms": median([r["transcript_ms"] for r in runs]),
                    "eos→first text ms": median([r["first_text_ms"] for r in runs]),
                    "prepared": sum(r["prepared"] for r in runs),
                    "adopted": sum(r["adopted"] for r in runs),
                    "deltas before stop (2 s clip)": runs[2]["deltas"],
                    "mean WER": sum(r["wer"] for r in runs) / len(runs),
                }
            )
    md = f"# bench voice_replay — {machine()}\n\nThe {len(UTTERANCES)} `bench voice` clips on a fake clock (audio "
    md += "time): real silero-vad in 40 ms frames, the real TurnTaker, real Whisper text for each pass, each pass "
    md += f"taking exactly the given time; first text = {LLM_MS} ms after the reply starts (prepared, or after the "
    md += "transcript). server_vad defaults (500 ms window, speculation_ms 200, interval 500). Medians over the clips; "
    md += "target eos→first text ≤ 650 ms.\n\n"
    md += markdown_table(rows, list(rows[0]))
    write("voice_replay", {"machine": machine(), "llm_ms": LLM_MS, "rows": rows, "runs": raw}, md)


if __name__ == "__main__":
    main()
