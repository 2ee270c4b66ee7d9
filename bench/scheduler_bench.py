"""`stream-omni bench scheduler`: the evaluation harness for the chunk scheduler.

Same tasks, embedded model, greedy, side by side in one run: naive token streaming (one token
per delta, no drafting), non-streaming (generate, then send), plain greedy decoding (chunked,
no drafting: the speed baseline), and the strategies fast / balanced (speculative drafting on)
and quality (chunk-level beam); ``fast_lookup`` is fast with prompt lookup as the only drafter.
Reports TTFT, inter-chunk latency, TPOT, tokens/s, draft acceptance and quality proxies (mean
log-prob, repetition rate), and whether output is identical to plain greedy. Writes bench/results/scheduler.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, write  # noqa: E402

ARTICLE = (
    "The city council met on Tuesday to discuss the new bicycle lanes on Main Street. Supporters said the "
    "lanes would make cycling safer and reduce traffic. Shop owners worried that removing parking spaces "
    "would hurt their business. The council voted five to two to build the lanes next spring, and promised "
    "to add a small parking lot behind the library."
)
CODE = (
    "def mean_and_spread(values):\n    if not values:\n        return None\n    total = 0\n    for v in values:\n"
    "        total = total + v\n    mean = total / len(values)\n    lo = min(values)\n    hi = max(values)\n"
    "    return mean, hi - lo\n"
)
TASKS = {
    "qa": ("chat", "What is the capital of Japan? Answer in one sentence."),
    "writing": ("creative", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    "code": ("code", "Write a Python function that checks whether a string is a palindrome."),
    "summarize": ("summarize", f"Summarize this article in two sentences:\n\n{ARTICLE}"),
    "edit": ("summarize", f"Repeat this text exactly, fixing nothing:\n\n{ARTICLE}"),
    "rewrite_code": (
        "code",
        f"Rename the variable `total` to `acc` in this function and return the full code:\n\n```python\n{CODE}```",
    ),
    "reasoning": ("chat", "If a train leaves at 3 pm and travels for 2 hours and 30 minutes, when does it arrive?"),
}
GROUNDED = {"summarize", "edit", "rewrite_code"}
SYSTEMS = ["naive", "non_streaming", "plain", "fast_lookup", "fast", "balanced", "quality"]


def repetition_rate(ids: list[int], n: int = 3) -> float:
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return 0.0 if not grams else 1 - len(set(grams)) / len(grams)


def token_mean(per_task: dict[str, dict[str, Any]], key: str) -> float:
    """``key`` averaged over every token a system wrote (a median over tasks picks one task's)."""
    total = sum(r["tokens"] for r in per_task.values())
    return sum(r[key] * r["tokens"] for r in per_task.values()) / max(total, 1)


def run(backend: Any, spec: Any, prompt: list[int], system: str, hint: str, n: int) -> dict[str, Any]:
    from models.decode import DecodeJob
    from models.sampling import SamplingParams
    from models.scheduler import SchedulerConfig

    if system == "naive":
        sched = SchedulerConfig.for_strategy(
            "fast", first_chunk_tokens=1, min_chunk_tokens=1, max_chunk_tokens=1, lookahead_tokens=0
        )
    elif system in ("plain", "non_streaming"):
        sched = SchedulerConfig.for_strategy("balanced", lookahead_tokens=0, task_hint=hint)
    else:  # fast / balanced / quality; fast_lookup: fast with prompt lookup as the only drafter
        sched = SchedulerConfig.for_strategy(system.removesuffix("_lookup"), task_hint=hint, lookahead_tokens=16)
    s = spec.for_job() if spec is not None and sched.lookahead_tokens else None
    job = DecodeJob(
        backend, backend.new_state(), prompt, SamplingParams(max_tokens=n), sched, s, s, track_logprobs=True
    )
    t0 = time.perf_counter()
    times: list[float] = []
    while not job.finished:
        ev = job.step()
        times += [time.perf_counter()] * len(ev.chunks)
    end = time.perf_counter()
    if system == "non_streaming":  # everything is sent at the end, as one message
        times = [end]
    toks = len(job.generated)
    first = times[0] if times else end
    m = job.metrics()
    return {
        "ttft_ms": (first - t0) * 1000,
        "inter_chunk_ms": 1000 * (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
        "tpot_ms": 1000 * (end - first) / max(toks - 1, 1),
        "tok_s": toks / max(end - t0, 1e-9),
        "chunks": len(times),
        "tokens": toks,
        "draft_acceptance": m["draft_acceptance"],
        "mean_logprob": m["mean_logprob"],
        "repetition": repetition_rate(job.generated),
        "ids": job.generated,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--threads", type=int, default=2, help="torch threads (this box has 2 cores)")
    ap.add_argument("--rounds", type=int, default=1, help="runs per system and task (medians)")
    ap.add_argument("--backend", choices=["transformers", "llama_cpp"], default="transformers")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="a subset of the systems (plain is always run)")
    ap.add_argument("--name", default=None, help="results file name (default: scheduler, scheduler_llama_cpp)")
    args = ap.parse_args()

    from models.speculative import SpecConfig, Speculator

    backend: Any
    if args.backend == "llama_cpp":
        from models.llama_cpp import LlamaCppConfig, load_llama_backend

        backend = load_llama_backend(LlamaCppConfig(threads=args.threads))
    else:
        from models.llm import LLMConfig, load_backend

        backend = load_backend(LLMConfig(threads=args.threads))
    # the default drafter (auto): the embedded GGUF through llama.cpp, prompt lookup first where it pays
    spec = Speculator(backend, SpecConfig(drafter="auto", k_max=16))
    lookup = Speculator(backend, SpecConfig(drafter="prompt_lookup", k_max=16))
    systems = [x for x in SYSTEMS if x in args.systems.split(",") or x == "plain"]
    results: dict[str, dict[str, Any]] = {s: {} for s in systems}
    for name in args.tasks.split(","):
        hint, text = TASKS[name]
        prompt = backend.chat_tokens([{"role": "user", "content": text}])
        run(backend, spec, prompt, "plain", hint, 4)  # warm
        for _ in range(args.rounds):  # systems interleaved, so a noisy neighbour hits them all alike
            for system in systems:
                sp = lookup if system == "fast_lookup" else spec
                results[system].setdefault(name, []).append(run(backend, sp, prompt, system, hint, args.tokens))
        plain_runs = list(results["plain"][name])
        for system in systems:
            runs = results[system][name]
            keep = dict(runs[0])
            # paired per round (the systems of a round ran back to back): a noisy minute hits both
            keep["x_plain"] = median([r["tok_s"] / p["tok_s"] for r, p in zip(runs, plain_runs, strict=True)])
            for key in ("ttft_ms", "inter_chunk_ms", "tpot_ms", "tok_s"):
                vals = [r[key] for r in runs if r[key] is not None]
                keep[key] = median(vals) if vals else None
            keep["identical_runs"] = all(r["ids"] == runs[0]["ids"] for r in runs)
            results[system][name] = keep
    rows = []
    for system in systems:
        r = results[system]
        plain = results["plain"]
        grounded = [t for t in r if t in GROUNDED]
        open_ = [t for t in r if t not in GROUNDED]

        def speed(ts: list[str], r: dict[str, Any] = r) -> float | None:
            return median([r[t]["x_plain"] for t in ts]) if ts else None

        acc = [r[t]["draft_acceptance"] for t in r if r[t]["draft_acceptance"] is not None]
        rows.append(
            {
                "system": system,
                "TTFT ms": median([r[t]["ttft_ms"] for t in r]),
                "inter-chunk ms": median([r[t]["inter_chunk_ms"] for t in r if r[t]["inter_chunk_ms"] is not None]),
                "TPOT ms": median([r[t]["tpot_ms"] for t in r]),
                "tok/s": median([r[t]["tok_s"] for t in r]),
                "× plain (grounded)": speed(grounded),
                "× plain (open)": speed(open_),
                "identical to plain": f"{sum(r[t]['ids'] == plain[t]['ids'] for t in r)}/{len(r)}",
                "draft acc.": median(acc) if acc else None,
                "mean log-prob": token_mean(r, "mean_logprob"),
                "repetition": median([r[t]["repetition"] for t in r]),
            }
        )
    tf = args.backend == "transformers"
    where = f"bf16, {args.threads} torch threads" if tf else f"llama.cpp, {args.threads} threads"
    md = f"# bench scheduler — {machine()}\n\nEmbedded SmolLM2-135M ({where}), greedy, "
    md += f"{args.tokens} tokens, {args.rounds} round(s), tasks: "
    md += ", ".join(f"{t}{' (grounded)' if t in GROUNDED else ''}" for t in args.tasks.split(","))
    md += "; medians (× plain: paired per round, then the median). "
    draft_name = Path(spec.cfg.draft_model).name if spec.cfg.draft_model else None
    md += f"Drafting in fast / balanced: `{spec.cfg.drafter}` ({spec.cfg.draft_backend}: `{draft_name}`), "
    md += "prompt lookup first where it pays; `fast_lookup`: fast with prompt lookup only.\n\n"
    md += markdown_table(rows, list(rows[0]))
    md += "\nPer task against `plain` (tokens/s over the whole response, TTFT included):\n\n"
    per_task = []
    for t in results["plain"]:
        p = results["plain"][t]
        row: dict[str, Any] = {"task": t + (" (grounded)" if t in GROUNDED else ""), "tokens": p["tokens"]}
        row["plain tok/s"] = p["tok_s"]
        for system in ("fast_lookup", "fast", "balanced"):
            if system in results:
                row[f"{system} ×"] = results[system][t]["x_plain"]
        if "fast" in results:
            row["fast draft acc."] = results["fast"][t]["draft_acceptance"]
        drafting = [x for x in ("fast_lookup", "fast", "balanced") if x in results]
        row["identical"] = all(results[x][t]["ids"] == p["ids"] for x in drafting)
        row["plain log-prob"] = p["mean_logprob"]
        if "quality" in results:
            row["quality log-prob"] = results["quality"][t]["mean_logprob"]
        per_task.append(row)
    md += markdown_table(per_task, list(dict.fromkeys(k for r in per_task for k in r)))
    for r in results.values():
        for v in r.values():
            v.pop("ids")
    name = args.name or ("scheduler" if args.backend == "transformers" else "scheduler_llama_cpp")
    write(name, {"machine": machine(), "args": vars(args), "rows": rows, "results": results}, md)


if __name__ == "__main__":
    main()
