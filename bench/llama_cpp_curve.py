"""Verify-cost curve of the llama.cpp backend: one forward of k tokens (k logit rows) vs one token.

A speculative step verifies k drafts in one ``forward(state, [tok, *drafts], n_logits=k+1)``;
drafting pays off only while that costs well under k single steps. Each batch is decoded
after a real chat prompt, then cropped away again (exactly what a rejected draft costs).

    python -m bench.llama_cpp_curve [--threads 2] [--reps 30]

Writes bench/results/llama_cpp_curve.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

SIZES = (1, 2, 4, 8, 16)
RESULTS = Path(__file__).parent / "results"
PROMPT = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Explain how a refrigerator keeps food cold, step by step."},
]


def measure(backend: LlamaCppBackend, reps: int) -> list[dict[str, float]]:
    state = backend.new_state()
    prompt = backend.chat_tokens(PROMPT)
    backend.forward(state, prompt)
    filler = backend.tokenize(" The compressor pumps refrigerant through coils outside the fridge and" * 2)
    base = len(state.tokens)
    samples: dict[int, list[float]] = {k: [] for k in SIZES}
    last_only: dict[int, list[float]] = {k: [] for k in SIZES}  # prefill-style: one logit row
    for rep in range(reps + 2):  # two warm-up rounds
        for k in SIZES:  # interleaved, so load drift hits every size alike
            for n_logits, into in ((k, samples), (1, last_only)):
                t0 = time.perf_counter()
                backend.forward(state, filler[:k], n_logits=n_logits)
                dt = time.perf_counter() - t0
                backend.crop(state, base)
                if rep >= 2:
                    into[k].append(dt * 1000)
    one = statistics.median(samples[1])
    one_p10 = statistics.quantiles(samples[1], n=10)[0]
    rows = []
    for k in SIZES:
        med = statistics.median(samples[k])
        p10 = statistics.quantiles(samples[k], n=10)[0]
        rows.append(
            {
                "tokens": k,
                "median_ms": round(med, 2),
                "p10_ms": round(p10, 2),
                "ratio_to_1": round(med / one, 2),
                "ratio_to_1_p10": round(p10 / one_p10, 2),
                "ms_per_token": round(med / k, 2),
                "last_row_only_median_ms": round(statistics.median(last_only[k]), 2),
            }
        )
    return rows


def to_markdown(meta: dict, rows: list[dict[str, float]]) -> str:
    lines = [
        "# llama.cpp verify-cost curve",
        "",
        f"{meta['model']}, {meta['threads']} threads, context {meta['context_tokens']} tokens, "
        f"{meta['reps']} reps, sizes interleaved, logits for every position of the batch (as a verify",
        "needs). A shared 2-core box: p10 is the less load-sensitive figure.",
        "",
        "| batch tokens | median ms | p10 ms | × one token (median) | × one token (p10) | ms per token "
        "| only last row's logits, median ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['tokens']} | {r['median_ms']} | {r['p10_ms']} | {r['ratio_to_1']} "
            f"| {r['ratio_to_1_p10']} | {r['ms_per_token']} | {r['last_row_only_median_ms']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    backend = LlamaCppBackend(LlamaCppConfig(model=args.model, threads=args.threads, n_ctx=2048, n_seq=1))
    rows = measure(backend, args.reps)
    meta = {
        "model": backend.name,
        "threads": args.threads,
        "reps": args.reps,
        "context_tokens": len(backend.chat_tokens(PROMPT)),
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llama_cpp_curve.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    md = to_markdown(meta, rows)
    (args.out / "llama_cpp_curve.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
