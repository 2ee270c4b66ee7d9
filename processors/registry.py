"""Processors by content type: bytes of one MIME type in, the text the model reads out.

The gateway looks a file's processor up here (uploads, ``file`` / ``input_file`` parts), so a new
modality needs no gateway change: a distribution declares an entry point in the group
``stream_omni.processors``::

    [project.entry-points."stream_omni.processors"]
    pdf = "my_pkg.pdf:PdfProcessor"

that loads to a class (called with no arguments) or an instance with ``name``, ``mimes``,
``check(data, mime)`` (raise ``ProcessorError`` to refuse the bytes, at upload) and
``to_text(data, mime) -> str`` (what the model reads; called in a worker thread). The built-in
image and WAV processors (``processors.builtin``) are registered in the same registry first; a
plugin that claims one of their MIME types replaces them for it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from .errors import InputError

log = logging.getLogger("stream_omni.processors")

ENTRY_POINT_GROUP = "stream_omni.processors"


class ProcessorError(InputError):
    """Bytes a plugin processor refuses: ``code`` and a one-line ``message`` for the client."""


@runtime_checkable
class Processor(Protocol):
    name: str  # short name, e.g. "image", "pdf"
    mimes: tuple[str, ...]  # the content types it reads (lower case, no parameters)

    def check(self, data: bytes, mime: str) -> None:
        """Refuse bad bytes (raise ``ProcessorError`` or the processor's own coded error) before they are kept."""
        ...

    def to_text(self, data: bytes, mime: str) -> str:
        """What the model reads of the content (blocking: runs in a worker thread)."""
        ...


class ProcessorRegistry:
    def __init__(self, processors: Iterable[Processor] = ()):
        self._by_mime: dict[str, Processor] = {}
        for p in processors:
            self.register(p)

    def register(self, processor: Processor) -> None:
        if not isinstance(processor, Processor):
            raise TypeError(f"{processor!r} is not a processor (name, mimes, check, to_text)")
        for mime in processor.mimes:
            self._by_mime[mime.lower()] = processor

    def find(self, mime: str) -> Processor | None:
        return self._by_mime.get(mime.split(";")[0].strip().lower())

    @property
    def names(self) -> list[str]:
        return sorted({p.name for p in self._by_mime.values()})

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register every installed plugin of ``group``; the names loaded. A plugin that fails to
        load is logged and skipped: one broken distribution must not stop the server."""
        loaded = []
        for ep in entry_points(group=group):
            try:
                obj = ep.load()
                self.register(obj() if isinstance(obj, type) else obj)
            except Exception as exc:
                log.error("processor plugin %s (%s) failed to load: %s: %s", ep.name, ep.value, type(exc).__name__, exc)
                continue
            loaded.append(ep.name)
        return loaded
