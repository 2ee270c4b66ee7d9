"""Generated-image output items of a response: the events around an image being made. Pure.

Functions of the ``Session`` they are given: they read its active response and stamp events through it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from models.image_events import TERMINAL, Generating, ImageCompleted, ImageEvent, PartialImage

from . import server_events as se
from .actions import Output, StartImage
from .response_ending import ResponseEnding
from .responses import ResponseState


@dataclass(frozen=True)
class ImageProgress:
    """One event of an image being generated (models.image_gen, from its worker thread)."""

    item_id: str  # the response's image_generation_call item
    event: ImageEvent


class ImageHost(Protocol):
    """What these functions use of the ``Session`` they are given."""

    response: ResponseState | None  # the active response

    def _out(self, *events: dict[str, Any], actions: list[Any] | None = None) -> Output: ...

    def _finish(self, r: ResponseState, ending: ResponseEnding) -> Output: ...


def request(s: ImageHost, response_id: str, prompt: str) -> Output:
    """Start an image output item (modality "image", or a request the scheduler intercepted)."""
    r = s.response
    if r is None or r.id != response_id:
        return Output()
    item_id = f"ig_{secrets.token_hex(8)}"
    index = r.take_index(item_id)
    item = {"id": item_id, "type": "image_generation_call", "status": "in_progress", "output_index": index}
    r.images[item_id] = item
    view = {k: v for k, v in item.items() if k != "output_index"}
    return s._out(
        se.output_item_added(r.id, index, view),
        se.image_call_in_progress(item_id, index),
        actions=[StartImage(r.id, item_id, prompt)],
    )


def progress(s: ImageHost, response_id: str, item_id: str, ev: ImageEvent) -> Output:
    """A progress event from the image generator (``models.image_gen``)."""
    r = s.response
    if r is None or r.id != response_id or item_id not in r.images:
        return Output()  # late event of a cancelled/finished response
    item = r.images[item_id]
    idx = item["output_index"]
    match ev:
        case Generating():
            return s._out(se.image_call_generating(item_id, idx))
        case PartialImage(index=index, png_b64=png_b64):
            return s._out(se.image_call_partial(item_id, idx, index, png_b64))
        case _ if not isinstance(ev, TERMINAL):
            return Output()
    item["status"] = "completed" if isinstance(ev, ImageCompleted) else "failed"
    done_item = {"id": item_id, "type": "image_generation_call", "status": item["status"]}
    events = []
    if isinstance(ev, ImageCompleted):
        done_item["result"] = item["result"] = ev.png_b64
        events.append(se.image_call_completed(item_id, idx))
    events.append(se.output_item_done(r.id, idx, done_item))
    out = s._out(*events)
    if r.ending is not None and not r.waiting:
        out.extend(s._finish(r, r.ending))
    return out
