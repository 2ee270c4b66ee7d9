"""One phone call serving a ``LiveSession``, whatever carries its audio (a ``Line``: a media stream, RTP).

Once the call is accepted the caller's G.711 goes into the session as ``audio/pcmu`` (or ``pcma``)
input (server VAD, Whisper, turn taking as on any socket); the reply's speech, synthesized in the
same format, goes back as 20 ms frames with marks (``gateway.telephony.playout``) on the loop's shared
clock (``gateway.telephony.pacer``), a media stream's a little ahead of it. Barge-in
clears the line and truncates each item cut at its last acknowledged mark: what the caller heard.
Keypad presses become ``input_audio_buffer.dtmf_event_received``. Events reach an app over the
sideband socket (``?call_id=``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..core.security import key_digest
from ..realtime import server_events as se
from ..realtime.actions import Output
from ..realtime.inputs import HeardUpTo, PlayOnTrack
from ..realtime.live_session import LiveSession
from ..realtime.speech_out import due_truncations
from ..voice.speech_actions import PlayAudio
from .pacer import Lead, pacer
from .playout import Frame, MarkOut, Playout, PlayoutStarted, PlayoutStopped

log = logging.getLogger("stream_omni.telephony")

ANY_KEY = key_digest(None)  # owner of a call answered by the default session: any of the server's keys


def telephone_session(session: dict[str, Any], codec: str = "audio/pcmu") -> dict[str, Any]:
    """``session`` with G.711 (``codec``) 8 kHz both ways: what the line carries, whatever else it asks for."""
    audio = dict(session.get("audio") or {})
    for side in ("input", "output"):
        audio[side] = {**dict(audio.get(side) or {}), "format": {"type": codec}}
    return {**session, "audio": audio}


class Line(Protocol):
    """What carries a call's audio: frames out in order, each mark after the frames before it."""

    codec: str  # "audio/pcmu" or "audio/pcma"
    lead_frames: int  # frames it may be sent ahead of real time: what the far end buffers (0: none)

    async def send(self, frames: list[bytes | str]) -> None:
        """20 ms frames (bytes) and mark names (str), in order."""
        ...

    async def clear(self) -> None:
        """Drop what the far end has buffered and not played."""
        ...

    async def close(self, reason: str) -> None: ...


