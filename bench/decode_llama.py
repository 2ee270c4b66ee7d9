"""Greedy decoding, side by side: llama-cpp-python's own streaming chat vs our backend + DecodeJob.

Same GGUF, same threads, same prompts, greedy, 128 tokens, both cold (no prompt cache reused):

* theirs: ``Llama.create_chat_completion(stream=True)`` (GGUF chat template);
* ours: ``LlamaCppBackend.chat_tokens`` + ``models.decode.DecodeJob`` (no drafting, "fast"
  chunking so the first token goes out alone, as theirs does).

The two run in lockstep in one thread: first token of each back to back, then one token of
theirs, one of ours, and so on, so load bursts from other work on a shared box hit both alike
(sequential runs here swung 3-107 tok/s). TTFT is from the request (template, tokenization,
prefill) to the first visible text; tok/s is (tokens - 1) over the time spent in the later
steps. Who goes first alternates per prompt and round; the table shows medians.

    python -m bench.decode_llama [--threads 2] [--rounds 3]

Writes bench/results/decode_llama.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from models.decode import DecodeJob
from models.llama_cpp import LlamaCppBackend, LlamaCppConfig
from models.llm import embedded_gguf
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig

MAX_TOKENS = 128
RESULTS = Path(__file__).parent / "results"
PROMPTS = [
    [
        {
            "role": "user",
            "content": "Write a long story about a lighthouse keeper who finds a message in a bottle.",
        }
    ],
    [
        {
            "role": "user",
            "content": "Explain in detail how the internet works, from undersea cables to web pages.",
        }
    ],
    [
        {"role": "system", "content": "You are a knowledgeable historian."},
        {"role": "user", "content": "Give a thorough history of the bicycle."},
    ],
]


class Theirs:
    """llama-cpp-python's own stream, advanced one visible token at a time."""

    def __init__(self, llm: Any, messages: list[dict[str, str]]):
        llm.reset()  # cold: no prefix reuse from the previous request
        self.stream = iter(
            llm.create_chat_completion(
                messages, stream=True, temperature=0.0, top_k=1, repeat_penalty=1.0, max_tokens=MAX_TOKENS
            )
        )
        self.text, self.tokens, self.finished = "", 0, False

    def step(self) -> bool:
        """Run until the next streamed text (one token) or the end; True if text came."""
        for chunk in self.stream:
            choice = chunk["choices"][0]
            piece = choice["delta"].get("content")
            if piece:
                self.text += piece
                self.tokens += 1  # a streamed chunk is one token (bar held-back partial UTF-8)
                return True
            if choice.get("finish_reason") == "length":
                self.tokens = MAX_TOKENS
        self.finished = True
        return False


class Ours:
    """Our backend through DecodeJob ("fast" chunking: the first token goes out alone)."""

    def __init__(self, backend: LlamaCppBackend, messages: list[dict[str, str]]):
        self.backend = backend
        prompt = backend.chat_tokens(messages)
        self.state = backend.new_state()
        self.job = DecodeJob(
            backend,
            self.state,
            prompt,
            SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
            SchedulerConfig.for_strategy("fast", lookahead_tokens=0),
        )
        self.text, self.finished, self.shown = "", False, False
        self.t_first_token: float | None = None  # first token accepted (maybe not yet shown)

    @property
    def tokens(self) -> int:
        return len(self.job.generated)

    def step(self) -> bool:
        """Run until one more token is accepted (and, at first, until text is visible)."""
        n = len(self.job.generated)
        while not self.job.finished:
            events = self.job.step()
            self.text += "".join(c.text for c in events.chunks)
            self.shown = self.shown or bool(events.chunks)
            if self.t_first_token is None and self.job.generated:
                self.t_first_token = time.perf_counter()
            if len(self.job.generated) > n and self.shown:
                return True
        self.finished = True
        self.backend.crop(self.state, 0)  # cold for the next request too
        return False


