"""bench speech: spoken replies on the embedded model, beside text-only numbers from the same run.

One server (embedded SmolLM2 on llama.cpp, drafter off, no Whisper), the default Piper voice.

- ``first audio``: response.created → first output_audio.delta of a spoken reply, against
  response.created → first output_text.delta of the same prompt as text; the difference is what the
  first chunk's synthesis adds (target: first text chunk → its first audio ≤ 150 ms).
- ``underruns``: on a long spoken reply, each audio delta's arrival against its play time on a clock
  started at the first delta (a delta arriving after the audio before it has finished playing is a gap).
- ``cost to others``: a text session's tok/s alone, and while another session speaks (target ≥ 0.8×):
  asked once the spoken reply has played ``--speaking-s`` on a real-time clock from its first audio delta
  (its decode is over by then: what speaking itself costs), and asked together with it (both decode in
  one batch, so the same pair with a text reply instead shows what sharing the decode costs by itself:
  "speech's own cost" is beside speech / beside text).
- ``cancel``: response.cancel → response.done, and whether any audio followed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from typing import Any

import websockets

from bench.common import machine, markdown_table, median, write

PROMPT = "Tell me a long story about a dragon who learns to cook."


async def _session(addr: str, modality: str) -> Any:
    ws = await websockets.connect(f"ws://{addr}/v1/realtime", max_size=None)
    json.loads(await ws.recv())  # session.created
    await ws.send(json.dumps({"type": "session.update", "session": {"output_modalities": [modality]}}))
    while json.loads(await ws.recv())["type"] != "session.updated":
        pass
    return ws


async def reply(
    addr: str,
    modality: str,
    max_tokens: int,
    cancel_after_s: float | None = None,
    first_audio: asyncio.Event | None = None,
) -> dict[str, Any]:
    """One reply: timings of its events (seconds from response.create); ``first_audio`` is set at its first
    audio delta."""
    ws = await _session(addr, modality)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    t0 = time.perf_counter()
    await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": max_tokens}}))
    out: dict[str, Any] = {"first_text": None, "first_audio": None, "audio": [], "cancel_at": None, "after_done": 0}
    done_at = None
    while True:
        try:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 0.5 if done_at else 300))
        except TimeoutError:
            break
        now = time.perf_counter() - t0
        kind = ev["type"]
        if done_at is not None:
            out["after_done"] += kind == "response.output_audio.delta"
            continue
        if kind == "response.output_text.delta" and out["first_text"] is None:
            out["first_text"] = now
        if kind == "response.output_audio.delta":
            out["first_audio"] = out["first_audio"] if out["first_audio"] is not None else now
            out["audio"].append((now, len(base64.b64decode(ev["delta"])) / 48_000))
            if first_audio is not None:
                first_audio.set()
            if cancel_after_s is not None and out["cancel_at"] is None and now - out["first_audio"] >= cancel_after_s:
                out["cancel_at"] = now
                await ws.send(json.dumps({"type": "response.cancel"}))
        if kind == "response.done":
            done_at = now
            out["done"] = now
            out["tokens"] = (ev["response"].get("usage") or {}).get("output_token_details", {}).get("text_tokens") or (
                ev["response"].get("usage") or {}
            ).get("output_tokens", 0)
    await ws.close()
    return out


def gaps(audio: list[tuple[float, float]]) -> tuple[int, float]:
    """(deltas that arrived after their play time, seconds of audio) on a clock started at the first delta."""
    if not audio:
        return 0, 0.0
    play_at, late = audio[0][0], 0
    for arrived, seconds in audio:
        if arrived > play_at + 0.005:
            late += 1
            play_at = arrived  # the player waited for it
        play_at += seconds
    return late, sum(s for _, s in audio)


def tok_s(r: dict[str, Any]) -> float:
    start = r["first_text"] if r["first_text"] is not None else r["first_audio"]
    return r["tokens"] / max(r["done"] - start, 1e-6)


async def while_speaking(addr: str, max_tokens: int, speaking_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a text reply asked once ``speaking_s`` of a spoken reply has played, that spoken reply)."""
    heard = asyncio.Event()
    spoken = asyncio.create_task(reply(addr, "audio", max_tokens, first_audio=heard))
    await asyncio.wait_for(heard.wait(), 300)
    await asyncio.sleep(speaking_s)  # the listener's playback clock: the spoken reply is still being heard
    text = await reply(addr, "text", max_tokens)
    return text, await spoken


