"""Constrained vs unconstrained greedy decoding on the embedded SmolLM2 (llama.cpp, the default backend).

Each round runs, side by side in this process: a constrained answer (json_schema / json_object / a forced
tool call) of N tokens, then an unconstrained greedy answer capped at the same N tokens (a prompt that
writes on), both without drafting. tokens/s is decode tokens over decode time (prefill excluded); the
grammar's own share is the time spent in the mask calls, per token. Medians over rounds.

    python -m bench.constrained [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from models import constrain
from models.decode import DecodeJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig

from .common import machine, markdown_table, median, write

CASES: list[tuple[str, str, Any]] = [
    (
        "json_schema",
        "Describe a fictional person as JSON.",
        constrain.json_grammar(
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": "integer"},
                    "city": {"type": "string"},
                    "hobbies": {"type": "array", "items": {"type": "string"}},
                    "bio": {"type": "string"},
                },
                "required": ["name", "age", "city", "hobbies", "bio"],
            }
        ),
    ),
    ("json_object", "Give me a product record as JSON.", constrain.json_grammar(None)),
    (
        "forced_tool_call",
        "What's the weather in Paris and in Rome?",
        constrain.tool_call_grammar(
            [
                constrain.ToolSpec(
                    "get_weather",
                    {
                        "type": "object",
                        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                        "required": ["city", "unit"],
                    },
                )
            ]
        ),
    ),
]
FREE_PROMPT = "Write a long story about a lighthouse keeper."


class Timed:
    """A Constraint whose calls are timed (the grammar's share of each step)."""

    def __init__(self, inner: constrain.Constraint):
        self.inner, self.seconds = inner, 0.0

    def _t(self, fn: Any, *a: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.seconds += time.perf_counter() - t0

    def mask(self, row: Any, greedy: bool = False) -> Any:
        return self._t(self.inner.mask, row, greedy)

    def mask_rows(self, rows: Any, drafts: list[int], greedy: bool = False) -> None:
        self._t(self.inner.mask_rows, rows, drafts, greedy)

    def valid_prefix(self, tokens: list[int]) -> int:
        return int(self._t(self.inner.valid_prefix, tokens))

    def advance(self, tokens: list[int]) -> None:
        self._t(self.inner.advance, tokens)

    @property
    def complete(self) -> bool:
        return bool(self._t(lambda: self.inner.complete))


def decode(backend: Any, prompt: str, max_tokens: int, constraint: Any = None) -> tuple[int, float]:
    """(tokens, decode seconds) of one greedy answer on a fresh cache."""
    job = DecodeJob(
        backend,
        backend.new_state(),
        backend.chat_tokens([{"role": "user", "content": prompt}]),
        SamplingParams(max_tokens=max_tokens),
        SchedulerConfig(lookahead_tokens=0),
        constraint=constraint,
    )
    job.step()  # prefill + first token
    t0 = time.perf_counter()
    n0 = len(job.generated)
    while not job.finished:
        job.step()
    return len(job.generated) - n0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args()
    from models.llama_cpp import LlamaCppConfig, load_llama_backend

    backend = load_llama_backend(LlamaCppConfig(threads=1, n_seq=2))
    constrain.grammar_vocab(backend)  # built once per backend (~0.5 s): not part of a response's cost
    decode(backend, FREE_PROMPT, 16)  # warm-up
    rows = []
    for name, prompt, grammar in CASES:
        con_tps, free_tps, mask_ms, lengths = [], [], [], []
        for _ in range(args.rounds):
            timed = Timed(constrain.constraint_for(backend, grammar))
            n, s = decode(backend, prompt, args.max_tokens, timed)
            m, s2 = decode(backend, FREE_PROMPT, n + 1)  # the same number of decode steps
            con_tps.append(n / s)
            free_tps.append(m / s2)
            mask_ms.append(1000 * timed.seconds / max(n, 1))
            lengths.append((n, m))
        c, f = median(con_tps), median(free_tps)
        rows.append(
            {
                "case": name,
                "tokens (constrained / free)": f"{lengths[0][0]} / {lengths[0][1]}",
                "constrained tok/s": c,
                "unconstrained tok/s": f,
                "cost %": 100 * (f - c) / f,
                "grammar ms/token": median(mask_ms),
            }
        )
    cols = list(rows[0])
    info = machine()
    md = (
        f"# Constrained vs unconstrained greedy decoding (SmolLM2-135M Q4_1, llama.cpp, 1 thread)\n\n"
        f"{info['when']}, load average {info['loadavg_1m']}, medians of {args.rounds} interleaved rounds.\n\n"
        + markdown_table(rows, cols)
    )
    write("constrained", {"machine": info, "rounds": args.rounds, "rows": rows}, md)


if __name__ == "__main__":
    main()
