"""Audio (and later image) input for one connection: frames, turns, transcription, barge-in.

Runs on the connection's event loop; Whisper runs on the worker thread every session shares
(``asr_worker``), which orders and batches the passes of all sessions. Everything it says to the
client goes through the sans-I/O ``Session`` so it is stamped with ``seq`` like the rest.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from processors.audio import AudioError, b64decode_strict, decode_base64_pcm16
from processors.audio_formats import PCM_RATE, g711_to_pcm16
from processors.backchannel import HeldBargeIn, keeps_reply
from processors.g711 import G711_RATE
from processors.input_clean import InputCleaner
from processors.speexdsp import available as echo_available

from ..services import Services
from ..voice.asr_worker import PassShed, shared_worker
from ..voice.clean_input import CleanPump
from ..voice.spoken_turn import ReplyPreparer, SpokenTurn, seconds_of
from ..voice.turntaking import (
    Completed,
    Drop,
    PassKind,
    Prepare,
    SetSilence,
    ShowDelta,
    Stopped,
    Transcribe,
    TurnAction,
    TurnConfig,
    TurnTaker,
)
from ..voice.voice_input import SpeechPaused, SpeechResumed, Turn, VoiceInput
from . import audio_settings
from . import inputs as i
from . import protocol as p
from .actions import Output
from .session import Session

log = logging.getLogger("stream_omni.media")
NOT_HEARD = "could not transcribe audio"


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
        self._current_item: str | None = None  # the user item of the turn being spoken
        self.voice: VoiceInput | None = None
        self.speculator = speculator
        self._spoken: SpokenTurn | None = None  # the VAD turn being spoken
        self.tasks: set[asyncio.Task[None]] = set()
        self._asr_lock = asyncio.Lock()  # one committed turn transcribed at a time per session: turns finish in order
        self.g711: str | None = None  # the input format when it is G.711 (set with the audio options)
        self._refused = False  # told server_busy for voice; audio is dropped until a seat frees
        # stopped turns whose transcript is not out yet, oldest first: the shared worker may finish a
        # later turn's pass first (its pause pass ran while this one's waited), transcripts go out in order
        self._stopped_turns: deque[SpokenTurn] = deque()
        self.on_pass: Callable[[str, str, float, float], None] | None = None  # (item, kind, queued, text in): timing
        self._held: HeldBargeIn | None = None  # speech over a reply not cancelled yet: a backchannel?
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
                self._abandon()
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
        noise, echo = audio_settings.cleaning(options)
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
        for ev in events:
            spoken = self._spoken
            if isinstance(ev, Turn):
                self._stopped(ev)
            elif isinstance(ev, SpeechPaused):
                if self._held is not None:
                    self._held.paused(ev.silence_start_ms)
                if spoken is not None:
                    self._probe(spoken)
                    self._act(spoken, spoken.taker.paused(voice.now_ms, ev.silence_start_ms))
                    self._unblock(spoken)
            elif isinstance(ev, SpeechResumed):
                if self._held is not None:
                    self._held.resumed()
                if spoken is not None:
                    if spoken.end is not None:
                        spoken.end.resumed()
                        self._window(spoken, spoken.end.window_ms)
                    self._act(spoken, spoken.taker.resumed())
            else:
                self._speech_started(ev.audio_start_ms)
        if self._spoken is not None and voice.in_speech:
            self._act(self._spoken, self._spoken.taker.heard(voice.now_ms))
        if self._held is not None and voice.in_speech and self._held.verdict(voice.now_ms) == "interruption":
            self._interrupt()

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
        self._abandon()
        try:
            turn = self._voice().commit()
        except AudioError as exc:
            self.send(self.session.handle(i.Report(exc.code, exc.message, event_id)))
            return
        self._committed(turn)

    def clear(self) -> None:
        if self.clean is not None and self.clean.busy:
            self.clean.then(self.clear)
            return
        self._abandon()
        if self.voice is not None:
            self.voice.clear()
        self._current_item = None
        self.send(self.session.handle(i.AudioCleared()))

    # ------------------------------------------------------------------ turns

    def _speech_started(self, start_ms: int) -> None:
        self._current_item = f"item_{secrets.token_hex(8)}"
        self.send(self.session.handle(i.SpeechStarted(self._current_item, start_ms)))
        voice = self.voice
        cfg = voice.vad_config if voice else None
        self._held = None  # an earlier overlap's turn is over; this one is judged afresh
        if self.session.response is not None and cfg is not None and cfg.interrupt_response:
            if cfg.backchannel_ms > 0 and voice is not None:  # a backchannel must not cut the reply: judge it first
                self._held = HeldBargeIn(self._current_item, voice.now_ms, cfg.backchannel_ms)
            else:
                self.send(self.session.handle(i.Cancel("turn_detected")))  # barge-in: priority path
        if cfg is not None:
            self._abandon()
            modelled = cfg.model == "smart_turn" and self.svc.turn_model is not None
            spoken = self._spoken = SpokenTurn.start(self._current_item, cfg, start_ms, modelled)
            if spoken.end is not None:
                self._window(spoken, spoken.end.window_ms)

    def _window(self, spoken: SpokenTurn, ms: int) -> None:
        """The turn in progress now ends after ``ms`` of silence (semantic_vad, the end-of-turn model)."""
        vad = self.voice.vad if self.voice else None
        if vad is not None and spoken is self._spoken:
            vad.machine.silence_target_ms = ms

    def _probe(self, spoken: SpokenTurn) -> None:
        """A pause began: ask the end-of-turn model about the turn so far, off the loop."""
        vad = self.voice.vad if self.voice else None
        if spoken.end is None or vad is None or self.svc.turn_model is None:
            return
        probe = spoken.end.paused()
        self._window(spoken, spoken.end.window_ms)
        self._spawn(self._score(spoken, probe.probe, vad.turn_audio()))

    async def _score(self, spoken: SpokenTurn, probe: int, audio: np.ndarray) -> None:
        try:
            p_complete = await self.svc.turn_model.score(audio)
        except Exception as exc:  # the model failing leaves the turn on its longer window
            log.error("end-of-turn model failed: %s", type(exc).__name__)
            return
        if spoken.end is not None and not spoken.taker.done:
            self._window(spoken, spoken.end.scored(probe, p_complete))

    def _interrupt(self) -> None:
        """The speech over the reply is an interruption: cancel the reply now (barge-in)."""
        self._held = None
        self.svc.metrics.voice_overlaps.labels(outcome="interruption").inc()
        self.send(self.session.handle(i.Cancel("turn_detected")))

    def _judge(self, item_id: str, a: Completed) -> Completed:
        """A held overlap's turn is complete: a backchannel or a false start keeps the reply and is not
        answered; anything else interrupts it (if it has not already) and is answered as usual."""
        held = self._held
        if held is None or held.item_id != item_id:
            return a
        self._held = None
        kind = held.verdict(held.start_ms, a.transcript or "")  # its speech ended at its pause or stop
        if not keeps_reply(kind):
            self.svc.metrics.voice_overlaps.labels(outcome="interruption").inc()
            self.send(self.session.handle(i.Cancel("turn_detected")))
            return a
        self.svc.metrics.voice_overlaps.labels(outcome=kind).inc()
        if a.speculation is not None and self.speculator is not None:
            self.speculator.drop(a.speculation)
        return replace(a, respond=False, speculation=None)

    def _stopped(self, turn: Turn) -> None:
        """The VAD closed the turn: its state machine says what goes out now and what follows."""
        spoken, self._spoken = self._spoken, None
        self._current_item = None
        if spoken is None:  # cannot happen: a VAD turn always starts first
            spoken = SpokenTurn(f"item_{secrets.token_hex(8)}", TurnTaker(TurnConfig(interval_ms=0), turn.start_ms))
        spoken.audio = turn.audio
        if self._held is not None and self._held.item_id == spoken.item_id:
            self._held.stopped(turn.end_ms)
        self._stopped_turns.append(spoken)
        self._act(spoken, spoken.taker.stopped(turn.end_ms))
        self._unblock(spoken)

    def _unblock(self, spoken: SpokenTurn) -> None:
        """A pause or final pass waits for a partial still queued: drop the partial, so the pass that
        gates the reply is queued now instead of after it."""
        blocked = spoken.taker.blocked_on
        ticket = spoken.tickets.get(blocked) if blocked is not None else None
        if ticket is not None:
            shared_worker(self.svc).withdraw(ticket)  # its task gets PassShed and tells the TurnTaker

    def _abandon(self) -> None:
        spoken, self._spoken = self._spoken, None
        if spoken is not None:
            self._act(spoken, spoken.taker.abandon())

    def _act(self, spoken: SpokenTurn, actions: list[TurnAction]) -> None:
        item_id = spoken.item_id
        for a in actions:
            if isinstance(a, Transcribe):
                audio: np.ndarray | None
                if a.kind == "final" and spoken.audio is not None:
                    audio = spoken.audio
                else:  # partial and pause passes: the turn so far (a copy; the VAD keeps appending)
                    vad = self.voice.vad if self.voice else None
                    audio = vad.turn_audio() if vad is not None and spoken is self._spoken else spoken.audio
                self._spawn(self._pass(spoken, a.pass_id, a.kind, audio))
            elif isinstance(a, ShowDelta):
                self.send(self.session.handle(i.TranscriptDelta(item_id, a.delta)))
            elif isinstance(a, Stopped):
                self.send(self.session.handle(i.SpeechStopped(item_id, a.end_ms)))
                self.send(self.session.handle(i.AudioCommitted(item_id)))
            elif isinstance(a, Completed):
                a = self._judge(item_id, a)
                if spoken not in self._stopped_turns:
                    self._completed(item_id, a, seconds_of(spoken.audio))
                    continue
                spoken.completed = a
                while self._stopped_turns and self._stopped_turns[0].completed is not None:
                    done = self._stopped_turns.popleft()
                    assert done.completed is not None
                    self._completed(done.item_id, done.completed, seconds_of(done.audio))
            elif isinstance(a, Prepare):
                if self.speculator is not None:
                    self.speculator.prepare(a.speculation, a.transcript)
            elif isinstance(a, Drop):
                if self.speculator is not None:
                    self.speculator.drop(a.speculation)
            elif isinstance(a, SetSilence):
                if spoken.end is not None:
                    self._window(spoken, spoken.end.transcribed(a.text))
                elif a.ms is not None:
                    self._window(spoken, a.ms)

    def _completed(self, item_id: str, a: Completed, seconds: float) -> None:
        if a.transcript is None:
            self.send(self.session.handle(i.TranscriptFailed(item_id, "transcription_failed", NOT_HEARD)))
        else:
            if a.delta:
                self.send(self.session.handle(i.TranscriptDelta(item_id, a.delta)))
            self.send(self.session.handle(i.TranscriptDone(item_id, a.transcript, seconds)))
            self.svc.metrics.transcripts.labels(consistent=str(a.consistent).lower()).inc()
        self.send(self.session.handle(i.TurnEnded(item_id, a.respond)))

    async def _pass(self, spoken: SpokenTurn, pass_id: int, kind: PassKind, audio: np.ndarray | None) -> None:
        if spoken.taker.done or audio is None:
            return
        ticket, fut = shared_worker(self.svc).submit(self.session.id, kind, audio)
        spoken.tickets[pass_id] = ticket
        queued = time.perf_counter()
        try:
            text = await fut
            if self.on_pass is not None:
                self.on_pass(spoken.item_id, kind, queued, time.perf_counter())
        except PassShed:  # a partial dropped under load, or for a gating pass of this turn
            self._act(spoken, spoken.taker.shed(pass_id))
            return
        except Exception as exc:  # a failed pass ends this turn's transcript at most
            log.error("transcription failed: %s", type(exc).__name__)
            self._act(spoken, spoken.taker.failed(pass_id))
            return
        finally:
            spoken.tickets.pop(pass_id, None)
        if spoken.taker.done:  # abandoned while its pass ran
            return
        held = self._held
        if held is not None and held.item_id == spoken.item_id and self.voice is not None:
            if held.verdict(self.voice.now_ms, text) == "interruption":
                self._interrupt()  # its words are not an acknowledgement: no need to wait for the turn's end
        self._act(spoken, spoken.taker.transcribed(pass_id, text))
        if spoken is self._spoken and self.voice is not None and self.voice.in_speech:
            self._act(spoken, spoken.taker.heard(self.voice.now_ms))  # audio that came in meanwhile

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _committed(self, turn: Turn) -> None:
        """A turn the client committed (``input_audio_buffer.commit``): transcribed, never answered by
        itself (the client asks with ``response.create``; VAD turns go through ``TurnTaker``)."""
        item_id = self._current_item or f"item_{secrets.token_hex(8)}"
        self._current_item = None
        self.send(self.session.handle(i.AudioCommitted(item_id)))
        self._spawn(self._run_asr(item_id, turn))

    async def _run_asr(self, item_id: str, turn: Turn) -> None:
        text: str | None = None
        try:
            async with self._asr_lock:
                text = await shared_worker(self.svc).transcribe(self.session.id, "final", turn.audio)
        except Exception as exc:  # a failed transcription ends this item only
            log.error("transcription failed: %s", type(exc).__name__)
            self.send(self.session.handle(i.TranscriptFailed(item_id, "transcription_failed", NOT_HEARD)))
        if text is not None:
            if text:
                self.send(self.session.handle(i.TranscriptDelta(item_id, text)))
            self.send(self.session.handle(i.TranscriptDone(item_id, text, seconds_of(turn.audio))))
        self.send(self.session.handle(i.TurnEnded(item_id)))  # a response.create held for it may start

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
        for t in self.tasks:
            t.cancel()
        if self.clean is not None:
            self.clean.close()
        self.release_seat()
