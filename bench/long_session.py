"""bench long_session: a 300-turn text session and a 100-turn voice session on the embedded model, whole context.

The embedded SmolLM2 on llama.cpp with its default 4096-token context, the default ``session.context_tokens``
(history kept in context) and ``truncation: "auto"`` (the default): once a prompt would not fit, the oldest whole
turns leave the model's context. Per turn it records the
server's TTFT (``response.done.metrics.ttft_ms``: job start → first token, prefill included), the prompt and
cached tokens, and any error. Target: no error, and TTFT flat — median of the last 10 turns / median of turns
6–15 (around turn 10) ≤ 1.5; the exact last / tenth ratio is recorded too.

Text turns: a ~40-token user message (a filler sentence and a question), replies capped at ``--reply`` tokens.
Voice turns: espeak-ng speech streamed as ``input_audio_buffer.append`` (faster than real time), server VAD,
Whisper, a spoken reply (Piper) of at most ``--reply`` tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import time
from typing import Any

import numpy as np
import websockets

from bench.common import machine, markdown_table, median, write

QUESTIONS = (
    "Tell me one thing about the moon.",
    "What colour is a ripe banana?",
    "Name an animal that lives in the sea.",
    "Which season comes after winter?",
    "What do bees make?",
    "How many legs does a spider have?",
    "Where does the sun rise?",
    "What is the opposite of cold?",
)
FILLER = "I keep a small garden with tomatoes, beans and lettuce, and two old apple trees by the shed. "


async def _recv(ws: Any) -> dict[str, Any]:
    ev: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 300))  # a turn on a busy box: minutes
    return ev


async def _open(addr: str, session: dict[str, Any]) -> Any:
    ws = await websockets.connect(f"ws://{addr}/v1/realtime", max_size=None)
    await _recv(ws)  # session.created
    await ws.send(json.dumps({"type": "session.update", "session": session}))
    while (await _recv(ws))["type"] != "session.updated":
        pass
    return ws


async def _until_done(ws: Any, t0: float) -> dict[str, Any]:
    """Events up to response.done: its row (timings from ``t0``), errors counted."""
    out: dict[str, Any] = {"errors": [], "first_delta_ms": None}
    while True:
        ev = await _recv(ws)
        kind = ev["type"]
        if kind == "error":
            out["errors"].append(ev["error"])
        elif kind in ("response.output_text.delta", "response.output_audio_transcript.delta"):
            if out["first_delta_ms"] is None:
                out["first_delta_ms"] = (time.perf_counter() - t0) * 1000
        elif kind == "conversation.item.deleted":
            out["errors"].append({"code": "deleted", "message": ev["item_id"]})
        elif kind == "response.done":
            r = ev["response"]
            usage = r.get("usage") or {}
            out.update(
                status=r["status"],
                ttft_ms=(r.get("metrics") or {}).get("ttft_ms"),
                input_tokens=usage.get("input_tokens"),
                cached_tokens=(usage.get("input_token_details") or {}).get("cached_tokens"),
            )
            return out


async def text_session(addr: str, turns: int, reply: int) -> list[dict[str, Any]]:
    ws = await _open(addr, {"output_modalities": ["text"]})
    rows = []
    for n in range(turns):
        text = f"{FILLER}{QUESTIONS[n % len(QUESTIONS)]}"
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": reply}}))
        rows.append(await _until_done(ws, t0))
    await ws.close()
    return rows


async def voice_session(addr: str, turns: int, reply: int) -> list[dict[str, Any]]:
    from processors.audio import float32_to_pcm16
    from testkit.espeak import silence, speak

    ws = await _open(addr, {"output_modalities": ["audio"], "max_output_tokens": reply})
    rows = []
    for n in range(turns):
        speech = speak(QUESTIONS[n % len(QUESTIONS)], 24_000)
        pcm = float32_to_pcm16(np.concatenate([silence(0.3, 24_000), speech, silence(1.0, 24_000)]))
        step = 24_000 * 2 // 25  # 40 ms
        for i in range(0, len(pcm), step):
            chunk = base64.b64encode(pcm[i : i + step]).decode()
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        rows.append(await _until_done(ws, time.perf_counter()))
    await ws.close()
    return rows


def summarize(kind: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    ttft = [float(r["ttft_ms"]) for r in rows if r.get("ttft_ms") is not None]
    prompts = [r["input_tokens"] or 0 for r in rows]
    cuts = sum(b < a for a, b in zip(prompts, prompts[1:], strict=False))
    rebuilds = sum(
        (r["cached_tokens"] or 0) < (prev["input_tokens"] or 0) // 2 for prev, r in zip(rows, rows[1:], strict=False)
    )
    early, late = median(ttft[5:15]), median(ttft[-10:])
    return {
        "session": kind,
        "turns": len(rows),
        "errors": sum(len(r["errors"]) for r in rows),
        "not completed": sum(r.get("status") not in ("completed", "incomplete") for r in rows),
        "cuts": cuts,
        "cache rebuilds": rebuilds,
        "max prompt": max(prompts),
        "TTFT ms turns 6-15 (median)": early,
        "TTFT ms last 10 (median)": late,
        "ratio last 10 / turns 6-15": late / early,
        "ratio last turn / turn 10": ttft[-1] / ttft[9] if len(ttft) >= 10 else None,
        "TTFT ms p90 (all)": float(np.percentile(ttft, 90)) if ttft else None,
        "TTFT ms max (all)": max(ttft) if ttft else None,
        "TTFT ms median (all)": statistics.median(ttft) if ttft else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--text-turns", type=int, default=300)
    ap.add_argument("--voice-turns", type=int, default=100)
    ap.add_argument("--reply", type=int, default=24, help="max output tokens per reply")
    ap.add_argument("--max-context", type=int, default=None, help="model.max_context (default: the config's)")
    ap.add_argument("--threads", type=int, default=None, help="model.threads (default: the config's)")
    ap.add_argument("--name", default="long_session", help="results file name under bench/results/")
    args = ap.parse_args()

    from gateway.core.config import load_config
    from gateway.core.config_model import AutoLocalModel
    from gateway.wiring.loading import default_loader
    from testkit.live_server import run_server

    overrides = {"session.instructions": "Answer briefly.", "model.max_context": args.max_context}
    cfg = load_config(None, **overrides, **({"model.threads": args.threads} if args.threads else {}))
    assert isinstance(cfg.model, AutoLocalModel)  # no config file: the embedded GGUF, on llama.cpp
    threads = cfg.model.threads or 2
    backend = default_loader(cfg)
    raw: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    with run_server(cfg, backend) as addr:
        for kind, run, turns in (("text", text_session, args.text_turns), ("voice", voice_session, args.voice_turns)):
            if turns <= 0:
                continue
            load_before = os.getloadavg()[0]
            t0 = time.perf_counter()
            raw[kind] = asyncio.run(run(addr, turns, args.reply))
            row = summarize(kind, raw[kind])
            row["wall s"] = time.perf_counter() - t0
            row["load 1m (start / end)"] = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
            rows.append(row)
            print(row, flush=True)
    md = f"# bench long_session — {machine()}\n\nEmbedded model (llama.cpp, {threads} threads), "
    md += f"context {cfg.model.max_context} tokens, `session.context_tokens` {cfg.session.context_tokens}, "
    md += f'`truncation: "auto"`, replies ≤ {args.reply} tokens. TTFT is the server\'s (job start → first '
    md += "token, prefill included). A cut is a turn whose prompt is shorter than the last one's; a cache rebuild "
    md += "is a turn that found less than half of the last prompt cached. Target: no error; ratio ≤ 1.5.\n\n"
    md += markdown_table(rows, list(rows[0]))
    write(args.name, {"machine": machine(), "args": vars(args), "rows": rows, "turns": raw}, md)


if __name__ == "__main__":
    main()
