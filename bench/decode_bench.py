"""`stream-omni bench decode`: stock generate vs our decode loop vs the WebSocket round trip.

Same prompts, greedy, measured side by side in one run (rounds alternate the systems, so a
noisy neighbour hits them all alike). Reports TTFT and decode tokens/s with ratios, and the
TTFT of turn 1 vs turn 10 in a growing conversation (KV cache reuse across turns).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, server_process, write  # noqa: E402

SETTLE_S = 0.06  # pause before every measured request, whichever system serves it

PROMPTS = [
    "Explain in a short paragraph why the sky is blue.",
    "Write three tips for staying focused while studying.",
    "Describe how a bicycle works to a child.",
]


def stock_generate(backend: Any, prompt: str, n: int) -> dict[str, float]:
    """transformers' own model.generate + TextIteratorStreamer (the baseline)."""
    import torch
    from transformers import TextIteratorStreamer

    ids = torch.tensor([backend.chat_tokens([{"role": "user", "content": prompt}])])
    streamer = TextIteratorStreamer(backend.tokenizer, skip_prompt=True, skip_special_tokens=True)
    seen: dict[str, float] = {}

    def consume() -> None:  # text only; every torch op stays on the calling thread (one libgomp team)
        for piece in streamer:
            if piece and "first" not in seen:
                seen["first"] = time.perf_counter()

    th = threading.Thread(target=consume)
    t0 = time.perf_counter()
    th.start()
    with torch.inference_mode():
        out = backend.model.generate(
            ids, max_new_tokens=n, do_sample=False, streamer=streamer, pad_token_id=backend.tokenizer.eos_token_id
        )
    th.join()
    end = time.perf_counter()
    tokens = int(out.shape[1] - ids.shape[1])
    first = seen.get("first", end)
    return {"ttft_ms": (first - t0) * 1000, "tok_s": (tokens - 1) / max(end - first, 1e-9), "tokens": tokens}


def our_loop(backend: Any, prompt: str, n: int, strategy: str, spec: Any = None) -> dict[str, float]:
    from models.decode import DecodeJob
    from models.sampling import SamplingParams
    from models.scheduler import SchedulerConfig

    t0 = time.perf_counter()  # like the WebSocket path, TTFT includes rendering + tokenizing the prompt
    ids = backend.chat_tokens([{"role": "user", "content": prompt}])
    s = spec.for_job() if spec is not None else None
    job = DecodeJob(
        backend,
        backend.new_state(),
        ids,
        SamplingParams(max_tokens=n),
        SchedulerConfig.for_strategy(strategy, lookahead_tokens=16 if s else 0),
        s,
        s,
    )
    first = None
    first_tokens = 1
    while not job.finished:
        ev = job.step()
        if ev.chunks and first is None:
            first = time.perf_counter()
            first_tokens = ev.chunks[0].tokens
    end = time.perf_counter()
    tokens = len(job.generated)
    first = first or end
    # decode speed: tokens after the first chunk over the time after it
    return {"ttft_ms": (first - t0) * 1000, "tok_s": (tokens - first_tokens) / max(end - first, 1e-9), "tokens": tokens}


async def ws_turns(
    addr: str, prompts: list[str], n: int, strategy: str, lookahead: int | None = None
) -> list[dict[str, float]]:
    import websockets

    scheduler: dict[str, Any] = {"strategy": strategy}
    if lookahead is not None:
        scheduler["lookahead_tokens"] = lookahead  # 0: this response drafts nothing
    out = []
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.recv()  # session.created
        for prompt in prompts:
            await ws.send(
                json.dumps(
                    {
                        "type": "conversation.item.create",
                        "item": {
                            "type": "message",
                            "role": "user",
                            "content": [{"type": "input_text", "text": prompt}],
                        },
                    }
                )
            )
            t0 = time.perf_counter()
            await ws.send(
                json.dumps(
                    {
                        "type": "response.create",
                        "response": {"max_output_tokens": n, "scheduler": scheduler},
                    }
                )
            )
            first = None
            while True:
                ev = json.loads(await ws.recv())
                if ev["type"] == "response.output_text.delta" and first is None:
                    first = time.perf_counter()
                if ev["type"] == "response.done":
                    end = time.perf_counter()
                    r = ev["response"]
                    break
            toks = r["usage"]["output_tokens"] if r["usage"] else 0
            first = first or end
            out.append(
                {
                    "ttft_ms": (first - t0) * 1000,
                    "tok_s": (toks - 1) / max(end - first, 1e-9),
                    "tokens": toks,
                    "server_ttft_ms": r["metrics"]["ttft_ms"] if r["metrics"] else None,
                    "prompt_tokens": r["metrics"]["prompt_tokens"] if r["metrics"] else None,
                    "cached_tokens": r["metrics"]["cached_tokens"] if r["metrics"] else None,
                }
            )
    return out


