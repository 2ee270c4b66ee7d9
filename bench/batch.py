"""`stream-omni bench batch`: continuous batching, N concurrent Realtime sessions over WebSocket.

One real ``stream-omni serve`` process (default config: the embedded model on llama.cpp, the
engine batching up to ``engine.max_running`` responses per step). First every prompt is answered
alone, one after another (the N = 1 row and the greedy reference); then for N = 2, 4, 8, 16, N
sessions connect, and all send their question at once (different open questions, greedy,
``--tokens`` each). Per row: aggregate tok/s (all tokens / wall time from the first send to the
last response.done), mean per-session tok/s, TTFT p50/p99/max, inter-chunk p99, server RSS, and
how many replies are token-for-token the text the same prompt got alone. The same rounds run again
on a second server with ``speculative.drafter: none`` (skip with ``--no-baseline``), so what drafting
costs or gains is always measured side by side (``× none``); ``--workload grounded`` asks for
paragraph edits (drafting's best case), ``mix`` half of each.

Optional physical rows, measured in the same run when the binaries are given (never needed):
``--batched-bench PATH`` runs llama.cpp's ``llama-batched-bench`` on the same GGUF (S_TG per B);
``--llama-server PATH`` serves the GGUF with ``llama-server --parallel N`` and sends the same
prompts to its streaming /completion endpoint. Writes bench/results/batch.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import free_port, machine, markdown_table, server_process, write

QUESTIONS = [
    "Why is the sky blue?",
    "What makes a good friend?",
    "How do airplanes stay in the air?",
    "Why do we dream at night?",
    "What is the best way to learn a new language?",
    "How does a refrigerator keep food cold?",
    "Why do cats purr?",
    "What causes the seasons on Earth?",
    "How can I sleep better?",
    "What is photosynthesis?",
    "Why is exercise good for the brain?",
    "How do vaccines work?",
    "What should I pack for a beach trip?",
    "Why do leaves change color in autumn?",
    "How do bees make honey?",
    "What is the difference between weather and climate?",
]


PARAGRAPHS = [
    "The city council met on Tuesday to discuss the new bicycle lanes on Main Street. Supporters said the "
    "lanes would make cycling safer. The council voted five to two to build them next spring.",
    "Our bakery opens at seven every morning. We bake bread, rolls and two kinds of cake each day, and on "
    "Fridays we also make cinnamon buns. Orders for birthdays need two days of notice.",
    "The library will close early on Thursday for staff training. Books due that day can be returned on "
    "Friday without a fee. The reading room reopens at nine on Friday morning.",
    "Please water the tomato plants twice a week and the herbs once a week. Keep the basil in the sun and "
    "the mint in the shade. Pick the ripe tomatoes before the weekend.",
    "The school trip leaves at eight from the main gate. Students should bring a packed lunch, a water "
    "bottle and a coat. The bus returns at four in the afternoon.",
    "Our team meeting moves from Monday to Wednesday this week. We will review the budget, plan the spring "
    "launch and choose a date for the summer party. Please send your notes by Tuesday.",
    "The museum has a new exhibit about old maps. It shows how sailors found their way across the sea "
    "before satellites. Tickets are half price for students on weekdays.",
    "To reset the router, hold the small button on the back for ten seconds. Wait until the light turns "
    "green, then connect again with the password printed on the label.",
]
GROUNDED = [f"Repeat this text exactly, fixing nothing:\n\n{p}" for p in PARAGRAPHS]


WORKLOAD_TEXT = {
    "open": "different open questions",
    "grounded": "'repeat this paragraph' edits, different paragraphs",
    "mix": "half grounded edits, half open questions, interleaved",
}


def workload(name: str, n: int) -> list[str]:
    """The ``n`` prompts of one round: open questions, grounded edits, or half of each (interleaved)."""
    if name == "open":
        return QUESTIONS[:n]
    if name == "grounded":
        return [GROUNDED[i % len(GROUNDED)] for i in range(n)]
    return [(GROUNDED[i // 2 % len(GROUNDED)] if i % 2 == 0 else QUESTIONS[i // 2]) for i in range(n)]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def server_pid() -> int | None:
    """Our child running ``gateway.wiring.cli serve`` (bench.common's server_process started it)."""
    me = str(os.getpid())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"gateway.wiring.cli" in cmd:
            return int(d.name)
    return None


def rss_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def session(addr: str, question: str, tokens: int, start: asyncio.Event, recv_s: float) -> dict[str, Any]:
    """One Realtime session: connect, wait for the common start, ask, collect timings and text."""
    import websockets

    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), recv_s)  # session.created
        item = {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]},
        }
        await ws.send(json.dumps(item))
        await start.wait()
        t0 = time.monotonic()
        await ws.send(
            json.dumps({"type": "response.create", "response": {"max_output_tokens": tokens, "temperature": 0.0}})
        )
        stamps: list[float] = []
        text: list[str] = []
        out: dict[str, Any] = {"error": None, "tokens": 0}
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), recv_s))
            now = time.monotonic()
            if ev["type"] == "error":
                out["error"] = ev["error"].get("code")
                break
            if ev["type"] == "response.output_text.delta":
                stamps.append(now)
                text.append(ev["delta"])
            if ev["type"] == "response.done":
                resp = ev["response"]
                out["tokens"] = (
                    (resp.get("usage") or {}).get("output_tokens") or (resp.get("metrics") or {}).get("tokens") or 0
                )
                out["status"] = resp.get("status")
                break
        out.update(
            t0=t0,
            t_end=time.monotonic(),
            text="".join(text),
            ttft=(stamps[0] - t0) if stamps else None,
            gaps=[b - a for a, b in zip(stamps, stamps[1:], strict=False)],
        )
        return out


