"""Speech over a reply: a backchannel ("mm-hmm", "okay") that lets it go on, or an interruption. Pure.

A listener says "mm-hmm", "yeah", "right" while the assistant speaks to show they follow, not to
take the turn. ``classify`` decides from what the overlapping speech said (Whisper's text, once a
pass over it is back) and how long it lasted:

- longer than ``max_ms`` of speech: an interruption, whatever it says (nobody backchannels for a
  second: "mm-hmm" is 0.3-0.6 s), so a real interruption never waits for Whisper longer than that;
- words, any of them not an acknowledgement: an interruption ("okay, stop", "wait");
- only acknowledgements, at most ``MAX_WORDS`` of them: a backchannel;
- no words at all (a cough, a breath, a false start that Whisper hears as nothing): a false start,
  which interrupts nothing either;
- no text yet: undecided (the caller waits for the pass or for ``max_ms``).
"""

from __future__ import annotations

import re
from typing import Literal

Overlap = Literal["backchannel", "false_start", "interruption", "undecided"]

MAX_WORDS = 4  # "oh okay I see" is still an acknowledgement; a sentence is not
MAX_MS = 700  # speech longer than this over a reply interrupts it, whatever it says

# single words that acknowledge without taking the turn (after lowercasing, hyphens and punctuation
# dropped: "Mm-hmm." → "mmhmm", "Uh-huh" → "uhhuh", "O.K." → "ok")
ACKNOWLEDGEMENTS = frozenset(
    "mm mmm mhm mmhm mmhmm hm hmm hmmm uh huh um er ah uhhuh uhuh aha oh ooh wow yeah yea yep yup yes ya okay ok k "
    "kay right alright sure cool nice great good fine true exactly indeed totally absolutely gotcha "
    "interesting really".split()
)
# two-word acknowledgements, joined before the words are checked
PHRASES = {
    ("i", "see"): "isee",
    ("got", "it"): "gotit",
    ("all", "right"): "alright",
    ("uh", "huh"): "uhhuh",
    ("mm", "hmm"): "mmhmm",
    ("makes", "sense"): "makessense",
    ("of", "course"): "ofcourse",
}
_JOINED = frozenset(PHRASES.values())


def words(text: str) -> list[str]:
    """Lowercase words without punctuation or hyphens, two-word acknowledgements joined."""
    raw = [re.sub(r"[^a-z0-9']", "", t) for t in text.lower().replace("’", "'").replace("-", "").split()]
    raw = [w for w in raw if w]
    out: list[str] = []
    i = 0
    while i < len(raw):
        pair = PHRASES.get((raw[i], raw[i + 1])) if i + 1 < len(raw) else None
        if pair is not None:
            out.append(pair)
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return out


def acknowledges(word: str) -> bool:
    """An acknowledgement: a listed word, or a hum Whisper spells its own way ("Mm", "Nmm", "Mhmm")."""
    return word in ACKNOWLEDGEMENTS or word in _JOINED or re.fullmatch(r"[mnh]*m[mnh]*", word) is not None


def classify(text: str | None, speech_ms: int, max_ms: int = MAX_MS) -> Overlap:
    """What speech of ``speech_ms`` over a reply is, given its transcript so far (None: not in yet)."""
    if speech_ms > max_ms:
        return "interruption"
    if text is None:
        return "undecided"
    heard = words(text)
    if not heard:
        return "false_start"
    if len(heard) <= MAX_WORDS and all(acknowledges(w) for w in heard):
        return "backchannel"
    return "interruption"


def keeps_reply(kind: Overlap) -> bool:
    """Whether the reply goes on (a backchannel or a false start)."""
    return kind in ("backchannel", "false_start")


class HeldBargeIn:
    """Speech over a reply that has not cancelled it yet: how long it has spoken, what it said."""

    def __init__(self, item_id: str, start_ms: int, max_ms: int):
        self.item_id = item_id  # the user item of the overlapping turn
        self.start_ms = start_ms  # where the VAD heard it start (session clock)
        self.max_ms = max_ms  # longer speech interrupts, whatever it says
        self._speech_end_ms: int | None = None  # where the current pause began, while it lasts
        self.text: str | None = None  # the latest transcript of it

    def paused(self, silence_start_ms: int) -> None:
        self._speech_end_ms = silence_start_ms

    def resumed(self) -> None:
        self._speech_end_ms = None

    def stopped(self, end_ms: int) -> None:
        """The turn ended; its speech ended at the pause before, or (no pause reported) at ``end_ms``."""
        if self._speech_end_ms is None:
            self._speech_end_ms = end_ms

    def speech_ms(self, now_ms: int) -> int:
        """Speech heard so far, pauses excluded from its end (not from its middle: short anyway)."""
        end = now_ms if self._speech_end_ms is None else self._speech_end_ms
        return max(0, end - self.start_ms)

    def verdict(self, now_ms: int, text: str | None = None) -> Overlap:
        """``classify`` with the latest text (``text`` replaces it when given)."""
        if text is not None:
            self.text = text
        return classify(self.text, self.speech_ms(now_ms), self.max_ms)
