"""Chunk filters: the operator's code sees every chunk before a client does (moderation, redaction).

Configured as ``filters: ["package.module:callable", …]``; each callable is called as
``fn(text, ctx) -> str | None`` with the chunk's text and a ``FilterContext`` (session id,
response id, the text sent so far), in order, each on the previous one's output. It returns the
text to send (possibly rewritten) or ``None`` to stop the response: the Realtime response ends
``incomplete`` with reason ``content_filter``, a chat completion with ``finish_reason:
"content_filter"``, and the conversation keeps only what was sent. A filter that raises stops
the response with the error ``filter_failed`` naming the filter; the server goes on.

Filters run on the event loop, once per chunk (not per token): they should be quick; one that
blocks stalls every session. No I/O here and no asyncio: a ``ResponseFilter`` is a small state
machine the API adapters drive.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger("stream_omni.filters")


@dataclass(frozen=True)
class FilterContext:
    session_id: str | None  # the Realtime session (None for the HTTP APIs)
    response_id: str  # the Realtime response or the completion id
    text_so_far: str  # what this response has sent before the chunk


ChunkFilter = Callable[[str, FilterContext], str | None]


FILTER_FAILED = "filter_failed"  # the error code of a response a filter failed on
CONTENT_FILTER = "content_filter"  # the finish reason of a response a filter stopped


@dataclass(frozen=True)
class NamedFilter:
    name: str  # the "module:callable" spec, for errors and logs
    fn: ChunkFilter


def load_filters(specs: Sequence[str]) -> tuple[NamedFilter, ...]:
    """Import every ``module:callable``; a bad spec is a ``ValueError`` naming it (at start-up, not per chunk)."""
    out = []
    for spec in specs:
        module, sep, attr = spec.partition(":")
        if not sep or not module or not attr:
            raise ValueError(f"filter {spec!r} must look like 'package.module:callable'")
        try:
            obj: object = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"filter {spec!r} cannot be loaded: {exc}") from None
        if not callable(obj):
            raise ValueError(f"filter {spec!r} is not callable")
        out.append(NamedFilter(spec, obj))
    return tuple(out)


class ResponseFilter:
    """One response's filtering: ``check(text)`` → the text to send, or None once the filters stopped it."""

    def __init__(self, filters: Sequence[NamedFilter], session_id: str | None, response_id: str):
        self.filters = filters
        self.session_id = session_id
        self.response_id = response_id
        self.sent: list[str] = []  # what went out
        self.stopped = False  # a filter returned None (or failed): nothing more is sent
        self.error: str | None = None  # why a filter failed (for the client: names the filter, not its insides)

    @property
    def reason(self) -> str | None:
        """None while running; ``content_filter`` or ``filter_failed`` once stopped."""
        if not self.stopped:
            return None
        return FILTER_FAILED if self.error is not None else CONTENT_FILTER

    def check(self, text: str) -> str | None:
        """The text to send for this chunk; None once a filter stopped the response (returned None,
        raised, or returned something other than str/None: then ``error`` says which)."""
        if self.stopped:
            return None
        if not self.filters:
            self.sent.append(text)
            return text
        so_far = "".join(self.sent)
        out = text
        for f in self.filters:
            try:
                res: object = f.fn(out, FilterContext(self.session_id, self.response_id, so_far))
                if res is not None and not isinstance(res, str):
                    raise TypeError(f"returned {type(res).__name__}, not str or None")
            except Exception as exc:  # the operator's code: it costs this response, never the server
                self.stopped = True
                self.error = f"chunk filter {f.name} failed: {type(exc).__name__}"
                log.error("chunk filter %s failed on response %s", f.name, self.response_id, exc_info=True)
                return None
            if res is None:
                self.stopped = True
                return None
            out = res
        self.sent.append(out)
        return out
