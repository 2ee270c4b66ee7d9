"""`stream-omni bench voices`: N concurrent real-time speakers on one server, N = 1, 2, 4, 8.

Each speaker is its own Realtime session over WebSocket: espeak-ng speech of 2-6 s streamed as a
live client does (40 ms pcm16 frames at 24 kHz paced to the wall clock, then silence), server VAD
defaults; the N speakers start staggered over one second, so their turns overlap. One server
(`stream-omni serve`, its own process, the embedded default) serves every round.

Per N: end of speech (the frame holding its last sample was sent) → ``…transcription.completed``
and → the first ``response.output_text.delta``, as p50 / p90 / max over every speaker of every
round; the mean word error rate; sessions refused with ``server_busy`` (past the server's voice
capacity) and how long they waited to be told; partial passes shed, Whisper calls and passes per
call, and CPU seconds per stage (VAD, Whisper, the rest of the server: the LLM, the loop) from
/metrics and /proc. With ``--text``, one more session streams a long text reply through each
round: its decode rate against the rate alone says whether the voices starve it, and the pass
wait/run figures whether it starves them. The 1-minute load average is printed beside every
round (a shared box: rerun before believing a slow one).

Writes bench/results/voices.{json,md} (``--name`` for another). Needs espeak-ng.
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

from bench.common import machine, markdown_table, server_process, write  # noqa: E402

# 2-6 s each at espeak's 150 wpm; every speaker of a round says another one
UTTERANCES = [
    "What is the capital of France?",
    "Please turn on the lights in the kitchen.",
    "My favorite color is blue.",
    "What is the weather going to be like tomorrow morning?",
    "Please open the kitchen window and turn on the lights.",
    "Can you tell me a short story about a brave little dog?",
    "How many minutes are there in one day?",
    "Remind me to call my sister when I get home from work tonight.",
]
RATE = 24_000
FRAME_MS = 40
ROUNDS = {1: 5, 2: 3, 4: 2, 8: 1}  # about the same number of turns per N
STAGGER_S = 1.0
WHISPER_THREAD = "so-asr"  # gateway.voice.asr_worker.THREAD_NAME (not imported: the bench also runs older servers)
STAGE = "stream_omni:voice_stage_seconds_sum"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def scrape(addr: str) -> dict[str, float]:
    """The voice counters of /metrics, flattened: name{label=value} → value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "voice" in s.name:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "le")
                if "le" not in s.labels:
                    out[f"{s.name}{{{labels}}}"] = s.value
    return out


