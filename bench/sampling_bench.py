"""The embedded model's repetition guard: looping replies and tokens/s, guard on vs off.

    stream-omni bench sampling [--max-tokens 96] [--questions N] [--drafter prompt_lookup|none]

50 short factual and chit-chat questions (bench/sampling_questions.txt), each answered four ways
side by side (so background load hits all alike), on the embedded model through llama.cpp with the
served drafter:

* ``defaults``: the model's recommended sampling as served (temperature 0.2, top-p 0.9, the guard:
  DRY and a frequency penalty; seeded by the question's index);
* ``defaults_no_guard``: the same without the guard;
* ``greedy_guard``: temperature 0 with the guard (what a client asking for ``temperature: 0`` gets);
* ``greedy_no_guard``: temperature 0, no guard (plain greedy).

A reply *loops* when it runs to the token limit and its last ``LOOP_WINDOW`` tokens hold some
``LOOP_N``-gram at least ``LOOP_TIMES`` times. Tokens/s compares the guard on vs off over the
whole set, and the guard's own cost is timed directly (seconds inside ``models.penalties.penalize``
per generated token, as a share of the decode time). Writes bench/results/sampling.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
QUESTIONS = Path(__file__).parent / "sampling_questions.txt"
LOOP_N, LOOP_WINDOW, LOOP_TIMES = 4, 48, 3
MODES = ("defaults", "defaults_no_guard", "greedy_guard", "greedy_no_guard")


def loops(ids: list[int], hit_limit: bool) -> bool:
    """A repeated n-gram run to the limit: the reply hit ``max_tokens`` and its tail repeats itself."""
    if not hit_limit:
        return False
    tail = ids[-LOOP_WINDOW:]
    grams = Counter(tuple(tail[i : i + LOOP_N]) for i in range(len(tail) - LOOP_N + 1))
    return bool(grams) and max(grams.values()) >= LOOP_TIMES


def params_for(mode: str, defaults: Any, seed: int, max_tokens: int) -> Any:
    from models.sampling import REPETITION_GUARD_KEYS, SamplingParams

    p = replace(defaults, seed=seed, max_tokens=max_tokens)
    if mode.startswith("greedy"):
        p = replace(p, temperature=0.0, top_p=1.0)
    if mode.endswith("no_guard"):  # every field of the guard back to "off", as session.repetition_guard: off does
        off = SamplingParams()
        p = replace(p, **{key: getattr(off, key) for key in REPETITION_GUARD_KEYS})
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import models.decode as decode
    from models.decode import DecodeJob
    from models.llama_cpp import LlamaCppBackend, LlamaCppConfig
    from models.sampling import SamplingParams
    from models.scheduler import SchedulerConfig
    from models.speculative import SpecConfig, Speculator

    ap = argparse.ArgumentParser(prog="stream-omni bench sampling")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--questions", type=int, default=50)
    ap.add_argument("--drafter", default="prompt_lookup", choices=("prompt_lookup", "none"))
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (1 on a loaded shared box)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    load_start = os.getloadavg()
    backend = LlamaCppBackend(LlamaCppConfig(threads=args.threads))
    defaults = replace(SamplingParams(), **backend.sampling_defaults)
    spec = Speculator(backend, SpecConfig(drafter=args.drafter)) if args.drafter != "none" else None
    decode.dry_breakers(backend)  # the one vocabulary scan, before any timing

    guard_s = [0.0]
    plain_penalize = decode.penalize

    def timed_penalize(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return plain_penalize(*a, **kw)
        finally:
            guard_s[0] += time.perf_counter() - t0

    decode.penalize = timed_penalize  # type: ignore[assignment]
    questions = QUESTIONS.read_text().splitlines()[: args.questions]
    rows: list[dict[str, Any]] = []
    for i, q in enumerate(questions):
        prompt = backend.chat_tokens([{"role": "user", "content": q}])
        row: dict[str, Any] = {"question": q}
        for mode in MODES:
            params = params_for(mode, defaults, i, args.max_tokens)
            s = spec.for_job() if spec is not None else None
            sched = SchedulerConfig(lookahead_tokens=spec.cfg.k_max if spec is not None else 0)
            job = DecodeJob(backend, backend.new_state(), prompt, params, sched, drafter=s, verifier=s)
            job.step()  # the prompt
            guard_s[0] = 0.0
            t0 = time.perf_counter()
            while not job.finished:
                job.step()
            seconds = time.perf_counter() - t0
            hit = len(job.generated) >= args.max_tokens
            row[mode] = {
                "tokens": len(job.generated),
                "seconds": round(seconds, 4),
                "guard_s": round(guard_s[0], 5),
                "loops": loops(job.generated, hit),
                "text": backend.decode(job.generated),
            }
        rows.append(row)
        print(f"{i + 1:2d}/{len(questions)} " + " ".join(f"{m}={'LOOP' if row[m]['loops'] else 'ok'}" for m in MODES))
    decode.penalize = plain_penalize  # type: ignore[assignment]

    summary: dict[str, Any] = {}
    for mode in MODES:
        toks = sum(r[mode]["tokens"] for r in rows)
        secs = sum(r[mode]["seconds"] for r in rows)
        guard = sum(r[mode]["guard_s"] for r in rows)
        summary[mode] = {
            "loop_share": round(sum(r[mode]["loops"] for r in rows) / len(rows), 3),
            "loops": sum(r[mode]["loops"] for r in rows),
            "tokens": toks,
            "tok_s": round(toks / secs, 1) if secs else 0.0,
            "guard_us_per_token": round(1e6 * guard / toks, 1) if toks else 0.0,
            "guard_share_of_decode": round(guard / secs, 4) if secs else 0.0,
        }
    for on, off in (("defaults", "defaults_no_guard"), ("greedy_guard", "greedy_no_guard")):
        summary[f"{on}_vs_{off}_tok_s"] = round(summary[on]["tok_s"] / summary[off]["tok_s"], 3)
    report = {
        "model": backend.name,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "drafter": args.drafter,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "questions": len(rows),
        "defaults": {k: v for k, v in backend.sampling_defaults.items()},
        "loop_rule": f"ran to max_tokens and a {LOOP_N}-gram occurs ≥ {LOOP_TIMES}x in the last {LOOP_WINDOW} tokens",
        "summary": summary,
        "total_s": round(time.perf_counter() - t_start, 1),
        # the box is shared: its 1-minute load average at the start and the end of the run
        "load_average": [round(load_start[0], 1), round(os.getloadavg()[0], 1)],
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sampling.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out / "sampling.md").write_text(markdown(report))
    print(json.dumps(summary, indent=2))
    print(f"total {report['total_s']}s; wrote {out / 'sampling.json'} and sampling.md")
    return report


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        "# Repetition guard: looping replies and tokens/s (`stream-omni bench sampling`)",
        "",
        f"{report['model']} (llama.cpp, {report['threads']} threads), {report['machine']}, "
        f"drafter {report['drafter']}, "
        f"{report['questions']} questions, max_tokens {report['max_tokens']}. Model defaults: {report['defaults']}. "
        f"Load average {report['load_average'][0]} at the start, {report['load_average'][1]} at the end.",
        f"A loop: {report['loop_rule']}.",
        "",
        "| mode | looping replies | tokens | tok/s | guard µs/token | guard share of decode |",
        "|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        m = s[mode]
        lines.append(
            f"| {mode} | {m['loops']} ({m['loop_share']:.0%}) | {m['tokens']} | {m['tok_s']} | "
            f"{m['guard_us_per_token']} | {m['guard_share_of_decode']:.2%} |"
        )
    lines += [
        "",
        f"tok/s guard on / off: defaults {s['defaults_vs_defaults_no_guard_tok_s']}x, "
        f"greedy {s['greedy_guard_vs_greedy_no_guard_tok_s']}x (the replies differ, so this mixes the guard's "
        "cost with different lengths and drafts; the guard's own cost is its timed share of decode).",
        "",
        "| question | defaults | greedy_no_guard |",
        "|---|---|---|",
    ]
    for r in report["rows"]:
        cell = [r[m]["text"].replace("\n", " ").replace("|", "\\|")[:90] for m in ("defaults", "greedy_no_guard")]
        lines.append(f"| {r['question']} | {cell[0]} | {cell[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
