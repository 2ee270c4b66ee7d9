"""What tracing costs: the same Realtime text turns on two servers, traces off and on, side by side.

Two ``stream-omni serve`` processes on the embedded model (SmolLM2 on llama.cpp, audio off), one with
``tracing.enabled`` exporting over OTLP/HTTP to a real receiver in this process
(``testkit.otlp.OtlpReceiver``), take turns answering the same prompts, alternating which goes first
each round, so load drift hits both alike. Per turn: the model's decode rate (``response.done``'s
``tokens_per_s``) and the client's end-to-end time (``response.create`` → ``response.done``), medians
over rounds. Targets: ≤ 2 % tokens/s and ≤ 5 ms per turn.

    python -m bench.tracing_bench [--rounds 20] [--tokens 64]    (--loop-only: the event loop's cost per turn alone)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from typing import Any

import websockets

from testkit.otlp import OtlpReceiver

from .common import machine, markdown_table, median, server_process, write

PROMPTS = ["Count from one to twenty in words.", "Name the planets of the solar system.", "List ten fruits."]


async def turn(ws: Any, prompt: str, tokens: int) -> tuple[float, float]:
    """One text turn: (tokens/s, end-to-end ms)."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    t0 = time.perf_counter()
    await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": tokens}}))
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), 300))
        if ev["type"] == "error":
            raise RuntimeError(ev["error"])
        if ev["type"] == "response.done":
            return float(ev["response"]["metrics"]["tokens_per_s"]), (time.perf_counter() - t0) * 1000


async def run(addrs: dict[str, str], rounds: int, tokens: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {name: {"tokens_per_s": [], "e2e_ms": []} for name in addrs}
    socks = {}
    for name, addr in addrs.items():
        # a fresh conversation per turn would add its own prefill: one session, its context capped by default
        socks[name] = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=60, max_size=None)
        await asyncio.wait_for(socks[name].recv(), 60)  # session.created
    try:
        for i in range(rounds + 1):
            order = list(addrs) if i % 2 == 0 else list(reversed(addrs))
            for name in order:
                tps, e2e = await turn(socks[name], PROMPTS[i % len(PROMPTS)], tokens)
                if i:  # the first round warms both
                    out[name]["tokens_per_s"].append(tps)
                    out[name]["e2e_ms"].append(e2e)
            print(f"round {i}/{rounds}", flush=True)
    finally:
        for ws in socks.values():
            await ws.close()
    return out


