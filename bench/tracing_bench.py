"""What tracing costs: the same Realtime turns on three servers, traces off, off and on, side by side.

Three ``stream-omni serve`` processes on the embedded default (SmolLM2 on llama.cpp, Whisper, the
Piper voice): ``off``, ``control`` (identical: what two untraced processes differ by) and ``on``,
exporting over OTLP/HTTP to a real receiver in this process (``testkit.otlp.OtlpReceiver``), take
turns answering the same text prompts and then the same spoken questions, the order rotating each
round, so load drift hits all alike. Per turn: the decode rate, the client's end-to-end time (text)
or the server's turn latency less the VAD's window (voice); each process's CPU per turn over a leg.
The differences are paired round by round, with a bootstrap interval. Targets: ≤ 2 % tokens/s and
≤ 5 ms a turn.

    python -m bench.tracing_bench [--rounds 30] [--tokens 64] [--voice-rounds 20] [--name tracing]
    python -m bench.tracing_bench --loop-only     (the event loop's cost per turn alone, in process)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import websockets

from testkit.otlp import OtlpReceiver

from .common import machine, markdown_table, median, median_ci, server_pid, server_process, write

PROMPTS = ["Count from one to twenty in words.", "Name the planets of the solar system.", "List ten fruits."]
SAID = ["What is the capital of France?", "Name three colours of the rainbow.", "How many legs does a spider have?"]
RATE = 24_000  # the Realtime default input: pcm16 mono at 24 kHz
FRAME = RATE // 10 * 2  # 100 ms of pcm16


async def _event(ws: Any) -> dict[str, Any]:
    ev = json.loads(await asyncio.wait_for(ws.recv(), 300))
    if ev["type"] == "error" or (ev["type"] == "response.done" and ev["response"]["status"] == "failed"):
        raise RuntimeError(str(ev))
    return ev


async def text_turn(ws: Any, i: int, tokens: int) -> dict[str, float]:
    """One text turn: the decode rate and response.create → response.done on the client's clock."""
    text = PROMPTS[i % len(PROMPTS)]
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    t0 = time.perf_counter()
    await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": tokens}}))
    while (ev := await _event(ws))["type"] != "response.done":
        pass
    tps = float(ev["response"]["metrics"]["tokens_per_s"])
    return {"tokens_per_s": tps, "e2e_ms": (time.perf_counter() - t0) * 1000}


def utterances() -> list[tuple[bytes, int]]:
    """Each of ``SAID`` as the client sends it: 300 ms of silence, the speech, 1.2 s of silence
    (the VAD's window, sent at once: the turn's clock is the audio's); and where the speech ends."""
    import numpy as np

    from processors.audio import float32_to_pcm16
    from testkit.espeak import silence, speak

    out = []
    for text in SAID:
        speech = speak(text, rate=RATE)
        pcm = float32_to_pcm16(np.concatenate([silence(0.3, RATE), speech, silence(1.2, RATE)]))
        out.append((pcm, (round(0.3 * RATE) + len(speech)) * 2))
    return out


async def voice_turn(ws: Any, utterance: tuple[bytes, int]) -> dict[str, float]:
    """One spoken turn answered in speech: the server's end of speech → first audio less the VAD's
    silence window (the part that is the server's work), the client's last speech byte sent → first
    audio delta, and the decode rate."""
    pcm, speech_end = utterance
    sent_at = 0.0
    for at in range(0, len(pcm), FRAME):
        chunk = base64.b64encode(pcm[at : at + FRAME]).decode()
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        if not sent_at and at + FRAME >= speech_end:
            sent_at = time.perf_counter()
    first_audio = None
    while (ev := await _event(ws))["type"] != "response.done":
        if ev["type"] == "response.output_audio.delta" and first_audio is None:
            first_audio = (time.perf_counter() - sent_at) * 1000
    metrics = ev["response"]["metrics"]
    lat = metrics["turn_latency"]
    return {
        "tokens_per_s": float(metrics["tokens_per_s"]),
        "turn_ms": float(lat["end_to_end_ms"]) - float(lat["vad_settle_ms"] or 0.0),
        "client_first_audio_ms": float(first_audio if first_audio is not None else "nan"),
    }