async def round_of(addr: str, questions: list[str], tokens: int, pid: int | None, recv_s: float) -> dict[str, Any]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(session(addr, q, tokens, start, recv_s)) for q in questions]
    await asyncio.sleep(0.5)  # every session connected and its question sent before the common start
    rss: list[float] = [rss_mb(pid)]
    load = os.getloadavg()[0]  # other work on the box: these figures only compare within one quiet run
    start.set()

    async def sample() -> None:
        while not all(t.done() for t in tasks):
            rss.append(rss_mb(pid))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    results = await asyncio.gather(*tasks)
    await sampler
    return {"sessions": results, "rss_mb_max": max(rss), "loadavg": load}


def summarize(n: int, runs: list[dict[str, Any]], solo: dict[str, str]) -> dict[str, Any]:
    """``runs``: rounds of ``n`` sessions (the solo row: many rounds of one)."""
    sessions = [s for r in runs for s in r["sessions"]]
    ok = [s for s in sessions if s["error"] is None]
    toks = sum(s["tokens"] for s in ok)
    wall = sum(max(s["t_end"] for s in r["sessions"]) - min(s["t0"] for s in r["sessions"]) for r in runs)
    ttft = [s["ttft"] for s in ok if s["ttft"] is not None]
    gaps = [g for s in ok for g in s["gaps"]]
    per = [s["tokens"] / max(s["t_end"] - s["t0"], 1e-9) for s in ok]
    same = sum(1 for s in ok if solo.get(s["question"]) == s["text"])
    return {
        "sessions": n,
        "aggregate tok/s": toks / max(wall, 1e-9),
        "per-session tok/s": sum(per) / len(per) if per else float("nan"),
        "TTFT p50 ms": pct(ttft, 0.5) * 1000,
        "TTFT p99 ms": pct(ttft, 0.99) * 1000,
        "TTFT max ms": max(ttft) * 1000 if ttft else float("nan"),
        "chunk gap p99 ms": pct(gaps, 0.99) * 1000,
        "server RSS MB": max(r["rss_mb_max"] for r in runs),
        "errors": len(sessions) - len(ok),
        "same as alone": f"{same}/{len(ok)}",
        "loadavg": max(r.get("loadavg", float("nan")) for r in runs),
    }


async def gateway_rows(
    addr: str, ns: list[int], tokens: int, recv_s: float, work: str = "open"
) -> tuple[list[dict[str, Any]], Any]:
    pid = server_pid()
    await round_of(addr, [QUESTIONS[-1]], 16, pid, recv_s)  # warm-up (graphs, caches)
    top = max(ns)
    solo_runs = []
    for q in dict.fromkeys(workload(work, top)):
        r = await round_of(addr, [q], tokens, pid, recv_s)
        r["sessions"][0]["question"] = q
        solo_runs.append(r)
    solo = {r["sessions"][0]["question"]: r["sessions"][0]["text"] for r in solo_runs}
    rows = [summarize(1, solo_runs, solo)]
    raw: dict[str, Any] = {"1": solo_runs}
    for n in ns:
        if n == 1:
            continue
        qs = workload(work, n)
        r = await round_of(addr, qs, tokens, pid, recv_s)
        for s, q in zip(r["sessions"], qs, strict=True):
            s["question"] = q
        raw[str(n)] = [r]
        rows.append(summarize(n, [r], solo))
    return rows, raw


