"""One spoken turn, from ``speech_started`` to its transcript: partial transcripts and speculation.

Sans-I/O: the voice layer reports what the VAD heard (with the session's audio clock, in ms) and
what Whisper returned; ``TurnTaker`` answers with actions. It never sleeps, reads a clock or
touches the engine, so every ordering of VAD events and transcription results is a unit test.

- **Streaming transcripts.** While the user speaks, a partial pass runs on the turn's audio so
  far once ``interval_ms`` more has arrived since the previous pass started and half of it since
  that pass came back; words that two consecutive passes agree on are shown (``ShowDelta``,
  LocalAgreement-2). The rest matters where a pass takes about ``interval_ms`` (a 2-core CPU):
  back to back, passes kept Whisper busy when the user stopped and the pause pass waited for a
  stale one (a fake-clock replay of the bench clips with 450 ms passes: median end of speech →
  first text 1013 ms without the rest, 861 ms with it; 2 deltas instead of 3 on the 2 s clip).
  The final transcript is one pass over the whole turn (the pause pass, or a pass after the
  window closes), so it is as good as before streaming existed; ``Completed.delta`` is what
  completes the shown words into it.
- **Speculation.** When the VAD reports a pause (a few windows of silence: ``processors.vad``'s
  ``PAUSE_PASS_MS``), a pass over the turn so far runs at once (or a pass already running that
  heard the silence begin stands for it); its text is the turn's transcript if the silence
  lasts, and once the silence reaches ``prepare_after_ms`` (``speculation_ms``) the reply to it is
  prepared unseen (``Prepare``), or at once when the end-of-turn model and the text agree the
  turn is complete (``confident``). The pass starts at the pause, not at ``speculation_ms``, because
  a Whisper pass on a small CPU takes longer than what is left of the window after it (0.5 s
  passes against 300 ms: ``bench voice``); the reply still waits for ``speculation_ms``, since the
  engine is shared. Speech coming back drops it (``Drop``: nothing was shown, nothing entered the
  history). When the window closes, ``TurnStopped`` and ``TurnCompleted`` come out together and the
  prepared reply is adopted; a pause text that arrives after the window closed is the transcript
  as it stands (no second pass). semantic_vad also sets this turn's silence window from that
  text (``SetSilence``).

- **Reopening** (``Reopener``, ``turn_detection.reopen_ms``: our extension, off by default). Speech
  that comes back soon after a turn ended, before any of the reply to it was heard, continues that
  turn: the reply is cancelled quietly and the new turn's passes hear the old turn's audio first,
  so a user who paused mid-sentence is answered once, for the whole sentence.

Only one pass runs at a time per turn (Whisper is serial anyway); a pass asked for while
another runs waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from processors.turn_text import LocalAgreement, semantic_silence_ms

PassKind = Literal["partial", "pause", "final"]


@dataclass(frozen=True)
class TurnConfig:
    interval_ms: int = 500  # a partial pass per this much new turn audio, Whisper resting half of it (0: none)
    speculate: bool = True  # transcribe and prepare the reply at a pause (the VAD says when)
    respond: bool = True  # create_response: the committed turn is answered
    eagerness: str | None = None  # semantic_vad's eagerness; None for server_vad (fixed window)
    prepare_after_ms: int = 0  # silence (from its start) before the reply is prepared: speculation_ms
    pause_text: bool = False  # report the pause text (SetSilence) for the end-of-turn model, server_vad too


# A pass whose audio reaches this far past the start of the silence heard every word the VAD heard:
# its text is as good as a pass over the whole turn (12 espeak-ng clips, cut 0-224 ms past the
# silence start: the same words as the whole turn's pass at every cut).
COVER_MS = 32  # one VAD window


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class Transcribe:
    """Run Whisper on the turn's audio (at least up to ``upto_ms``: the glue takes all it has, which
    past a pause is silence); answer ``transcribed(pass_id, text)`` or ``failed(pass_id)``."""

    pass_id: int
    upto_ms: int
    kind: PassKind


@dataclass(frozen=True)
class ShowDelta:
    """``conversation.item.input_audio_transcription.delta`` while the user speaks."""

    delta: str


@dataclass(frozen=True)
class TurnStopped:
    """``speech_stopped`` and ``input_audio_buffer.committed``: the turn is in the conversation."""

    end_ms: int


@dataclass(frozen=True)
class TurnCompleted:
    """The transcript (None: transcription failed); ``delta`` completes the shown words into it."""

    transcript: str | None
    delta: str  # "" when nothing is left to show
    respond: bool  # answer the turn (create_response and a non-empty transcript)
    speculation: int | None  # the prepared reply to adopt, if any
    consistent: bool = True  # False when the shown words are not a prefix of the final transcript


@dataclass(frozen=True)
class Prepare:
    """Start the reply to ``transcript`` unseen (prefill and decode, nothing sent)."""

    speculation: int
    transcript: str


@dataclass(frozen=True)
class Drop:
    """Speech resumed: cancel the prepared reply silently."""

    speculation: int


@dataclass(frozen=True)
class SetSilence:
    """semantic_vad: this turn now ends after ``ms`` of silence (the transcript heuristic; None without
    semantic_vad). ``text``: the pause text it comes from, which the end-of-turn model's policy reads."""

    ms: int | None
    text: str = ""