async def served(
    addrs: dict[str, str], rounds: int, session: dict[str, Any] | None, turn: Callable[[Any, int], Awaitable[dict]]
) -> dict[str, list[dict[str, float]]]:
    """``rounds`` turns on each server (and one to warm them), the order rotating each round."""
    out: dict[str, list[dict[str, float]]] = {name: [] for name in addrs}
    socks = {}
    for name, addr in addrs.items():
        # a fresh conversation per turn would add its own prefill: one session, its context capped by default
        socks[name] = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=60, max_size=None)
        await _event(socks[name])  # session.created
        if session is not None:
            await socks[name].send(json.dumps({"type": "session.update", "session": session}))
            while (await _event(socks[name]))["type"] != "session.updated":
                pass
    try:
        for i in range(rounds + 1):
            names = list(addrs)
            for name in names[i % len(names) :] + names[: i % len(names)]:
                row = await turn(socks[name], i)
                if i:  # the first round warms both
                    out[name].append(row)
            print(f"round {i}/{rounds}", flush=True)
    finally:
        for ws in socks.values():
            await ws.close()
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (the export thread's too)."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def compare(
    rows: dict[str, list[dict[str, float]]], key: str, base: str, other: str, ratio: bool = False
) -> tuple[float, float, float]:
    """The median of ``other`` − ``base`` (or ``other`` / ``base``), paired round by round, with its 95 % interval."""
    pairs = zip((r[key] for r in rows[base]), (r[key] for r in rows[other]), strict=True)
    return median_ci([b / a if ratio else b - a for a, b in pairs])


def loop_cost(endpoint: str, turns: int = 300, deltas: int = 48) -> dict[str, float]:
    """What a traced turn costs the event loop, in-process and deterministic: the events of a voice turn
    with ``deltas`` text deltas fed to the turn timer (always on) alone, and with a session trace beside it
    (its observe, then drawing the turn's spans at the end). Median µs per turn over ``turns``."""
    from gateway.core.config import TracingConfig
    from gateway.core.telemetry import Tracing
    from gateway.realtime.response_ending import ResponseEnding
    from gateway.realtime.tracing import SessionTrace
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

    def turn(timer: TurnTimer, trace: SessionTrace | None, i: int) -> None:
        """Turn ``i``'s events as a session sends them, then (traced) its TTS chunks and its spans drawn."""
        rid, t0 = f"resp_{i}", time.perf_counter()
        for batch in events(i):
            now = time.perf_counter()
            timer.observe(batch, now, 1000, 500)
            if trace is not None:
                trace.observe(batch, now)
        timed = timer.finish(rid, metrics)
        if trace is not None:
            for k in range(4):
                trace.tts_chunk(rid, k, t0, t0 + 0.01, 40)
            trace.response(rid, ResponseEnding.completed({}, metrics), timed, time.perf_counter())

    result = {}
    for traced in (False, True):
        timer, took = TurnTimer(), []
        trace = SessionTrace(tracing, "sess_bench", lambda: None, time.perf_counter()) if traced else None
        for i in range(turns):
            t0 = time.perf_counter()
            turn(timer, trace, i)
            took.append((time.perf_counter() - t0) * 1e6)
        result["traced_us" if traced else "untraced_us"] = median(took)

    def one() -> None:  # a turn of its own session, for the export thread's cost
        turn(TurnTimer(), SessionTrace(tracing, "sess_export", lambda: None, time.perf_counter()), 0)

    result.update(export_cost(tracing, one, endpoint))
    tracing.close()
    return result


