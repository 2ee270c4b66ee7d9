"""Audio input for one connection: its settings, frames through cleaning and the VAD, the voice seat.

Runs on the connection's event loop; what the VAD hears goes to ``SpokenTurns`` (turns, their
transcription, barge-in). Whisper runs on the worker thread every session shares (``asr_worker``),
which orders and batches the passes of all sessions. Everything it says to the client goes through
the sans-I/O ``Session`` so it is stamped with ``seq`` like the rest.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from processors.audio import AudioError, b64decode_strict, decode_base64_pcm16
from processors.audio_formats import PCM_RATE, g711_to_pcm16
from processors.g711 import G711_RATE
from processors.input_clean import InputCleaner
from processors.speexdsp import available as echo_available

from ..core.services import Services
from ..voice.asr_worker import shared_worker
from ..voice.clean_input import CleanPump
from ..voice.spoken_turn import ReplyPreparer
from ..voice.voice_input import VoiceInput
from . import audio_settings
from . import inputs as i
from . import protocol as p
from .actions import Output
from .session import Session
from .spoken_turns import SpokenTurns


class MediaInput:
    def __init__(
        self,
        session: Session,
        services: Services,
        send: Callable[[Output], None],
        speculator: ReplyPreparer | None = None,
    ):
        self.session = session
        self.svc = services
        self.send = send
        self.voice: VoiceInput | None = None
        self.turns = SpokenTurns(session, services, send, speculator, lambda: self.voice)
        self.g711: str | None = None  # the input format when it is G.711 (set with the audio options)
        self._refused = False  # told server_busy for voice; audio is dropped until a seat frees
        self.clean: CleanPump | None = None  # echo cancellation / noise reduction in front of the VAD
        self._clean_key: tuple[int, str | None, bool] | None = None  # the settings it was made with

    # ------------------------------------------------------------------ configuration

    def _audio_opts(self, options: p.SessionOptions) -> tuple[int, dict[str, Any] | None]:
        a = audio_settings.audio_in(options, self.svc.default_turn_detection)
        self.g711 = a.g711  # audio/pcmu or audio/pcma: decoded to 8 kHz pcm16 before the buffer
        return a.rate, a.turn_detection

    @property
    def input_rate(self) -> int:
        """The sample rate the voice input expects now, from the session's ``audio.input.format``."""
        return self._audio_opts(self.session.options)[0]

    def idle_timeout(self) -> tuple[int, int] | None:
        """``(idle_timeout_ms, the input clock's now in ms)`` when the session's turn detection has an idle
        timeout and no one is speaking; else None."""
        if self.svc.asr is None:
            return None
        ms = audio_settings.idle_timeout_ms(
            audio_settings.audio_in(self.session.options, self.svc.default_turn_detection)
        )
        voice = self.voice
        if ms is None or (voice is not None and voice.in_speech):
            return None
        return ms, voice.now_ms if voice is not None else 0

    def check_update(self, ev: p.SessionUpdate) -> Output | None:
        """Validate the audio part of a session.update before the session applies it."""
        merged = {**self.session.options.model_dump(), **ev.session.model_dump(exclude_unset=True)}
        rate, td = self._audio_opts(p.SessionOptions.model_validate(merged))
        try:
            if self.voice is not None:
                self.voice.configure(rate, td)
                self._configure_clean(p.SessionOptions.model_validate(merged), rate)
                self.turns.abandon()
            else:
                VoiceInput.check(self.svc.audio_limits, td, rate)
        except AudioError as exc:
            return self.session.handle(i.Report(exc.code, exc.message, ev.event_id, "session.audio.input"))
        return None

    def _voice(self) -> VoiceInput:
        if self.voice is None:
            rate, td = self._audio_opts(self.session.options)
            self.voice = VoiceInput(self.svc.audio_limits, td, rate)
            self._configure_clean(self.session.options, rate)
        return self.voice

    def _configure_clean(self, options: p.SessionOptions, rate: int) -> None:
        """The input cleaner these options ask for (``audio_settings.cleaning``), when it changed."""
        noise, echo = audio_settings.cleaning(options, webrtc=self.session.audio_track)
        echo = echo and echo_available()
        key = (rate, noise, echo)
        if key == self._clean_key:
            return
        self._clean_key = key
        old, self.clean = self.clean, None
        if old is not None and not old.busy:  # a busy one delivers what it holds, then is dropped
            old.close()
        if noise is not None or echo:
            self.clean = CleanPump(InputCleaner(rate, noise=noise, echo_on=echo), self._feed)

    def played(self, pcm: bytes, fmt: str) -> None:
        """The session sent this audio to its client (``output_audio.delta``): the echo to cancel."""
        if self.clean is not None:
            if fmt == "audio/pcm":
                self.clean.played(pcm, PCM_RATE)
            else:
                self.clean.played(g711_to_pcm16(pcm, fmt), G711_RATE)

    def stop_playback(self) -> None:
        """The reply was cancelled: the client stops playing it."""
        if self.clean is not None:
            self.clean.stop_playback()

    # ------------------------------------------------------------------ frames

    def append(self, raw: bytes | str, event_id: str | None = None) -> None:
        """``input_audio_buffer.append`` (base64 str) or a binary frame (raw pcm16 bytes)."""
        if self.svc.asr is None:
            self.send(
                self.session.handle(i.Report("audio_disabled", "audio input is not enabled on this server", event_id))
            )
            return
        voice = self._voice()
        manual = voice.vad is None
        if manual and not self._seated(event_id):
            return  # without server VAD the audio is the turn: a seat per frame
        try:
            if isinstance(raw, str):
                raw = b64decode_strict(raw)
            pcm = g711_to_pcm16(raw, self.g711) if self.g711 else raw
        except AudioError as exc:
            self.svc.metrics.errors.labels(code=exc.code).inc()
            self.send(self.session.handle(i.Report(exc.code, exc.message, event_id, "audio")))
            return
        if self.clean is not None and len(pcm) % 2 == 0:
            self.clean.append(pcm, event_id)  # comes back cleaned through _feed, in order
        else:
            self._feed(pcm, event_id)

    def _feed(self, pcm: bytes, event_id: str | None) -> None:
        """A (cleaned) pcm16 frame into the VAD and the turn it belongs to."""
        voice = self._voice()
        manual = voice.vad is None
        try:
            t0 = time.perf_counter()
            events = voice.append(pcm)
            self.svc.metrics.voice_stage.labels(stage="vad").observe(time.perf_counter() - t0)
        except AudioError as exc:
            self.svc.metrics.errors.labels(code=exc.code).inc()
            self.send(self.session.handle(i.Report(exc.code, exc.message, event_id, "audio")))
            return
        if not manual and (events or voice.in_speech) and not self._seated(event_id):
            voice.clear()  # speech with no seat: not heard, and no speech_started for it
            return
        if not manual and self.svc.turn_model is not None:
            self.svc.turn_model.heard(len(pcm) / 2 / voice.buffer.rate)  # seconds of (decoded) pcm16
        self.turns.on_events(events, voice)

    @property
    def on_pass(self) -> Callable[[str, str, float, float], None] | None:
        """Called with (item, pass kind, queued at, text in at) for each Whisper pass (turn timing)."""
        return self.turns.on_pass

    @on_pass.setter
    def on_pass(self, hook: Callable[[str, str, float, float], None] | None) -> None:
        self.turns.on_pass = hook

    def _seated(self, event_id: str | None) -> bool:
        """A voice seat for this session, taken when it speaks (server VAD) or sends audio (manual
        turns): past capacity, server_busy once. Silence between turns holds none, so calls that
        stream their microphone all the time (WebRTC, Pipecat) only take one while someone talks."""
        worker = shared_worker(self.svc)
        if worker.seat(self.session.id):
            self._refused = False
            return True
        if not self._refused:
            self._refused = True
            self.svc.metrics.errors.labels(code="server_busy").inc()
            msg = (
                f"voice capacity reached: this server serves {worker.capacity} voice "
                f"session{'' if worker.capacity == 1 else 's'} speaking at once; "
                "this speech is not heard until one ends (text still works)"
            )
            self.send(self.session.handle(i.Report("server_busy", msg, event_id, "audio")))
        return False

    def commit(self, event_id: str | None = None) -> None:
        if self.clean is not None and self.clean.busy:
            self.clean.then(lambda: self.commit(event_id))  # after the frames sent before it
            return
        self.turns.abandon()
        try:
            turn = self._voice().commit()
        except AudioError as exc:
            self.send(self.session.handle(i.Report(exc.code, exc.message, event_id)))
            return
        self.turns.committed(turn)

    def clear(self) -> None:
        if self.clean is not None and self.clean.busy:
            self.clean.then(self.clear)
            return
        self.turns.cleared()
        if self.voice is not None:
            self.voice.clear()
        self.send(self.session.handle(i.AudioCleared()))

    # ------------------------------------------------------------------ content parts

    async def resolve_audio_part(self, b64: str) -> str:
        """An ``input_audio`` content part → its transcript."""
        if self.svc.asr is None:
            raise AudioError("audio_disabled", "audio input is not enabled on this server")
        rate, _ = self._audio_opts(self.session.options)
        if self.g711:
            b64 = base64.b64encode(g711_to_pcm16(b64decode_strict(b64), self.g711)).decode("ascii")
        audio = decode_base64_pcm16(b64, rate, self.svc.audio_limits)
        return await shared_worker(self.svc).transcribe(self.session.id, "final", audio)

    def release_seat(self) -> None:
        """Give this session's voice seat up (its socket went; its next audio takes one again)."""
        if self.svc.asr_worker is not None:
            self.svc.asr_worker.unseat(self.session.id)

    def close(self) -> None:
        self.turns.close()
        if self.clean is not None:
            self.clean.close()
        self.release_seat()
