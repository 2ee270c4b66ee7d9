"""A scripted telephony provider for tests: Twilio's Media Streams protocol over a real WebSocket.

It sends ``connected`` and ``start``, streams the caller's µ-law in paced 20 ms frames, and plays
what the gateway sends the way Twilio does: frames into a buffer played in real time, each ``mark``
echoed once the audio before it has played, ``clear`` drops the buffer and echoes the pending marks.
"""

# ruff: noqa: ASYNC109  (a per-call timeout is the point of these helpers)

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from typing import Any

import numpy as np
import websockets

from gateway.telephony import twilio
from processors.audio import resample
from processors.g711 import ulaw_decode, ulaw_encode

FRAME = 160  # 20 ms at 8 kHz


def to_ulaw(audio16k: np.ndarray) -> bytes:
    """float32 speech at 16 kHz → µ-law 8 kHz (what a phone line carries)."""
    pcm = np.clip(resample(audio16k, 16_000, 8_000), -1, 1) * 32767
    return ulaw_encode(pcm.astype(np.int16))


class PhoneCaller:
    def __init__(self, ws: Any, stream_sid: str):
        self.ws = ws
        self.stream_sid = stream_sid
        self.buffer = bytearray()  # received, not yet played
        self.marks: list[tuple[int, str]] = []  # (buffer position, name) still to play
        self.heard = bytearray()  # what was played to the caller
        self.received: list[dict[str, Any]] = []  # every message from the gateway, in order
        self.acked: list[str] = []  # marks echoed because their audio played
        self.clears = 0
        self.first_audio_at: float | None = None  # monotonic time of the first reply frame
        self.frame_times: list[float] = []  # monotonic arrival time of each reply frame
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._play())]
        self.closed = asyncio.Event()
        self._tick = asyncio.Event()  # set by each playout tick

    @classmethod
    async def dial(
        cls,
        addr: str,
        auth_token: str | None = None,
        custom: dict[str, str] | None = None,
        signature: str | None = None,
    ) -> PhoneCaller:
        url = f"ws://{addr}/v1/telephony/media-stream"
        headers = {}
        if auth_token is not None or signature is not None:
            headers["X-Twilio-Signature"] = signature or twilio.signature(auth_token or "", url)
        ws = await websockets.connect(url, additional_headers=headers, max_size=None)
        sid = f"MZ{time.monotonic_ns():x}"
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        fmt = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
        start = {"streamSid": sid, "callSid": "CA" + sid[2:], "mediaFormat": fmt, "customParameters": custom or {}}
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "start": start, "streamSid": sid}))
        return cls(ws, sid)

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                self.received.append(msg)
                kind = msg.get("event")
                if kind == "media":
                    self.frame_times.append(time.monotonic())
                    if self.first_audio_at is None:
                        self.first_audio_at = self.frame_times[0]
                    self.buffer += base64.b64decode(msg["media"]["payload"])
                elif kind == "mark":
                    self.marks.append((len(self.buffer), msg["mark"]["name"]))
                elif kind == "clear":
                    self.clears += 1
                    self.buffer.clear()
                    pending, self.marks = self.marks, []
                    for _, name in pending:  # Twilio echoes the marks a clear flushed
                        await self._echo(name)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def _play(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += 0.02
            await asyncio.sleep(max(0.0, due - loop.time()))
            frame = bytes(self.buffer[:FRAME])
            del self.buffer[:FRAME]
            self.heard += frame
            self._tick.set()
            self.marks = [(pos - len(frame), name) for pos, name in self.marks]
            while self.marks and self.marks[0][0] <= 0:
                name = self.marks.pop(0)[1]
                self.acked.append(name)
                await self._echo(name)

    async def _echo(self, name: str) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}))

    async def say(self, ulaw: bytes) -> None:
        """Stream the caller's audio in real time, 20 ms a frame."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        for i in range(0, len(ulaw), FRAME):
            payload = base64.b64encode(ulaw[i : i + FRAME]).decode()
            msg = {"event": "media", "streamSid": self.stream_sid, "media": {"track": "inbound", "payload": payload}}
            await self.ws.send(json.dumps(msg))
            due += 0.02
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def dtmf(self, digit: str) -> None:
        await self.ws.send(json.dumps({"event": "dtmf", "streamSid": self.stream_sid, "dtmf": {"digit": digit}}))

    def heard_pcm(self) -> np.ndarray:
        pcm: np.ndarray = ulaw_decode(bytes(self.heard)).astype(np.float32) / 32768.0
        return pcm

    async def wait(self, predicate: Any, within: float) -> None:
        """Until ``predicate()`` holds, or TimeoutError. Checked on every 20 ms playout tick, and every 20 ms
        once the call has hung up (its playout stopped: what is awaited then is the server freeing it)."""
        async with asyncio.timeout(within):
            while not predicate():
                self._tick.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._tick.wait(), 0.02)

    async def hang_up(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps({"event": "stop", "streamSid": self.stream_sid}))
        await self.close()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await self.ws.close()
