"""`stream-omni bench remote`: one engine, reached directly vs through our gateway, side by side.

The engine is llama-cpp-python's own OpenAI server (``python -m llama_cpp.server``) on the
embedded GGUF; the gateway is ``stream-omni serve`` with ``model.backend: openai`` pointing at
it, each in its own process. Three ways to ask the same engine the same thing, in one run:

* **direct**: the engine's ``/v1/chat/completions`` stream (what a client without us gets);
* **gateway SSE**: our ``/v1/chat/completions`` stream (the default chunking);
* **gateway WebSocket**: our ``/v1/realtime`` (``response.create``, the default chunking);
* **gateway SSE, whole words**: the SSE row with ``eager_first: false`` (and ``fast`` chunking: a
  one-word first chunk), the scheduler's first chunk waiting for where its word ends.

Greedy, 128 tokens. The three rows send the *same* messages back to back (order rotated per
prompt), right after one unmeasured request that puts those messages in the engine's prompt cache:
each row then prefills one token, as every turn does on an engine with prefix caching, instead of
a whole prompt whose time under this shared box's load swings from 0.2 to 8 s (measured in the
first version of this benchmark) and drowns a gap of milliseconds. A fresh nonce per prompt keeps
the previous round's cache from helping. Medians over every request, and the median of the
per-round differences to the direct row.

TTFT: from sending the request to the first text. With a remote engine our scheduler's first chunk
is the engine's first delta as it comes (``eager_first``, the default for ``backend: openai``);
with whole words it waits for the engine's *second* delta (the one that tells where the first word
ends), so the direct row also reports that time ("direct, 2nd delta"), the floor for any client
that shows whole words. "first text mid-word" counts the responses whose first text is followed
by a letter or digit (the first word went on in the next delta or chunk). tok/s: (tokens − 1) /
(last text − first text), tokens from the engine's usage. Then cancel: ``response.cancel`` →
``response.done`` over the WebSocket, and → our upstream connection leaving ESTABLISHED (read from
/proc/net/tcp).

    python -m bench.remote_bench [--rounds 3] [--tokens 128] [--engine-threads 1] [--engine llama-server]

Writes bench/results/remote.{json,md} (remote_llama_server.{json,md} with ``--engine llama-server``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench.common import machine, markdown_table, median, server_process, write

if TYPE_CHECKING:
    from testkit.remote_engines import EngineProcess

PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Explain in detail how the internet works, from undersea cables to web pages.",
    "Give a thorough history of the bicycle.",
]
# short questions whose answers start in many ways: how often is an engine's first delta only the
# start of a word (what eager_first shows as the first chunk)?
PROBES = [
    "What is 17 times 23?",
    "How do I boil an egg?",
    "Summarize the plot of Cinderella.",
    "What is photosynthesis?",
    "Explain recursion.",
    "Who wrote Hamlet?",
    "Tell me a joke.",
    "Write a haiku about rain.",
    "List three fruits.",
    "Translate 'good morning' to French.",
    "What's the capital of Australia?",
    "Write Python code to reverse a list.",
    "Is the earth flat?",
    "Hi!",
    "Recommend a book.",
    "Why is the sky blue?",
    "Compose a limerick about a cat.",
    "Write an email asking for a day off.",
    "What are prime numbers?",
    "Give me a recipe for pancakes.",
    "How many legs does a spider have?",
    "What does DNA stand for?",
    "Name the planets.",
    "What's your name?",
]
_nonce = itertools.count(1)


def loadavg() -> str:
    """The box's 1/5/15-minute load averages: this shared box's load moves these numbers."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def gateway_cpu_s() -> float:
    """CPU seconds (user + system) our gateway process (this process's ``gateway.wiring.cli`` child) has used:
    what it spends per streamed token, apart from waiting for a core on a loaded box."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] == me and b"gateway.wiring.cli" in (stat.parent / "cmdline").read_bytes():
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return float("nan")


def messages(prompt: str) -> list[dict[str, str]]:
    """The same prompt with a new nonce in front: no cache from an earlier request helps it."""
    return [
        {"role": "system", "content": f"Request {next(_nonce)}. You are a helpful assistant."},
        {"role": "user", "content": prompt},
    ]


def sse_run(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed Chat Completion: times of the first two text deltas and the last, usage."""
    for attempt in range(3):
        try:
            return _sse_run(client, url, body)
        except httpx.RemoteProtocolError as exc:
            # llama-server sometimes closes a kept-alive connection just as the next request reuses it
            # ("Server disconnected without sending a response"); nothing was generated: ask again, as
            # the gateway's own engine client does (model.retries). A stream broken midway is an error.
            if "without sending a response" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _sse_run(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    times: list[float] = []
    texts: list[str] = []
    usage: dict[str, Any] = {}
    with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            data = json.loads(line[5:])
            if data.get("usage"):
                usage = data["usage"]
            text = "".join((c.get("delta") or {}).get("content") or "" for c in data.get("choices") or [])
            if text:
                times.append(time.perf_counter())
                texts.append(text)
    return summary(t0, times, texts, int(usage.get("completion_tokens") or len(times)))


def summary(t0: float, times: list[float], texts: list[str], tokens: int) -> dict[str, Any]:
    span = times[-1] - times[0] if len(times) > 1 else float("nan")
    return {
        "first_texts": texts[:2],
        "first_mid_word": len(texts) > 1 and texts[0][-1:].isalnum() and texts[1][:1].isalnum(),
        "ttft_ms": (times[0] - t0) * 1000,
        "second_ms": (times[1] - t0) * 1000 if len(times) > 1 else float("nan"),
        "tokens": tokens,
        "tok_s": (tokens - 1) / span if span and span > 0 else float("nan"),
    }


async def session(addr: str, prompt: list[dict[str, str]]) -> Any:
    """A new Realtime session holding exactly ``prompt`` (what the other rows send), ready to respond."""
    import websockets

    ws = await websockets.connect(f"ws://{addr}/v1/realtime", max_size=None)
    await ws.recv()  # session.created
    for m in prompt:
        item = {"type": "message", "role": m["role"], "content": [{"type": "input_text", "text": m["content"]}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        while json.loads(await ws.recv())["type"] != "conversation.item.added":
            pass
    return ws


async def ws_run(addr: str, prompt: list[dict[str, str]], n: int) -> dict[str, Any]:
    """One Realtime response (connecting and adding the items happen before the clock starts)."""
    ws = await session(addr, prompt)
    try:
        t0 = time.perf_counter()
        body = {"max_output_tokens": n, "temperature": 0}  # the gateway's default chunking
        await ws.send(json.dumps({"type": "response.create", "response": body}))
        times: list[float] = []
        texts: list[str] = []
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if ev["type"] == "response.output_text.delta":
                times.append(time.perf_counter())
                texts.append(ev["delta"])
            elif ev["type"] == "response.done":
                return summary(t0, times, texts, int(ev["response"]["usage"]["output_tokens"]))
    finally:
        await ws.close()


async def ws_cancel(addr: str, engine: EngineProcess, prompt: list[dict[str, str]], cpp: bool) -> dict[str, float]:
    """Cancel at the first delta: ms to response.done, and to our engine connection leaving ESTABLISHED;
    with llama-server (``cpp``) also until its ``/slots`` shows no slot processing (polled after the
    done, so an upper bound)."""
    from testkit.remote_engines import slots, tcp_states

    engine_port = engine.port

    ws = await session(addr, prompt)
    body = {"max_output_tokens": 600, "scheduler": {"strategy": "fast"}}
    await ws.send(json.dumps({"type": "response.create", "response": body}))
    while json.loads(await ws.recv())["type"] != "response.output_text.delta":
        pass

    def ours() -> set[int]:  # our (the gateway's) ends of established connections to the engine
        return {lp for (lp, rp), s in tcp_states(engine_port).items() if rp == engine_port and s == "ESTABLISHED"}

    before = ours()
    busy = [s["id"] for s in slots(engine) if s["is_processing"]] if cpp else []
    t0 = time.perf_counter()
    await ws.send(json.dumps({"type": "response.cancel"}))
    closed_ms = float("nan")
    deadline = t0 + 5
    while time.perf_counter() < deadline:  # a tight poll: /proc/net/tcp costs well under 1 ms here
        if before - ours():
            closed_ms = (time.perf_counter() - t0) * 1000
            break
        await asyncio.sleep(0)
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if ev["type"] == "response.done":
            done_ms = (time.perf_counter() - t0) * 1000
            assert ev["response"]["status"] == "cancelled", ev
            break
    out = {"done_ms": done_ms, "upstream_closed_ms": closed_ms}
    while cpp and time.perf_counter() < deadline:
        if not any(s["is_processing"] for s in slots(engine)):
            out["slot_idle_ms"] = (time.perf_counter() - t0) * 1000
            # llama-server leaves has_next_token true on a task it stopped early (false: ran to its end)
            cut = [s["next_token"][0]["has_next_token"] for s in slots(engine) if s["id"] in busy and "next_token" in s]
            out["slot_stopped_early"] = float(bool(cut) and all(cut))
            break
    await ws.close()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from testkit.remote_engines import cpp_llama_server, llama_server

    load_before = loadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench_remote_"))
    cpp = args.engine == "llama-server"
    if cpp:
        engine = cpp_llama_server(tmp, parallel=2, threads=args.engine_threads)
    else:
        engine = llama_server(tmp)
        engine.argv[engine.argv.index("--n_threads") + 1] = str(args.engine_threads)
    engine.start()
    probes: list[list[str]] = []
    rows: dict[str, list[dict[str, Any]]] = {"direct": [], "gateway SSE": [], "gateway WebSocket": []}
    rows["gateway SSE, whole words"] = []
    cancels: list[dict[str, float]] = []
    overrides = {"model.backend": "openai", "model.base_url": engine.base_url, "audio.enabled": False}
    try:
        with server_process(overrides) as addr, httpx.Client(timeout=120) as client:
            n = args.tokens

            def body(prompt: list[dict[str, str]], ours: bool, **sched: Any) -> dict[str, Any]:
                b: dict[str, Any] = {"model": "smollm2-engine", "messages": prompt, "max_tokens": n, "stream": True}
                b |= {"temperature": 0.0, "stream_options": {"include_usage": True}}
                return b | ({"scheduler": sched} if ours and sched else {})  # ours: the gateway's default chunking

            for q in PROBES:  # the engine directly, greedy: its first two deltas
                pb = body([{"role": "user", "content": q}], False) | {"max_tokens": 3}
                probes.append(sse_run(client, f"{engine.base_url}/chat/completions", pb)["first_texts"])
            # warm-up: each path once (connections, first-request costs)
            sse_run(client, f"{engine.base_url}/chat/completions", body(messages(PROMPTS[0]), False))
            sse_run(client, f"http://{addr}/v1/chat/completions", body(messages(PROMPTS[0]), True))
            await ws_run(addr, messages(PROMPTS[0]), 16)
            order = list(rows)
            for r in range(args.rounds):
                for i, prompt in enumerate(PROMPTS):
                    k = (r * len(PROMPTS) + i) % len(order)
                    msgs = messages(prompt)
                    warm = body(msgs, False) | {"max_tokens": 1}
                    sse_run(client, f"{engine.base_url}/chat/completions", warm)  # the prompt into the cache
                    for who in order[k:] + order[:k]:
                        cpu0 = gateway_cpu_s()
                        if who == "direct":
                            res = sse_run(client, f"{engine.base_url}/chat/completions", body(msgs, False))
                        elif who == "gateway SSE":
                            res = sse_run(client, f"http://{addr}/v1/chat/completions", body(msgs, True))
                        elif who == "gateway SSE, whole words":
                            # a one-word first chunk that waits for its word end
                            whole = body(msgs, True, strategy="fast", eager_first=False)
                            res = sse_run(client, f"http://{addr}/v1/chat/completions", whole)
                        else:
                            res = await ws_run(addr, msgs, n)
                        res["gateway_cpu_ms"] = (gateway_cpu_s() - cpu0) * 1000
                        rows[who].append(res)
                        await asyncio.sleep(0.05)
            for i in range(args.cancels):
                cancels.append(await ws_cancel(addr, engine, messages(PROMPTS[i % len(PROMPTS)]), cpp))
                await asyncio.sleep(0.2)
    finally:
        engine.stop()
    return {"rows": rows, "cancels": cancels, "probes": probes, "load_before": load_before, "load_after": loadavg()}


def report(raw: dict[str, Any], args: argparse.Namespace) -> None:
    rows = raw["rows"]
    d_ttft = median([x["ttft_ms"] for x in rows["direct"]])
    d_second = median([x["second_ms"] for x in rows["direct"]])
    d_tok = median([x["tok_s"] for x in rows["direct"]])
    table = []
    for who, xs in rows.items():
        ttft = median([x["ttft_ms"] for x in xs])
        tok = median([x["tok_s"] for x in xs])
        pairs = list(zip(xs, rows["direct"], strict=True))
        table.append(
            {
                "path": who,
                "requests": len(xs),
                "TTFT ms": ttft,
                "direct 2nd delta ms": d_second if who == "direct" else None,
                "TTFT − direct ms": ttft - d_ttft,
                "paired TTFT gap ms": median([x["ttft_ms"] - d["ttft_ms"] for x, d in pairs]),
                "paired tok/s ratio": median([x["tok_s"] / d["tok_s"] for x, d in pairs]),
                "TTFT − direct 2nd delta ms": ttft - d_second,
                "tok/s": tok,
                "× direct tok/s": tok / d_tok,
                "tokens": median([x["tokens"] for x in xs]),
                "first text mid-word": f"{sum(bool(x['first_mid_word']) for x in xs)}/{len(xs)}",
                "gateway CPU ms/token": sum(x["gateway_cpu_ms"] for x in xs) / max(sum(x["tokens"] for x in xs), 1),
            }
        )
    probes = [p for p in raw["probes"] if len(p) == 2]
    split = [p for p in probes if p[0][-1:].isalnum() and p[1][:1].isalnum()]
    joined = [p for p in probes if not p[0][-1:].isspace() and not p[1][:1].isspace()]
    probe = {"n": len(probes), "mid_word": len(split), "no_space_after": len(joined), "examples": split[:6]}
    c = raw["cancels"]
    cancel = {
        "n": len(c),
        "done_ms_median": median([x["done_ms"] for x in c]),
        "done_ms_max": max((x["done_ms"] for x in c), default=float("nan")),
        "upstream_closed_ms_median": median([x["upstream_closed_ms"] for x in c]),
        "upstream_closed_ms_max": max((x["upstream_closed_ms"] for x in c), default=float("nan")),
    }
    idle = [x for x in c if "slot_idle_ms" in x]  # llama-server only
    slot_line = ""
    if idle:
        cancel["slot_idle_ms_median"] = median([x["slot_idle_ms"] for x in idle])
        cancel["slot_idle_ms_max"] = max(x["slot_idle_ms"] for x in idle)
        cancel["slot_stopped_early"] = sum(int(x["slot_stopped_early"]) for x in idle)
        slot_line = (
            f"; llama-server's `/slots` showed every slot idle {cancel['slot_idle_ms_median']:.1f} ms median "
            f"(max {cancel['slot_idle_ms_max']:.1f}, polled after the done) after the cancel, {len(idle)} of "
            f"{len(c)} within 5 s, {cancel['slot_stopped_early']} of them stopped mid-task (`has_next_token` still "
            "true: the engine cut the task short, it did not run to its end)"
        )
    engine = (
        "llama.cpp's C++ `llama-server` (`--parallel 2`)"
        if args.engine == "llama-server"
        else "llama-cpp-python's OpenAI server (`python -m llama_cpp.server`)"
    )
    cols = ["path", "requests", "TTFT ms", "TTFT − direct ms", "paired TTFT gap ms", "TTFT − direct 2nd delta ms"]
    cols += ["tok/s", "× direct tok/s", "paired tok/s ratio", "first text mid-word", "gateway CPU ms/token"]
    md = (
        "# Remote engine: direct vs through the gateway\n\n"
        f"Engine: {engine}, embedded SmolLM2-135M "
        f"Q4_1, {args.engine_threads} thread(s); gateway: `stream-omni serve` with `model.backend: openai`; "
        f"greedy, {args.tokens} tokens, {args.rounds} rounds × {len(PROMPTS)} prompts, medians; "
        f"load average {raw['load_before']} before the run, {raw['load_after']} after. "
        f"Direct TTFT {d_ttft:.1f} ms to the first delta, {d_second:.1f} ms to the second (where our scheduler's "
        "first whole word can end).\n\n"
        + markdown_table(table, cols)
        + "\nCancel over the WebSocket (at the first delta): "
        f"`response.done` after {cancel['done_ms_median']:.1f} ms median (max {cancel['done_ms_max']:.1f}); "
        f"our connection to the engine closed after {cancel['upstream_closed_ms_median']:.1f} ms median "
        f"(max {cancel['upstream_closed_ms_max']:.1f}), n = {cancel['n']}{slot_line}.\n\n"
        f"First-delta probe ({probe['n']} short questions, the engine directly, greedy): the first delta is "
        f"only the start of a word (a letter or digit follows) in {probe['mid_word']}, e.g. "
        + ", ".join(f"`{a}`+`{b}`" for a, b in probe["examples"])
        + f"; no whitespace follows it (contractions, punctuation included) in {probe['no_space_after']}. "
        "With `eager_first` (the default for `backend: openai`) that first delta is the first chunk.\n\n"
        f"Machine: {json.dumps(machine())}\n"
    )
    out = {"machine": machine(), "args": vars(args), "table": table, "cancel": cancel, "probe": probe, "raw": raw}
    write("remote_llama_server" if args.engine == "llama-server" else "remote", out, md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--cancels", type=int, default=5)
    ap.add_argument("--engine-threads", type=int, default=1)
    ap.add_argument(
        "--engine",
        choices=["llama-cpp-python", "llama-server"],
        default="llama-cpp-python",
        help="llama-cpp-python's server (pip extra), or llama.cpp's C++ llama-server if one is found (LLAMA_SERVER, "
        "PATH, ~/.cache/llama-bin): results in remote_llama_server.{json,md}",
    )
    args = ap.parse_args()
    report(asyncio.run(run(args)), args)


if __name__ == "__main__":
    main()
