"""`stream-omni bench replicas`: two gateway replicas sharing sessions through a real Redis.

Side by side in one run, on the fake model (the model is not what is measured):
- resume latency, reconnect → first replayed event, on the session's own replica vs on the other
  one (which replays from Redis after asking the owner for its received count), interleaved;
- owner killed (SIGKILL) mid-response while the client is attached through the other replica:
  kill → ``response.done`` (incomplete, server_error), at two lease times.
Writes bench/results/replicas.{json,md}. Needs redis-server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets

from bench.common import machine, markdown_table, write
from testkit.replicas import RedisServer, replica

OPTS: dict[str, Any] = {"max_size": None, "open_timeout": 10, "close_timeout": 5}
USER = json.dumps(
    {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "tell me"}]},
    }
)


async def recv(ws: Any, timeout_s: float = 15) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout_s))


async def ask(addr: str, until: str) -> tuple[str, int]:
    """A new session asks for a reply and leaves once it has seen an event of type ``until``:
    its resume token and the last seq it read."""
    ws = await websockets.connect(f"ws://{addr}/v1/realtime", **OPTS)
    ev = await recv(ws)
    token, last = ev["resume"]["token"], ev["seq"]
    await ws.send(USER)
    await ws.send(json.dumps({"type": "response.create"}))
    while ev["type"] != until:
        ev = await recv(ws)
        last = ev.get("seq", last)
    await ws.close()
    return token, last


async def one_turn(addr: str) -> tuple[str, int]:
    """A session with one finished reply: its token and last seq."""
    return await ask(addr, "response.done")


async def resume_ms(addr: str, token: str, last_seq: int) -> float:
    t0 = time.perf_counter()
    ws = await websockets.connect(f"ws://{addr}/v1/realtime?resume_token={token}&last_seq={last_seq}", **OPTS)
    hello = await recv(ws)
    assert hello["type"] == "session.resumed", hello
    ev = await recv(ws)  # the first replayed event
    took = (time.perf_counter() - t0) * 1000
    assert ev["seq"] == last_seq + 1, ev
    await ws.close()
    return took


async def killed(owner: Any, other: str) -> float:
    """Kill the owner mid-response with the client on the other replica: seconds to response.done."""
    token, last = await ask(f"127.0.0.1:{owner.port}", "response.output_text.delta")
    ws = await websockets.connect(f"ws://{other}/v1/realtime?resume_token={token}&last_seq={last}", **OPTS)
    assert (await recv(ws))["type"] == "session.resumed"
    owner.kill()
    t0 = time.perf_counter()
    while True:
        ev = await recv(ws, 30)
        if ev["type"] == "response.done":
            assert ev["response"]["status"] == "incomplete", ev
            await ws.close()
            return time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100, help="resumes per replica")
    ap.add_argument("--kills", type=int, default=3, help="owner kills per lease time")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    redis = RedisServer(tmp).start()
    rows: list[dict[str, Any]] = []
    pair: list[Any] = []
    try:
        for _ in range(2):
            pair.append(replica(tmp, redis.url, answer_tokens=200, step_s=0.002).start())
        a, b = (f"127.0.0.1:{p.port}" for p in pair)
        token, last = asyncio.run(one_turn(a))
        same: list[float] = []
        other: list[float] = []
        for i in range(args.trials):  # interleaved: both see the same moments of the box
            back = last - 1 - i % 20  # 1..20 events to replay
            same.append(asyncio.run(resume_ms(a, token, back)))
            other.append(asyncio.run(resume_ms(b, token, back)))
        for name, xs in (("own replica (memory)", same), ("other replica (Redis)", other)):
            rows.append(
                {
                    "measure": f"resume on the {name}: reconnect → first replayed event",
                    "median": round(statistics.median(xs), 1),
                    "p99": round(pct(xs, 0.99), 1),
                    "unit": "ms",
                    "n": len(xs),
                }
            )
        for p in pair:
            p.stop()
        for lease in (1.0, 3.0):
            times = []
            for _ in range(args.kills):
                conf = {"replicas": {"lease_s": lease}, "server": {"grace_period_s": 60}}
                owner, survivor = (
                    replica(tmp, redis.url, settings=conf, answer_tokens=2000, step_s=0.01).start() for _ in range(2)
                )
                try:
                    times.append(asyncio.run(killed(owner, f"127.0.0.1:{survivor.port}")))
                finally:
                    owner.stop()
                    survivor.stop()
            rows.append(
                {
                    "measure": f"owner killed, lease {lease:g} s: kill → response.done incomplete",
                    "median": round(statistics.median(times), 2),
                    "p99": round(max(times), 2),
                    "unit": "s",
                    "n": len(times),
                }
            )
    finally:
        for p in pair:
            p.stop()
        redis.stop()
    info = machine()
    md = (
        f"# bench replicas — {info}\n\nTwo replica processes (fake model) + redis-server on loopback."
        " Targets: resume on another replica ≤ 50 ms; owner killed → response.done within the lease + 1 s.\n\n"
        + markdown_table(rows, ["measure", "median", "p99", "unit", "n"])
    )
    write("replicas", {"machine": info, "rows": rows}, md)


if __name__ == "__main__":
    main()
