"""Audio (and later image) input for one connection: frames, turns, transcription, barge-in.

Runs on the connection's event loop; Whisper runs in a worker thread. Everything it says to the
client goes through the sans-I/O ``Session`` so it is stamped with ``seq`` like the rest.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from processors.audio import AudioError, b64decode_strict, decode_base64_pcm16
from processors.vad import ServerVadConfig

from ..services import Services
from . import protocol as p
from .session import Output, Session
from .turns import Turn, VoiceInput

log = logging.getLogger("stream_omni.media")


class MediaInput:
    def __init__(
        self,
        session: Session,
        services: Services,
        send: Callable[[Output], None],
        start_response: Callable[[p.ResponseCreate], None],
    ):
        self.session = session
        self.svc = services
        self.send = send
        self.start_response = start_response  # runs a response.create once its turn's transcript is in
        self._current_item: str | None = None  # the user item of the turn being spoken
        self.voice: VoiceInput | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self._asr_lock = asyncio.Lock()  # one transcription at a time per session: turns finish in order

    # ------------------------------------------------------------------ configuration

    def _audio_opts(self, options: p.SessionOptions) -> tuple[int, dict[str, Any] | None]:
        rate, td = 24_000, self.svc.default_turn_detection
        audio_in = options.audio.input if options.audio and options.audio.input else None
        if audio_in is not None:
            if audio_in.format is not None:
                rate = audio_in.format.rate
            if "turn_detection" in audio_in.model_fields_set:
                td = audio_in.turn_detection
        return rate, td

    def describe(self, view: dict[str, Any]) -> None:
        """Report the effective ``audio.input`` settings (turn detection with every field filled in)."""
        if self.svc.asr is None:
            return
        rate, td = self._audio_opts(self.session.options)
        try:
            detection = ServerVadConfig.from_turn_detection(td).view() if td is not None else None
        except AudioError:  # refused by check_update before it could be applied; never stored
            return
        audio_in = view.setdefault("audio", {}).setdefault("input", {})
        audio_in["format"] = {"type": "audio/pcm", "rate": rate}
        audio_in["turn_detection"] = detection

    def check_update(self, ev: p.SessionUpdate) -> Output | None:
        """Validate the audio part of a session.update before the session applies it."""
        merged = {**self.session.options.model_dump(), **ev.session.model_dump(exclude_unset=True)}
        rate, td = self._audio_opts(p.SessionOptions.model_validate(merged))
        try:
            if self.voice is not None:
                self.voice.configure(rate, td)
            else:
                VoiceInput(self.svc.audio_limits, td, rate)  # validation only
        except AudioError as exc:
            return self.session.error(exc.code, exc.message, ev.event_id, "session.audio.input")
        return None

    def _voice(self) -> VoiceInput:
        if self.voice is None:
            rate, td = self._audio_opts(self.session.options)
            self.voice = VoiceInput(self.svc.audio_limits, td, rate)
        return self.voice

    # ------------------------------------------------------------------ frames

    def append(self, raw: bytes | str, event_id: str | None = None) -> None:
        """``input_audio_buffer.append`` (base64 str) or a binary frame (raw pcm16 bytes)."""
        if self.svc.asr is None:
            self.send(self.session.error("audio_disabled", "audio input is not enabled on this server", event_id))
            return
        voice = self._voice()
        try:
            if isinstance(raw, str):
                raw = b64decode_strict(raw)
            events = voice.append(raw)
        except AudioError as exc:
            self.svc.metrics.errors.labels(code=exc.code).inc()
            self.send(self.session.error(exc.code, exc.message, event_id, "audio"))
            return
        for ev in events:
            if isinstance(ev, Turn):
                self._turn(ev, auto=True)
            else:
                self._speech_started(ev.audio_start_ms)

    def commit(self, event_id: str | None = None) -> None:
        try:
            turn = self._voice().commit()
        except AudioError as exc:
            self.send(self.session.error(exc.code, exc.message, event_id))
            return
        self._turn(turn, auto=False)

    def clear(self) -> None:
        if self.voice is not None:
            self.voice.clear()
        self._current_item = None
        self.send(self.session.audio_cleared())

    # ------------------------------------------------------------------ turns

    def _speech_started(self, start_ms: int) -> None:
        self._current_item = f"item_{secrets.token_hex(8)}"
        self.send(self.session.speech_started(self._current_item, start_ms))
        cfg = self.voice.vad_config if self.voice else None
        if self.session.response is not None and cfg is not None and cfg.interrupt_response:
            self.send(self.session.cancel("turn_detected"))  # barge-in: priority path

    def _turn(self, turn: Turn, auto: bool) -> None:
        item_id = self._current_item or f"item_{secrets.token_hex(8)}"
        self._current_item = None
        if auto:
            self.send(self.session.speech_stopped(item_id, turn.end_ms))
        self.send(self.session.audio_committed(item_id))
        cfg = self.voice.vad_config if self.voice else None
        respond = auto and cfg is not None and cfg.create_response
        self._transcribe(item_id, turn, respond)

    def _transcribe(self, item_id: str, turn: Turn, respond: bool) -> None:
        self.session.item_pending(item_id)
        task = asyncio.create_task(self._run_asr(item_id, turn, respond))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run_asr(self, item_id: str, turn: Turn, respond: bool) -> None:
        asr = self.svc.asr
        assert asr is not None
        text: str | None = None
        try:
            async with self._asr_lock:
                text = await asyncio.to_thread(asr.transcribe, turn.audio)
        except Exception as exc:  # a failed transcription ends this item only
            log.error("transcription failed: %s", type(exc).__name__)
            self.send(self.session.transcript_failed(item_id, "transcription_failed", "could not transcribe audio"))
        finally:
            go = self.session.settle(item_id)
        if text is not None:
            if text:
                self.send(self.session.transcript_delta(item_id, text))
            self.send(self.session.transcript_done(item_id, text))
            if respond and text and go is None:
                go = self.session.want_response(p.ResponseCreate(type="response.create"))
        if go is not None:
            self.start_response(go)

    # ------------------------------------------------------------------ content parts

    async def resolve_audio_part(self, b64: str) -> str:
        """An ``input_audio`` content part → its transcript."""
        if self.svc.asr is None:
            raise AudioError("audio_disabled", "audio input is not enabled on this server")
        rate, _ = self._audio_opts(self.session.options)
        audio = decode_base64_pcm16(b64, rate, self.svc.audio_limits)
        return str(await asyncio.to_thread(self.svc.asr.transcribe, audio))

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()