def backend_rows(ns: list[int], threads: int, rounds: int = 12, ctx: int = 96) -> list[dict[str, Any]]:
    """The physical row, in this process (the server is stopped by then): our llama.cpp backend's
    ``forward_batch`` of one token for each of B sequences (every sequence ``ctx`` tokens deep),
    B visited in turn each round so load drift hits every B alike; fastest and median step."""
    import statistics

    from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

    b = LlamaCppBackend(LlamaCppConfig(threads=threads, n_ctx=1024, n_seq=max(ns)))
    states = [b.new_state() for _ in range(max(ns))]
    b.forward_batch([(s, [(17 + 31 * i + j) % 1000 + 10 for i in range(ctx)], 1) for j, s in enumerate(states)])
    times: dict[int, list[float]] = {n: [] for n in ns}
    for r in range(rounds + 1):
        for n in ns:
            base = [len(s.tokens) for s in states[:n]]
            t0 = time.perf_counter()
            b.forward_batch([(s, [100 + r], 1) for s in states[:n]])
            if r:  # round 0 warms the graphs up
                times[n].append(time.perf_counter() - t0)
            for s, k in zip(states[:n], base, strict=True):
                b.crop(s, k)
    b.close()
    return [
        {
            "sessions": n,
            "backend step tok/s (fastest)": n / min(times[n]),
            "backend step tok/s (median)": n / statistics.median(times[n]),
        }
        for n in ns
    ]