def server_cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) of the `stream-omni serve` we started: (all its threads, Whisper's:
    the worker thread and the compute threads it started, which inherit its OS name)."""
    total = whisper = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != me:  # not our child
                    continue
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:  # the thread ended meanwhile
                continue
            name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick
            total += cpu
            whisper += cpu if name == WHISPER_THREAD else 0.0
    return total, whisper


def pcm_for(text: str) -> tuple[bytes, int, float]:
    """(pcm16 at 24 kHz: 0.5 s silence, the speech, 2.5 s silence; byte offset of the end of speech; speech s)."""
    import numpy as np
    import soxr

    from processors.audio import float32_to_pcm16
    from testkit.espeak import speak

    speech = soxr.resample(speak(text), 16_000, RATE).astype(np.float32)
    lead, tail = np.zeros(RATE // 2, np.float32), np.zeros(RATE * 5 // 2, np.float32)
    return float32_to_pcm16(np.concatenate([lead, speech, tail])), (len(lead) + len(speech)) * 2, len(speech) / RATE


async def speaker(addr: str, text: str, start_at: float, audio_out: bool = False) -> dict[str, Any]:
    import websockets

    from processors.asr import word_error_rate

    pcm, eos_byte, speech_s = pcm_for(text)
    step = RATE * 2 * FRAME_MS // 1000
    marks: dict[str, float] = {}
    out: dict[str, Any] = {"text": text, "speech_s": round(speech_s, 2), "refused": False}
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), 30)
        session: dict[str, Any] = {"max_output_tokens": 16}
        if audio_out:
            session["output_modalities"] = ["audio"]
        update = {"type": "session.update", "session": session}
        await ws.send(json.dumps(update))
        while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "session.updated":
            pass

        async def reader() -> None:
            while True:
                ev = json.loads(await ws.recv())
                kind = ev["type"]
                marks.setdefault(kind, time.perf_counter())
                if kind == "response.output_audio_transcript.delta":  # a spoken reply's text
                    marks.setdefault("response.output_text.delta", marks[kind])
                if kind == "error" and ev["error"].get("code") == "server_busy":
                    out["refused"] = True
                    out["busy_message"] = ev["error"]["message"]
                    return
                if kind == "conversation.item.input_audio_transcription.completed":
                    out["transcript"] = ev["transcript"]
                if kind == "response.done" and ev["response"]["status"] != "cancelled" and "eos" in marks:
                    return

        task = asyncio.create_task(reader())
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        t0 = time.perf_counter()
        marks["start"] = t0
        for i in range(0, len(pcm), step):
            if task.done():
                break
            await ws.send(pcm[i : i + step])
            if "eos" not in marks and i + step >= eos_byte:
                marks["eos"] = time.perf_counter()
            await asyncio.sleep(max(0.0, t0 + (i + step) / (RATE * 2) - time.perf_counter()))
        try:
            await asyncio.wait_for(task, 30)
        except TimeoutError:
            out["timeout"] = True
    if out["refused"]:
        out["told_busy_after_start_ms"] = (marks["error"] - marks["start"]) * 1000
        return out
    e = marks.get("eos", float("nan"))

    def since(kind: str) -> float | None:
        return (marks[kind] - e) * 1000 if kind in marks else None

    out.update(
        eos_to_speech_stopped_ms=since("input_audio_buffer.speech_stopped"),
        eos_to_transcript_ms=since("conversation.item.input_audio_transcription.completed"),
        eos_to_first_text_ms=since("response.output_text.delta"),
        eos_to_first_audio_ms=since("response.output_audio.delta"),
        wer=word_error_rate(text, out.get("transcript", "")),
    )
    return out


async def text_reader(addr: str, stop: asyncio.Event, tokens: int = 400) -> dict[str, Any]:
    """Long text replies back to back (a fresh session each, so the context never fills) until ``stop``:
    output tokens per second once the first one is out."""
    import websockets

    got, spent = 0, 0.0
    item = {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Write a long story about a lighthouse keeper."}],
        },
    }
    while not stop.is_set():
        async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
            await asyncio.wait_for(ws.recv(), 30)
            await ws.send(json.dumps(item))
            await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": tokens}}))
            first: float | None = None
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 120))
                if ev["type"] == "response.output_text.delta" and first is None:
                    first = time.perf_counter()
                if ev["type"] == "response.done":
                    n = (ev["response"].get("usage") or {}).get("output_tokens", 0)
                    if first is not None and n > 1:
                        got += n - 1
                        spent += time.perf_counter() - first
                    break
    return {"tokens": got, "seconds": round(spent, 2), "tok_s": got / spent if spent else None}


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


async def round_of(addr: str, n: int, offset: int, audio_out: bool = False) -> list[dict[str, Any]]:
    start = time.perf_counter() + 1.5  # every socket connected and configured by then
    texts = [UTTERANCES[(offset + i) % len(UTTERANCES)] for i in range(n)]
    starts = [start + i * STAGGER_S / n for i in range(n)]
    return list(await asyncio.gather(*(speaker(addr, t, at, audio_out) for t, at in zip(texts, starts, strict=True))))


async def level(
    addr: str, n: int, rounds: int, with_text: bool, audio_out: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    stop = asyncio.Event()
    reader = asyncio.create_task(text_reader(addr, stop)) if with_text else None
    if reader is not None:
        await asyncio.sleep(2.0)  # its first reply is decoding
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        before = await asyncio.to_thread(scrape, addr)
        got = await round_of(addr, n, r * n, audio_out)
        after = await asyncio.to_thread(scrape, addr)
        spec = "stream_omni:voice_speculation_total{outcome=%s}"
        counts = {k: after.get(spec % k, 0.0) - before.get(spec % k, 0.0) for k in ("prepared", "committed")}
        for run in got:  # replies prepared at the pause / adopted at commit, over the round (per turn at N = 1)
            run.update({f"round_{k}": v for k, v in counts.items()})
        runs += got
        await asyncio.sleep(0.5)
    stop.set()
    return runs, (await reader if reader is not None else None)


def summarize(n: int, runs: list[dict[str, Any]], before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    served = [r for r in runs if not r["refused"]]
    ft = [r["eos_to_first_text_ms"] for r in served if r.get("eos_to_first_text_ms") is not None]
    fa = [r["eos_to_first_audio_ms"] for r in served if r.get("eos_to_first_audio_ms") is not None]
    tr = [r["eos_to_transcript_ms"] for r in served if r.get("eos_to_transcript_ms") is not None]

    def d(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    calls = d("stream_omni:voice_asr_batch_passes_count{}")
    passes = d("stream_omni:voice_asr_batch_passes_sum{}")
    waits = d("stream_omni:voice_stage_seconds_count{stage=asr_wait}")
    return {
        "N": n,
        "turns": len(runs),
        "refused": len(runs) - len(served),
        "no reply": sum(1 for r in served if r.get("eos_to_first_text_ms") is None),
        "eos→transcript p50": pct(tr, 0.5),
        "p90": pct(tr, 0.9),
        "max": max(tr) if tr else None,
        "eos→first text p50": pct(ft, 0.5),
        "p90 ": pct(ft, 0.9),
        "max ": max(ft) if ft else None,
        "eos→first audio p50": pct(fa, 0.5),
        "p90  ": pct(fa, 0.9),
        "max  ": max(fa) if fa else None,
        "mean WER": sum(r["wer"] for r in served) / len(served) if served else None,
        "partials shed": d("stream_omni:voice_partials_shed_total{}"),
        "Whisper calls": calls,
        "passes/call": passes / calls if calls else None,
        "pass wait ms (mean)": 1000 * d(f"{STAGE}{{stage=asr_wait}}") / waits if waits else None,
        "call ms (mean)": 1000 * d(f"{STAGE}{{stage=asr_run}}") / calls if calls else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", default="1,2,4,8", help="comma-separated speaker counts")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per N (default: 5, 3, 2, 1 for 1, 2, 4, 8)")
    ap.add_argument("--headroom", type=float, default=None, help="audio.encoder_headroom_s (default: the server's)")
    ap.add_argument("--capacity", type=int, default=None, help="audio.max_concurrent_turns (default: measured)")
    ap.add_argument("--threads", type=int, default=None, help="audio.threads (Whisper's compute threads)")
    ap.add_argument("--text", action="store_true", help="one text session decoding through every round")
    ap.add_argument("--name", default="voices", help="results file name under bench/results/")
    ap.add_argument("--audio-out", action="store_true", help="replies spoken (output_modalities audio)")
    ap.add_argument(
        "--set", action="append", default=[], help="config override KEY=VALUE (e.g. engine.prefill_chunk=256)"
    )
    args = ap.parse_args()

    overrides: dict[str, Any] = {"session.max_output_tokens": 400, "speculative.drafter": "none"}
    if args.headroom is not None:
        overrides["audio.encoder_headroom_s"] = args.headroom
    if args.threads is not None:
        overrides["audio.threads"] = args.threads
    if args.capacity is not None:
        overrides["audio.max_concurrent_turns"] = args.capacity
    for kv in args.set:
        key, _, value = kv.partition("=")
        overrides[key] = json.loads(value) if value[:1].isdigit() or value in ("true", "false", "null") else value
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    with server_process(overrides) as addr:
        capacity = scrape(addr).get("stream_omni:voice_capacity{}")
        print(f"server voice capacity: {capacity}")
        asyncio.run(round_of(addr, 1, 0, args.audio_out))  # warm-up: first Whisper, model and voice calls
        text_alone = None
        if args.text:
            stop = asyncio.Event()

            async def alone() -> dict[str, Any]:
                task = asyncio.create_task(text_reader(addr, stop))
                await asyncio.sleep(8.0)
                stop.set()
                return await task

            text_alone = asyncio.run(alone())
            print(f"text decode alone: {text_alone}  load {load()}")
        for n in (int(x) for x in args.n.split(",")):
            before, cpu0 = scrape(addr), server_cpu_s()
            la = load()
            runs, text = asyncio.run(level(addr, n, args.rounds or ROUNDS.get(n, 1), args.text, args.audio_out))
            after, cpu1 = scrape(addr), server_cpu_s()
            row = summarize(n, runs, before, after)
            vad = after.get("stream_omni:voice_stage_seconds_sum{stage=vad}", 0) - before.get(
                "stream_omni:voice_stage_seconds_sum{stage=vad}", 0
            )
            asr = cpu1[1] - cpu0[1]
            row.update(
                {
                    "CPU s VAD": vad,
                    "CPU s Whisper": asr,
                    "CPU s rest": (cpu1[0] - cpu0[0]) - vad - asr,
                    "load 1m": la,
                    "load after": load(),
                }
            )
            if text is not None:
                row["text tok/s"] = text["tok_s"]
            rows.append(row)
            raw[str(n)] = {"runs": runs, "text": text}
            print(markdown_table([row], list(row)))
    md = f"# bench voices — {machine()}\n\n"
    md += f"N concurrent speakers (Realtime sessions over WebSocket, espeak-ng, {FRAME_MS} ms frames in real time, "
    md += f"starts staggered over {STAGGER_S:.0f} s, server VAD defaults), one `stream-omni serve` (embedded model, "
    md += f"max 16 output tokens per voice reply), overrides {overrides}; server voice capacity {capacity}. "
    md += "Times in ms from the end of speech; p50 / p90 / max over every speaker of every round. "
    if text_alone is not None:
        md += f"Text decode alone: {text_alone['tok_s']:.1f} tok/s. "
    md += "\n\n" + markdown_table(rows, list(rows[0]))
    write(
        args.name,
        {
            "machine": machine(),
            "overrides": overrides,
            "capacity": capacity,
            "rows": rows,
            "raw": raw,
            "text_alone": text_alone,
        },
        md,
    )


if __name__ == "__main__":
    main()