def lockstep(llm: Any, backend: LlamaCppBackend, messages: list[dict[str, str]], first: str) -> dict:
    """Both decode the same prompt, alternating token by token, so load bursts on a shared box
    hit both alike. TTFT includes template + tokenization + prefill for both."""
    starts: dict[str, float] = {}
    runs: dict[str, Any] = {}
    ttft: dict[str, float] = {}
    first_tok: dict[str, float] = {}
    order = [first, "ours" if first == "theirs" else "theirs"]
    for who in order:  # the first token of each, back to back
        starts[who] = time.perf_counter()
        runs[who] = Theirs(llm, messages) if who == "theirs" else Ours(backend, messages)
        runs[who].step()
        ttft[who] = (time.perf_counter() - starts[who]) * 1000
        t_tok = getattr(runs[who], "t_first_token", None)  # theirs shows each token at once
        first_tok[who] = ttft[who] if t_tok is None else (t_tok - starts[who]) * 1000
    spent = dict.fromkeys(order, 0.0)
    while not all(r.finished for r in runs.values()):
        for who in order:
            if not runs[who].finished:
                t0 = time.perf_counter()
                runs[who].step()
                spent[who] += time.perf_counter() - t0
    out = {}
    for who in order:
        r = runs[who]
        out[who] = {
            "ttft_ms": round(ttft[who], 2),
            "first_token_ms": round(first_tok[who], 2),
            "tokens": r.tokens,
            "tok_s": round((r.tokens - 1) / max(spent[who], 1e-9), 2),
            "total_s": round(ttft[who] / 1000 + spent[who], 3),
            "text": r.text,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    from llama_cpp import Llama

    llm = Llama(
        str(embedded_gguf()),
        n_ctx=2048,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        chat_format="chat_template.default",  # the GGUF's own template, as ours renders it
        verbose=False,
    )
    backend = LlamaCppBackend(LlamaCppConfig(threads=args.threads, n_ctx=2048, n_seq=1))
    lockstep(llm, backend, PROMPTS[0], "theirs")  # warm-up (page in weights, first allocations)

    runs: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for i, messages in enumerate(PROMPTS):
            pair = lockstep(llm, backend, messages, "theirs" if (rnd + i) % 2 == 0 else "ours")
            runs.append(
                {
                    "round": rnd,
                    "prompt": i,
                    **pair,
                    "same_text": pair["ours"]["text"] == pair["theirs"]["text"],
                }
            )

    def med(who: str, key: str) -> float:
        return round(statistics.median(r[who][key] for r in runs), 2)

    summary = {
        who: {k: med(who, k) for k in ("ttft_ms", "first_token_ms", "tok_s", "total_s", "tokens")}
        for who in ("theirs", "ours")
    }
    summary["ratio_tok_s"] = round(summary["ours"]["tok_s"] / summary["theirs"]["tok_s"], 3)
    summary["ratio_ttft"] = round(summary["ours"]["ttft_ms"] / summary["theirs"]["ttft_ms"], 3)
    summary["ratio_first_token"] = round(summary["ours"]["first_token_ms"] / summary["theirs"]["first_token_ms"], 3)
    summary["identical_text"] = f"{sum(r['same_text'] for r in runs)}/{len(runs)}"
    meta = {"model": backend.name, "threads": args.threads, "max_tokens": MAX_TOKENS, "rounds": args.rounds}
    for r in runs:  # keep the JSON small: one text sample per prompt is enough
        for who in ("theirs", "ours"):
            r[who]["text"] = r[who]["text"][:80]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_llama.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=2, ensure_ascii=False) + "\n"
    )
    md = to_markdown(meta, summary, runs)
    (args.out / "decode_llama.md").write_text(md)
    print(md)


def to_markdown(meta: dict, s: dict, runs: list[dict]) -> str:
    lines = [
        "# Greedy decode: llama-cpp-python stream vs our backend + DecodeJob",
        "",
        f"{meta['model']}, {meta['threads']} threads, {meta['max_tokens']} tokens, "
        f"{len(runs)} runs each ({meta['rounds']} rounds × {len(PROMPTS)} prompts), lockstep, medians, "
        "cold prompt.",
        "",
        "| | TTFT ms (first text) | first token ms | tok/s | total s |",
        "|---|---:|---:|---:|---:|",
        f"| llama-cpp-python create_chat_completion(stream) | {s['theirs']['ttft_ms']} "
        f"| {s['theirs']['first_token_ms']} | {s['theirs']['tok_s']} | {s['theirs']['total_s']} |",
        f"| ours: LlamaCppBackend + DecodeJob | {s['ours']['ttft_ms']} | {s['ours']['first_token_ms']} "
        f"| {s['ours']['tok_s']} | {s['ours']['total_s']} |",
        f"| ours / theirs | {s['ratio_ttft']} | {s['ratio_first_token']} | {s['ratio_tok_s']} | |",
        "",
        "Ours shows text at word boundaries (the chunk scheduler never cuts inside a word), so its",
        "first text can wait for the second token; 'first token' is when the first token is decoded.",
        "",
        f"Greedy text identical in {s['identical_text']} runs.",
        "",
        "| round | prompt | theirs tok/s | ours tok/s | theirs TTFT | ours TTFT |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['round']} | {r['prompt']} | {r['theirs']['tok_s']} | {r['ours']['tok_s']} "
            f"| {r['theirs']['ttft_ms']} | {r['ours']['ttft_ms']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
