"""Big frames vs. everyone else: a victim session's longest gap between deltas, alone and while 3
clients send 15 MB text frames (under the 16 MiB limit), side by side in one run against one gateway
process on the fake model. Also with big frames parsed on a thread instead of a process (the GIL
is held through each C call of the parse), and with every protection off (parse on the loop, no
bytes/s bound), to show what each buys. Target: attacked ≤ 1.5× alone (a victim may slow, never stall). Writes
bench/results/bigframes.*.

`python -m bench.bigframes_bench [--seconds 15] [--attackers 3] [--frame-mb 15] [--repeat 1]` (the box's load moves
the gaps: repeats interleave the servers, so that each is measured under the same load)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import websockets

from bench.common import free_port, machine, markdown_table, write

USER = {
    "type": "conversation.item.create",
    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
}
THREAD = ["limits.parse_processes=0"]
OFF = ["limits.parse_off_loop_bytes=1000000000", "limits.inbound_bytes_per_s=1000000000000"]
SERVERS = {
    "default: big frames parsed in a process": [],
    "big frames parsed on a thread": THREAD,
    "parse on the loop, no bytes/s bound": OFF,
}


def start(port: int, sets: list[str], code: str | None = None) -> subprocess.Popen[bytes]:
    """``code``: another checkout to run the server from (``--before``)."""
    cmd = [sys.executable, "-m", "bench.load_server", "--backend", "fake", "--port", str(port), "--step-ms", "5"]
    for kv in sets:
        cmd += ["--set", kv]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if code:
        env["PYTHONPATH"] = code
    proc = subprocess.Popen(cmd, env=env, cwd=code)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            asyncio.run(_probe(port))
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


async def _probe(port: int) -> None:
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime", open_timeout=2):
        pass


async def warm(addr: str, frame_mb: float) -> None:
    """One big frame before measuring: the parse process starts on the first (≈ 0.6 s of imports)."""
    frame = json.dumps({"type": "x.unknown", "pad": "A" * int(frame_mb * 1_000_000)})
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.send(frame)
        while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "error":
            pass


async def victim(addr: str, until: float) -> dict[str, Any]:
    """Back-to-back responses; the longest gap between two deltas of one response."""
    gaps: list[float] = []
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.send(json.dumps(USER))
        while time.monotonic() < until:
            await ws.send(json.dumps({"type": "response.create"}))
            last = None
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if ev["type"] == "response.output_text.delta":
                    now = time.monotonic()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                elif ev["type"] == "response.done":
                    break
    gaps.sort()
    return {"max_gap_ms": gaps[-1] * 1000, "p99_gap_ms": gaps[int(0.99 * (len(gaps) - 1))] * 1000, "deltas": len(gaps)}


async def attacker(addr: str, until: float, frame: str, sent: list[int]) -> None:
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None, max_queue=None) as ws:
        while time.monotonic() < until:
            await ws.send(frame)  # waits when the server stops reading (TCP backpressure)
            sent[0] += 1


async def flood(addr: str, seconds: float, attackers: int, frame_mb: float) -> int:
    frame = json.dumps({"type": "x.unknown", "pad": "A" * int(frame_mb * 1_000_000)})  # parsed in full, refused
    until = time.monotonic() + seconds
    sent = [0]
    await asyncio.gather(*(attacker(addr, until, frame, sent) for _ in range(attackers)), return_exceptions=True)
    return sent[0]


def scenario(addr: str, seconds: float, attackers: int, frame_mb: float, nice: int = 0) -> dict[str, Any]:
    """The attackers run in a process of their own: in the victim's, their sends would delay its reads.
    ``nice``: that process's CPU priority. An attacker is another machine; on this 2-core box its own
    work (building and masking 15 MB frames, ≈ 3 cores' worth of senders) competes with the server and
    the victim for the same two cores unless it runs below them."""
    proc = None
    if attackers:
        code = f"import asyncio, os; os.nice({nice}); from bench.bigframes_bench import flood; "
        code += f"print(asyncio.run(flood({addr!r}, {seconds + 2}, {attackers}, {frame_mb})))"
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the flood is on before the victim starts
    out = asyncio.run(victim(addr, time.monotonic() + seconds))
    out["frames_sent"] = int(proc.communicate(timeout=120)[0].strip() or 0) if proc else 0
    return out


def git_head(checkout: str) -> str:
    out = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--attackers", type=int, default=3)
    ap.add_argument("--frame-mb", type=float, default=15.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--before", metavar="CHECKOUT", help="also a server from this checkout (main)")
    ap.add_argument("--attacker-nice", type=int, default=0, help="the attackers' process priority (19: lowest)")
    ap.add_argument("--only-default", action="store_true", help="just the default server")
    args = ap.parse_args()
    chosen = list(SERVERS.items())[:1] if args.only_default else list(SERVERS.items())
    servers = {name: (sets, None) for name, sets in chosen}
    if args.before:
        servers[f"before: {args.before} at {git_head(args.before)}"] = ([], args.before)
    rows = []
    for run, (name, (sets, code)) in ((r, s) for r in range(args.repeat) for s in servers.items()):
        load = os.getloadavg()[0]  # other work on the box: the gaps alone move with it
        port = free_port()
        proc = start(port, sets, code)
        try:
            addr = f"127.0.0.1:{port}"
            asyncio.run(warm(addr, args.frame_mb))
            alone = scenario(addr, args.seconds, 0, args.frame_mb)
            attacked = scenario(addr, args.seconds, args.attackers, args.frame_mb, args.attacker_nice)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
        rows.append(
            {
                "run": run + 1,
                "server": name,
                "load 1m": load,
                "alone max gap ms": alone["max_gap_ms"],
                "attacked max gap ms": attacked["max_gap_ms"],
                "ratio": attacked["max_gap_ms"] / alone["max_gap_ms"],
                "alone p99 ms": alone["p99_gap_ms"],
                "attacked p99 ms": attacked["p99_gap_ms"],
                "15 MB frames accepted": attacked["frames_sent"],
            }
        )
    cols = list(rows[0])
    md = (
        f"# Big frames ({args.attackers} clients × {args.frame_mb:g} MB text frames, {args.seconds:g} s each)\n\n"
        "Big frames are parsed in a process at nice +10 (default), on a thread, or on the loop with no bytes/s bound.\n"
        "Victim: back-to-back responses on the fake model (5 ms steps); gap = time between two of its deltas.\n"
        "ratio = attacked max gap / alone max gap (target ≤ 1.5); load 1m = the box's load average then.\n"
        f"The attackers' process ran at nice {args.attacker_nice} (19: as if on another machine).\n\n"
        + markdown_table(rows, cols)
        + f"\nmachine: {machine()}\n"
    )
    write("bigframes", {"machine": machine(), "args": vars(args), "rows": rows}, md)


if __name__ == "__main__":
    main()
