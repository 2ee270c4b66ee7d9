"""`stream-omni bench asr_ctx`: a faster-whisper tiny.en pass on the full 30 s encoder input vs a short one.

Whisper's encoder reads 30 s of mel frames whatever the clip's length; ``AsrConfig.encoder_headroom_s``
encodes the clip plus that headroom instead (``processors.asr.encoder_frames``). Side by side in
one run, settings interleaved per clip: the pass time (median of ``--repeats``), its CPU time, and
the words, on the espeak-ng utterances of ``bench voice`` and a few more, each as a turn's audio
(300 ms of prefix padding, 100 ms of trailing silence), and on cuts of the bench clips at 40 % and
70 % of their speech (what streaming passes hear). WER against the text (whole clips), word
agreement with the full pass (every clip), how many short passes looped and were redone on 30 s.
Also ``transcribe(chunk_length=10)``, which changes only how audio is split into segments:
faster-whisper still pads each segment to 3000 frames.
Writes bench/results/asr_ctx.{json,md}. Needs espeak-ng.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench.common import machine, markdown_table, median, write  # noqa: E402

MORE = [
    "Set a timer for ten minutes.",
    "Can you tell me a joke about cats?",
    "Remind me to call my mother at six o'clock tonight.",
    "How far is it from London to Paris by train?",
    "Turn the music down a little.",
    "I would like to book a table for two people on Friday evening at the Italian restaurant.",
    "What time is it?",
]
HEADROOMS: list[float | None] = [None, 0.5, 2.0, 4.0, 6.0, 8.0]


def clips() -> list[tuple[str, str | None, np.ndarray]]:
    """(name, reference text or None for a cut, turn audio float32 [n] at 16 kHz)."""
    from bench.voice import UTTERANCES, utterance_audio
    from testkit.espeak import silence, speak

    out: list[tuple[str, str | None, np.ndarray]] = []
    for text, parts in UTTERANCES:
        speech = utterance_audio(text, parts)
        out.append((text, text, np.concatenate([silence(0.3), speech, silence(0.1)])))
        for frac in (0.4, 0.7):
            cut = speech[: int(speech.size * frac)]
            out.append((f"{text} [{int(frac * 100)} %]", None, np.concatenate([silence(0.3), cut])))
    for text in MORE:
        out.append((text, text, np.concatenate([silence(0.3), speak(text), silence(0.1)])))
    return out


def label(headroom: float | None) -> str:
    return "full 30 s (today)" if headroom is None else f"audio + {headroom:g} s"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from processors.asr import AsrConfig, FasterWhisper, encoder_frames, normalize_words, word_error_rate

    parser = argparse.ArgumentParser(prog="stream-omni bench asr_ctx", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    start = machine()
    models = {h: FasterWhisper(AsrConfig(encoder_headroom_s=h)) for h in HEADROOMS}
    raw = models[None]._model  # the same WhisperModel class, for transcribe(chunk_length=10)

    def chunk10(audio: np.ndarray) -> str:
        segs, _ = raw.transcribe(
            audio,
            language="en",
            beam_size=1,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            chunk_length=10,
        )
        return "".join(s.text for s in segs).strip()

    runners: dict[str, Any] = {label(h): m.transcribe for h, m in models.items()}
    runners["transcribe(chunk_length=10)"] = chunk10
    for run in runners.values():  # warm-up: first calls allocate
        run(np.zeros(16_000, np.float32))

    rows: list[dict[str, Any]] = []
    for name, ref, audio in clips():
        times: dict[str, list[float]] = {k: [] for k in runners}
        cpu: dict[str, list[float]] = {k: [] for k in runners}
        texts: dict[str, str] = {}
        redone_before = {label(h): m.redone for h, m in models.items()}
        for _ in range(args.repeats):
            for key, run in runners.items():  # interleaved: load changes hit every setting alike
                t0, c0 = time.perf_counter(), time.process_time()
                texts[key] = run(audio)
                times[key].append(time.perf_counter() - t0)
                cpu[key].append(time.process_time() - c0)
        full = texts[label(None)]
        for key in runners:
            headroom = next((h for h in HEADROOMS if label(h) == key), None)
            rows.append(
                {
                    "clip": name,
                    "audio_s": round(audio.size / 16_000, 2),
                    "setting": key,
                    "frames": encoder_frames(audio.size, headroom) if key in map(label, HEADROOMS) else 3000,
                    "pass_ms": round(1000 * median(times[key])),
                    "cpu_ms": round(1000 * median(cpu[key])),
                    "wer": None if ref is None else round(word_error_rate(ref, texts[key]), 3),
                    "same_words_as_full": normalize_words(texts[key]) == normalize_words(full),
                    # passes of this clip whose short text looped and were redone on 30 s
                    "redone": models[headroom].redone - redone_before[key] if key in redone_before else 0,
                    "text": texts[key],
                }
            )
        print(name, {k: round(1000 * median(v)) for k, v in times.items()}, flush=True)

    summary = []
    for key in runners:
        mine = [r for r in rows if r["setting"] == key]
        whole = [r for r in mine if r["wer"] is not None]
        summary.append(
            {
                "setting": key,
                "median pass ms": round(median([r["pass_ms"] for r in mine])),
                "median CPU ms": round(median([r["cpu_ms"] for r in mine])),
                "max pass ms": max(r["pass_ms"] for r in mine),
                "redone on 30 s": sum(r["redone"] for r in mine),
                "mean WER (whole clips)": round(sum(r["wer"] for r in whole) / len(whole), 3),
                "bench clips mean WER": round(sum(r["wer"] for r in whole[:5]) / 5, 3),
                "same words as full": f"{sum(r['same_words_as_full'] for r in mine)}/{len(mine)}",
            }
        )
    end = machine()
    md = (
        "# faster-whisper tiny.en: full 30 s encoder input vs a short one\n\n"
        f"{start['when']}, {start['cpus']} CPUs, load average (1 min) {start['loadavg_1m']} at start, "
        f"{end['loadavg_1m']} at the end (a shared box: compare rows, not runs). {args.repeats} repeats per "
        "clip and setting, interleaved; pass = `FasterWhisper.transcribe`, wall time, median. Clips: the 5 "
        f"utterances of `bench voice` and {len(MORE)} more as turn audio (300 ms before, 100 ms after), and "
        "the bench clips cut at 40 % and 70 % of their speech (no reference: compared with the full pass).\n\n"
        + markdown_table(summary, list(summary[0]))
        + "\n## Per clip\n\n"
        + markdown_table(rows, ["clip", "audio_s", "setting", "frames", "pass_ms", "cpu_ms", "redone", "wer", "text"])
    )
    data = {"machine": start, "machine_end": end, "repeats": args.repeats, "summary": summary, "rows": rows}
    write("asr_ctx", data, md)
    return data


if __name__ == "__main__":
    main()
