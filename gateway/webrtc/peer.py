"""One WebRTC call: an aiortc peer connection serving a ``LiveSession`` (audio both ways, ``oai-events``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCRtpSender, RTCSessionDescription

from ..core.config_calls import WebRtcConfig
from ..realtime import server_events as se
from ..realtime.actions import Output
from ..realtime.connection import Connection
from ..realtime.inputs import HeardUpTo, PlayOnTrack
from ..realtime.live_session import LiveSession
from ..realtime.protocol import CLOSE_TRY_AGAIN
from ..realtime.speech_out import due_truncations
from ..voice.speech_actions import PlayAudio
from .channel import LABEL, DataChannelSocket
from .checks import CheckPacer, pace_checks
from .ports import bind_in_range
from .track_pacing import FRAME_MS, Cleared, OutboundAudio, PlayoutEvent, TrackStarted, TrackStopped, track_samples
from .tracks import IDLE_FRAMES, PacedTrack, decode_inline, pump_inbound, shorten_jitter_buffer
from .webrtc_sdp import WebRtcOffer, with_opus_bitrate, with_public_ip

log = logging.getLogger("stream_omni.webrtc")

OPUS_CLOCK = 48_000  # RTP timestamp units of Opus: aiortc reports jitter in them


def ice_servers(cfg: WebRtcConfig) -> list[RTCIceServer]:
    return [RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in cfg.ice_servers]


class Call:
    def __init__(
        self,
        live: LiveSession,
        call_id: str,
        cfg: WebRtcConfig,
        on_end: Callable[[Call], None],
        source: OutboundAudio | None = None,
    ):
        """``source``: the outbound queue of the call this one resumes (its audio plays on from where it stopped)."""
        self.live = live
        self.svc = live.svc
        self.call_id = call_id
        self.cfg = cfg
        self.on_end = on_end  # the call table forgets it
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=ice_servers(cfg)))
        self.source = source if source is not None else OutboundAudio()
        self.track = PacedTrack(self.source, self._playout, self._open_response)
        self._muted: str | None = None  # a response whose audio was cut: the rest of it is not played
        self._cut: list[tuple[str, int]] = []  # items cut, to truncate once their response has ended
        self.connection: Connection | None = None
        self.opened = asyncio.Event()  # the data channel is up
        self.ended = False
        self.end_reason = ""
        self.closing: asyncio.Future[None] | None = None  # the peer connection's close, once ending
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lost = 0  # packets lost reported so far (getStats is cumulative)
        self.started = time.monotonic()

    # ------------------------------------------------------------------ signalling

    async def answer(self, offer: WebRtcOffer, last_seq: int = -1, resumed: bool = False) -> str:
        """Set the offer, attach our track and the session, return the SDP answer."""
        pc = self.pc
        pc.on("track", self._on_track)
        pc.on("datachannel", lambda ch: self._on_channel(ch, last_seq, resumed))
        pc.on("connectionstatechange", self._on_state)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer.sdp, type="offer"))
        opus = [c for c in RTCRtpSender.getCapabilities("audio").codecs if c.mimeType.lower() == "audio/opus"]
        for t in pc.getTransceivers():
            if t.kind == "audio":
                t.setCodecPreferences(opus)
                shorten_jitter_buffer(t.receiver, self.cfg.jitter_prefetch_frames)
                decode_inline(t.receiver)
                if offer.maxptime_ms is not None and offer.maxptime_ms < IDLE_FRAMES * FRAME_MS:
                    self.track.idle_frames = 1  # the caller takes no 60 ms packets
                pc.addTrack(self.track)  # binds to the offer's audio transceiver
                break
        if self.cfg.udp_ports is not None:
            bind_in_range(pc, *self.cfg.udp_ports)
        pace_checks(pc, CheckPacer(self.cfg.stun_checks_per_s, self.cfg.stun_checks_burst))
        await pc.setLocalDescription(await pc.createAnswer())
        sdp = with_opus_bitrate(pc.localDescription.sdp, offer.opus_payload, self.cfg.upstream_kbps * 1000)
        self.live.taps.append(self._heard)
        # the reply's audio goes on the track from now on (no output_audio.delta on oai-events, as on OpenAI)
        self.live.send(self.live.session.handle(PlayOnTrack()))
        self.live.speaker.sink = self._play
        self._spawn(self._watch(), "webrtc-watch")
        return with_public_ip(sdp, self.cfg.public_ip) if self.cfg.public_ip else sdp

    # ------------------------------------------------------------------ media

    def _on_track(self, track: Any) -> None:
        if track.kind != "audio":
            return
        live = self.live

        def rate() -> int:
            return live.media.input_rate

        def wanted() -> bool:
            return not live.closed and self.svc.asr is not None

        self._spawn(pump_inbound(track, rate, live.on_bytes, wanted), "webrtc-audio-in")

    def _open_response(self) -> str | None:
        r = self.live.session.response
        return r.id if r is not None else None

    def _play(self, action: PlayAudio) -> None:
        """A released chunk of the reply (the session's ``PlayAudio``): onto the track, at 48 kHz."""
        if action.response_id == self._muted:
            return  # cut by the listener: the rest of this response stays unheard
        if not self.source.push(track_samples(action.audio, action.format), action.response_id, action.item_id):
            log.warning("call %s: outbound audio queue full, a chunk of %s dropped", self.call_id, action.item_id)

    def _playout(self, events: list[PlayoutEvent]) -> None:
        out = []
        for ev in events:
            if isinstance(ev, TrackStarted):
                out.append(se.output_buffer_started(ev.response_id))
            elif isinstance(ev, TrackStopped):
                out.append(se.output_buffer_stopped(ev.response_id))
        self._emit(out)

    def _emit(self, events: list[dict[str, Any]]) -> None:
        if events and not self.live.closed:
            self.live.send(Output([self.live.outbox.stamp(e) for e in events], []))

    def _heard(self, events: list[dict[str, Any]]) -> None:
        """The session's events as they go out. Barge-in: the user speaks over the reply, and the session
        interrupts on speech — the outbound audio stops now (``output_audio_buffer.cleared``), as the GA
        server does. A response ending lets the items cut from it be truncated."""
        if self._cut and any(e.get("type") == "response.done" for e in events):
            asyncio.get_running_loop().call_soon(self._truncate_cut)
        if not (self.source.playing or self.source.queued_ms):
            return
        voice = self.live.media.voice
        cfg = voice.vad_config if voice is not None else None
        if cfg is None or not cfg.interrupt_response:
            return
        # with backchannels judged first, playback stops when the reply is cancelled, not at any speech
        if any(_barges_in(e, judged=cfg.backchannel_ms > 0) for e in events):
            self.clear_output()

    def clear_output(self, event_id: str | None = None) -> Cleared:
        """``output_audio_buffer.clear`` (GA, WebRTC only) or barge-in: cut playback now and say so; the
        items cut keep only what was played (server-side truncation: the client sends no ``audio_end_ms``)."""
        cut = self.source.clear()
        r = self.live.session.response
        if r is not None:
            self._muted = r.id  # its generation goes on until cancelled (GA: clear follows response.cancel)
        rid = cut.response_id or self.source.last_response or ""
        self._emit([se.output_buffer_cleared(rid)])
        if cut.items:
            self._cut.extend(cut.items)
            asyncio.get_running_loop().call_soon(self._truncate_cut)
        return cut

    def _truncate_cut(self) -> None:
        """Truncate the cut items whose response has ended (a running one is truncated when it ends)."""
        live = self.live
        if live.closed:
            return
        r = live.session.response
        now, self._cut = due_truncations(self._cut, r.item_id if r is not None else None)
        for item, ms in now:
            live.send(live.session.handle(HeardUpTo(item, ms)))

    def _intercept(self, data: str | bytes) -> bool:
        """Client events only a WebRTC call understands, handled ahead of the queue (a priority path)."""
        if not isinstance(data, str) or len(data) > 512 or "output_audio_buffer.clear" not in data:
            return False
        try:
            ev = json.loads(data)
        except ValueError:
            return False
        if not isinstance(ev, dict) or ev.get("type") != "output_audio_buffer.clear":
            return False
        self.live.received += 1
        self.clear_output(ev.get("event_id") if isinstance(ev.get("event_id"), str) else None)
        return True

    # ------------------------------------------------------------------ events channel

    def _on_channel(self, channel: Any, last_seq: int, resumed: bool) -> None:
        if channel.label != LABEL or self.connection is not None or self.ended:
            return  # other channels are the app's own business
        sock = DataChannelSocket(channel, self._socket_closed, self._intercept)
        self.connection = Connection(sock, self.live, last_seq)  # type: ignore[arg-type]
        self.opened.set()
        self._spawn(self._serve(self.connection, resumed), "webrtc-events")

    async def _serve(self, connection: Connection, resumed: bool) -> None:
        await connection.run(resumed=resumed)
        await self.end("events channel closed")

    def _socket_closed(self, code: int, reason: str) -> None:
        self._spawn(self.end(reason or f"closed {code}"), "webrtc-end")

    # ------------------------------------------------------------------ lifecycle

    def _on_state(self) -> None:
        state = self.pc.connectionState
        if state in ("failed", "closed") and not self.ended:
            self._spawn(self.end(f"peer connection {state}"), "webrtc-end")

    async def _watch(self) -> None:
        """End a call whose events channel never opens; sample loss and jitter while it runs."""
        try:
            await asyncio.wait_for(self.opened.wait(), self.cfg.connect_timeout_s)
        except TimeoutError:
            await self.end("no data channel within connect_timeout_s")
            return
        metrics = self.svc.metrics
        received, quiet_since = 0, time.monotonic()
        while not self.ended:
            await asyncio.sleep(self.cfg.stats_interval_s)
            try:
                stats = list((await self.pc.getStats()).values())
            except Exception:  # stats are best effort; the call goes on
                continue
            for s in stats:
                if getattr(s, "type", "") == "inbound-rtp" and getattr(s, "kind", "") == "audio":
                    lost = max(0, int(s.packetsLost))
                    metrics.webrtc_packets_lost.inc(max(0, lost - self._lost))
                    self._lost = max(self._lost, lost)
                    metrics.webrtc_jitter.observe(float(s.jitter) / OPUS_CLOCK)
                    if s.packetsReceived != received:
                        received, quiet_since = s.packetsReceived, time.monotonic()
            # a caller that was sending audio and stopped has gone (a browser sends 50 packets/s, silence
            # included); one that never sent is left to ICE consent freshness (about 30 s in aioice)
            if received and time.monotonic() - quiet_since > self.cfg.media_timeout_s:
                await self.end("no audio from the caller within media_timeout_s")
                return

    async def end(self, reason: str) -> None:
        """Close the peer connection; the session stays for its grace period (resume), unless hung up."""
        if self.ended:
            return
        self.ended = True
        self.end_reason = reason
        log.info("call %s ended: %s", self.call_id, reason)
        if self.connection is not None:
            self.connection.kick(CLOSE_TRY_AGAIN, reason)
        elif self.live.attached is None:
            self.svc.registry.detached(self.live)  # never attached: its grace timer starts now
        self.track.stop()
        with contextlib.suppress(ValueError):
            self.live.taps.remove(self._heard)
        # not cancelled on a timeout: a close cut short leaves aiortc's DTLS task to die with the loop
        self.closing = asyncio.ensure_future(self.pc.close())
        await asyncio.wait({self.closing}, timeout=5.0)
        current = asyncio.current_task()
        others = [t for t in self._tasks if t is not current]
        for t in others:
            t.cancel()
        if others:  # gone before the loop closes (a server shutting down ends its calls last)
            await asyncio.wait(others, timeout=2.0)
        self.svc.metrics.webrtc_active.dec()
        self.on_end(self)

    async def hangup(self) -> None:
        """End the call and its session (``POST /v1/realtime/calls/{id}/hangup``)."""
        self.live.close("call_hangup")
        writer = self.connection.writer if self.connection is not None else None
        if writer is not None:  # the last events (response.done of a cancelled reply) go out first
            with contextlib.suppress(Exception):
                await asyncio.wait({writer}, timeout=1.0)
        await self.end("hung up")
        self.svc.registry.detached(self.live)  # closed: forgotten now

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _barges_in(event: dict[str, Any], judged: bool) -> bool:
    """Whether ``event`` cuts playback: speech starting, or (backchannels judged first) the reply's
    cancellation by speech."""
    if not judged:
        return event.get("type") == "input_audio_buffer.speech_started"
    details = (event.get("response") or {}).get("status_details") or {}
    return event.get("type") == "response.done" and details.get("reason") == "turn_detected"
