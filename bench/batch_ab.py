"""`stream-omni bench batch-ab`: the default config, ``drafter: none`` and llama-server, round by round.

``bench batch`` measures one server after the other; on a shared 2-core box the load drifts in
between, and one round of 8 sessions moved by ±15 % from run to run. Here every system is up at
once (an idle one costs no CPU) and they take turns: for each repetition and each N, every system
runs the same round, in an order that rotates. A round is N sessions asking at once (N = 1: the
prompts one after another). Each ratio is taken within a repetition (paired, so drift cancels),
then the median over repetitions is reported, with its range.

Systems: ``stream-omni serve`` with the default config, the same with ``speculative.drafter:
none``, and, given ``--llama-server PATH``, llama.cpp's server on the same GGUF with ``--parallel``
the largest N (the way it is run for many users). Writes bench/results/<name>.{json,md}.
Run: ``python -m bench.batch_ab --llama-server ~/.cache/llama-bin/llama-server``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from bench.batch import WORKLOAD_TEXT, config_overrides, llama_server_round, pct, round_of, workload
from bench.common import free_port, machine, markdown_table, server_process, write

Round = Callable[[list[str], int], Awaitable[dict[str, Any]]]


@contextlib.contextmanager
def llama_server(binary: str, gguf: str, parallel: int, threads: int) -> Iterator[int]:
    port = free_port()
    cmd = [binary, "-m", gguf, "--port", str(port), "--parallel", str(parallel), "-c", str(4096 * parallel)]
    cmd += ["-t", str(threads), "-fa", "on", "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("llama-server did not start")
            time.sleep(0.3)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def measure(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Aggregate tok/s (all tokens over the rounds' summed wall time) and TTFT of a batch of rounds."""
    sessions = [s for r in rounds for s in r["sessions"] if s["error"] is None]
    wall = sum(max(s["t_end"] for s in r["sessions"]) - min(s["t0"] for s in r["sessions"]) for r in rounds)
    ttft = [s["ttft"] for s in sessions if s["ttft"] is not None]
    return {
        "tok/s": sum(s["tokens"] for s in sessions) / max(wall, 1e-9),
        "ttft_p50": pct(ttft, 0.5) * 1000,
        "ttft_p99": pct(ttft, 0.99) * 1000,
        "errors": sum(1 for r in rounds for s in r["sessions"] if s["error"] is not None),
    }


async def one_round(run: Round, n: int, work: str, tokens: int, tag: str = "") -> dict[str, float]:
    """``tag``: put before every prompt (a repetition's own prompts: no exact prompt is cached from before)."""
    qs = [tag + q for q in workload(work, max(n, 8))]
    if n == 1:  # every prompt alone, one after another
        return measure([await run([q], tokens) for q in dict.fromkeys(qs)])
    return measure([await run(qs[:n], tokens)])


async def campaign(
    systems: dict[str, Round], ns: list[int], reps: int, work: str, tokens: int, fresh: bool = False
) -> dict[str, Any]:
    names = list(systems)
    for run in systems.values():  # warm-up: graphs, caches, first allocations
        await run(["Hi"], 16)
    results: dict[str, dict[int, list[dict[str, float]]]] = {s: {n: [] for n in ns} for s in names}
    for rep in range(reps):
        for n in ns:
            order = names[rep % len(names) :] + names[: rep % len(names)]  # who goes first rotates
            for name in order:
                m = await one_round(systems[name], n, work, tokens, f"(Round {rep + 1}) " if fresh else "")
                m["loadavg"] = os.getloadavg()[0]
                results[name][n].append(m)
                print(f"rep {rep} N={n} {name}: {m['tok/s']:.1f} tok/s, TTFT p99 {m['ttft_p99']:.0f} ms", flush=True)
    return results


