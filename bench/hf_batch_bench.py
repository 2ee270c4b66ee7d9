"""The generic transformers path batched (models.hf_batch) vs one forward per conversation.

In process, the embedded model (or ``--model``) loaded through the generic HF path
(``fast_path: false``): N conversations each ``--ctx`` tokens deep; per round and per N, one
``forward_batch`` of one token for each of the N (one model forward) and, right after it, the same
N tokens as N plain ``forward`` calls (``forward_each``, what the generic path did before). Each
measured step is cropped back, so every round sees the same caches; N is visited in turn each
round so load drift hits every N alike. Fastest and median of ``--rounds`` rounds; the 1-minute
load average is recorded with the row. Writes bench/results/hf_batch.{json,md}.

    python -m bench.hf_batch_bench [--rounds 8] [--ctx 64] [--dtype bfloat16] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from bench.common import machine, markdown_table, write


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sessions", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=64, help="tokens already in every conversation's cache")
    ap.add_argument("--name", default="hf_batch")
    args = ap.parse_args()
    from models.backend import forward_each
    from models.llm import LLMConfig, load_backend

    b = load_backend(
        LLMConfig(model=args.model, dtype=args.dtype, threads=args.threads, fast_path=False, batch_generic=True)
    )
    assert b.fast is None and b.batchable, "the generic path must be the one measured"
    ns = [int(x) for x in args.sessions.split(",")]
    states = [b.new_state() for _ in range(max(ns))]
    for j, s in enumerate(states):  # different prompts, the same depth
        b.forward(s, [(17 + 31 * i + j) % 1000 + 10 for i in range(args.ctx)], 1)
    batched: dict[int, list[float]] = {n: [] for n in ns}
    each: dict[int, list[float]] = {n: [] for n in ns}
    loads: list[float] = []
    for r in range(args.rounds + 1):
        loads.append(os.getloadavg()[0])
        for n in ns:
            for kind, times in (("batch", batched), ("each", each)):
                items = [(s, [100 + r], 1) for s in states[:n]]
                t0 = time.perf_counter()
                if kind == "batch":
                    b.forward_batch(items)
                else:
                    forward_each(b, items)
                if r:  # round 0 warms the kernels up
                    times[n].append(time.perf_counter() - t0)
                for s in states[:n]:
                    b.crop(s, args.ctx)
    rows: list[dict[str, Any]] = []
    for n in ns:
        rows.append(
            {
                "N": n,
                "forward_batch ms (median)": 1000 * statistics.median(batched[n]),
                "N × forward ms (median)": 1000 * statistics.median(each[n]),
                "forward_batch tok/s (fastest)": n / min(batched[n]),
                "N × forward tok/s (fastest)": n / min(each[n]),
                "speed-up (median)": statistics.median(each[n]) / statistics.median(batched[n]),
            }
        )
    cols = list(rows[0])
    info = machine()
    md = f"# bench hf_batch — {info}\n\n"
    md += (
        f"The generic transformers path (`fast_path: false`) on `{args.model}` ({args.dtype}, "
        f"{args.threads} torch thread(s)), in process: one `forward_batch` of one token for each of N "
        f"conversations ({args.ctx} tokens deep; models.hf_batch: one forward) beside the same N tokens as "
        f"N plain `forward` calls, side by side in each of {args.rounds} rounds. 1-minute load average "
        f"during the run: {min(loads):.2f}–{max(loads):.2f} (2 cores, shared with other work).\n\n"
    )
    md += markdown_table(rows, cols)
    write(args.name, {"machine": info, "args": vars(args), "loadavg_1m": loads, "rows": rows}, md)


if __name__ == "__main__":
    main()
