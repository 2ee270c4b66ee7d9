"""A small test client over the real `websockets` library."""

# ruff: noqa: ASYNC109  (a per-call timeout is the point of these helpers)

from __future__ import annotations

import asyncio
import json
from typing import Any

import websockets


class RealtimeClient:
    def __init__(self, ws: Any):
        self.ws = ws
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, addr: str, query: str = "model=tiny-llama", **kw: Any) -> RealtimeClient:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime?{query}", max_size=None, **kw)
        return cls(ws)

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def recv(self, timeout: float = 60) -> dict[str, Any]:
        ev = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(ev)
        return ev

    async def until(self, type_: str, timeout: float = 120) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            ev = await self.recv(max(0.01, deadline - loop.time()))
            if ev["type"] == type_:
                return ev

    async def update_session(self, session: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
        """Send ``session.update`` and return the ``session.updated`` that answers it."""
        await self.send({"type": "session.update", "session": session})
        return await self.until("session.updated", timeout)

    async def say(self, text: str, role: str = "user") -> None:
        await self.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]},
            }
        )

    async def ask(self, text: str, **response: Any) -> dict[str, Any]:
        """Send a user message, create a response, return its response.done."""
        await self.say(text)
        await self.send({"type": "response.create", "response": response})
        return await self.until("response.done")

    def text_of(self, response_id: str) -> str:
        return "".join(
            e["delta"]
            for e in self.events
            if e["type"] == "response.output_text.delta" and e["response_id"] == response_id
        )

    async def close(self) -> None:
        await self.ws.close()
