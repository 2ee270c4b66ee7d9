"""`stream-omni bench llama_matrix`: llama-cpp-python's own streaming vs our backends, side by side.

Same GGUF (SmolLM2-135M-Instruct Q4_1), 2 threads, greedy, same prompts; rounds alternate the
systems so load bursts hit all alike:

* llama-cpp-python's own ``create_chat_completion(stream=True)`` — the anchor;
* our llama.cpp backend through the chunk scheduler, drafting off and on (prompt lookup, adaptive);
* our transformers backend (bf16, fast Llama path), drafting off;
* the full WebSocket round trip on the default server (llama.cpp, drafting on), run as
  ``stream-omni serve`` in its own process (see bench.common.server_process for why).

Open-chat and input-grounded prompts are reported separately. Writes bench/results/llama_matrix.*.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, server_process, write  # noqa: E402

TEXT = (
    "The city council met on Tuesday to discuss the new bicycle lanes on Main Street. Supporters said the lanes "
    "would make cycling safer and reduce traffic. Shop owners worried that removing parking spaces would hurt "
    "their business. The council voted five to two to build the lanes next spring."
)
PROMPTS = {
    "chat": [
        "Write a story about a lighthouse keeper who finds a message in a bottle.",
        "Explain how the internet works, from undersea cables to web pages.",
    ],
    "grounded": [
        f"Repeat this text exactly:\n\n{TEXT}",
        f"Rewrite this text, changing only 'Tuesday' to 'Monday':\n\n{TEXT}",
    ],
}


def theirs(llm: Any, prompt: str, n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    first, parts = None, []
    for chunk in llm.create_chat_completion(
        messages=[{"role": "user", "content": prompt}], max_tokens=n, temperature=0.0, top_k=1, stream=True
    ):
        delta = chunk["choices"][0]["delta"].get("content")
        if delta:
            first = first or time.perf_counter()
            parts.append(delta)
    end = time.perf_counter()
    toks = len(llm.tokenize("".join(parts).encode(), add_bos=False, special=False))
    return {
        "ttft_ms": ((first or end) - t0) * 1000,
        "tok_s": max(toks - 1, 0) / max(end - (first or end), 1e-9),
        "text": "".join(parts),
    }


def ours(backend: Any, spec: Any, prompt: str, n: int, drafting: bool) -> dict[str, Any]:
    from models.decode import DecodeJob
    from models.sampling import SamplingParams
    from models.scheduler import SchedulerConfig

    t0 = time.perf_counter()
    ids = backend.chat_tokens([{"role": "user", "content": prompt}])
    s = spec.for_job() if drafting else None
    sched = SchedulerConfig.for_strategy("fast", lookahead_tokens=16 if drafting else 0)
    job = DecodeJob(backend, backend.new_state(), ids, SamplingParams(max_tokens=n), sched, s, s)
    first, text, first_tokens = None, "", 1
    while not job.finished:
        ev = job.step()
        for c in ev.chunks:
            if first is None:
                first, first_tokens = time.perf_counter(), c.tokens
            text += c.text
    end = time.perf_counter()
    toks = len(job.generated)
    return {
        "ttft_ms": ((first or end) - t0) * 1000,
        "tok_s": (toks - first_tokens) / max(end - (first or end), 1e-9),
        "text": text,
        "acceptance": job.metrics()["draft_acceptance"],
    }


async def ws(addr: str, prompt: str, n: int) -> dict[str, Any]:
    import websockets

    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as sock:
        await sock.recv()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
        await sock.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await sock.recv()
        await sock.recv()
        t0 = time.perf_counter()
        await sock.send(
            json.dumps(
                {"type": "response.create", "response": {"max_output_tokens": n, "scheduler": {"strategy": "fast"}}}
            )
        )
        first, text = None, ""
        while True:
            ev = json.loads(await sock.recv())
            if ev["type"] == "response.output_text.delta":
                first = first or time.perf_counter()
                text += ev["delta"]
            if ev["type"] == "response.done":
                end = time.perf_counter()
                toks = ev["response"]["usage"]["output_tokens"]
                break
    return {
        "ttft_ms": ((first or end) - t0) * 1000,
        "tok_s": max(toks - 1, 0) / max(end - (first or end), 1e-9),
        "text": text,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fresh", type=int, default=10, help="new questions for the TTFT table")
    args = ap.parse_args()

    import llama_cpp

    from models.llama_cpp import LlamaCppConfig, load_llama_backend
    from models.llm import LLMConfig, embedded_gguf, load_backend
    from models.speculative import SpecConfig, Speculator

    # the anchor with the attention kernels our backend uses by default (flash attention: faster
    # here for both, and what makes llama.cpp batch-invariant), so 'same text' compares like with like
    llm = llama_cpp.Llama(model_path=str(embedded_gguf()), n_ctx=4096, n_threads=2, flash_attn=True, verbose=False)
    lb = load_llama_backend(LlamaCppConfig(threads=2))
    tb = load_backend(LLMConfig(threads=2))
    lspec = Speculator(lb, SpecConfig(drafter="prompt_lookup", k_max=16))
    systems = ["llama-cpp-python", "ours llama.cpp", "ours llama.cpp + drafting", "ours transformers", "WebSocket"]
    res: dict[str, dict[str, list[dict[str, Any]]]] = {s: {"chat": [], "grounded": []} for s in systems}
    with server_process({"audio.enabled": False}) as addr:
        asyncio.run(ws(addr, "hi", 4))
        theirs(llm, "hi", 4)
        for _ in range(args.rounds):
            for kind, prompts in PROMPTS.items():
                for p in prompts:
                    res["llama-cpp-python"][kind].append(theirs(llm, p, args.tokens))
                    res["ours llama.cpp"][kind].append(ours(lb, None, p, args.tokens, False))
                    res["ours llama.cpp + drafting"][kind].append(ours(lb, lspec, p, args.tokens, True))
                    res["ours transformers"][kind].append(ours(tb, None, p, args.tokens, False))
                    res["WebSocket"][kind].append(asyncio.run(ws(addr, p, args.tokens)))
        # TTFT on questions none of the systems has seen (separate caches: each reuses only the template)
        fresh: dict[str, list[float]] = {"llama-cpp-python": [], "ours llama.cpp": [], "WebSocket": []}
        for i in range(args.fresh):
            q = f"Question {1000 + 37 * i}: tell me one fact about the number {i + 3}."
            fresh["llama-cpp-python"].append(theirs(llm, q, 8)["ttft_ms"])
            fresh["ours llama.cpp"].append(ours(lb, None, q, 8, False)["ttft_ms"])
            fresh["WebSocket"].append(asyncio.run(ws(addr, q, 8))["ttft_ms"])
    rows = []
    for s in systems:
        row: dict[str, Any] = {"system": s}
        for kind in ("chat", "grounded"):
            runs, anchor = res[s][kind], res["llama-cpp-python"][kind]
            row[f"{kind} TTFT ms"] = median([r["ttft_ms"] for r in runs])
            row[f"{kind} tok/s"] = median([r["tok_s"] for r in runs])
            row[f"{kind} × anchor"] = row[f"{kind} tok/s"] / median([r["tok_s"] for r in anchor])
            row[f"{kind} same text"] = (
                f"{sum(r['text'] == a['text'] for r, a in zip(runs, anchor, strict=True))}/{len(runs)}"
            )
        rows.append(row)
    md = f"# bench llama_matrix — {machine()}\n\n{args.tokens} tokens, greedy, {args.rounds} rounds, medians; "
    md += "'same text' compares with llama-cpp-python's output on the same run.\n\n"
    md += markdown_table(rows, list(rows[0]))
    anchor_ttft = median(fresh["llama-cpp-python"])
    md += f"\nTTFT on {args.fresh} new questions (only the chat template is cached; 8 tokens each):\n\n"
    md += markdown_table(
        [
            {"system": k, "median TTFT ms": median(v), "− llama-cpp-python ms": median(v) - anchor_ttft}
            for k, v in fresh.items()
        ],
        ["system", "median TTFT ms", "− llama-cpp-python ms"],
    )
    write("llama_matrix", {"machine": machine(), "rows": rows, "results": res, "fresh_ttft": fresh}, md)


if __name__ == "__main__":
    main()