def twin_worker(conn: Any, threads: int) -> None:
    """The in-process twins of the WebSocket rows, in a process of their own: our loop called
    directly (no drafting, or the default drafter), timed inside this process. Like the server,
    this process only decodes its own requests and idles while the others run, so the two
    compare under the same conditions (the benchmark's main process, which runs every other
    system, answered its next request ≈ 10 ms faster than a process that had idled meanwhile)."""
    import torch

    from models.llm import LLMConfig, load_backend
    from models.speculative import SpecConfig, Speculator

    torch.set_num_threads(threads)
    fast = load_backend(LLMConfig(threads=threads))
    spec = Speculator(fast, SpecConfig(drafter="auto", k_max=16))  # the default: the GGUF through llama.cpp drafts
    for p in PROMPTS:  # warm-up
        our_loop(fast, p, 4, "fast")
        our_loop(fast, p, 4, "fast", spec)
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        drafted, prompt, n, strategy = msg
        conn.send(our_loop(fast, prompt, n, strategy, spec if drafted else None))


@contextlib.contextmanager
def twin_process(threads: int) -> Iterator[Callable[[bool, str, int, str], dict[str, float]]]:
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=twin_worker, args=(theirs, threads), daemon=True)
    proc.start()
    try:
        if mine.recv() != "ready":
            raise RuntimeError("twin process failed to start")

        def ask(drafted: bool, prompt: str, n: int, strategy: str) -> dict[str, float]:
            mine.send((drafted, prompt, n, strategy))
            return mine.recv()

        yield ask
    finally:
        mine.send(None)
        proc.join(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per response")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the prompt set")
    ap.add_argument("--strategy", default="fast", help="scheduler strategy for our loop and the WS run")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (same for every system; 2 cores here)")
    args = ap.parse_args()

    import torch

    from models.llm import LLMConfig, load_backend

    torch.set_num_threads(args.threads)
    fast = load_backend(LLMConfig(threads=args.threads))
    slow = load_backend(LLMConfig(threads=args.threads, fast_path=False))
    from models.speculative import SpecConfig, Speculator

    lookup = Speculator(fast, SpecConfig(drafter="prompt_lookup", k_max=16))
    # one `stream-omni serve` in its own process (bench.common.server_process) with the default
    # configuration on the transformers backend: the WebSocket rows decode like the in-process
    # loop, without drafting (`lookahead_tokens: 0` in the response) or with the default drafter.
    # One server, not one per row: a second idle server process made the first one's TTFT
    # ≈ 10 ms slower here (measured), which is this box's, not the gateway's, cost
    overrides = {"model.backend": "transformers", "model.threads": args.threads, "audio.enabled": False}
    keys = ("stock", "ours_hf", "ours", "ours_lookup", "ours_spec", "ws", "ws_spec")
    systems: dict[str, list[dict[str, float]]] = {k: [] for k in keys}
    with server_process(overrides) as addr, twin_process(args.threads) as twin:
        for p in PROMPTS:  # warm-up
            our_loop(fast, p, 4, args.strategy)
        asyncio.run(ws_turns(addr, PROMPTS[:1], 4, args.strategy, 0))
        asyncio.run(ws_turns(addr, PROMPTS[:1], 4, args.strategy))
        runs: dict[str, Callable[[str], dict[str, float]]] = {
            "stock": lambda p: stock_generate(slow, p, args.tokens),
            "ours_hf": lambda p: our_loop(slow, p, args.tokens, args.strategy),
            "ours_lookup": lambda p: our_loop(fast, p, args.tokens, args.strategy, lookup),
            # each WebSocket row right after its in-process twin (`twin_process`): the TTFT gap
            # is taken pairwise
            "ours": lambda p: twin(False, p, args.tokens, args.strategy),
            "ws": lambda p: asyncio.run(ws_turns(addr, [p], args.tokens, args.strategy, 0))[0],
            "ours_spec": lambda p: twin(True, p, args.tokens, args.strategy),
            "ws_spec": lambda p: asyncio.run(ws_turns(addr, [p], args.tokens, args.strategy))[0],
        }
        for _ in range(args.rounds):
            for p in PROMPTS:
                for key, once in runs.items():
                    # every system starts alike: after the previous one's libgomp workers have
                    # stopped spinning (≈ 10 ms of a core after a process's last torch call here,
                    # which would otherwise land on whichever process decodes next)
                    time.sleep(SETTLE_S)
                    systems[key].append(once(p))
        turns = asyncio.run(
            ws_turns(
                addr,
                [f"Question {i + 1}: name one fact about the number {i + 7}." for i in range(10)],
                32,
                args.strategy,
                0,
            )
        )
    base = median([r["tok_s"] for r in systems["stock"]])
    names = {
        "stock": "transformers generate + TextIteratorStreamer",
        "ours_hf": "our loop, transformers forward",
        "ours": "our loop, fast Llama path (in a process of its own, like the server)",
        "ours_lookup": "our loop, fast path + prompt-lookup drafting",
        "ours_spec": "our loop, fast path + default drafting (same GGUF via llama.cpp, lookup first; own process)",
        "ws": "WebSocket round trip (`stream-omni serve`, transformers, `lookahead_tokens: 0`: no drafting)",
        "ws_spec": "WebSocket round trip (`stream-omni serve`, transformers, default drafting)",
    }
    twin_of = {"ws": "ours", "ws_spec": "ours_spec"}  # a WebSocket row's in-process counterpart
    rows = []
    for key, results in systems.items():
        tok_s = median([r["tok_s"] for r in results])
        ttft = median([r["ttft_ms"] for r in results])
        pairs = zip(results, systems[twin_of.get(key, "ours")], strict=True)  # same prompt, same round
        server = [r["server_ttft_ms"] for r in results if r.get("server_ttft_ms") is not None]
        rows.append(
            {
                "system": names[key],
                "TTFT ms": ttft,
                "tok/s": tok_s,
                "× stock tok/s": tok_s / base,
                "TTFT − in-process ms": median([a["ttft_ms"] - b["ttft_ms"] for a, b in pairs]),
                "server-side TTFT ms": median(server) if server else None,
            }
        )
    t1, t10 = turns[0]["ttft_ms"], turns[-1]["ttft_ms"]
    md = f"# bench decode — {machine()}\n\n{args.tokens} new tokens, greedy, {args.rounds} rounds × {len(PROMPTS)} "
    md += f"prompts, strategy `{args.strategy}`, {args.threads} torch thread(s); medians.\n\n"
    md += "TTFT − in-process: median over (prompt, round) pairs of this system's TTFT minus its in-process twin's "
    md += "(`ours` for the in-process rows and the plain WebSocket row, `ours_spec` for WebSocket + default drafting), "
    md += f"each measured right after the other with a {SETTLE_S * 1000:.0f} ms pause before every request; "
    md += "server-side TTFT is the server's own `response.done` metric (job start to first chunk).\n\n"
    md += markdown_table(
        rows, ["system", "TTFT ms", "tok/s", "× stock tok/s", "TTFT − in-process ms", "server-side TTFT ms"]
    )
    md += "\nGrowing conversation over one WebSocket (10 turns):\n\n"
    md += markdown_table(
        [
            {"turn": i + 1, **{k: t[k] for k in ("ttft_ms", "prompt_tokens", "cached_tokens")}}
            for i, t in enumerate(turns)
        ],
        ["turn", "ttft_ms", "prompt_tokens", "cached_tokens"],
    )
    md += f"\nturn-10 TTFT / turn-1 TTFT = {t10 / t1:.2f}\n"
    write("decode", {"machine": machine(), "args": vars(args), "systems": systems, "turns": turns, "rows": rows}, md)


if __name__ == "__main__":
    main()
