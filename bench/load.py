"""`stream-omni bench load`: many concurrent WebSocket sessions against a gateway process (loopback).

Fake model: N sessions chat in a loop for D seconds → errors, responses, p50/p99 gap between
deltas and TTFT, server RSS. Real model: N sessions at once with max_running=N → every session
progresses; extra sessions get server_busy. Bounded in count and time; writes bench/results/load_*.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from bench.common import free_port, machine, markdown_table, write


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def client(addr: str, until: float, stats: dict[str, Any], once: bool = False) -> None:
    import websockets

    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.recv()
        item = {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        }
        while time.monotonic() < until:
            await ws.send(json.dumps(item))
            t0 = time.monotonic()
            await ws.send(
                json.dumps(
                    {
                        "type": "response.create",
                        "response": {"max_output_tokens": 48, "scheduler": {"strategy": "fast"}},
                    }
                )
            )
            last = None
            while True:
                ev = json.loads(await ws.recv())
                now = time.monotonic()
                if ev["type"] == "error":
                    stats["errors"][ev["error"]["code"]] = stats["errors"].get(ev["error"]["code"], 0) + 1
                    if ev["error"]["code"] == "server_busy":
                        return
                if ev["type"] == "response.output_text.delta":
                    if last is None:
                        stats["ttft"].append(now - t0)
                    else:
                        stats["gaps"].append(now - last)
                    last = now
                    stats["deltas"] += 1
                if ev["type"] == "response.done":
                    stats["responses"] += 1
                    break
            if once:
                return


async def run_load(addr: str, sessions: int, duration: float, pid: int) -> dict[str, Any]:
    stats: dict[str, Any] = {"errors": {}, "ttft": [], "gaps": [], "responses": 0, "deltas": 0}
    until = time.monotonic() + duration
    rss: list[float] = []

    async def sample() -> None:
        while time.monotonic() < until:
            rss.append(rss_mb(pid))
            await asyncio.sleep(1.0)

    await asyncio.gather(sample(), *(client(addr, until, stats) for _ in range(sessions)))
    stats["rss_mb_max"] = max(rss) if rss else None
    stats["rss_mb_start"] = rss[0] if rss else None
    return stats


async def run_real(addr: str, sessions: int, extra: int) -> dict[str, Any]:
    per = [{"errors": {}, "ttft": [], "gaps": [], "responses": 0, "deltas": 0} for _ in range(sessions + extra)]
    until = time.monotonic() + 600
    tasks = [asyncio.create_task(client(addr, until, per[i], once=True)) for i in range(sessions)]
    await asyncio.sleep(1.0)  # the first N are decoding now
    tasks += [asyncio.create_task(client(addr, until, per[sessions + i], once=True)) for i in range(extra)]
    await asyncio.gather(*tasks)
    return {"per_session": per}


def start_server(backend: str, port: int, max_running: int, max_waiting: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "bench.load_server",
        "--backend",
        backend,
        "--port",
        str(port),
        "--max-running",
        str(max_running),
        "--max-waiting",
        str(max_waiting),
    ]
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("load server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--real-sessions", type=int, default=8)
    ap.add_argument("--real-extra", type=int, default=2)
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()

    port = free_port()
    proc = start_server("fake", port, max_running=args.sessions, max_waiting=args.sessions)
    try:
        fake = asyncio.run(run_load(f"127.0.0.1:{port}", args.sessions, args.duration, proc.pid))
    finally:
        proc.terminate()
        proc.wait(30)
    rows = [
        {
            "run": f"fake model, {args.sessions} sessions, {args.duration:.0f} s",
            "responses": fake["responses"],
            "errors": sum(fake["errors"].values()),
            "TTFT p50 ms": pct(fake["ttft"], 0.5) * 1000,
            "TTFT p99 ms": pct(fake["ttft"], 0.99) * 1000,
            "delta gap p50 ms": pct(fake["gaps"], 0.5) * 1000,
            "delta gap p99 ms": pct(fake["gaps"], 0.99) * 1000,
            "server RSS MB (start→max)": f"{fake['rss_mb_start']:.0f}→{fake['rss_mb_max']:.0f}",
        }
    ]
    real: dict[str, Any] = {}
    if not args.skip_real:
        port = free_port()
        proc = start_server("real", port, max_running=args.real_sessions, max_waiting=0)
        try:
            real = asyncio.run(run_real(f"127.0.0.1:{port}", args.real_sessions, args.real_extra))
        finally:
            proc.terminate()
            proc.wait(30)
        per = real["per_session"]
        served = per[: args.real_sessions]
        rows.append(
            {
                "run": f"real model, {args.real_sessions} at once + {args.real_extra} extra",
                "responses": sum(s["responses"] for s in per),
                "errors": sum(sum(s["errors"].values()) for s in served),
                "TTFT p50 ms": pct([t for s in served for t in s["ttft"]], 0.5) * 1000,
                "TTFT p99 ms": pct([t for s in served for t in s["ttft"]], 0.99) * 1000,
                "delta gap p50 ms": pct([g for s in served for g in s["gaps"]], 0.5) * 1000,
                "delta gap p99 ms": pct([g for s in served for g in s["gaps"]], 0.99) * 1000,
                "server RSS MB (start→max)": "",
            }
        )
        real["progressed"] = sum(1 for s in served if s["deltas"] > 0)
        real["busy_extra"] = sum(1 for s in per[args.real_sessions :] if s["errors"].get("server_busy"))
    md = f"# bench load — {machine()}\n\n"
    md += markdown_table(rows, list(rows[0]))
    if real:
        md += (
            f"\nReal model: {real['progressed']}/{args.real_sessions} sessions progressed; "
            f"{real['busy_extra']}/{args.real_extra} extra sessions got server_busy.\n"
        )
    write("load", {"machine": machine(), "args": vars(args), "fake": fake, "real": real, "rows": rows}, md)


if __name__ == "__main__":
    main()
