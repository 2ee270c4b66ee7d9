"""A session's state as JSON, and how another replica continues it after its owner died. Pure.

The owner writes a snapshot together with the events it mirrors (``gateway.cluster.mirror``), in
the same Redis transaction: a snapshot at seq ``S`` holds exactly what events ``0..S`` made. Text
deltas after ``S`` are not in it (snapshots are written only when something other than a delta
went out), so ``take_over`` adds them back: the conversation keeps exactly the delivered text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..realtime import protocol as p
from ..realtime.inputs import Abandon, Restored
from ..realtime.response_ending import ResponseEnding
from ..realtime.responses import ResponseState
from ..realtime.session import Session

# events that change nothing a snapshot holds except the active response's text: no snapshot after them
TEXT_DELTA = "response.output_text.delta"
STATELESS = frozenset(
    {
        TEXT_DELTA,
        "conversation.item.input_audio_transcription.delta",
        "input_audio_buffer.speech_started",
        "response.output_audio.delta",  # a spoken reply's audio: what a takeover keeps is its transcript
        "response.output_audio_transcript.delta",
        "rate_limits.updated",
        "error",
    }
)


def event_type(text: str) -> str:
    """The ``type`` of a stamped event's JSON text: always its first key (``gateway.realtime.server_events``)."""
    head = '{"type":"'
    return text[len(head) : text.index('"', len(head))] if text.startswith(head) else ""


def needs_snapshot(event_types: list[str]) -> bool:
    """Did any of these events change the session beyond the active response's text?"""
    return any(t not in STATELESS for t in event_types)


def snapshot(session: Session, seq: int, received: int) -> dict[str, Any]:
    """``session`` as it stands once event ``seq`` went out; ``received``: client frames it handled."""
    r = session.response
    response = None
    if r is not None:
        response = dataclasses.asdict(r)
        response["known_tools"] = sorted(r.known_tools)
        # the spoken part lives with its voice queue on the owner: a replica that takes over ends the
        # response at once, with its text (as for any response running there)
        response["audio"] = None
    return {
        "seq": seq,
        "received": received,
        "id": session.id,
        "options": session.options.model_dump(mode="json", exclude_unset=False),
        "locked": sorted(session.locked),  # what an ek_ key fixed stays fixed on the replica taking over
        "items": session.conversation.items,
        "response": response,
    }


def restored(snap: dict[str, Any], later: Sequence[dict[str, Any]] = ()) -> Restored:
    """The session ``snap`` describes (its id, options, items, response), with the text of ``later`` (the
    events mirrored after it, in order) added to the response that was running."""
    r = snap.get("response")
    response = None
    if r is not None:
        # an ending is a dict in the snapshot's JSON (dataclasses.asdict); anything else (a snapshot written
        # before it had its own type) is dropped: a response taken over is ended anew (``take_over``)
        ending = ResponseEnding(**r["ending"]) if isinstance(r.get("ending"), dict) else None
        response = ResponseState(**{**r, "known_tools": frozenset(r.get("known_tools") or ()), "ending": ending})
        for ev in later:
            if ev.get("type") == TEXT_DELTA and ev.get("response_id") == response.id:
                response.text += ev["delta"]
                response.started = True
    return Restored(
        session_id=snap["id"],
        options=p.SessionOptions.model_validate(snap["options"]),
        locked=frozenset(snap.get("locked") or ()),
        items=list(snap["items"]),
        response=response,
    )


def take_over(session: Session, snap: dict[str, Any], later: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Continue a session whose owner died: ``session`` (fresh, stamping from the stream's next seq)
    becomes ``snap`` plus the text of ``later`` (the events mirrored after it, in order), and a
    response that was running is ended ``incomplete`` (reason ``server_error``), its delivered text
    kept. Returns the events that ended it (already stamped), or [] when none was running."""
    session.handle(restored(snap, later))
    if session.response is None:
        return []
    return session.handle(Abandon("server_error")).events
