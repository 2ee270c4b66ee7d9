"""One connection's spoken turns, from ``speech_started`` to the transcript and the reply it asks for.

The VAD's events come in from ``MediaInput`` (which owns frames, cleaning and the voice seat); each
turn's ``TurnTaker`` says which Whisper passes run and what goes out, the end-of-turn model sets
its silence window, and speech over a reply is judged a backchannel or a barge-in here. Manual
(``input_audio_buffer.commit``) turns are transcribed here too, in order.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from processors.backchannel import HeldBargeIn, keeps_reply

from ..core.services import Services
from ..voice.asr_worker import PassShed, shared_worker
from ..voice.spoken_turn import PauseSignals, ReplyPreparer, SpokenTurn, seconds_of
from ..voice.turntaking import (
    Drop,
    PassKind,
    Prepare,
    Reopen,
    Reopener,
    SetSilence,
    ShowDelta,
    Transcribe,
    TurnAction,
    TurnCompleted,
    TurnConfig,
    TurnStopped,
    TurnTaker,
)
from ..voice.voice_input import SpeechPaused, SpeechResumed, Turn, VoiceEvent, VoiceInput
from . import inputs as i
from . import protocol as p
from .actions import Output
from .session import Session

NOT_HEARD = "could not transcribe audio"
log = logging.getLogger("stream_omni.media")


class SpokenTurns:
    def __init__(
        self,
        session: Session,
        services: Services,
        send: Callable[[Output], None],
        speculator: ReplyPreparer | None,
        voice: Callable[[], VoiceInput | None],
    ):
        self.session = session
        self.svc = services
        self.send = send
        self.speculator = speculator
        self._voice = voice  # the connection's voice input, once it has one
        self._current_item: str | None = None  # the user item of the turn being spoken
        self._spoken: SpokenTurn | None = None  # the VAD turn being spoken
        self.tasks: set[asyncio.Task[None]] = set()
        self._asr_lock = asyncio.Lock()  # one committed turn transcribed at a time per session: turns finish in order
        # stopped turns whose transcript is not out yet, oldest first: the shared worker may finish a
        # later turn's pass first (its pause pass ran while this one's waited), transcripts go out in order
        self._stopped_turns: deque[SpokenTurn] = deque()
        self.on_pass: Callable[[str, str, float, float], None] | None = None  # (item, kind, queued, text in): timing
        self._held: HeldBargeIn | None = None  # speech over a reply not cancelled yet: a backchannel?
        self._reopener = Reopener()  # may speech that resumes continue the last answered turn?
        self._answered: SpokenTurn | None = None  # that turn, while the reopener holds it open

    @property
    def voice(self) -> VoiceInput | None:
        return self._voice()

    def on_events(self, events: list[VoiceEvent], voice: VoiceInput) -> None:
        """What the VAD reported for one frame (speech starts, pauses, resumptions, finished turns)."""
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

    def cleared(self) -> None:
        """``input_audio_buffer.clear``: the turn being spoken goes, and its item with it."""
        self.abandon()
        self._current_item = None
        self._reopener.closed()  # the client dropped what was said: nothing to continue
        self._answered = None

    def _speech_started(self, start_ms: int) -> None:
        self._current_item = f"item_{secrets.token_hex(8)}"
        self.send(self.session.handle(i.VoiceStarted(self._current_item, start_ms)))
        voice = self.voice
        cfg = voice.vad_config if voice else None
        self._held = None  # an earlier overlap's turn is over; this one is judged afresh
        if not self._reply_unheard():
            self._reopener.closed()  # its reply was heard (or ended): this speech is a turn of its own
        reopen = self._reopener.started(start_ms)
        lead = self._reopen(reopen[0]) if reopen else None  # not None: its reply went quietly, no barge-in
        if lead is None and self.session.response is not None and cfg is not None and cfg.interrupt_response:
            if cfg.backchannel_ms > 0 and voice is not None:  # a backchannel must not cut the reply: judge it first
                self._held = HeldBargeIn(self._current_item, voice.now_ms, cfg.backchannel_ms)
            else:
                self.send(self.session.handle(i.Cancel("turn_detected")))  # barge-in: priority path
        if cfg is not None:
            self.abandon()
            modelled = cfg.model == "smart_turn" and self.svc.turn_model is not None
            spoken = self._spoken = SpokenTurn.start(self._current_item, cfg, start_ms, modelled)
            spoken.lead = lead
            if spoken.end is not None:
                self._window(spoken, spoken.end.window_ms)

    def _reply_unheard(self) -> bool:
        """Nothing of the last answered turn's reply reached the client yet (no audio, or for a text
        reply no text): its transcript is not out, or the reply is still silent."""
        answered = self._answered
        if answered is None:
            return False
        if not answered.taker.done or answered in self._stopped_turns:
            return True  # still being transcribed: no reply yet
        r = self.session.response
        if r is None:
            return False  # the reply ended (heard), or none was started
        return not r.started if r.audio is None else r.audio.audio_ms == 0

    def _reopen(self, reopen: Reopen) -> np.ndarray | None:
        """Speech continues the last answered turn: its reply goes quietly and the turn's items leave the
        conversation (once its transcript is out); returns the turn's audio, which leads the new turn."""
        prev, self._answered = self._answered, None
        if prev is None or prev.item_id != reopen.item_id or prev.audio is None:
            return None
        self.svc.metrics.turns_reopened.inc()
        if not prev.taker.done or prev in self._stopped_turns:
            prev.reopened = True  # _completed answers nothing for it and takes its item out
            return prev.audio
        r = self.session.response
        if r is not None:
            assistant = r.item_id if r.started and r.store else None
            self.send(self.session.handle(i.Cancel("turn_detected")))
            if assistant is not None:
                self._delete(assistant)  # nothing of it was heard: it is no part of the conversation
        self._delete(prev.item_id)
        return prev.audio

    def _delete(self, item_id: str) -> None:
        """Take an item out of the conversation (``conversation.item.deleted``), unless already gone."""
        if self.session.has_item(item_id):
            self.send(self.session.handle(p.ItemDelete(type="conversation.item.delete", item_id=item_id)))

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
        spoken.signals = PauseSignals(paused_at=time.perf_counter())
        self._window(spoken, spoken.end.window_ms)
        self._spawn(self._score(spoken, probe.probe, spoken.joined(vad.turn_audio())))

    async def _score(self, spoken: SpokenTurn, probe: int, audio: np.ndarray) -> None:
        try:
            p_complete, spent = await self.svc.turn_model.timed(audio)
        except Exception as exc:  # the model failing leaves the turn on its longer window
            log.error("end-of-turn model failed: %s", type(exc).__name__)
            return
        if spoken.end is not None and not spoken.taker.done:
            if spoken.end.answers(probe):
                spoken.signals.scored_at, spoken.signals.model_s = time.perf_counter(), spent
            self._window(spoken, spoken.end.scored(probe, p_complete))
            self._if_confident(spoken)

    def _if_confident(self, spoken: SpokenTurn) -> None:
        """Both end-of-turn signals say complete: the reply is prepared now, not after speculation_ms."""
        if spoken.end is not None and spoken.end.complete:
            self._act(spoken, spoken.taker.confident())

    def _interrupt(self) -> None:
        """The speech over the reply is an interruption: cancel the reply now (barge-in)."""
        self._held = None
        self.svc.metrics.voice_overlaps.labels(outcome="interruption").inc()
        self.send(self.session.handle(i.Cancel("turn_detected")))

    def _judge(self, item_id: str, a: TurnCompleted) -> TurnCompleted:
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
        spoken.audio = spoken.joined(turn.audio)
        if self._held is not None and self._held.item_id == spoken.item_id:
            self._held.stopped(turn.end_ms)
        self._stopped_turns.append(spoken)
        cfg = self.voice.vad_config if self.voice else None
        if cfg is not None and cfg.reopen_ms > 0 and spoken.taker.config.respond:
            self._reopener.reopen_ms = cfg.reopen_ms
            self._reopener.answered(spoken.item_id, turn.end_ms)
            self._answered = spoken
        if spoken.end is not None and log.isEnabledFor(logging.DEBUG):  # where the turn's wait went
            end = spoken.end
            log.debug(
                "turn %s ended on a %d ms window (p=%s, text %s): %s",
                spoken.item_id,
                end.window_ms,
                "-" if end.probability is None else f"{end.probability:.2f}",
                end.ending or "-",
                spoken.signals.summary(time.perf_counter()),
            )
        self._act(spoken, spoken.taker.stopped(turn.end_ms))
        self._unblock(spoken)

    def _unblock(self, spoken: SpokenTurn) -> None:
        """A pause or final pass waits for a partial still queued: drop the partial, so the pass that
        gates the reply is queued now instead of after it."""
        blocked = spoken.taker.blocked_on
        ticket = spoken.tickets.get(blocked) if blocked is not None else None
        if ticket is not None:
            shared_worker(self.svc).withdraw(ticket)  # its task gets PassShed and tells the TurnTaker

    def abandon(self) -> None:
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
                    live = vad.turn_audio() if vad is not None and spoken is self._spoken else None
                    audio = spoken.audio if live is None else spoken.joined(live)
                self._spawn(self._pass(spoken, a.pass_id, a.kind, audio))
            elif isinstance(a, ShowDelta):
                self.send(self.session.handle(i.TranscriptDelta(item_id, a.delta)))
            elif isinstance(a, TurnStopped):
                self.send(self.session.handle(i.VoiceStopped(item_id, a.end_ms)))
                self.send(self.session.handle(i.AudioCommitted(item_id)))
            elif isinstance(a, TurnCompleted):
                a = self._judge(item_id, a)
                if not a.respond or spoken.reopened:
                    self._reopener.closed(item_id)  # no reply to this turn will come
                if spoken.reopened:
                    a = self._quiet(a)
                if spoken not in self._stopped_turns:
                    self._completed(spoken, a)
                    continue
                spoken.completed = a
                while self._stopped_turns and self._stopped_turns[0].completed is not None:
                    done = self._stopped_turns.popleft()
                    assert done.completed is not None
                    self._completed(done, done.completed)
            elif isinstance(a, Prepare):
                if self.speculator is not None:
                    self.speculator.prepare(a.speculation, a.transcript)
            elif isinstance(a, Drop):
                if self.speculator is not None:
                    self.speculator.drop(a.speculation)
            elif isinstance(a, SetSilence):
                if spoken.end is not None:
                    spoken.signals.text_at = time.perf_counter()
                    self._window(spoken, spoken.end.transcribed(a.text))
                    self._if_confident(spoken)
                elif a.ms is not None:
                    self._window(spoken, a.ms)

    def _quiet(self, a: TurnCompleted) -> TurnCompleted:
        """A turn a later one continues: its transcript goes out, it answers nothing."""
        if a.speculation is not None and self.speculator is not None:
            self.speculator.drop(a.speculation)
        return replace(a, respond=False, speculation=None)

    def _completed(self, spoken: SpokenTurn, a: TurnCompleted) -> None:
        # usage: the audio this turn added (a reopened turn's lead was reported with the turn it continues)
        item_id, seconds = spoken.item_id, max(seconds_of(spoken.audio) - seconds_of(spoken.lead), 0.0)
        if a.transcript is None:
            self.send(self.session.handle(i.TranscriptFailed(item_id, "transcription_failed", NOT_HEARD)))
        else:
            if a.delta:
                self.send(self.session.handle(i.TranscriptDelta(item_id, a.delta)))
            self.send(self.session.handle(i.TranscriptDone(item_id, a.transcript, seconds)))
            self.svc.metrics.transcripts.labels(consistent=str(a.consistent).lower()).inc()
        self.send(self.session.handle(i.TurnEnded(item_id, a.respond)))
        if spoken.reopened:
            self._delete(item_id)  # the turn that continues it holds its words

    async def _pass(self, spoken: SpokenTurn, pass_id: int, kind: PassKind, audio: np.ndarray | None) -> None:
        if spoken.taker.done or audio is None:
            return
        ticket, fut = shared_worker(self.svc).submit(self.session.id, kind, audio)
        spoken.tickets[pass_id] = ticket
        queued = time.perf_counter()
        try:
            text = await fut
            log.debug(
                "turn %s: %s pass of %.2f s audio, %.0f ms queued → text",
                spoken.item_id,
                kind,
                seconds_of(audio),
                (time.perf_counter() - queued) * 1000,
            )
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

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def committed(self, turn: Turn) -> None:
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
