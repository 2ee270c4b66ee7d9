"""A realtime client for the replica tests: each (re)connect goes to a replica it picks, and it
counts what a resume may never do — a duplicate, a gap, a resume_failed — instead of hiding it."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import websockets

from tests.resume_client import WS_OPTS, Stalled, drop, recv


@dataclass
class Run:
    token: str | None = None
    last_seq: int = -1
    events: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    gaps: int = 0
    resume_failed: int = 0
    resumes: int = 0
    server_closes: int = 0
    frames: list[str] = field(default_factory=list)  # what this client sent to its session, in order
    resent: int = 0
    replicas_used: set[str] = field(default_factory=set)
    resume_ms: list[float] = field(default_factory=list)  # reconnect → first replayed event

    def accept(self, ev: dict[str, Any]) -> None:
        if ev["type"] == "error" and ev["error"]["code"] == "resume_failed":
            self.resume_failed += 1
            return
        if "seq" not in ev:
            return
        if ev["seq"] <= self.last_seq:
            self.duplicates += 1
            return
        if ev["seq"] != self.last_seq + 1:
            self.gaps += 1
        self.last_seq = ev["seq"]
        self.events.append(ev)
        if ev["type"] == "session.created":
            self.token = ev["resume"]["token"]

    def text(self, response_index: int = -1) -> str:
        ids = [e["response"]["id"] for e in self.events if e["type"] == "response.created"]
        rid = ids[response_index]
        return "".join(
            e["delta"] for e in self.events if e["type"] == "response.output_text.delta" and e["response_id"] == rid
        )

    def count(self, type_: str) -> int:
        return sum(1 for e in self.events if e["type"] == type_)


def user(text: str) -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return json.dumps({"type": "conversation.item.create", "item": item})


CREATE = json.dumps({"type": "response.create"})


async def connect(addr: str, run: Run) -> Any:
    if run.token is None:
        return await websockets.connect(f"ws://{addr}/v1/realtime", **WS_OPTS)
    url = f"ws://{addr}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}"
    return await websockets.connect(url, **WS_OPTS)


async def send_turn(ws: Any, run: Run, say: str) -> None:
    frames = [user(say), CREATE]
    run.frames += frames
    for frame in frames:
        await ws.send(frame)


async def turn(
    run: Run,
    replicas: list[str],
    say: str,
    cuts: list[tuple[int, str]],
    rng: random.Random,
    recv_timeout_s: float = 15,
) -> None:
    """One user turn (``say`` + response.create) until its response.done, cutting the socket after
    each listed count of received frames and reconnecting to a randomly chosen replica."""
    plan = list(cuts)
    sent = False
    done_before = run.count("response.done")
    received = 0
    addr = rng.choice(replicas)
    while True:
        t0 = time.perf_counter()
        ws = await connect(addr, run)
        run.replicas_used.add(addr)
        first = True
        try:
            while True:
                if plan and received >= plan[0][0]:
                    how = plan.pop(0)[1]
                    received = 0
                    await drop(ws, how)
                    break
                ev = await recv(ws, recv_timeout_s)
                received += 1
                if ev["type"] == "session.resumed":
                    run.resumes += 1
                    for frame in run.frames[ev["received_events"] :]:  # lost in the drop: send again
                        await ws.send(frame)
                        run.resent += 1
                    if not sent:  # a later turn begins on a resumed socket
                        await send_turn(ws, run, say)
                        sent = True
                    continue
                if first and run.token is not None:
                    run.resume_ms.append((time.perf_counter() - t0) * 1000)
                first = False
                run.accept(ev)
                if ev["type"] == "error" and ev["error"]["code"] == "resume_failed":
                    raise AssertionError(f"resume_failed: {ev['error']['message']}")
                if not sent and ev["type"] == "session.created":
                    await send_turn(ws, run, say)
                    sent = True
                if run.count("response.done") > done_before:
                    await ws.close()
                    return
        except websockets.ConnectionClosed:
            run.server_closes += 1
        finally:
            if ws.transport is not None and not ws.transport.is_closing():
                ws.transport.abort()
        addr = rng.choice(replicas)


__all__ = ["CREATE", "Run", "Stalled", "asyncio", "turn", "user"]
