"""What a partial transcript says about the turn in progress. Pure: strings in, decisions out.

- ``end_of_utterance`` / ``semantic_silence_ms``: semantic_vad's end-of-turn signal. A finished
  sentence ("…the kitchen window.") ends the turn sooner; a trailing conjunction or filler
  ("…the window and", "um", "…") waits longer, so a user who pauses to think is not cut off.
- ``LocalAgreement``: streaming transcripts from repeated Whisper passes on the growing turn audio.
  A word is shown (a transcription delta) once two consecutive passes agree on it and on every
  word before it (LocalAgreement-2, as in whisper_streaming): a pass on audio that ends mid-word
  guesses its last words, and the next pass, with more audio, corrects them.
"""

from __future__ import annotations

import re
from typing import Literal

from .vad import EAGERNESS_SILENCE_MS

Ending = Literal["finished", "continuing", "unknown"]

# a turn that ends on one of these is not over: the user is still building the sentence
CONTINUERS = frozenset(
    "and or but so because then um uh er hmm like the a an to of with for if that my your our their "
    "is are was in on at from which who when while".split()
)
FINISHED_FACTOR = 0.5  # a finished sentence: half the eagerness window
CONTINUING_FACTOR = 2.5  # a trailing "and…": two and a half times it
MIN_SILENCE_MS = 100  # never end a turn on less silence than this


def _word(token: str) -> str:
    return re.sub(r"[^a-z0-9']", "", token.lower().replace("’", "'"))


def end_of_utterance(text: str) -> Ending:
    """Classify the end of a partial transcript."""
    text = text.strip()
    if not text:
        return "unknown"
    if text.endswith(("...", "…", ",", "-", "—", ";", ":")):
        return "continuing"
    words = [w for w in (_word(t) for t in text.split()) if w]
    if words and words[-1] in CONTINUERS:
        return "continuing"
    if text[-1] in ".!?":
        return "finished"
    return "unknown"


def semantic_silence_ms(eagerness: str, text: str) -> int:
    """semantic_vad's silence window for a turn whose transcript so far is ``text``."""
    base = EAGERNESS_SILENCE_MS[eagerness]
    ending = end_of_utterance(text)
    if ending == "finished":
        return max(MIN_SILENCE_MS, round(base * FINISHED_FACTOR))
    if ending == "continuing":
        return round(base * CONTINUING_FACTOR)
    return base


class LocalAgreement:
    """Committed words of a growing transcript; each ``update`` returns the newly committed text."""

    def __init__(self) -> None:
        self.committed: list[str] = []  # raw tokens (with punctuation) shown so far
        self._previous: list[str] = []  # the last pass's tokens

    @property
    def text(self) -> str:
        return " ".join(self.committed)

    def update(self, hypothesis: str) -> str:
        """A new pass over the whole turn so far → the delta to show ("" if nothing new agreed)."""
        tokens = hypothesis.split()
        previous, self._previous = self._previous, tokens
        n = len(self.committed)
        # a pass that no longer agrees with what is shown adds nothing until the passes settle again
        if [_word(t) for t in tokens[:n]] != [_word(t) for t in self.committed]:
            return ""
        agreed = n
        while agreed < min(len(tokens), len(previous)) and _word(tokens[agreed]) == _word(previous[agreed]) != "":
            agreed += 1
        new = tokens[n:agreed]
        if not new:
            return ""
        self.committed.extend(new)
        return (" " if n else "") + " ".join(new)

    def remainder(self, final: str) -> str | None:
        """The delta that completes the shown text into ``final``; None if ``final`` does not extend it."""
        tokens = final.split()
        n = len(self.committed)
        if [_word(t) for t in tokens[:n]] != [_word(t) for t in self.committed]:
            return None
        if not n:
            return final.strip()
        rest = tokens[n:]
        # the last shown word may have gained punctuation ("window" → "window."): not re-sent
        tail = tokens[n - 1][len(self.committed[n - 1]) :] if tokens[n - 1].startswith(self.committed[n - 1]) else ""
        return tail + ("" if not rest else " " + " ".join(rest))
