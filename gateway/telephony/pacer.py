"""One 20 ms clock for the outbound audio of every call on the event loop, and the lead a line keeps at
its far end. One timer for all calls, not one per call: N calls cost one wake-up per 20 ms, and a late
tick (a busy loop) owes every call the same frames."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from .playout import FRAME_MS

FRAME_S = FRAME_MS / 1000
MAX_CATCHUP = 5  # ticks one late wake-up may make up, beside its own (120 ms in all); more is lost, not bursted


@dataclass
class Lead:
    """How far ahead of the clock a line's far end is fed. A media stream's provider plays from its own
    buffer (its marks say what played), so frames sent ahead ride out a stall of the gateway's loop; RTP
    has no such buffer to count on, so its lead is 0. Pure: ``ahead`` models the far end's buffer."""

    frames: int  # the most frames sent ahead of the clock
    ahead: int = 0  # frames sent ahead now (the far end's buffer, as far as we know)

    def budget(self, owed: int) -> int:
        """Frames to send on a tick that owes ``owed`` frames of real time: those, plus the lead's refill."""
        return owed + max(0, self.frames - self.ahead)

    def sent(self, n: int, owed: int) -> None:
        """``n`` frames went out on a tick of ``owed``: the far end played ``owed`` of its buffer meanwhile."""
        self.ahead = max(0, self.ahead + n - owed)


Tick = Callable[[int], None]


class Pacer:
    """The loop's clock: each joined call's ``tick(owed)`` every 20 ms, ``owed`` ≥ 1 after a late wake-up."""

    def __init__(self) -> None:
        self._ticks: dict[int, Tick] = {}
        self._next = 0
        self._task: asyncio.Task[None] | None = None

    def join(self, tick: Tick) -> Callable[[], None]:
        """Tick ``tick`` from now on; the returned function leaves."""
        key = self._next
        self._next += 1
        self._ticks[key] = tick
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            _PACERS[loop] = self
            self._task = loop.create_task(self._run(), name="telephony-pacer")
        return lambda: self._ticks.pop(key, None) and None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await self._clock(loop)
        finally:
            if _PACERS.get(loop) is self:
                del _PACERS[loop]  # no call left: the loop holds no pacer (a closed loop is not kept alive)

    async def _clock(self, loop: asyncio.AbstractEventLoop) -> None:
        due = loop.time()
        while self._ticks:
            due += FRAME_S
            await asyncio.sleep(max(0.0, due - loop.time()))
            late = int((loop.time() - due) / FRAME_S)  # whole ticks missed
            owed = 1 + min(MAX_CATCHUP, max(0, late))
            due += (owed - 1) * FRAME_S
            if late > MAX_CATCHUP:
                due = loop.time()  # the rest of a long stall is not owed: it would only be bursted out
            for tick in list(self._ticks.values()):
                tick(owed)


# the pacer of each loop with calls on it (not weak keys: uvloop's loop takes no weak reference)
_PACERS: dict[asyncio.AbstractEventLoop, Pacer] = {}


def pacer() -> Pacer:
    """The running loop's pacer (one per loop: the test servers run several loops in one process)."""
    loop = asyncio.get_running_loop()
    found = _PACERS.get(loop)
    if found is None:
        found = _PACERS[loop] = Pacer()
    return found