def loop_cost(endpoint: str, turns: int = 300, deltas: int = 48) -> dict[str, float]:
    """What a traced turn costs the event loop, in-process and deterministic: the events of a voice turn
    with ``deltas`` text deltas fed to the turn timer (always on) alone, and with a session trace beside it
    (its observe, then drawing the turn's spans at the end). Median µs per turn over ``turns``."""
    from gateway.core.config import TracingConfig
    from gateway.realtime.response_ending import ResponseEnding
    from gateway.realtime.tracing import Tracing
    from gateway.realtime.turnlatency import TurnTimer

    tracing = Tracing(TracingConfig(enabled=True, endpoint=endpoint), "bench")
    metrics = {"queue_ms": 1.0, "prefill_ms": 20.0, "ttft_ms": 40.0, "tokens": deltas, "prompt_tokens": 30}
    metrics["e2e_s"] = 1.0

    def events(i: int) -> list[list[dict[str, Any]]]:
        item, rid = f"item_{i}", f"resp_{i}"
        out = [
            [{"type": "input_audio_buffer.speech_started", "item_id": item}],
            [{"type": "input_audio_buffer.speech_stopped", "item_id": item, "audio_end_ms": 900}],
            [{"type": "conversation.item.input_audio_transcription.completed", "item_id": item, "transcript": "x"}],
            [{"type": "response.created", "response": {"id": rid}}],
            [{"type": "response.content_part.added", "response_id": rid}],
        ]
        for _ in range(deltas):
            out.append([{"type": "response.output_audio.delta", "response_id": rid, "delta": "AAAA"}])
            out.append([{"type": "response.output_audio_transcript.delta", "response_id": rid, "delta": "w"}])
        return out

    result = {}
    for traced in (False, True):
        timer, took = TurnTimer(), []
        trace = tracing.session("sess_bench", lambda: None, time.perf_counter()) if traced else None
        for i in range(turns):
            batches = events(i)
            t0 = time.perf_counter()
            for batch in batches:
                now = time.perf_counter()
                timer.observe(batch, now, 1000, 500)
                if trace is not None:
                    trace.observe(batch, now)
            timed = timer.finish(f"resp_{i}", metrics)
            if trace is not None:
                for k in range(4):
                    trace.tts_chunk(f"resp_{i}", k, t0, t0 + 0.01, 40)
                trace.response(f"resp_{i}", ResponseEnding.completed({}, metrics), timed, time.perf_counter())
            took.append((time.perf_counter() - t0) * 1e6)
        result["traced_us" if traced else "untraced_us"] = median(took)
    tracing.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--loop-only", action="store_true", help="only the in-process event-loop cost per turn")
    args = ap.parse_args()
    if args.loop_only:
        with OtlpReceiver() as rx:
            cost = loop_cost(rx.endpoint)
        info = machine()
        added = (cost["traced_us"] - cost["untraced_us"]) / 1000
        md = (
            "# Tracing: what a traced voice turn costs the event loop\n\n"
            f"`python -m bench.tracing_bench --loop-only` — {info['when']}, {info['cpus']} CPUs, load average (1 min) "
            f"{info['loadavg_1m']}. A voice turn's events (48 text + 48 audio deltas, 4 TTS chunks) through the "
            f"turn timer (on either way) and the session trace: {cost['untraced_us']:.0f} µs untraced, "
            f"{cost['traced_us']:.0f} µs traced; tracing adds {added:.3f} ms a turn (median of 300; target ≤ 5 ms).\n"
        )
        write("tracing_loop", {"machine": info, "loop_cost_us": cost, "added_ms": added}, md)
        return
    # greedy: both servers write the same reply, so their times compare turn for turn
    base = {"audio.enabled": False, "session.temperature": 0.0}
    with contextlib.ExitStack() as stack:
        rx = stack.enter_context(OtlpReceiver())
        off = stack.enter_context(server_process(base, timeout_s=900))
        on = stack.enter_context(
            server_process({**base, "tracing.enabled": True, "tracing.endpoint": rx.endpoint}, timeout_s=900)
        )
        times = asyncio.run(run({"off": off, "on": on}, args.rounds, args.tokens))
        deadline = time.monotonic() + 15
        while len([s for s in rx.spans if s.name.startswith("chat ")]) < args.rounds and time.monotonic() < deadline:
            time.sleep(0.1)  # the batch exporter sends every 5 s (OTEL_BSP_SCHEDULE_DELAY)
        chat_spans = len([s for s in rx.spans if s.name.startswith("chat ")])
        cost = loop_cost(rx.endpoint)
    info = machine()
    med = {name: {k: median(v) for k, v in series.items()} for name, series in times.items()}
    rows = [{"tracing": name, "tokens_per_s": m["tokens_per_s"], "e2e_ms": m["e2e_ms"]} for name, m in med.items()]
    ratio = med["on"]["tokens_per_s"] / med["off"]["tokens_per_s"]
    extra = med["on"]["e2e_ms"] - med["off"]["e2e_ms"]
    rows.append({"tracing": "on / off", "tokens_per_s": ratio, "e2e_ms": extra})
    per_turn_ms = (cost["traced_us"] - cost["untraced_us"]) / 1000
    md = (
        "# Tracing on vs off: the same Realtime text turns, side by side\n\n"
        f"`python -m bench.tracing_bench --rounds {args.rounds} --tokens {args.tokens}` — {info['when']}, "
        f"{info['cpus']} CPUs, load average (1 min) {info['loadavg_1m']}; the embedded model on llama.cpp, "
        f"medians over {args.rounds} turns each, alternating. Spans received: {chat_spans} responses. "
        "Targets: tokens/s ratio ≥ 0.98, end-to-end ≤ +5 ms per turn.\n\n"
        + markdown_table(rows, ["tracing", "tokens_per_s", "e2e_ms"])
        + "\nOn the event loop, per voice turn (48 text + 48 audio deltas, 4 TTS chunks; the turn timer is on "
        f"either way): {cost['untraced_us']:.0f} µs untraced, {cost['traced_us']:.0f} µs traced — "
        f"tracing adds {per_turn_ms:.3f} ms a turn (median of 300).\n"
    )
    write(
        "tracing",
        {
            "machine": info,
            "series": times,
            "medians": med,
            "ratio": ratio,
            "extra_ms": extra,
            "spans": chat_spans,
            "loop_cost_us": cost,
        },
        md,
    )


if __name__ == "__main__":
    main()
