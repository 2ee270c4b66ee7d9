"""A telephony media stream (Twilio ``<Connect><Stream>``, Telnyx) as a call's ``Line``: a WebSocket of JSON frames.

Out: ``media`` (base64 µ-law), ``mark``, ``clear``. In: ``media`` → the call's audio, ``mark`` → the
playhead (the provider played up to it), ``dtmf``, ``stop`` (gateway.telephony.twilio parses them).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from . import twilio
from .call import PhoneCall

log = logging.getLogger("stream_omni.telephony")


class StreamLine:
    codec = "audio/pcmu"  # Twilio streams carry µ-law only

    def __init__(self, ws: WebSocket, start: twilio.Start, lead_frames: int = 0):
        self.ws = ws
        self.start = start
        self.lead_frames = lead_frames  # the provider buffers and plays at its pace: a stall of ours is not heard
        self._lock = asyncio.Lock()  # the pacer and a clear never interleave their messages

    async def send(self, frames: list[bytes | str]) -> None:
        sid = self.start.stream_sid
        async with self._lock:
            for f in frames:
                await self.ws.send_text(twilio.media(sid, f) if isinstance(f, bytes) else twilio.mark(sid, f))

    async def clear(self) -> None:
        async with self._lock:
            await self.ws.send_text(twilio.clear(self.start.stream_sid))

    async def close(self, reason: str) -> None:
        await self.ws.close(1000, reason[:120])


async def serve(ws: WebSocket, call: PhoneCall) -> str:
    """Read the provider's frames into ``call`` until the stream stops or closes; the reason."""
    while True:
        try:
            raw = await ws.receive_text()
        except (WebSocketDisconnect, RuntimeError):
            return "stream closed"
        ev = twilio.parse(raw)
        if isinstance(ev, twilio.FrameError):
            log.info("call %s: bad media-stream message: %s", call.call_id, ev.message)
            continue  # a provider's odd message costs that message, not the call
        if isinstance(ev, twilio.Stop):
            return "stream stopped"
        if isinstance(ev, twilio.Media) and ev.track in ("inbound", "inbound_track"):
            call.on_audio(ev.payload)
        elif isinstance(ev, twilio.Mark):
            call.on_mark(ev.name)
        elif isinstance(ev, twilio.Dtmf):
            call.on_dtmf(ev.digit)