def export_cost(
    tracing: Any, one_turn: Callable[[], None], endpoint: str, tries: int = 50, per_batch: int = 20
) -> dict[str, float]:
    """What the export thread spends on one voice turn's spans (protobuf, then a POST to the receiver):
    CPU the loop's thread competes with for the interpreter, off the loop itself. The spans of
    ``per_batch`` turns go in one request, as the batch processor sends them; median µs a turn of ``tries``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    one_turn()  # its spans, caught as they end (the session span stays open: it is not a turn's)
    spans = memory.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=endpoint)
    cpu, wall = [], []
    batch = list(spans) * per_batch  # the batch processor posts what 5 s gathered (up to 512 spans) at once
    for _ in range(tries):
        c0, w0 = time.thread_time(), time.perf_counter()
        exporter.export(batch)
        cpu.append((time.thread_time() - c0) * 1e6 / per_batch)
        wall.append((time.perf_counter() - w0) * 1e6 / per_batch)
    exporter.shutdown()
    return {"export_spans": len(spans), "export_cpu_us": median(cpu), "export_wall_us": median(wall)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--voice-rounds", type=int, default=20, help="spoken turns on each server (0: none)")
    ap.add_argument("--voice-tokens", type=int, default=24)
    ap.add_argument("--name", default="tracing", help="results file name under bench/results/")
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
            f"{cost['traced_us']:.0f} µs traced; tracing adds {added:.3f} ms a turn (median of 300; target ≤ 5 ms). "
            f"The export thread spends {cost['export_cpu_us'] / 1000:.2f} ms of CPU "
            f"({cost['export_wall_us'] / 1000:.2f} ms wall) encoding and posting the turn's "
            f"{cost['export_spans']:.0f} spans (20 turns a request), off the loop.\n"
        )
        write("tracing_loop", {"machine": info, "loop_cost_us": cost, "added_ms": added}, md)
        return
    # greedy (the config's session.temperature): the servers write the same reply, so their turns
    # compare one for one; the voice leg's Whisper and Piper are deterministic too
    base = {"session.temperature": 0.0}
    legs: dict[str, dict[str, list[dict[str, float]]]] = {}
    cpu: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        rx = stack.enter_context(OtlpReceiver())
        traced = {"tracing.enabled": True, "tracing.endpoint": rx.endpoint}
        # "control": a second untraced server, so the table shows what two identical processes differ by
        addrs = {name: stack.enter_context(server_process(base, timeout_s=900)) for name in ("off", "control")}
        addrs["on"] = stack.enter_context(server_process({**base, **traced}, timeout_s=900))
        pids = {name: server_pid(addr.rsplit(":", 1)[1]) for name, addr in addrs.items()}
        said = utterances()
        plan: list[tuple[str, int, dict[str, Any] | None, Callable[[Any, int], Awaitable[dict]]]] = [
            ("text", args.rounds, {"output_modalities": ["text"]}, lambda ws, i: text_turn(ws, i, args.tokens)),
            (
                "voice",
                args.voice_rounds,
                {"output_modalities": ["audio"], "max_output_tokens": args.voice_tokens},
                lambda ws, i: voice_turn(ws, said[i % len(said)]),
            ),
        ]
        for leg, rounds, session, turn in plan:
            if not rounds:
                continue
            before = {name: cpu_s(pid) for name, pid in pids.items()}
            legs[leg] = asyncio.run(served(addrs, rounds, session, turn))
            # the whole leg's CPU (the export thread's batches land whenever its timer fires), per turn
            cpu[leg] = {name: (cpu_s(pid) - before[name]) * 1000 / (rounds + 1) for name, pid in pids.items()}
        deadline = time.monotonic() + 15
        want = sum(rounds + 1 for _, rounds, _, _ in plan if rounds)  # with each leg's warm-up round
        while len([s for s in rx.spans if s.name.startswith("chat ")]) < want and time.monotonic() < deadline:
            time.sleep(0.1)  # the batch exporter sends every 5 s (OTEL_BSP_SCHEDULE_DELAY)
        spans = len(rx.spans)
        chat_spans = len([s for s in rx.spans if s.name.startswith("chat ")])
        cost = loop_cost(rx.endpoint)
    info = machine()
    rows, summary = [], {}
    for leg, series in legs.items():
        keys = ["tokens_per_s", "e2e_ms"] if leg == "text" else ["tokens_per_s", "turn_ms", "client_first_audio_ms"]
        for key in keys:
            meds = {name: median([r[key] for r in series[name]]) for name in addrs}
            ratio = key == "tokens_per_s"  # a rate compares as a ratio, a time as a difference
            ctl, on = (compare(series, key, "off", name, ratio) for name in ("control", "on"))
            summary.setdefault(leg, {})[key] = {"medians": meds, "control_vs_off": ctl, "on_vs_off": on}
            shown = "{:.3f} [{:.3f}, {:.3f}]" if ratio else "{:+.2f} [{:+.2f}, {:+.2f}]"
            rows.append(
                {
                    "leg": leg,
                    "measure": f"{key} ({'÷' if ratio else '−'})",
                    **meds,
                    "control vs off": shown.format(*ctl),
                    "on vs off": shown.format(*on),
                }
            )
        c = cpu[leg]
        shares = {f"{name} vs off": f"{c[name] / c['off']:.3f}" for name in ("control", "on")}
        rows.append({"leg": leg, "measure": "CPU ms a turn, whole leg (÷)", **c, **shares})
    per_turn_ms = (cost["traced_us"] - cost["untraced_us"]) / 1000
    md = (
        "# Tracing on vs off: the same Realtime turns, side by side\n\n"
        f"`python -m bench.tracing_bench --rounds {args.rounds} --tokens {args.tokens} --voice-rounds "
        f"{args.voice_rounds} --voice-tokens {args.voice_tokens}` — {info['when']}, {info['cpus']} CPUs, load "
        f"average (1 min) {info['loadavg_1m']}; the embedded default (SmolLM2 on llama.cpp, Whisper tiny.en, the "
        "Piper voice) in three `stream-omni serve` processes: `off`, `control` (the same, untraced) and `on`, which "
        "exports spans over OTLP/HTTP to a receiver in this process; each round one turn on each, the order "
        "rotating, greedy so all write the same reply. Spans received: "
        f"{spans} ({chat_spans} responses). Targets: tokens/s ratio ≥ 0.98, ≤ +5 ms a turn.\n\n"
        "- text: `response.create` → `response.done` on the client's clock (`e2e_ms`);\n"
        "- voice: espeak speech sent at once, server VAD; `turn_ms` is the server's end of speech → first audio "
        "less the VAD's silence window (`turn_latency`), `client_first_audio_ms` the last speech byte sent → the "
        "first audio delta;\n"
        "- medians per server; `x vs off`: the median of the round-by-round ratios (÷) or differences (−) with a "
        "95 % bootstrap interval (`control vs off` is what two identical processes differ by on this box);\n"
        "- CPU: each process's user + system time over the leg, per turn (the export thread's included).\n\n"
        + markdown_table(rows, ["leg", "measure", "off", "control", "on", "control vs off", "on vs off"])
        + "\nDeterministic, in process, per voice turn (48 text + 48 audio deltas, 4 TTS chunks, the turn timer on "
        f"either way): the event loop spends {cost['untraced_us']:.0f} µs untraced, {cost['traced_us']:.0f} µs "
        f"traced — tracing adds {per_turn_ms:.3f} ms a turn (median of 300); the export thread spends "
        f"{cost['export_cpu_us'] / 1000:.2f} ms of CPU ({cost['export_wall_us'] / 1000:.2f} ms wall) encoding and "
        f"posting the turn's {cost['export_spans']:.0f} spans (20 turns a request), off the loop.\n"
    )
    write(
        args.name,
        {
            "machine": info,
            "series": legs,
            "summary": summary,
            "cpu_ms_per_turn": cpu,
            "spans": spans,
            "chat_spans": chat_spans,
            "loop_cost_us": cost,
        },
        md,
    )


if __name__ == "__main__":
    main()
