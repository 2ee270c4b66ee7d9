"""The most drafting could gain on a round of grounded and open sessions, from the measured step cost.

A round ends when its last reply does. Open questions draft little that is accepted, so each open
session still takes one step per token: ``tokens`` steps whatever the grounded sessions do.
Drafting lets a grounded session finish in fewer steps, as verify blocks of ``1 + k`` rows, and
its rows leave the later steps. Whether that shortens the round depends only on what a step costs
for its shape, so this measures exactly those shapes on the llama.cpp backend, with the mix
workload's real prompts in the cache, and compares two round times built from them:

- none: ``tokens`` steps of ``n_open + n_grounded`` rows of one token;
- the best drafting can do: every draft accepted (acceptance 1, the upper bound), so the grounded
  sessions take ``tokens // (k + 1)`` steps of ``n_open × 1 + n_grounded × (1 + k)`` rows (and one
  of the rest, when ``k + 1`` does not divide ``tokens``), then the open sessions finish alone,
  ``n_open × 1`` rows a step.

``round_none / round_best`` is the ceiling on aggregate ``× none`` for that mix: any acceptance
below 1 adds steps and rejected rows. Step shapes are timed interleaved (load drift hits each
alike), each the median of ``--reps``.

    python -m bench.mix_bound [--model embedded|PATH.gguf] [--reps 15] [--name mix_bound]

Writes bench/results/<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.batch import workload
from bench.common import machine, markdown_table, write
from models.backend import KVState
from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

FILLER = " The compressor pumps refrigerant through coils outside the fridge and"


def step_ms(backend: LlamaCppBackend, states: list[KVState], rows: list[int], filler: list[int]) -> float:
    """One ``forward_batch``: state j gets ``rows[j]`` tokens (all their logits, as a verify needs),
    then every state is cropped back, as a rejected draft would be."""
    lengths = [len(s.tokens) for s in states]
    items = [(s, filler[:r], r) for s, r in zip(states, rows, strict=True) if r]
    t0 = time.perf_counter()
    backend.forward_batch(items)
    took = time.perf_counter() - t0
    for s, n in zip(states, lengths, strict=True):
        backend.crop(s, n)
    return took * 1000


def measure(
    backend: LlamaCppBackend, n_grounded: int, n_open: int, ks: list[int], tokens: int, reps: int
) -> dict[str, float]:
    states = []
    for p in workload("grounded", n_grounded) + workload("open", n_open):  # grounded first: rows[:n_grounded]
        s = backend.new_state()
        backend.forward(s, backend.chat_tokens([{"role": "user", "content": p}]))
        states.append(s)
    filler = backend.tokenize(FILLER * 4)
    shapes: dict[str, list[int]] = {
        "all x1": [1] * (n_grounded + n_open),
        "open x1": [0] * n_grounded + [1] * n_open,
        **{f"k={k}": [1 + k] * n_grounded + [1] * n_open for k in ks},
        **{f"k={k} rest": [tokens % (k + 1)] * n_grounded + [1] * n_open for k in ks if tokens % (k + 1)},
    }
    times: dict[str, list[float]] = {name: [] for name in shapes}
    for rep in range(reps + 2):  # two warm-up rounds
        for name, rows in shapes.items():
            ms = step_ms(backend, states, rows, filler)
            if rep >= 2:
                times[name].append(ms)
    return {name: statistics.median(ts) for name, ts in times.items()}


def bound_rows(cost: dict[str, float], ks: list[int], tokens: int) -> list[dict]:
    none = tokens * cost["all x1"]
    rows = []
    for k in ks:
        full, rest = divmod(tokens, k + 1)
        steps = full + (rest > 0)
        best = full * cost[f"k={k}"] + (cost[f"k={k} rest"] if rest else 0.0) + (tokens - steps) * cost["open x1"]
        rows.append(
            {
                "k": k,
                "step ms (drafting)": round(cost[f"k={k}"], 1),
                "grounded steps": steps,
                "round s (none)": round(none / 1000, 2),
                "round s (all accepted)": round(best / 1000, 2),
                "ceiling × none": round(none / best, 3),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded", help="'embedded' or a GGUF path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grounded", type=int, default=4)
    ap.add_argument("--open", type=int, default=4)
    ap.add_argument("--k", default="1,2,4,8", help="draft lengths to bound")
    ap.add_argument("--tokens", type=int, default=128, help="reply length (the mix benchmark's)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--name", default="mix_bound")
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    n = args.grounded + args.open
    backend = LlamaCppBackend(LlamaCppConfig(model=args.model, threads=args.threads, n_ctx=4096, n_seq=n))
    cost = measure(backend, args.grounded, args.open, ks, args.tokens, args.reps)
    rows = bound_rows(cost, ks, args.tokens)
    md = f"# bench mix-bound — {machine()}\n\n"
    md += (
        f"{backend.name}, {args.threads} threads. {args.grounded} grounded + {args.open} open sessions with the mix "
        f"workload's prompts in the cache, {args.tokens} tokens each. Step medians of {args.reps} interleaved reps: "
        f"all {n} × 1 token {cost['all x1']:.1f} ms, the {args.open} open × 1 alone {cost['open x1']:.1f} ms. "
        "'ceiling × none': the round with drafting that is always accepted over the round without drafting "
        "(the open sessions still take one step per token).\n\n"
    )
    md += markdown_table(rows, list(rows[0]))
    write(args.name, {"machine": machine(), "args": vars(args), "step_ms": cost, "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
