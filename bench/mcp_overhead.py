"""What running an MCP tool inside a Realtime response costs over calling it directly.

In one run, side by side, alternating: a direct call of the MCP test server's ``add`` tool from an open
``mcp`` ClientSession (the tool's own run time, plus one loopback round trip), and the same call made by
the gateway inside a response — the model (the embedded SmolLM2 on llama.cpp) is forced to call it, and the
client times ``response.mcp_call.in_progress`` → ``response.mcp_call.completed``: the gateway's dispatch,
its guarded HTTP client, the SDK, output capping (the model's tokenizer), the events. Both events ride the
same socket, so their delivery cancels out. Medians and p90 over rounds; the 1-minute load average beside.

    python -m bench.mcp_overhead [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .common import free_port, machine, markdown_table, median, server_process, write

ROOT = Path(__file__).resolve().parent.parent


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * len(s)))] if s else float("nan")


def start_mcp() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = tempfile.NamedTemporaryFile(suffix=".log", delete=False).name
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tools.servers", "http", str(port), log],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the MCP server did not start") from None
            time.sleep(0.05)


async def until(ws: Any, type_: str) -> tuple[dict[str, Any], float]:
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), 300))
        if ev["type"] == "error":
            raise RuntimeError(ev["error"])
        if ev["type"] == "response.done" and type_ != "response.done":
            raise RuntimeError(f"the response ended before {type_}: {ev['response']['status_details']}")
        if ev["type"] == type_:
            return ev, time.perf_counter()


async def run(addr: str, url: str, rounds: int) -> dict[str, list[float]]:
    direct: list[float] = []
    gateway: list[float] = []
    async with streamable_http_client(url) as streams, ClientSession(streams[0], streams[1]) as mcp:
        await mcp.initialize()
        await mcp.call_tool("add", {"a": 1, "b": 1})  # warm
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=60, max_size=None)
        try:
            await until(ws, "session.created")
            tool = {"type": "mcp", "server_label": "calc", "server_url": url, "require_approval": "never"}
            await ws.send(json.dumps({"type": "session.update", "session": {"tools": [tool]}}))
            await until(ws, "mcp_list_tools.completed")
            for i in range(rounds + 1):
                t0 = time.perf_counter()
                await mcp.call_tool("add", {"a": i, "b": 1})
                took = time.perf_counter() - t0
                item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"{i}+1?"}]}
                await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
                choice = {"type": "mcp", "server_label": "calc", "name": "add"}
                await ws.send(
                    json.dumps(
                        {"type": "response.create", "response": {"tool_choice": choice, "max_output_tokens": 48}}
                    )
                )
                _, start = await until(ws, "response.mcp_call.in_progress")
                _, end = await until(ws, "response.mcp_call.completed")
                await until(ws, "response.done")
                if i:  # the first round warms the gateway's connection
                    direct.append(took * 1000)
                    gateway.append((end - start) * 1000)
        finally:
            await ws.close()
    return {"direct": direct, "gateway": gateway}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    proc, url = start_mcp()
    try:
        with server_process({"audio.enabled": False, "tools.mcp_allowed_urls": [url]}, timeout_s=900) as addr:
            times = asyncio.run(run(addr, url, args.rounds))
    finally:
        proc.terminate()
        proc.wait(10)
    info = machine()
    rows = [{"path": name, "median_ms": median(xs), "p90_ms": p90(xs), "rounds": len(xs)} for name, xs in times.items()]
    over = median(times["gateway"]) - median(times["direct"])
    rows.append({"path": "overhead (gateway − direct)", "median_ms": over, "p90_ms": None, "rounds": None})
    md = (
        "# MCP tool call: inside a Realtime response vs a direct mcp client call\n\n"
        f"`python -m bench.mcp_overhead --rounds {args.rounds}` — {info['when']}, {info['cpus']} CPUs, "
        f"load average (1 min) {info['loadavg_1m']}. Target: overhead ≤ 10 ms.\n\n"
        + markdown_table(rows, ["path", "median_ms", "p90_ms", "rounds"])
    )
    write("mcp_overhead", {"machine": info, "times_ms": times, "overhead_ms": over}, md)


if __name__ == "__main__":
    main()
