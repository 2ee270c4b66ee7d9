"""When a spoken turn is over: the end-of-turn model and the pause transcript fused into a silence window. Pure.

The VAD ends a turn after a window of silence; ``EndOfTurn`` says how long that window is for the
turn in progress, from two signals about the speech before the current pause:

- the end-of-turn model's probability that the turn is complete (``processors.smart_turn``: the
  audio's prosody), asked once per pause, as soon as the pause begins;
- how the pause transcript ends (``processors.turn_text.end_of_utterance``: Whisper's text of the
  turn so far, made at the same pause for speculation): a trailing "and", "the", "um" or a comma
  says the user is still building the sentence, whatever the prosody says.

| model | transcript | window |
|---|---|---|
| complete (p ≥ threshold) | finished or unknown | ``complete_ms`` (short: the turn ends now) |
| incomplete, or not in yet | not continuing | ``unsure_ms`` |
| any | continuing | ``continuing_ms`` (the eagerness limit) |

The short window waits for both signals on purpose. The reply cannot start before the transcript
is in anyway (it is the reply's prompt), so ending the turn before the text costs nothing in time
to first audio (the turn ends the moment the text comes, if the model said complete); and the
model alone cuts people off: on 10 Piper sentences cut at a mid-sentence
word it said "complete" (p ≥ 0.5) at 6 ("Can you tell me", "What is the" among them).
When speech resumes, the pause's signals are forgotten (the next pause asks again).

The windows per eagerness follow OpenAI's ``semantic_vad``: ``high`` ends soonest, ``low`` lets
the user take their time, and the continuing limits are OpenAI's documented maximum timeouts
(8 s, 4 s, 2 s). ``server_vad`` with a model keeps its ``silence_duration_ms`` as the window
whenever the signals do not both say complete.
"""

from __future__ import annotations

from dataclasses import dataclass

from .turn_text import Ending, end_of_utterance

THRESHOLD = 0.5  # P(complete) at which the model's answer counts as "complete" (Smart Turn's own cut)


@dataclass(frozen=True)
class Windows:
    """Silence that ends a turn, by what the signals say."""

    complete_ms: int  # the model says complete and the transcript does not disagree
    unsure_ms: int  # the model says incomplete, or a signal is not in yet
    continuing_ms: int  # the transcript ends on a conjunction, article, filler or comma


# semantic_vad's eagerness ("auto" = medium). unsure_ms is above the longest mid-sentence pause the
# bench speaks (900 ms) at medium; continuing_ms is OpenAI's maximum timeout for the eagerness.
EAGERNESS_WINDOWS = {
    "high": Windows(complete_ms=150, unsure_ms=600, continuing_ms=2_000),
    "medium": Windows(complete_ms=200, unsure_ms=1_000, continuing_ms=4_000),
    "low": Windows(complete_ms=300, unsure_ms=1_500, continuing_ms=8_000),
}
EAGERNESS_WINDOWS["auto"] = EAGERNESS_WINDOWS["medium"]
SERVER_VAD_COMPLETE_MS = 200  # server_vad with a model: the short window, at most silence_duration_ms


def server_vad_windows(silence_duration_ms: int) -> Windows:
    """``server_vad`` with a model: ``silence_duration_ms`` unless both signals say complete."""
    silence = silence_duration_ms
    return Windows(min(SERVER_VAD_COMPLETE_MS, silence), silence, silence)


def windows_for(semantic: bool, eagerness: str, silence_duration_ms: int) -> Windows:
    """The windows of a ``turn_detection``: semantic_vad's eagerness, or server_vad's silence."""
    return EAGERNESS_WINDOWS[eagerness] if semantic else server_vad_windows(silence_duration_ms)


@dataclass(frozen=True)
class Probe:
    """Ask the model about the turn's audio so far; answer ``scored(probe, p)``."""

    probe: int


class EndOfTurn:
    """One turn's silence window. Sans-I/O: the glue reports pauses, the model's answers and the pause
    transcript; ``window_ms`` is the window to apply now."""

    def __init__(self, windows: Windows, threshold: float = THRESHOLD):
        self.windows = windows
        self.threshold = threshold
        self._ids = 0
        self._probe: int | None = None  # the probe of the current pause, while one is asked or answered
        self.probability: float | None = None  # the model's answer for the current pause
        self.ending: Ending | None = None  # how the current pause's transcript ends
        self.probes = 0  # probes asked during this turn

    @property
    def window_ms(self) -> int:
        w = self.windows
        if self.ending == "continuing":
            return w.continuing_ms
        if self.probability is None or self.ending is None or self.probability < self.threshold:
            return w.unsure_ms
        return w.complete_ms

    @property
    def complete(self) -> bool:
        """Both signals say the turn is complete (the short window applies)."""
        return self.window_ms == self.windows.complete_ms and self.probability is not None

    def paused(self) -> Probe:
        """A pause began: ask the model about the audio so far (this pause's answers replace the last's)."""
        self._forget()
        self._ids += 1
        self.probes += 1
        self._probe = self._ids
        return Probe(self._ids)

    def resumed(self) -> None:
        """Speech came back before the window closed: the pause's signals no longer describe the turn."""
        self._forget()

    def answers(self, probe: int) -> bool:
        """Whether an answer to ``probe`` would count (it is the current pause's)."""
        return probe == self._probe

    def scored(self, probe: int, probability: float) -> int:
        """The model's answer to ``probe`` (an answer to an earlier pause is ignored); returns the window."""
        if probe == self._probe:
            self.probability = probability
        return self.window_ms

    def transcribed(self, text: str) -> int:
        """The current pause's transcript; returns the window."""
        if self._probe is not None:
            self.ending = end_of_utterance(text)
        return self.window_ms

    def _forget(self) -> None:
        self._probe = None
        self.probability = None
        self.ending = None
