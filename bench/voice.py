"""`stream-omni bench voice`: end of speech → speech_stopped → transcript → first reply text, per
turn-detection configuration, with streamed transcripts and speculation counted.

Real espeak-ng speech streamed as a live client does (40 ms pcm16 frames at 24 kHz, paced to the
wall clock, then silence) into one real server on the embedded model; each configuration is a
session setting, so all of them meet the same server, model and machine. One utterance has a
350 ms pause mid-sentence, which speculation must prepare for and then drop.

Per run: the times from the end of speech (the moment the frame holding its last sample was sent)
to ``speech_stopped``, to ``…transcription.completed`` and to the first ``response.output_text.delta``;
transcription deltas seen before ``speech_stopped``; the word error rate of the final transcript;
and the server's speculation counters (prepared / committed / discarded), read from /metrics.
Writes bench/results/voice.{json,md}. Needs espeak-ng.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import urllib.request
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, write  # noqa: E402

# (label, turn_detection): "today" is the path before streaming and speculation existed
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("server_vad, one-shot (before)", {"type": "server_vad", "speculation_ms": 0, "transcription_interval_ms": 0}),
    ("server_vad, streaming only", {"type": "server_vad", "speculation_ms": 0}),
    ("server_vad (defaults)", {"type": "server_vad"}),
    ("semantic_vad auto", {"type": "semantic_vad", "eagerness": "auto"}),
    ("semantic_vad high", {"type": "semantic_vad", "eagerness": "high"}),
]
# (text, pause): pause seconds inside the utterance, after its first part
UTTERANCES: list[tuple[str, tuple[str, str] | None]] = [
    ("Please open the kitchen window.", None),
    ("My favorite color is blue.", None),
    ("Please turn on the lights in the kitchen.", None),  # 2.0 s: the streaming target's clip
    ("What is the weather going to be like tomorrow morning?", None),
    (
        "Please open the kitchen window and turn on the lights.",
        ("Please open the kitchen window", "and turn on the lights."),
    ),
]
PAUSE_S = 0.35
RATE = 24_000


def speculation_counts(addr: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {"prepared": 0.0, "committed": 0.0, "discarded": 0.0, "mismatched": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "stream_omni:voice_speculation_total":
                out[s.labels["outcome"]] = s.value
    return out


def utterance_audio(text: str, parts: tuple[str, str] | None) -> Any:
    import numpy as np

    from testkit.espeak import silence, speak

    if parts is None:
        return speak(text)
    return np.concatenate([speak(parts[0]), silence(PAUSE_S), speak(parts[1])])


async def one(addr: str, turn_detection: dict[str, Any], text: str, parts: tuple[str, str] | None) -> dict[str, Any]:
    import numpy as np
    import soxr
    import websockets

    from processors.asr import word_error_rate
    from processors.audio import float32_to_pcm16

    speech = soxr.resample(utterance_audio(text, parts), 16_000, RATE).astype(np.float32)
    lead, tail = np.zeros(RATE // 2, np.float32), np.zeros(RATE * 2, np.float32)
    pcm = float32_to_pcm16(np.concatenate([lead, speech, tail]))
    eos_byte = (len(lead) + len(speech)) * 2
    step = RATE * 2 * 40 // 1000
    marks: dict[str, float] = {}
    early_deltas = 0
    stops = 0  # turns the VAD found (a mid-sentence pause longer than the window makes two)
    transcript = ""
    before = speculation_counts(addr)
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.recv()
        update = {"type": "session.update", "session": {"audio": {"input": {"turn_detection": turn_detection}}}}
        await ws.send(json.dumps(update))
        while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "session.updated":
            pass

        async def reader() -> None:
            nonlocal early_deltas, transcript, stops
            while True:
                ev = json.loads(await ws.recv())
                kind = ev["type"]
                if kind != "response.output_text.delta" or "eos" in marks:  # not a reply to half a split turn
                    marks.setdefault(kind, time.perf_counter())
                stops += kind == "input_audio_buffer.speech_stopped"
                if kind == "conversation.item.input_audio_transcription.delta":
                    early_deltas += "input_audio_buffer.speech_stopped" not in marks
                if kind == "conversation.item.input_audio_transcription.completed":
                    transcript = ev["transcript"]
                # a reply to the first half of a split turn (cancelled by barge-in, or done before the
                # speech went on): the reply to the whole utterance comes after the end of speech
                if kind == "response.done" and ev["response"]["status"] != "cancelled" and "eos" in marks:
                    return

        task = asyncio.create_task(reader())
        t0 = time.perf_counter()
        for i in range(0, len(pcm), step):
            await ws.send(pcm[i : i + step])
            if "eos" not in marks and i + step >= eos_byte:
                marks["eos"] = time.perf_counter()
            await asyncio.sleep(max(0.0, t0 + (i + step) / (RATE * 2) - time.perf_counter()))
        await asyncio.wait_for(task, 120)
    after = speculation_counts(addr)
    e = marks["eos"]
    return {
        "text": text,
        "speech_s": round(len(speech) / RATE, 2),
        "eos_to_speech_stopped_ms": (marks["input_audio_buffer.speech_stopped"] - e) * 1000,
        "eos_to_transcript_ms": (marks["conversation.item.input_audio_transcription.completed"] - e) * 1000,
        "eos_to_first_text_ms": (marks["response.output_text.delta"] - e) * 1000,
        "deltas_before_stop": early_deltas,
        "turns": stops,
        "wer": word_error_rate(text, transcript),
        "transcript": transcript,
        **{k: after[k] - before[k] for k in after},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine", default="faster-whisper")
    ap.add_argument("--configs", default="all", help="comma-separated indexes into CONFIGS, or all")
    args = ap.parse_args()

    from gateway.core.config import load_config
    from gateway.wiring.loading import default_loader
    from testkit.live_server import run_server

    chosen = CONFIGS if args.configs == "all" else [CONFIGS[int(i)] for i in args.configs.split(",")]
    overrides = {"audio.engine": args.engine, "session.max_output_tokens": 16, "speculative.drafter": "none"}
    cfg = load_config(None, **overrides)
    backend = default_loader(cfg)
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    with run_server(cfg, backend) as addr:
        asyncio.run(one(addr, CONFIGS[0][1], *UTTERANCES[0]))  # warm-up: first Whisper and model calls
        for label, td in chosen:
            runs = [asyncio.run(one(addr, td, text, parts)) for text, parts in UTTERANCES]
            raw[label] = runs
            prepared = sum(r["prepared"] for r in runs)
            window = 500 if td["type"] == "server_vad" else None
            rows.append(
                {
                    "configuration": label,
                    "eos→speech_stopped ms": median([r["eos_to_speech_stopped_ms"] for r in runs]),
                    "eos→transcript ms": median([r["eos_to_transcript_ms"] for r in runs]),
                    "eos→first text ms": median([r["eos_to_first_text_ms"] for r in runs]),
                    "target ms": window + 150 if window else None,
                    "deltas before stop (2 s clip)": raw[label][2]["deltas_before_stop"],
                    "deltas before stop (median)": median([r["deltas_before_stop"] for r in runs]),
                    "prepared": prepared,
                    "committed": sum(r["committed"] for r in runs),
                    "discarded": sum(r["discarded"] for r in runs),
                    "discard rate": (sum(r["discarded"] for r in runs) / prepared) if prepared else None,
                    "mean WER": sum(r["wer"] for r in runs) / len(runs),
                    "turns": sum(r["turns"] for r in runs),
                }
            )
    md = f"# bench voice — {machine()}\n\nMedians over {len(UTTERANCES)} espeak-ng utterances streamed at real-time "
    md += f"pace (40 ms frames), engine {args.engine}, embedded model, max 16 output tokens. One utterance has a "
    md += f"{int(PAUSE_S * 1000)} ms pause mid-sentence (each must be exactly one turn: `turns` counts them). "
    md += "The 2 s clip is 'Please turn on the lights in the kitchen.' (2.03 s). "
    md += "Target: eos→first text ≤ silence window + 150 ms.\n\n"
    md += markdown_table(rows, list(rows[0]))
    write("voice", {"machine": machine(), "engine": args.engine, "rows": rows, "runs": raw}, md)


if __name__ == "__main__":
    main()
