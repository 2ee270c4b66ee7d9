"""How long a reply's next chunk waits before it is synthesized: speech stays a lead ahead of playback. Pure.

Synthesized as fast as the voice allows, a long reply takes a core for seconds at once, and on a small
machine that time comes out of every other session's decode. A listener needs only the audio it will
play next: so each reply's synthesis runs at most ``lead_s`` ahead of a real-time playback clock that
starts when its first audio goes out. The same CPU is spent, spread over the playback instead of in
one burst beside other sessions' decoding. The first chunk never waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KEPT = 16  # replies whose clocks are remembered (a session speaks one at a time; the rest are old)


@dataclass
class PlaybackClock:
    lead_s: float  # seconds of audio a reply may have sent beyond what has played; 0: no pacing
    _replies: dict[str, tuple[float, float]] = field(default_factory=dict)  # id → (first audio at, seconds sent)

    def sent(self, response_id: str, seconds: float, now: float) -> None:
        """``seconds`` more of ``response_id``'s audio went out at ``now``."""
        started, total = self._replies.pop(response_id, (now, 0.0))
        self._replies[response_id] = (started, total + seconds)  # re-inserted: the newest stays
        while len(self._replies) > KEPT:
            del self._replies[next(iter(self._replies))]

    def wait_s(self, response_id: str, now: float) -> float:
        """How long ``response_id``'s next chunk waits before synthesis (0: start now)."""
        if self.lead_s <= 0 or response_id not in self._replies:
            return 0.0
        started, total = self._replies[response_id]
        ahead = total - (now - started)  # audio sent that has not played yet, on a real-time clock
        return max(0.0, ahead - self.lead_s)
