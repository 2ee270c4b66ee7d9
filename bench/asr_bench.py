"""ASR speed, side by side: ``python -m bench.asr_bench`` → bench/results/asr.json and asr.md.

For each engine (faster-whisper int8, openai-whisper fp32) on the same ~7 s espeak-ng utterance:
load time, the real-time factor (transcription seconds / audio seconds; median of ``--repeats``
runs after one warm-up), CPU-seconds per audio second, the transcript and its word error rate. Needs espeak-ng
(``apt-get install espeak-ng``). Takes well under two minutes on the 2-core box.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from processors.asr import ENGINES, AsrConfig, load_asr, word_error_rate
from processors.audio import decode_wav

TEXT = (
    "Open the door and turn on the lights in the kitchen. "
    "My favorite color is blue and I live in a small town near the sea."
)
RESULTS = Path(__file__).parent / "results"


def utterance(text: str = TEXT) -> np.ndarray:
    """``text`` spoken by espeak-ng (en-us, 160 wpm) → float32 ``[n]`` at 16 kHz."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        sys.exit("bench.asr_bench needs espeak-ng: apt-get install espeak-ng")
    wav = subprocess.run(
        [espeak, "-v", "en-us", "-s", "160", "--stdout", text], check=True, capture_output=True, timeout=60
    ).stdout
    return decode_wav(wav)


def measure(engine: str, model: str, audio: np.ndarray, repeats: int) -> dict:
    t0 = time.perf_counter()
    asr = load_asr(AsrConfig(engine=engine, model=model))
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    text = asr.transcribe(audio)  # warm-up (first call allocates, builds mel filters, …)
    first_s = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        text = asr.transcribe(audio)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    seconds = audio.size / 16_000
    median = statistics.median(times)
    return {
        "engine": engine,
        "model": model,
        "load_s": round(load_s, 2),
        "first_call_s": round(first_s, 2),
        "transcribe_s": [round(t, 3) for t in times],
        "rtf": round(median / seconds, 3),
        # CPU-seconds (all threads) per audio second: steadier than wall time on a shared box
        "cpu_per_audio_s": round(statistics.median(cpu) / seconds, 3),
        "transcript": text,
        "wer": round(word_error_rate(TEXT, text), 3),
    }


def markdown(report: dict) -> str:
    lines = [
        f"# ASR real-time factor ({report['audio_s']} s espeak-ng utterance, {report['cpus']} CPUs)",
        "",
        f'Reference: "{TEXT}"',
        "",
        "| engine | model | load s | first call s | median s | RTF | CPU s / audio s | WER | transcript |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['engine']} | {r['model']} | {r['load_s']} | {r['first_call_s']} | "
            f"{statistics.median(r['transcribe_s']):.3f} | {r['rtf']} | {r['cpu_per_audio_s']} | "
            f"{r['wer']} | {r['transcript']} |"
        )
    lines += [
        "",
        f"Fastest: **{report['fastest']}** (RTF target ≤ 0.2 for tiny.en). Load average at start: {report['loadavg']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.asr_bench", description=__doc__)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--model", default="tiny.en", choices=["tiny.en", "base"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    audio = utterance()
    report = {
        "audio_s": round(audio.size / 16_000, 2),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "results": [measure(engine, args.model, audio, args.repeats) for engine in args.engines],
    }
    report["fastest"] = min(report["results"], key=lambda r: r["rtf"])["engine"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "asr.json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    (args.out / "asr.md").write_text(md)
    print(md)
    return report


if __name__ == "__main__":
    main()
