"""How much ``/v1/audio/speech`` one API key may ask of the shared voices, pure: requests at once, characters a minute.

Synthesis takes CPU in proportion to the text (a 4,096-character input is about a minute of one
worker), and the workers are shared with every session's spoken replies. The queue takes keys in turn
(``gateway.voice.tts_queue``), which bounds what one key's request costs the others' latency; these bounds
keep one key from holding the workers all the same: at most ``max_concurrent`` requests of a key at
once, and ``chars_per_min`` characters per minute (a bucket that refills continuously, one full
minute's worth at most). Past either, the request is refused (429) before anything is synthesized.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Key:
    running: int = 0
    chars: float = 0.0  # characters left in its bucket
    at: float = 0.0  # clock reading when ``chars`` was last brought up to date


@dataclass
class SpeechBudget:
    max_concurrent: int  # audio.output.http_max_concurrent_per_key
    chars_per_min: int  # audio.output.http_chars_per_min_per_key
    keys: dict[str, _Key] = field(default_factory=dict)

    def admit(self, key: str, chars: int, now: float) -> str | None:
        """Take a request of ``chars`` characters for ``key``: None, or why it is refused (with the config key).
        An admitted request must be ``release``d when it ends."""
        k = self.keys.get(key)
        if k is None:
            k = self.keys[key] = _Key(chars=float(self.chars_per_min), at=now)
        k.chars = min(float(self.chars_per_min), k.chars + (now - k.at) * self.chars_per_min / 60.0)
        k.at = now
        if k.running >= self.max_concurrent:
            return f"this API key has {k.running} speech requests running (audio.output.http_max_concurrent_per_key)"
        if chars > k.chars:
            return (
                f"this API key has spent its speech characters for now; retry in {self.retry_after_s(key, chars)} s"
                " (audio.output.http_chars_per_min_per_key)"
            )
        k.chars -= chars
        k.running += 1
        return None

    def release(self, key: str) -> None:
        k = self.keys.get(key)
        if k is None:
            return
        k.running = max(0, k.running - 1)
        if k.running == 0 and k.chars >= self.chars_per_min:  # idle and full: nothing worth keeping
            del self.keys[key]

    def retry_after_s(self, key: str, chars: int) -> int:
        """Seconds until ``chars`` fit ``key``'s bucket (at least 1): the 429's Retry-After."""
        k = self.keys.get(key)
        have = k.chars if k is not None else float(self.chars_per_min)
        return max(1, int((chars - have) * 60.0 / self.chars_per_min + 0.999))
