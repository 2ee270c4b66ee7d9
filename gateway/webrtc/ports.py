"""``webrtc.udp_ports``: host candidates bound inside a fixed UDP port range (firewalls, containers).

aioice binds each host candidate on an ephemeral port and has no option for a range, so the
gatherers of one peer connection get their candidate gathering replaced, per instance, by one
that binds the first free port of the range. Server-reflexive (STUN) candidates are gathered on
those sockets as aioice would; TURN relays are aioice's own. Pinned to aiortc 1.16 / aioice 0.13.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from typing import Any

from aioice import ice, turn
from aioice.candidate import Candidate, candidate_foundation, candidate_priority


def _gatherers(pc: Any) -> list[Any]:
    transports: set[Any] = getattr(pc, "_RTCPeerConnection__iceTransports", set())
    return [t.iceGatherer._connection for t in transports]


def bind_in_range(pc: Any, low: int, high: int) -> None:
    """Make ``pc``'s ICE gathering bind host candidates on ports ``low``..``high`` (inclusive)."""
    for conn in _gatherers(pc):
        original = conn.get_component_candidates

        async def ranged(
            component: int,
            addresses: list[str],
            timeout: int = 5,  # noqa: ASYNC109 (aioice's signature)
            *,
            _conn: Any = conn,
            _original: Any = original,
        ) -> list[Candidate]:
            loop = asyncio.get_running_loop()
            candidates: list[Candidate] = []
            protocols = []
            for address in addresses:
                for port in range(low, high + 1):
                    try:
                        transport, protocol = await loop.create_datagram_endpoint(
                            functools.partial(ice.StunProtocol, _conn), local_addr=(address, port)
                        )
                    except OSError:
                        continue  # taken (another call): the next port
                    sock = transport.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, turn.UDP_SOCKET_BUFFER_SIZE)
                    host, bound = transport.get_extra_info("sockname")[:2]
                    protocol.local_candidate = Candidate(
                        foundation=candidate_foundation("host", "udp", host),
                        component=component,
                        transport="udp",
                        priority=candidate_priority(component, "host"),
                        host=host,
                        port=bound,
                        type="host",
                    )
                    candidates.append(protocol.local_candidate)
                    protocols.append(protocol)
                    break
            _conn._protocols += protocols
            if _conn.stun_server:
                queries = [ice.server_reflexive_candidate(pr, _conn.stun_server) for pr in protocols]
                try:
                    found = await asyncio.wait_for(asyncio.gather(*queries, return_exceptions=True), timeout)
                except TimeoutError:
                    found = []  # no STUN answer: host candidates only, as aioice does
                candidates += [f[0] for f in found if isinstance(f, tuple)]
            if _conn.turn_server:  # aioice's own relay gathering: no host addresses
                candidates += await _original(component, [], timeout)
            return candidates

        conn.get_component_candidates = ranged
