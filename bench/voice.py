"""`stream-omni bench voice`: end of speech → speech_stopped → transcript → first reply text.

Real espeak-ng speech streamed at real-time pace (40 ms pcm16 frames at 24 kHz, then silence)
into a real server on the embedded model, per ASR engine. Needs espeak-ng.
Writes bench/results/voice.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, write  # noqa: E402

WATCH = (
    "input_audio_buffer.speech_stopped",
    "conversation.item.input_audio_transcription.completed",
    "response.output_text.delta",
    "response.done",
)
SENTENCES = ["Please open the kitchen window.", "My favorite color is blue.", "Turn on the lights in the kitchen."]


async def one(addr: str, sentence: str) -> dict[str, float]:
    import numpy as np
    import soxr
    import websockets

    from processors.audio import float32_to_pcm16
    from testkit.speech import speak

    speech = soxr.resample(speak(sentence), 16_000, 24_000).astype(np.float32)
    lead = np.zeros(24_000 // 2, np.float32)
    tail = np.zeros(24_000 * 2, np.float32)
    pcm = float32_to_pcm16(np.concatenate([lead, speech, tail]))
    eos_byte = (len(lead) + len(speech)) * 2
    step = 24_000 * 2 * 40 // 1000
    marks: dict[str, float] = {}
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.recv()

        async def reader() -> None:
            while True:
                ev = json.loads(await ws.recv())
                now = time.perf_counter()
                for key in WATCH:
                    if ev["type"] == key and key not in marks:
                        marks[key] = now
                if ev["type"] == "response.done":
                    return

        task = asyncio.create_task(reader())
        t0 = time.perf_counter()
        for i in range(0, len(pcm), step):
            await ws.send(pcm[i : i + step])
            if "eos" not in marks and i + step >= eos_byte:
                marks["eos"] = time.perf_counter()
            await asyncio.sleep(max(0.0, t0 + (i + step) / (24_000 * 2) - time.perf_counter()))
        await asyncio.wait_for(task, 120)
    e = marks["eos"]
    return {
        "eos_to_speech_stopped_ms": (marks["input_audio_buffer.speech_stopped"] - e) * 1000,
        "eos_to_transcript_ms": (marks["conversation.item.input_audio_transcription.completed"] - e) * 1000,
        "eos_to_first_text_ms": (marks["response.output_text.delta"] - e) * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engines", default="faster-whisper,openai-whisper")
    args = ap.parse_args()

    from gateway.config import load_config
    from gateway.loading import default_loader
    from testkit.server import run_server

    backend = default_loader(load_config(None))
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    for engine in args.engines.split(","):
        cfg = load_config(None, **{"audio.engine": engine, "session.max_output_tokens": 16})
        with run_server(cfg, backend) as addr:
            runs = [asyncio.run(one(addr, s)) for s in SENTENCES]
        raw[engine] = runs
        rows.append({"engine": engine, **{k: median([r[k] for r in runs]) for k in runs[0]}})
    md = f"# bench voice — {machine()}\n\nMedians over {len(SENTENCES)} espeak-ng utterances streamed at real-time "
    md += "pace; server VAD with silence_duration_ms = 500 (the VAD must hear that much silence first).\n\n"
    md += markdown_table(rows, list(rows[0]))
    write("voice", {"machine": machine(), "rows": rows, "runs": raw}, md)


if __name__ == "__main__":
    main()
