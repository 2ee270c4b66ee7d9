"""SIP session timers (RFC 4028), pure: the interval and refresher an INVITE's ``Session-Expires`` /
``Min-SE`` settle on, and when a call must be refreshed or ended. The clock is given."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

RFC_MIN_SE = 90  # §4: no session interval may be below 90 s
_VALUE = re.compile(r"^\s*(\d+)\s*(?:;(.*))?$")


class TimerError(ValueError):
    """A malformed Session-Expires / Min-SE: the INVITE gets 400 naming the header."""


@dataclass(frozen=True)
class Timer:
    interval: int  # seconds: the session expires this long after its last refresh
    refresher: Literal["uac", "uas"]  # who refreshes: the caller (uac) or the gateway (uas)
    required: bool  # the 2xx carries Require: timer (the caller said it supports them)

    def header(self) -> str:
        return f"{self.interval};refresher={self.refresher}"


@dataclass(frozen=True)
class TooSmall:
    min_se: int  # 422 Session Interval Too Small, with this Min-SE: the caller retries with at least it


def _seconds(name: str, value: str) -> tuple[int, str]:
    m = _VALUE.match(value)
    if m is None:
        raise TimerError(f"{name}: {value!r} is not delta-seconds")
    return int(m.group(1)), (m.group(2) or "")


def negotiate(
    session_expires: str | None, min_se: str | None, supported: bool, our_min_se: int, default_interval: int | None
) -> Timer | TooSmall | None:
    """The INVITE's timer (§9): ``supported`` = its Supported (or Require) lists ``timer``. ``default_interval``:
    the interval asked of a caller that supports timers and asked none (None: none then). None: no timer."""
    floor = max(RFC_MIN_SE, our_min_se)
    if min_se is not None:
        floor = max(floor, _seconds("Min-SE", min_se)[0])
    if session_expires is None:
        if not supported or default_interval is None:
            return None
        return Timer(max(default_interval, floor), "uac", True)
    interval, params = _seconds("Session-Expires", session_expires)
    if interval < max(RFC_MIN_SE, our_min_se):
        return TooSmall(max(RFC_MIN_SE, our_min_se))
    asked = re.search(r"(?:^|;)\s*refresher\s*=\s*(uac|uas)\b", params, re.IGNORECASE)
    if not supported:  # the caller cannot refresh by itself (§9): the gateway does
        return Timer(interval, "uas", False)
    refresher: Literal["uac", "uas"] = "uas" if asked and asked.group(1).lower() == "uas" else "uac"
    return Timer(interval, refresher, True)


@dataclass(frozen=True)
class Refresh:
    """The gateway is the refresher: send a refresh (UPDATE) now."""


@dataclass(frozen=True)
class Expire:
    """No refresh came in time: the gateway ends the call (BYE)."""


@dataclass
class SessionClock:
    """One call's timer from the answer on: ``refreshed`` at each refresh (either side's), ``due`` says what
    is owed at ``now``, ``next_at`` when to look again."""

    timer: Timer
    last: float  # the last refresh (the answer counts as the first)
    sent: bool = False  # our refresh for this period went out

    def refreshed(self, now: float, timer: Timer | None = None) -> None:
        self.last, self.sent = now, False
        if timer is not None:
            self.timer = timer

    def _refresh_at(self) -> float:
        return self.last + self.timer.interval / 2  # §10: the refresher refreshes at half the interval

    def _expire_at(self) -> float:
        # §10: the other side ends the session when it expires less min(32 s, a third of the interval)
        return self.last + self.timer.interval - min(32.0, self.timer.interval / 3)

    def due(self, now: float) -> Refresh | Expire | None:
        if now >= self._expire_at():
            return Expire()
        if self.timer.refresher == "uas" and not self.sent and now >= self._refresh_at():
            self.sent = True
            return Refresh()
        return None

    def next_at(self) -> float:
        if self.timer.refresher == "uas" and not self.sent:
            return self._refresh_at()
        return self._expire_at()
