"""A call's ICE connectivity checks paced: at most ``webrtc.stun_checks_per_s`` (after a burst of
``webrtc.stun_checks_burst``) STUN checks start per call, over all its candidate pairs.

Each check is a STUN binding request the server sends to an address the caller named (or one a request
came from), retransmitted up to 6 times by aioice; capping an offer's candidates bounds how many there
are, this bounds how fast they go out. ``CheckPacer`` is the pure token bucket (fake-clock tested);
``pace_checks`` puts it in front of aioice's ``check_start`` on each of a peer connection's ICE agents
(per instance; pinned to aioice 0.13, as ``gateway.webrtc.ports``). A delayed check stays Waiting, so
aioice's own 20 ms pacing starts no other pair meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckPacer:
    """A token bucket of check starts: ``reserve`` takes the next start and says how long to wait for it."""

    rate_per_s: float  # checks started per second, sustained
    burst: int  # checks that may start at once (a call's first pairs)
    clock: Callable[[], float] = time.monotonic
    _tokens: float = field(init=False)
    _at: float = field(init=False)
    started: int = field(default=0, init=False)  # checks reserved so far

    def __post_init__(self) -> None:
        self._tokens, self._at = float(self.burst), self.clock()

    def reserve(self) -> float:
        """Seconds until the start just reserved may go (0: now). Reservations queue: each waits its turn."""
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        self._tokens -= 1
        self.started += 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate_per_s


def _agents(pc: Any) -> list[Any]:
    transports: set[Any] = getattr(pc, "_RTCPeerConnection__iceTransports", set())
    return [t.iceGatherer._connection for t in transports]


def pace_checks(pc: Any, pacer: CheckPacer) -> None:
    """Every check ``pc``'s ICE agents start (ordinary, triggered, after a role conflict) waits for ``pacer``."""
    for agent in _agents(pc):
        original = agent.check_start

        async def paced(pair: Any, _start: Any = original) -> None:
            wait = pacer.reserve()
            if wait > 0:
                await asyncio.sleep(wait)
            await _start(pair)

        agent.check_start = paced
