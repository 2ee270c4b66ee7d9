"""A WebRTC client on aiortc (tests, bench): an SDP offer to /v1/realtime/calls, Opus out, ``oai-events`` in."""

# ruff: noqa: ASYNC109  (a per-call timeout is the point of these helpers)

from __future__ import annotations

import asyncio
import fractions
import json
import time
from typing import Any

import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

RATE = 48_000
FRAME = 960


class PlayTrack(MediaStreamTrack):
    """Plays int16 mono 48 kHz audio in real time (then silence), like a microphone would."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.pcm = np.zeros(0, dtype=np.int16)
        self.pos = 0
        self.sent = 0
        self._start: float | None = None
        self.done = asyncio.Event()  # everything queued has been sent

    def play(self, pcm: np.ndarray) -> None:
        self.pcm = np.concatenate([self.pcm[self.pos :], pcm.astype(np.int16)])
        self.pos = 0
        self.done.clear()

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self.sent * FRAME / RATE
        if due > now:
            await asyncio.sleep(due - now)
        chunk = np.zeros(FRAME, dtype=np.int16)
        take = min(FRAME, len(self.pcm) - self.pos)
        if take > 0:
            chunk[:take] = self.pcm[self.pos : self.pos + take]
            self.pos += take
        elif not self.done.is_set():
            self.done.set()
        frame = AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self.sent * FRAME
        frame.time_base = fractions.Fraction(1, RATE)
        self.sent += 1
        return frame


def pcm48(audio16k: np.ndarray) -> np.ndarray:
    import soxr

    return (np.clip(soxr.resample(audio16k, 16_000, RATE), -1, 1) * 32767).astype(np.int16)


class RtcClient:
    def __init__(self, pc: RTCPeerConnection, mic: PlayTrack):
        self.pc = pc
        self.mic = mic
        self.channel: Any = None
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.events: list[dict[str, Any]] = []
        self.opened = asyncio.Event()
        self.audio_frames = 0  # frames of the server's track received
        self.audio_arrived = asyncio.Event()
        self.record = False  # keep the decoded frames of the server's track (``heard``)
        self.heard: list[tuple[float, np.ndarray]] = []  # (monotonic arrival, int16 mono 48 kHz) per frame
        self.location = ""
        self.call_id = ""
        self._reader: asyncio.Future[None] | None = None

    @classmethod
    async def call(
        cls,
        addr: str,
        query: str = "",
        session: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 20,
        record: bool = False,
    ) -> RtcClient:
        pc = RTCPeerConnection()
        mic = PlayTrack()
        c = cls(pc, mic)
        c.record = record
        pc.addTrack(mic)
        c.channel = pc.createDataChannel("oai-events")
        c.channel.on("open", c.opened.set)
        c.channel.on("message", c._message)
        pc.on("track", c._track)
        await pc.setLocalDescription(await pc.createOffer())
        resp = await post_offer(addr, pc.localDescription.sdp, query, session, headers)
        if resp.status_code != 201:
            await pc.close()
            raise RuntimeError(f"offer refused: {resp.status_code} {resp.text}")
        assert resp.headers["content-type"].startswith("application/sdp")
        c.location = resp.headers["location"]
        c.call_id = c.location.rsplit("/", 1)[-1]
        await pc.setRemoteDescription(RTCSessionDescription(sdp=resp.text, type="answer"))
        await asyncio.wait_for(c.opened.wait(), timeout)
        return c

    def _message(self, data: str | bytes) -> None:
        self.inbox.put_nowait(json.loads(data))

    def _track(self, track: MediaStreamTrack) -> None:
        async def read() -> None:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                self.audio_frames += frame.samples // FRAME if isinstance(frame, AudioFrame) else 1  # 20 ms each
                self.audio_arrived.set()
                if self.record and isinstance(frame, AudioFrame):
                    channels = len(frame.layout.channels)
                    mono = frame.to_ndarray().reshape(-1, channels).mean(axis=1).astype(np.int16)
                    self.heard.append((time.monotonic(), mono))

        self._reader = asyncio.ensure_future(read())

    def audio(self, since: float = 0.0, until: float = float("inf")) -> np.ndarray:
        """The server's track as received (recording on), int16 mono 48 kHz, frames arriving in [since, until)."""
        parts = [pcm for t, pcm in self.heard if since <= t < until]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    async def send(self, event: dict[str, Any]) -> None:
        self.channel.send(json.dumps(event))

    async def recv(self, timeout: float = 60) -> dict[str, Any]:
        ev = await asyncio.wait_for(self.inbox.get(), timeout)
        self.events.append(ev)
        return ev

    async def until(self, type_: str, timeout: float = 120) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            ev = await self.recv(max(0.01, deadline - loop.time()))
            if ev["type"] == type_:
                return ev

    async def close(self) -> None:
        await asyncio.wait_for(self.pc.close(), 10)


async def post_offer(
    addr: str,
    sdp: str,
    query: str = "",
    session: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    url = f"http://{addr}/v1/realtime/calls" + (f"?{query}" if query else "")
    async with httpx.AsyncClient(timeout=20) as http:
        if session is None:
            return await http.post(url, content=sdp, headers={"Content-Type": "application/sdp", **(headers or {})})
        files = {"sdp": (None, sdp), "session": (None, json.dumps(session))}
        return await http.post(url, files=files, headers=headers or {})