class PhoneCall:
    def __init__(self, line: Line, call_id: str, mark_ms: int, on_end: Callable[[], None]):
        self.line = line
        self.call_id = call_id
        self.on_end = on_end
        self.live: LiveSession | None = None
        self.playout = Playout(mark_ms)
        self.ended = asyncio.Event()
        self._muted: str | None = None  # a response cut by barge-in: the rest of it is not played
        self._cut: list[tuple[str, int]] = []  # items cut, truncated once their response has ended
        self._leave: Callable[[], None] | None = None  # off the loop's pacer
        self._lead = Lead(line.lead_frames)
        self._outbox: list[bytes | str] = []  # frames and marks the pacer took, not yet on the line
        self._sending: asyncio.Task[None] | None = None
        self.frames_in = 0
        self.hangup_hook: Callable[[], None] | None = None  # the line's own goodbye (SIP: a BYE, or a refusal)
        self.refer_hook: Callable[[str], bool] | None = None  # a transfer to a tel:/sip: URI, where the line can

    # ------------------------------------------------------------------ attach

    def attach(self, live: LiveSession) -> None:
        """The call was accepted: ``live`` hears the caller and speaks on the stream from now on."""
        self.live = live
        live.send(live.session.handle(PlayOnTrack()))  # the reply's audio goes on the stream, not as output_audio.delta
        live.speaker.sink = self._play
        live.taps.append(self._heard)
        self._leave = pacer().join(self._tick)

    def _play(self, action: PlayAudio) -> None:
        if action.response_id == self._muted:
            return
        if action.format != self.line.codec:  # the session was changed off the line's format: not playable
            log.warning("call %s: %s audio cannot go on a %s line", self.call_id, action.format, self.line.codec)
            return
        if not self.playout.push(action.audio, action.response_id, action.item_id):
            log.warning("call %s: outbound audio queue full, a chunk of %s dropped", self.call_id, action.item_id)

    def _tick(self, owed: int) -> None:
        """The pacer's 20 ms tick (``owed`` ticks after a late one): that much audio, plus the line's lead."""
        sent = 0
        for _ in range(self._lead.budget(owed)):
            out = self.playout.take()
            if not out:
                break
            sent += 1
            for o in out:
                if isinstance(o, Frame):
                    self._outbox.append(o.ulaw)
                elif isinstance(o, MarkOut):
                    self._outbox.append(o.name)
                elif isinstance(o, PlayoutStarted):
                    self._emit([se.output_buffer_started(o.response_id)])
        self._lead.sent(sent, owed)
        if self._outbox and (self._sending is None or self._sending.done()):
            self._sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self._outbox:
            frames, self._outbox = self._outbox, []
            with contextlib.suppress(Exception):  # a gone far end: its reader sees the close
                await self.line.send(frames)

    def _emit(self, events: list[dict[str, Any]]) -> None:
        live = self.live
        if events and live is not None and not live.closed:
            live.send(Output([live.outbox.stamp(e) for e in events], []))

    def _open_response(self) -> str | None:
        r = self.live.session.response if self.live is not None else None
        return r.id if r is not None else None

    def _stopped(self, stopped: list[PlayoutStopped]) -> None:
        self._emit([se.output_buffer_stopped(s.response_id) for s in stopped])

    # ------------------------------------------------------------------ barge-in, truncation

    def _heard(self, events: list[dict[str, Any]]) -> None:
        """The session's events as they go out: a response that ended may have stopped playing, and
        lets the items cut from it be truncated; the caller speaking over the reply cuts it."""
        for e in events:
            if e.get("type") == "response.done":
                rid = e.get("response", {}).get("id")
                if isinstance(rid, str):
                    asyncio.get_running_loop().call_soon(self._finished, rid)
                if self._cut:
                    asyncio.get_running_loop().call_soon(self._truncate_cut)
        live = self.live
        if live is None or not self.playout.playing:
            return
        voice = live.media.voice
        interrupts = voice is not None and voice.vad_config is not None and voice.vad_config.interrupt_response
        if interrupts and any(e.get("type") == "input_audio_buffer.speech_started" for e in events):
            self.clear_output()

    def _finished(self, response_id: str) -> None:
        self._stopped(self.playout.finished(response_id))

    def clear_output(self) -> None:
        """Cut playback here and at the provider (``clear``); items keep what the caller heard."""
        cut = self.playout.clear()
        self._outbox.clear()
        self._lead.ahead = 0  # the far end drops its buffer too
        r = self._open_response()
        if r is not None:
            self._muted = r
        asyncio.get_running_loop().create_task(self.line.clear())
        rid = cut.response_id or ""
        self._emit([se.output_buffer_cleared(rid)])
        if cut.items:
            self._cut.extend(cut.items)
            asyncio.get_running_loop().call_soon(self._truncate_cut)

    def _truncate_cut(self) -> None:
        live = self.live
        if live is None or live.closed:
            return
        r = live.session.response
        now, self._cut = due_truncations(self._cut, r.item_id if r is not None else None)
        for item, ms in now:
            live.send(live.session.handle(HeardUpTo(item, ms)))

    # ------------------------------------------------------------------ inbound

    def on_audio(self, g711: bytes) -> None:
        """The caller's audio, in the line's codec; not heard before the call is accepted."""
        live = self.live
        if live is not None and not live.closed and live.svc.asr is not None:
            self.frames_in += 1
            live.on_bytes(g711)

    def on_mark(self, name: str) -> None:
        """The far end played everything sent before mark ``name``."""
        if self.live is not None:
            self._stopped(self.playout.ack(name, self._open_response()))

    def on_dtmf(self, digit: str) -> None:
        if self.live is not None and not self.live.closed:
            now = int(time.time())
            self._emit([se.dtmf_received(digit, now)])

    async def end(self, reason: str) -> None:
        """Free everything: the pacer, the session (a phone call cannot be resumed), the line."""
        if self.ended.is_set():
            return
        self.ended.set()
        log.info("call %s ended: %s", self.call_id, reason)
        if self.hangup_hook is not None:
            self.hangup_hook()
        if self._leave is not None:
            self._leave()
        if self._sending is not None:
            self._sending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sending
        live = self.live
        if live is not None:
            with contextlib.suppress(ValueError):
                live.taps.remove(self._heard)
            live.close("call_hangup")
            live.svc.registry.detached(live)
        with contextlib.suppress(Exception):
            await self.line.close(reason)
        self.on_end()