async def measure(
    addr: str, runs: int, max_tokens: int, speaking_s: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    await reply(addr, "audio", 16)  # warm-up: first model call, first synthesis
    text = [await reply(addr, "text", 24) for _ in range(runs)]
    spoken = [await reply(addr, "audio", 24) for _ in range(runs)]
    alone = []  # taken in each repetition beside the others: the ratios are paired, drift hits both sides
    shared = []
    speaking = []  # asked while another session's spoken reply plays, its decode over
    long_spoken = []
    beside_text = []  # the same two-reply batch with nothing spoken: what sharing the decode alone costs
    for _ in range(runs):
        alone.append(await reply(addr, "text", max_tokens))
        t, s = await asyncio.gather(reply(addr, "text", max_tokens), reply(addr, "audio", max_tokens))
        shared.append(t)
        long_spoken.append(s)
        t, _ = await asyncio.gather(reply(addr, "text", max_tokens), reply(addr, "text", max_tokens))
        beside_text.append(t)
        t, s = await while_speaking(addr, max_tokens, speaking_s)
        speaking.append(t)
        long_spoken.append(s)
    cancels = [await reply(addr, "audio", max_tokens, cancel_after_s=1.0) for _ in range(runs)]
    late = [gaps(s["audio"]) for s in long_spoken]
    row = {
        "first text delta ms (text reply)": median([1000 * r["first_text"] for r in text]),
        "first audio delta ms (spoken reply)": median([1000 * r["first_audio"] for r in spoken]),
        "first chunk → first audio ms": median([1000 * r["first_audio"] for r in spoken])
        - median([1000 * r["first_text"] for r in text]),
        "text tok/s alone": median([tok_s(r) for r in alone]),
        "text tok/s while another speaks": median([tok_s(r) for r in speaking]),
        "text tok/s asked with a spoken reply": median([tok_s(r) for r in shared]),
        "text tok/s beside a text reply": median([tok_s(r) for r in beside_text]),
        "underrun gaps (long spoken replies)": sum(g for g, _ in late),
        "spoken s per long reply": median([s for _, s in late]),
        "cancel → done ms": median([1000 * (r["done"] - r["cancel_at"]) for r in cancels if r["cancel_at"]]),
        "audio deltas after done": sum(r["after_done"] for r in cancels),
    }

    def paired(num: list[dict[str, Any]], den: list[dict[str, Any]]) -> float:
        return median([tok_s(a) / tok_s(b) for a, b in zip(num, den, strict=True)])

    row["cost ratio (while another speaks / alone)"] = paired(speaking, alone)
    row["asked together / alone"] = paired(shared, alone)
    row["speech's own cost ratio"] = paired(shared, beside_text)
    raw = {"text": text, "spoken": spoken, "alone": alone, "shared": shared, "beside_text": beside_text}
    raw["speaking"] = speaking
    raw["long_spoken"] = long_spoken
    return [row], {**raw, "cancels": cancels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--workers", type=int, default=1, help="audio.output.workers")
    ap.add_argument("--threads", type=int, default=1, help="audio.output.threads")
    ap.add_argument("--lead-s", type=float, default=None, help="audio.output.lead_s (default: the config's)")
    ap.add_argument("--nice", type=int, default=None, help="audio.output.nice (default: the config's)")
    ap.add_argument("--speaking-s", type=float, default=5.0, help="audio played before the text reply is asked")
    ap.add_argument("--name", default="speech", help="results file name under bench/results/")
    args = ap.parse_args()

    from gateway.core.config import load_config
    from gateway.wiring.loading import default_loader
    from testkit.live_server import run_server

    overrides = {
        "audio.enabled": False,
        "speculative.drafter": "none",
        "session.max_output_tokens": args.max_tokens,
        "audio.output": {"workers": args.workers, "threads": args.threads},
    }
    for key in ("lead_s", "nice"):
        if getattr(args, key) is not None:
            overrides["audio.output"][key] = getattr(args, key)
    cfg = load_config(None, **overrides)
    backend = default_loader(cfg)
    with run_server(cfg, backend) as addr:
        rows, raw = asyncio.run(measure(addr, args.runs, args.max_tokens, args.speaking_s))
    rows[0]["load 1m (end)"] = machine()["loadavg_1m"]
    md = f"# bench speech — {machine()}\n\nEmbedded model, drafter off, Piper en_US-joe-medium, "
    out = cfg.audio.output
    md += f"audio.output.workers={out.workers}, threads={out.threads}, lead_s={out.lead_s}, nice={out.nice}; "
    md += f"medians of {args.runs} runs (ratios paired per run); "
    md += f"long replies: {args.max_tokens} tokens; 'while another speaks': asked {args.speaking_s} s into the "
    md += "spoken reply's playback.\n\n" + markdown_table(rows, list(rows[0]))
    write(args.name, {"machine": machine(), "args": vars(args), "rows": rows, "runs": raw}, md)
    print(md)


if __name__ == "__main__":
    main()
