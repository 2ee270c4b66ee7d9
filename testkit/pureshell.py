"""The I/O side of a sans-I/O ``Session`` for tests without sockets: every check it asks for passes.

``Session.handle`` leaves a ``session.update``'s audio check and a ``response.create``'s capacity check to
the I/O layer (``CheckUpdate``, ``CheckCapacity``); ``handled`` grants them as ``LiveSession`` does when the
voice layer accepts and the engine has room, so a test sees what the client would.
"""

from __future__ import annotations

from typing import Any

from gateway.realtime.actions import CheckCapacity, CheckUpdate, Output
from gateway.realtime.session import Session


def handled(s: Session, ev: Any) -> Output:
    """``s.handle(ev)``, its checks passed: their outcome in place of the check actions."""
    out = s.handle(ev)
    done = Output(out.events, [])
    for action in out.actions:
        if isinstance(action, CheckUpdate):
            done.extend(s.apply_update(action.event))
        elif isinstance(action, CheckCapacity):
            done.extend(s.create_response(action.event))
        else:
            done.actions.append(action)
    return done
