"""Whether a session's microphone hears the reply at all: the echo canceller's gate and filter act only when it does.

Pure (no numpy, no I/O): a state machine over the delay estimates ``processors.echo`` makes while the reply
plays. A client that cancels its own echo, or has none (a headset, an app that plays elsewhere), shows no
correlation between what the server played and what the microphone sends, and its user's words must reach the
VAD and Whisper untouched, the first word of a barge-in included. A speakerphone's echo shows as a sharp
correlation peak at a steady delay within a fraction of a second of the reply starting. So an echo counts as
found only after estimates agree on its delay (a single peak can be chance: two unrelated voices line up at some
lag), and is forgotten after the reply has played on with no trace of it for a while (the headset went on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PresenceConfig:
    """When a correlation peak is an echo."""

    min_peak: float = 0.08  # GCC-PHAT peak (0..1) an estimate needs to count as a sighting of the echo, and …
    # … either the microphone is mostly the reference at that delay (correlation coefficient; a speakerphone's
    # echo alone: 0.95-0.99 from its first 10 ms, 0.6-0.7 through an 8 kHz phone line; the user's voice
    # against the reply's: under 0.5) …
    min_rho: float = 0.6
    # … or the peak clears what chance gives on that window (whose spread goes as 1/sqrt(samples)):
    # chance / sqrt(window); 9 is twice the highest chance peak seen between two voices at any window
    chance: float = 9.0
    agree: int = 32  # samples (2 ms at 16 kHz) two sightings' delays may differ by and be the same path
    confirm: int = 2  # agreeing sightings in a row that make an echo found …
    # … spread over this many samples of microphone at least (30 ms at 16 kHz): an echo stays at its delay
    # while the audio moves on, a word of the user's that happens to match one of the reply's does not
    span: int = 480
    # echo power gain (−25 dB) below which a peak is not an echo worth acting on: two unrelated voices that
    # line up at some lag show one, but little of the one's energy is in the other
    min_gain2: float = 3e-3
    forget_after: int = 32_000  # samples (2 s) of a reply playing throughout with no sighting: the echo is gone


@dataclass(frozen=True)
class Estimate:
    """One delay estimate over a window of microphone and reference."""

    delay: int  # samples by which the microphone follows the reference at the peak
    peak: float  # GCC-PHAT peak height (0..1)
    gain2: float  # the echo path's power gain at that delay (least squares)
    rho: float  # correlation coefficient of the microphone and the reference at that delay (-1..1)
    playing: float  # share of the window's reference that is sound (0..1): 1 when the reply plays throughout
    window: int  # microphone samples the estimate correlated
    end: int  # the microphone position the window ends at


@dataclass(frozen=True)
class Presence:
    """What is known of the echo so far; ``found`` decides whether the canceller touches the microphone."""

    found: bool = False  # an echo has been confirmed (and not since forgotten)
    delay: int | None = None  # the confirmed or candidate delay in samples
    gain2: float | None = None  # its power gain (the gate's measure of how loud the echo can be)
    streak: int = 0  # agreeing sightings in a row at ``delay``
    since: int = 0  # where the first of them ended (microphone position)
    lost_at: int | None = None  # where a found echo stopped being sighted (over a playing reply); None: it is
    dominant: bool = False  # the last estimate found the microphone mostly echo (``min_rho``): the VAD is at risk


def sighting(e: Estimate, cfg: PresenceConfig) -> bool:
    """Whether the estimate shows an echo worth acting on: a clear peak and an echo loud enough to hear."""
    if e.peak < cfg.min_peak or e.gain2 < cfg.min_gain2:
        return False
    return e.rho >= cfg.min_rho or e.peak >= cfg.chance / math.sqrt(max(e.window, 1))


def observe(s: Presence, e: Estimate, cfg: PresenceConfig) -> Presence:
    """The state after one more estimate."""
    if not sighting(e, cfg):
        if e.playing < 0.8:  # the reply only began (or ended) in this window: its echo may not be back yet
            return s if s.found else replace(s, streak=0, dominant=False)
        if not s.found:
            return replace(s, streak=0, dominant=False)
        lost_at = e.end if s.lost_at is None else s.lost_at
        if e.end - lost_at >= cfg.forget_after:
            return Presence()
        return replace(s, lost_at=lost_at, dominant=False)
    same = s.streak > 0 and s.delay is not None and abs(e.delay - s.delay) <= cfg.agree
    streak, since = (s.streak + 1, s.since) if same else (1, e.end)
    found = s.found or (streak >= cfg.confirm and e.end - since >= cfg.span)
    dominant = e.rho >= cfg.min_rho
    return Presence(found, e.delay, e.gain2, streak, since, lost_at=None, dominant=dominant)


def acting(s: Presence) -> bool:
    """Whether the canceller works on the microphone: an echo found, or sighted with the microphone mostly
    echo and not yet disproved. A speakerphone's echo must not reach the VAD for long (~60 ms of it starts a
    turn), so the canceller acts from such a sighting; nothing but the reply's own echo makes the microphone
    that like the reply, and a chance peak (the user's word matching one of the reply's) acts only once
    confirmed over ``span``."""
    return s.found or (s.streak > 0 and s.dominant)


def probing(s: Presence) -> bool:
    """Whether to estimate at the fast cadence: no echo found yet (one that is there leaks until it is), or
    the one found was lost (its delay moved: a client that stalled, a loaded box; the filter and the gate
    look in the wrong place until it is found again)."""
    return not s.found or s.lost_at is not None
