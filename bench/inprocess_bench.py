"""In-process API TTFT (``StreamOmni.stream()``) vs the engine's own, side by side in one run.

Both systems share one ``StreamOmni`` (the configured model, llama.cpp for the embedded default):

* **engine**: a ``DecodeJob`` built from the prompt's ids and submitted to the engine, its first
  chunk caught by a plain thread callback (no asyncio, no request validation): what the engine
  itself needs to first text;
* **stream()**: ``so.stream(messages)`` from the call to the first chunk in the consuming
  coroutine: validation, the chat template, the job, the engine, the hand-off to the event loop.

Rounds alternate the order of the two; every prompt is new to the cache (a number in front), so
neither system reuses the other's prefill beyond the shared template. Gap = stream() − engine,
paired per round. No drafting (it never runs before the first text anyway, and its start-up
probe takes minutes on a busy 2-core box); one llama.cpp thread, steadier under contention.

    python -m bench.inprocess_bench [--rounds 20] [--threads 1] [--fake]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, write  # noqa: E402

SETTLE_S = 0.06  # pause before every measured request (libgomp's spin after the last one), both systems alike
MAX_TOKENS = 8


def prompt(i: int, who: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{i * 2 + (who == 'engine')}. Say something short about the sea."}]


def engine_ttft(so: Any, messages: list[dict[str, str]]) -> float:
    """ms from building the job to its first chunk reaching a thread callback."""
    from models.decode import DecodeJob, JobEvents

    svc = so.services
    first = threading.Event()
    t_first: list[float] = []

    def sink(ev: JobEvents) -> None:
        if ev.chunks and not t_first:
            t_first.append(time.perf_counter())
            first.set()
        if ev.done is not None:
            first.set()

    t0 = time.perf_counter()
    ids = svc.backend.chat_tokens(messages)
    job = DecodeJob(
        svc.backend,
        svc.backend.new_state(),
        ids,
        svc.sampling({"temperature": 0.0}, max_tokens=MAX_TOKENS),
        svc.scheduler_config(),
        *svc.drafting(),
    )
    svc.engine.submit(job, sink)
    assert first.wait(60)
    deadline = time.monotonic() + 60
    while not job.finished and time.monotonic() < deadline:  # let it end before the next round
        time.sleep(0.001)
    return (t_first[0] - t0) * 1000


async def stream_ttft(so: Any, messages: list[dict[str, str]]) -> tuple[float, float]:
    """(ms from stream() to the first chunk in this coroutine, the job's own ttft_ms)."""
    t0 = time.perf_counter()
    t_first = None
    final = None
    async for chunk in so.stream(messages, temperature=0, max_output_tokens=MAX_TOKENS):
        if t_first is None:
            t_first = time.perf_counter()
        if chunk.is_final:
            final = chunk
    assert t_first is not None and final is not None and final.metrics is not None
    return (t_first - t0) * 1000, float(final.metrics["ttft_ms"])


async def run(rounds: int, threads: int, fake: bool) -> dict[str, Any]:
    from gateway import StreamOmni
    from testkit.fake_backend import FakeBackend

    rows: list[dict[str, float]] = []
    cfg = {"audio.enabled": False, "speculative.drafter": "none", "model.threads": threads}
    # --fake: a backend with a fixed 5 ms step, so what is measured is the gateway's own share
    async with StreamOmni(backend=FakeBackend(step_s=0.005) if fake else None, **cfg) as so:
        for warm in range(2):  # first prefills pay one-time costs (allocations, page faults)
            engine_ttft(so, prompt(-1 - warm, "engine"))
            await stream_ttft(so, prompt(-1 - warm, "stream"))
        for i in range(rounds):
            order = ["engine", "stream"] if i % 2 == 0 else ["stream", "engine"]
            row: dict[str, float] = {}
            for who in order:
                await asyncio.sleep(SETTLE_S)
                if who == "engine":
                    row["engine_ms"] = engine_ttft(so, prompt(i, who))
                else:
                    row["stream_ms"], row["stream_job_ms"] = await stream_ttft(so, prompt(i, who))
            row["gap_ms"] = row["stream_ms"] - row["engine_ms"]
            row["own_gap_ms"] = row["stream_ms"] - row["stream_job_ms"]
            rows.append(row)
        model = so.services.backend.name
    return {"model": model, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fake", action="store_true", help="testkit's FakeBackend (5 ms a step) instead of the model")
    args = ap.parse_args()
    got = asyncio.run(run(args.rounds, args.threads, args.fake))
    rows = got["rows"]
    summary = {
        "engine_ttft_ms_median": round(median([r["engine_ms"] for r in rows]), 2),
        "stream_ttft_ms_median": round(median([r["stream_ms"] for r in rows]), 2),
        "stream_job_ttft_ms_median": round(median([r["stream_job_ms"] for r in rows]), 2),
        "gap_ms_median": round(median([r["gap_ms"] for r in rows]), 2),
        "gap_ms_max": round(max(r["gap_ms"] for r in rows), 2),
        "own_gap_ms_median": round(median([r["own_gap_ms"] for r in rows]), 2),
        "own_gap_ms_max": round(max(r["own_gap_ms"] for r in rows), 2),
        "target_gap_ms": 5.0,
    }
    table = [
        {"system": "engine (thread callback)", "TTFT ms (median)": summary["engine_ttft_ms_median"]},
        {"system": "StreamOmni.stream()", "TTFT ms (median)": summary["stream_ttft_ms_median"]},
        {"system": "  its job's own ttft_ms", "TTFT ms (median)": summary["stream_job_ttft_ms_median"]},
    ]
    md = (
        f"# In-process API TTFT vs the engine's own\n\n{got['model']}, greedy, {MAX_TOKENS} tokens, "
        f"{len(rows)} rounds (order alternating), {args.threads} thread(s), {machine()}\n\n"
        + markdown_table(table, ["system", "TTFT ms (median)"])
        + f"\nGap stream() − engine, paired per round: median {summary['gap_ms_median']} ms, "
        f"max {summary['gap_ms_max']} ms (target: within 5 ms).\n"
        f"\nGap stream() − the same response's own engine ttft_ms (one request, no pairing noise): "
        f"median {summary['own_gap_ms_median']} ms, max {summary['own_gap_ms_max']} ms.\n"
    )
    write(
        "inprocess_fake" if args.fake else "inprocess",
        {"machine": machine(), "model": got["model"], "summary": summary, "rows": rows},
        md,
    )


if __name__ == "__main__":
    main()