TurnAction = Transcribe | ShowDelta | TurnStopped | TurnCompleted | Prepare | Drop | SetSilence


# ---------------------------------------------------------------- the state machine


class TurnTaker:
    def __init__(self, config: TurnConfig, start_ms: int):
        self.config = config
        self.agreement = LocalAgreement()
        self._ids = 0
        self._running: tuple[int, PassKind, int] | None = None  # the pass in flight: (id, kind, upto_ms)
        self._now = start_ms  # the latest audio the VAD analysed
        self._last_upto = start_ms  # audio covered by the latest pass
        self._paused = False
        self._pause_ms = start_ms  # where the latest pause was reported
        self._silence_from = start_ms  # where the paused silence began
        self._want: PassKind | None = None  # a pause or final pass waiting for the running one
        self._pause_text: str | None = None  # the pause pass's transcript, while the pause lasts
        self._speculation: int | None = None  # the prepared reply, while the pause lasts
        self._to_prepare: str | None = None  # the reply's transcript, until the silence is long enough
        self._confident = False  # the end-of-turn model and the pause text say complete: prepare at once
        self._end_ms: int | None = None  # set by stopped()
        self.done = False  # Completed (or abandoned): nothing more happens
        self.discarded = 0  # prepared replies dropped because speech resumed

    # ------------------------------------------------------------------ inputs

    def heard(self, now_ms: int) -> list[TurnAction]:
        """The VAD has analysed audio up to ``now_ms`` and the turn goes on."""
        cfg = self.config
        if self._busy:
            return []
        self._now = max(self._now, now_ms)
        if self._paused:
            return self._prepare_if_due()
        if self._running is not None or not cfg.interval_ms or now_ms - self._last_upto < cfg.interval_ms:
            return []
        return [self._start("partial", now_ms)]

    def paused(self, now_ms: int, silence_start_ms: int | None = None) -> list[TurnAction]:
        """The VAD hears silence since ``silence_start_ms``: transcribe the turn so far (now, or after
        the running pass, unless that pass already reaches into the silence and so stands for it)."""
        if self._busy:
            return []
        self._paused = True
        self._pause_ms = now_ms
        self._now = max(self._now, now_ms)
        self._silence_from = now_ms if silence_start_ms is None else silence_start_ms
        if not self.config.speculate:
            return []
        if self._running is not None:
            pass_id, _, upto = self._running
            if upto >= self._silence_from + COVER_MS:
                self._running = (pass_id, "pause", upto)
            else:
                self._want = "pause"
            return []
        return [self._start("pause", now_ms)]

    def resumed(self) -> list[TurnAction]:
        """Speech came back before the window closed: forget the pause and what it prepared."""
        if self._busy:
            return []
        self._paused = False
        self._pause_text = None
        self._to_prepare = None
        self._confident = False
        if self._want == "pause":
            self._want = None
        if self._running is not None and self._running[1] == "pause":
            self._running = (self._running[0], "partial", self._running[2])  # its text only feeds the agreement now
        if self._speculation is None:
            return []
        dropped, self._speculation = self._speculation, None
        self.discarded += 1
        return [Drop(dropped)]

    def confident(self) -> list[TurnAction]:
        """The end-of-turn model and the pause text both say this pause ends the turn: prepare the reply
        now (once the text is in) instead of after ``prepare_after_ms`` of silence. That wait keeps a
        shared engine from preparing replies at every breath; a confident pause is not a breath, and
        its turn ends a short window after the silence began, so the reply's prefill and first chunk
        would otherwise start only about when the turn ends."""
        if self._busy or not self._paused:
            return []
        self._confident = True
        return self._prepare_if_due()

    def stopped(self, end_ms: int) -> list[TurnAction]:
        """The silence window closed: the turn is committed; its transcript follows (now, if ready)."""
        if self._busy:
            return []
        self._end_ms = end_ms
        out: list[TurnAction] = [TurnStopped(end_ms)]
        if self._pause_text is not None:
            out.append(self._complete(self._pause_text, self._speculation))
        elif self._running is not None and self._running[1] == "pause":
            pass  # its text will be the transcript
        elif self._running is not None:
            self._want = "final"
        else:
            out.append(self._start("final", end_ms))
        return out

    def transcribed(self, pass_id: int, text: str) -> list[TurnAction]:
        """Whisper's text for pass ``pass_id``."""
        kind = self._finish(pass_id)
        if kind is None or self.done:
            return []
        out: list[TurnAction] = []
        if self._end_ms is None:
            delta = self.agreement.update(text)
            if delta:
                out.append(ShowDelta(delta))
        if kind == "pause" and self._end_ms is None:
            out.extend(self._on_pause_text(text))
        elif kind in ("pause", "final") and self._end_ms is not None:
            out.append(self._complete(text, None))
        return out + self._next()

    def failed(self, pass_id: int) -> list[TurnAction]:
        """Pass ``pass_id`` raised. A failed final (or pause, once stopped) pass fails the transcript."""
        kind = self._finish(pass_id)
        if kind is None or self.done:
            return []
        if kind != "partial" and self._end_ms is not None:
            self.done = True
            return [TurnCompleted(None, "", False, None)]
        return self._next()

    def shed(self, pass_id: int) -> list[TurnAction]:
        """The ASR queue dropped partial pass ``pass_id`` before it ran (under load, or because a
        gating pass waits for it): no words from it; a pause or final pass waiting for it starts now."""
        if self._running is None or self._running[0] != pass_id or self._running[1] != "partial":
            return []  # only a partial is ever shed
        return [] if self._finish(pass_id) is None or self.done else self._next()

    @property
    def blocked_on(self) -> int | None:
        """The partial pass a pause or final pass waits for (the queue may shed it), if any."""
        if self._want is None or self._running is None or self._running[1] != "partial":
            return None
        return self._running[0]

    def abandon(self) -> list[TurnAction]:
        """The turn was dropped (manual commit, clear, new settings)."""
        if self.done:
            return []
        self.done = True
        spec, self._speculation = self._speculation, None
        return [Drop(spec)] if spec is not None else []

    # ------------------------------------------------------------------ internals

    @property
    def _busy(self) -> bool:
        """TurnStopped or done: VAD events no longer concern this turn."""
        return self.done or self._end_ms is not None

    def _start(self, kind: PassKind, upto_ms: int) -> Transcribe:
        self._ids += 1
        self._running = (self._ids, kind, upto_ms)
        self._last_upto = upto_ms
        return Transcribe(self._ids, upto_ms, kind)

    def _finish(self, pass_id: int) -> PassKind | None:
        if self._running is None or self._running[0] != pass_id:
            return None  # not ours (cannot happen with one pass at a time; kept safe)
        kind = self._running[1]
        self._running = None
        self._last_upto = max(self._last_upto, self._now - self.config.interval_ms // 2)  # Whisper rests
        return kind

    def _on_pause_text(self, text: str) -> list[TurnAction]:
        if not self._paused:
            return []
        self._pause_text = text
        out: list[TurnAction] = []
        eagerness = self.config.eagerness
        if eagerness is not None or self.config.pause_text:
            out.append(SetSilence(semantic_silence_ms(eagerness, text) if eagerness is not None else None, text))
        transcript, _, _ = self._final_text(text)
        if self.config.respond and transcript:
            self._to_prepare = transcript
            out.extend(self._prepare_if_due())
        return out

    def _prepare_if_due(self) -> list[TurnAction]:
        """Prepare the reply once the pause text is in and the silence has lasted ``prepare_after_ms``."""
        if self._to_prepare is None:
            return []
        if not self._confident and self._now - self._silence_from < self.config.prepare_after_ms:
            return []
        self._ids += 1
        self._speculation = self._ids
        transcript, self._to_prepare = self._to_prepare, None
        return [Prepare(self._ids, transcript)]

    def _next(self) -> list[TurnAction]:
        if self._running is not None or self.done:
            return []
        if self._end_ms is not None and self._want == "final":
            self._want = None
            return [self._start("final", self._end_ms)]
        if self._paused and self._want == "pause":
            self._want = None
            return [self._start("pause", self._pause_ms)]
        return []

    def _final_text(self, text: str) -> tuple[str, str, bool]:
        """(transcript, delta still to show, consistent) for the whole-turn text ``text``."""
        rest = self.agreement.remainder(text)
        if rest is None:  # the shown words were wrong: the transcript is the whole pass as is
            return text.strip(), "", False
        return (self.agreement.text + rest).strip(), rest, True

    def _complete(self, text: str, speculation: int | None) -> TurnCompleted:
        self.done = True
        self._speculation = None
        self._to_prepare = None
        transcript, delta, consistent = self._final_text(text)
        respond = self.config.respond and bool(transcript)
        return TurnCompleted(transcript, delta, respond, speculation if respond else None, consistent)


# ---------------------------------------------------------------- reopening a turn


@dataclass(frozen=True)
class Reopen:
    """Speech came back ``gap_ms`` after turn ``item_id`` ended, before any of its reply was heard: that
    reply is cancelled quietly and the new speech continues the turn (the glue leads the new turn with
    the old one's audio and takes the old item out of the conversation once its transcript is out)."""

    item_id: str
    gap_ms: int


class Reopener:
    """The latest turn that will be answered, while speech resuming may still reopen it.

    Sans-I/O like ``TurnTaker``: the glue reports when a turn ends and will be answered, when the
    first audio of a reply reaches the client, and when speech starts (on the VAD's clock, in ms).
    A turn reopens only while nothing of its reply was heard and the speech starts at most
    ``reopen_ms`` after the turn's end (0: never, OpenAI's semantics): a user who paused mid-sentence
    and went on is not answered twice, and a reply already playing is a barge-in as before.
    """

    def __init__(self, reopen_ms: int = 0):
        self.reopen_ms = reopen_ms
        self._open: tuple[str, int] | None = None  # (item, end ms) of the turn that may still reopen
        self.reopened = 0  # turns reopened so far

    def answered(self, item_id: str, end_ms: int) -> None:
        """Turn ``item_id`` ended at ``end_ms`` and its reply is on the way."""
        self._open = (item_id, end_ms) if self.reopen_ms > 0 else None

    def closed(self, item_id: str | None = None) -> None:
        """The reply was heard (its first audio went out), ended, or will not come (``item_id``'s only, if given)."""
        if item_id is None or (self._open is not None and self._open[0] == item_id):
            self._open = None

    def started(self, start_ms: int) -> list[Reopen]:
        """Speech starts at ``start_ms`` (where its turn's audio begins): does it reopen the last turn?"""
        if self._open is None:
            return []
        (item_id, end_ms), self._open = self._open, None
        gap = max(0, start_ms - end_ms)
        if gap > self.reopen_ms:
            return []
        self.reopened += 1
        return [Reopen(item_id, gap)]