def paired(results: dict[str, Any], a: str, b: str, n: int, key: str = "tok/s") -> tuple[float, float, float]:
    """Median, min and max over repetitions of a's figure over b's."""
    ratios = [x[key] / y[key] for x, y in zip(results[a][n], results[b][n], strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def table(results: dict[str, Any], ns: list[int]) -> list[dict[str, Any]]:
    rows = []
    for name, per_n in results.items():
        for n in ns:
            ms = per_n[n]
            row: dict[str, Any] = {
                "system": name,
                "sessions": n,
                "aggregate tok/s (median)": statistics.median(m["tok/s"] for m in ms),
                "min": min(m["tok/s"] for m in ms),
                "max": max(m["tok/s"] for m in ms),
                "TTFT p50 ms (median)": statistics.median(m["ttft_p50"] for m in ms),
                "TTFT p99 ms (median)": statistics.median(m["ttft_p99"] for m in ms),
                "errors": sum(m["errors"] for m in ms),
                "loadavg": round(max(m["loadavg"] for m in ms), 2),
            }
            for other in results:
                if other != name and name == "default":
                    med, lo, hi = paired(results, name, other, n)
                    row[f"× {other}"] = f"{med:.2f} ({lo:.2f}–{hi:.2f})"
                    if other.startswith("llama-server"):
                        med, lo, hi = paired(results, name, other, n, "ttft_p99")
                        row["TTFT p99 × llama-server"] = f"{med:.2f} ({lo:.2f}–{hi:.2f})"
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", default="1,8", help="comma-separated N")
    ap.add_argument("--tokens", type=int, default=128, help="max tokens per reply")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (each system runs every round once per rep)")
    ap.add_argument("--workload", choices=["open", "grounded", "mix"], default="open")
    ap.add_argument("--llama-server", default=None, help="path to llama-server (optional system)")
    ap.add_argument("--threads", type=int, default=2, help="llama-server's threads (the gateway's default is 2)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds any one receive may take")
    ap.add_argument("--name", default="batch_ab", help="results file name under bench/results/")
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="each repetition's prompts start with its own tag, so no system finds a whole prompt in its cache from"
        " an earlier repetition (llama-server's slots keep their last prompt; ours borrow any cached prefix)",
    )
    ap.add_argument("--set", action="append", default=[], help="config override KEY=VALUE for both servers")
    args = ap.parse_args()
    ns = [int(x) for x in args.sessions.split(",")]
    from models.llm import embedded_gguf

    base = config_overrides(args.set)
    with contextlib.ExitStack() as stack:
        systems: dict[str, Round] = {}
        for label, cfg in (("default", {}), ("drafter: none", {"speculative.drafter": "none"})):
            addr = stack.enter_context(server_process({**base, **cfg}, timeout_s=900))
            systems[label] = lambda qs, t, a=addr: round_of(a, qs, t, None, args.timeout)
        if args.llama_server:
            port = stack.enter_context(llama_server(args.llama_server, str(embedded_gguf()), max(ns), args.threads))
            systems[f"llama-server --parallel {max(ns)}"] = lambda qs, t, p=port: llama_server_round(
                p, qs, t, args.timeout
            )
        results = asyncio.run(campaign(systems, ns, args.reps, args.workload, args.tokens, args.fresh))
    rows = table(results, ns)
    md = f"# bench batch-ab — {machine()}\n\n"
    md += (
        f"Every system up at once, taking turns round by round ({args.reps} repetitions, the order rotating); "
        f"workload {args.workload} ({WORKLOAD_TEXT[args.workload]}), {args.tokens} tokens per reply, greedy"
        f"{'; ' + ', '.join(args.set) if args.set else ''}"
        f"{'; fresh prompts each repetition' if args.fresh else '; the same prompts every repetition'}. "
        "A round: N sessions asking at once (N = 1: the prompts one after another). Ratios are per repetition "
        "(paired), median (min–max). loadavg: the highest 1-minute load seen at a round's end.\n\n"
    )
    md += markdown_table(rows, list(dict.fromkeys(k for r in rows for k in r)))
    write(args.name, {"machine": machine(), "args": vars(args), "results": results, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