def batched_bench_rows(binary: str, gguf: str, ns: list[int], threads: int) -> list[dict[str, Any]]:
    """llama.cpp's own ``llama-batched-bench``: the physical ceiling of batching on this box."""
    cmd = [
        binary,
        "-m",
        gguf,
        "-c",
        str(4096 * 4),
        "-b",
        "2048",
        "-ub",
        "512",
        "-npp",
        "32",
        "-ntg",
        "64",
        "-npl",
        ",".join(map(str, ns)),
        "-t",
        str(threads),
        "-fa",
        "on",
        "--output-format",
        "jsonl",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            rows.append({"sessions": d["pl"], "llama-batched-bench S_TG t/s": d["speed_tg"]})
    return rows


async def llama_server_round(port: int, questions: list[str], tokens: int, recv_s: float) -> dict[str, Any]:
    """Streaming /completion requests (chat template applied by the server's /v1/chat/completions)."""
    import httpx

    async def one(client: Any, q: str) -> dict[str, Any]:
        t0 = time.monotonic()
        stamps: list[float] = []
        n = 0
        body = {"messages": [{"role": "user", "content": q}], "max_tokens": tokens, "temperature": 0.0, "stream": True}
        async with client.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    d = json.loads(line[6:])
                    if d["choices"] and d["choices"][0]["delta"].get("content"):
                        stamps.append(time.monotonic())
                        n += 1
        return {
            "t0": t0,
            "t_end": time.monotonic(),
            "tokens": n,
            "error": None,
            "text": "",
            "ttft": stamps[0] - t0 if stamps else None,
            "gaps": [b - a for a, b in zip(stamps, stamps[1:], strict=False)],
            "question": q,
        }

    async with httpx.AsyncClient(timeout=recv_s) as client:
        res = await asyncio.gather(*(one(client, q) for q in questions))
    return {"sessions": list(res), "rss_mb_max": float("nan")}


def llama_server_rows(
    binary: str, gguf: str, ns: list[int], tokens: int, threads: int, recv_s: float, work: str = "open"
) -> list[dict]:
    rows = []
    for n in ns:
        port = free_port()
        cmd = [
            binary,
            "-m",
            gguf,
            "--port",
            str(port),
            "--parallel",
            str(n),
            "-c",
            str(4096 * n),
            "-t",
            str(threads),
            "-fa",
            "on",
            "--no-webui",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("llama-server did not start")
                time.sleep(0.3)
            asyncio.run(llama_server_round(port, QUESTIONS[:1], 16, recv_s))  # warm-up
            r = asyncio.run(llama_server_round(port, workload(work, n), tokens, recv_s))
            row = summarize(n, [r], {})
            rows.append(
                {
                    "sessions": n,
                    "llama-server aggregate tok/s": row["aggregate tok/s"],
                    "llama-server TTFT p99 ms": row["TTFT p99 ms"],
                }
            )
        finally:
            proc.terminate()
            proc.wait(30)
    return rows


def config_overrides(sets: list[str]) -> dict[str, Any]:
    """The servers' config: audio off, then each ``--set KEY=VALUE`` (numbers and booleans as JSON)."""
    overrides: dict[str, Any] = {"audio.enabled": False}
    for kv in sets:
        key, _, value = kv.partition("=")
        overrides[key] = json.loads(value) if value[:1].isdigit() or value in ("true", "false") else value
    return overrides


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", default="1,2,4,8,16", help="comma-separated N")
    ap.add_argument("--tokens", type=int, default=128, help="max_output_tokens per response")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds any one receive may take")
    ap.add_argument("--set", action="append", default=[], help="config override KEY=VALUE (e.g. engine.max_running=4)")
    ap.add_argument("--batched-bench", default=None, help="path to llama-batched-bench (optional row)")
    ap.add_argument("--llama-server", default=None, help="path to llama-server (optional rows)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads of the physical rows")
    ap.add_argument("--no-backend-rows", action="store_true", help="skip the in-process forward_batch rows")
    ap.add_argument("--name", default="batch", help="results file name under bench/results/")
    ap.add_argument("--workload", choices=["open", "grounded", "mix"], default="open", help="the prompts")
    ap.add_argument("--no-baseline", action="store_true", help="skip the drafter: none rows")
    args = ap.parse_args()
    ns = [int(x) for x in args.sessions.split(",")]
    overrides = config_overrides(args.set)
    configs: list[tuple[str, dict[str, Any]]] = [("default", {})]
    if not args.no_baseline:  # the cost or the gain of drafting is always on the table
        configs.append(("drafter: none", {"speculative.drafter": "none"}))
    by_config: dict[str, list[dict[str, Any]]] = {}
    raw: dict[str, Any] = {}
    texts: dict[str, dict[str, str]] = {}
    for label, extra_cfg in configs:
        with server_process({**overrides, **extra_cfg}, timeout_s=900) as addr:
            cfg_rows, cfg_raw = asyncio.run(gateway_rows(addr, ns, args.tokens, args.timeout, args.workload))
        for r in cfg_rows:
            r["config"] = label
        by_config[label], raw[label] = cfg_rows, cfg_raw
        texts[label] = {s["question"]: s["text"] for s in (x for rr in cfg_raw["1"] for x in rr["sessions"])}
    rows = by_config["default"]
    base = by_config.get("drafter: none")
    if base is not None:
        for r, b in zip(rows, base, strict=True):
            r["× none"] = r["aggregate tok/s"] / b["aggregate tok/s"]
        same = sum(texts["default"][q] == texts["drafter: none"].get(q) for q in texts["default"])
        for r in rows:  # greedy identity across configurations: drafting never changes the text
            r["same as none"] = f"{same}/{len(texts['default'])}" if r["sessions"] == 1 else ""
    from models.llm import embedded_gguf

    gguf = str(embedded_gguf())
    extra: list[dict[str, Any]] = backend_rows(ns, args.threads) if not args.no_backend_rows else []
    if args.batched_bench:
        extra += batched_bench_rows(args.batched_bench, gguf, ns, args.threads)
    if args.llama_server:
        extra += llama_server_rows(args.llama_server, gguf, ns, args.tokens, args.threads, args.timeout, args.workload)
    for e in extra:
        for r in rows:
            if r["sessions"] == e["sessions"]:
                r.update({k: v for k, v in e.items() if k != "sessions"})
    phys = [r for r in rows if "backend step tok/s (fastest)" in r]
    if phys:
        one_step = phys[0]["backend step tok/s (fastest)"]
        for r in phys:
            r["backend × one"] = r["backend step tok/s (fastest)"] / one_step
    one = rows[0]["aggregate tok/s"]
    for r in rows:
        r["× one"] = r["aggregate tok/s"] / one
        if "backend step tok/s (fastest)" in r:
            r["× backend step"] = r["aggregate tok/s"] / r["backend step tok/s (fastest)"]
        if "llama-server aggregate tok/s" in r:
            r["× llama-server"] = r["aggregate tok/s"] / r["llama-server aggregate tok/s"]
    if base is not None:
        one_b = base[0]["aggregate tok/s"]
        for r in base:
            r["× one"] = r["aggregate tok/s"] / one_b
    rows = sorted([*rows, *(base or [])], key=lambda r: (r["sessions"], r["config"] != "default"))
    cols = ["config", *dict.fromkeys(k for r in rows for k in r if k != "config")]
    md = f"# bench batch — {machine()}\n\n"
    md += (
        f"`stream-omni serve` (default config{', ' + ', '.join(args.set) if args.set else ''}; audio off), "
        "and the same with `speculative.drafter: none` in the same run (× none: default over none at that N; "
        "same as none: replies alone token-identical across the two), "
        f"workload {args.workload} ({WORKLOAD_TEXT[args.workload]}), "
        f"{args.tokens} tokens per response, greedy. N = 1: each prompt alone, "
        "one after another (also the greedy reference for 'same as alone'). 'backend step': our llama.cpp "
        "backend in this process after the server stopped, one forward_batch of one token for each of N "
        "sequences, N visited in turn each round, fastest and median of 12 rounds (the physical ceiling, "
        "like llama-batched-bench S_TG). loadavg: the box's 1-minute load when the round started (2 cores; "
        "other work running makes every figure slower and noisier).\n\n"
    )
    md += markdown_table(rows, cols)
    for per_n in raw.values():
        for rnd in per_n.values():
            for r in rnd:
                for s in r["sessions"]:
                    s.pop("gaps", None)
    write(args.name, {"machine": machine(), "args": vars(args), "rows": rows, "raw": raw}, md)


if __name__ == "__main__":
    main()
