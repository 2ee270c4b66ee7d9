"""`stream-omni bench engine_ab`: the default drafting against none, the engine alone, round by round.

``bench batch_ab`` compares two servers; this takes the servers out. One ``StreamOmni`` (the
embedded default, llama.cpp) serves both systems: each round builds N ``DecodeJob``s from the
same prompts and submits them to the engine at once, with the default drafter (``drafting()``)
or with none (``lookahead_tokens: 0``, no drafter). The order alternates every repetition and
every round's prompts carry their own tag: the two systems share one cache, and a round must not
find its prompts there from an earlier one. Per system: aggregate tok/s (all tokens over the
round's wall time), TTFT from the jobs' own metrics, draft tokens tried and accepted; the ratio is
paired per repetition, median (min–max). (Greedy identity with and without drafting is a test:
tests/engine.)

    python -m bench.engine_ab [--workload open|grounded|mix] [--sessions 8] [--reps 6] [--set KEY=VALUE ...]

``--set model.backend=transformers`` runs the same GGUF through transformers (bf16).

Writes bench/results/<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GREEDY = {"temperature": 0.0}  # both systems write the same tokens: the comparison is of speed alone

from bench.batch import WORKLOAD_TEXT, config_overrides, pct, workload  # noqa: E402
from bench.common import machine, markdown_table, write  # noqa: E402

SYSTEMS = ("default", "drafter: none")


def one_round(so: Any, prompts: list[str], tokens: int, drafting: bool) -> dict[str, Any]:
    """N jobs submitted at once; their figures once every one has ended."""
    from gateway.core.request_options import SchedulerOptions
    from models.decode import DecodeJob, JobEvents

    svc = so.services
    done = threading.Event()
    left = [len(prompts)]
    lock = threading.Lock()

    def sink(ev: JobEvents) -> None:
        if ev.done is not None:
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    sched = svc.scheduler_config(None if drafting else SchedulerOptions(lookahead_tokens=0))
    jobs = []
    t0 = time.perf_counter()
    for q in prompts:
        ids = svc.backend.chat_tokens([{"role": "user", "content": q}])
        spec = svc.drafting() if drafting else (None, None)
        job = DecodeJob(
            svc.backend, svc.backend.new_state(), ids, svc.sampling(GREEDY, max_tokens=tokens), sched, *spec
        )
        jobs.append(job)
        svc.engine.submit(job, sink)
    if not done.wait(600):
        raise RuntimeError("a round did not end in 600 s")
    wall = time.perf_counter() - t0
    ttft = [j.metrics()["ttft_ms"] or 0.0 for j in jobs]
    return {
        "tok/s": sum(len(j.generated) for j in jobs) / wall,
        "ttft_p50": pct(ttft, 0.5),
        "ttft_p99": pct(ttft, 0.99),
        "drafted": sum(j.drafted for j in jobs),
        "accepted": sum(j.accepted for j in jobs),
    }


async def campaign(
    work: str, n: int, reps: int, tokens: int, overrides: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    from gateway import StreamOmni

    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    async with StreamOmni(**overrides) as so:
        for name in SYSTEMS:  # warm-up: graphs, the cost curve's first observations
            await asyncio.to_thread(one_round, so, ["Hi"], 16, name == "default")
        for rep in range(reps):
            for i, name in enumerate(SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]):
                # one cache serves both: the second system must not find the first's prompts in it
                prompts = [f"(Round {2 * rep + i + 1}) {q}" for q in workload(work, n)]
                r = await asyncio.to_thread(one_round, so, prompts, tokens, name == "default")
                out[name].append(r)
                print(f"rep {rep} {name}: {r['tok/s']:.1f} tok/s, drafted {r['drafted']}/{r['accepted']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", choices=["open", "grounded", "mix"], default="open")
    ap.add_argument("--sessions", type=int, default=8, help="jobs per round")
    ap.add_argument("--reps", type=int, default=6, help="repetitions (each system runs one round per rep)")
    ap.add_argument("--tokens", type=int, default=128, help="max tokens per reply")
    ap.add_argument("--name", default="engine_ab", help="results file name under bench/results/")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override (audio is off)")
    args = ap.parse_args()
    overrides = config_overrides(args.set)
    res = asyncio.run(campaign(args.workload, args.sessions, args.reps, args.tokens, overrides))
    a, b = res[SYSTEMS[0]], res[SYSTEMS[1]]
    ratios = [x["tok/s"] / y["tok/s"] for x, y in zip(a, b, strict=True)]
    ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
    rows = []
    for name in SYSTEMS:
        rs = res[name]
        rows.append(
            {
                "system": name,
                "sessions": args.sessions,
                "aggregate tok/s (median)": statistics.median(r["tok/s"] for r in rs),
                "min": min(r["tok/s"] for r in rs),
                "max": max(r["tok/s"] for r in rs),
                "TTFT p50 ms (median)": statistics.median(r["ttft_p50"] for r in rs),
                "TTFT p99 ms (median)": statistics.median(r["ttft_p99"] for r in rs),
                "drafted / accepted": f"{sum(r['drafted'] for r in rs)} / {sum(r['accepted'] for r in rs)}",
                "× drafter: none": ratio if name == "default" else "",
            }
        )
    md = f"# bench engine_ab — {machine()}\n\n"
    md += (
        f"The engine alone (no server; config {overrides}), {args.reps} repetitions, the order alternating; "
        f"workload {args.workload} "
        f"({WORKLOAD_TEXT[args.workload]}), {args.sessions} jobs at once, {args.tokens} tokens, greedy, fresh prompts "
        "each round (the two systems share one cache). Ratio paired per repetition, median (min–max).\n\n"
    )
    md += markdown_table(rows, list(rows[0]))
    write(args.name, {"machine": machine(), "args": vars(args), "results": res, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
