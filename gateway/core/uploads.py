"""What an uploaded file is, checked at upload, and what the model reads of it when a message uses it.

At upload, a file is checked by the processor of its type (``svc.processors``): images and WAV
audio by the built-in ones, i.e. the very decoders and limits inline data goes through
(``processors.image.decode_image`` with the ``vision`` limits, ``processors.audio.decode_wav``
with the audio limits), so a file is refused at once with the same code and message an inline
part would get; other types by their plugin. ``user_data`` no processor reads is kept as it came.

When a message refers to a file (Chat ``{"type": "file", "file": {"file_id"}}``, Realtime
``input_image`` / ``input_audio`` / ``input_file`` with ``file_id``), it becomes the same text the
inline form would: an image its description, a WAV its transcript, other content what its
processor plugin (``processors.registry``) reads.

Both APIs read a part's media through ``image_text`` and ``attached_text`` here, so an image or a
file is the same text to the model on either; each API only maps the refusals (``REFUSALS``) onto
its own error shape and field path.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import math

from processors.errors import InputError
from processors.image import MIME_TO_FORMAT, ImageError

from .file_store import StoredFile
from .services import Services

_MAGIC = [(b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg")]


class FileRefused(InputError):
    """An upload or a use of a file that cannot go on: ``code``, a message for the client, an HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(code, message)
        self.status = status


# what a processor or a file lookup raises to refuse content: each has ``code`` and ``message``
REFUSALS = (InputError,)  # FileRefused, ImageError, AudioError, ProcessorError


def sniff(data: bytes) -> str | None:
    """image/png | image/jpeg | image/webp | audio/wav by the content's own header, else None."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    return None


def _mime(declared: str | None) -> str:
    return (declared or "application/octet-stream").split(";")[0].strip().lower()


def check_upload(svc: Services, data: bytes, purpose: str, declared: str | None) -> tuple[str, str]:
    """(kind, mime) of an upload: its processor checks it (``processors.registry``; the built-in
    image and WAV ones are the inline path's decoders), raising the coded error inline data gets.
    ``kind`` is the processor's name, or ``data`` for content no processor reads."""
    if not data:
        raise FileRefused("invalid_file", "the file is empty")
    mime = sniff(data) or _mime(declared)
    proc = svc.processors.find(mime)
    if purpose == "vision" and (proc is None or proc.name != "image"):
        allowed = ", ".join(sorted(MIME_TO_FORMAT))
        raise ImageError("unsupported_image_format", f"purpose 'vision' takes an image ({allowed})")
    if proc is None:
        return "data", mime
    proc.check(data, mime)
    return proc.name, mime


async def load(svc: Services, owner: str, file_id: str) -> tuple[StoredFile, bytes]:
    """The file ``owner`` may use, or ``FileRefused`` file_not_found (another key's file does not exist)."""
    store = svc.files
    found = None if store is None else await asyncio.to_thread(store.read, owner, file_id)
    if found is None:
        raise FileRefused(
            "file_not_found", f"no file {file_id!r}: it was deleted, expired or never existed", status=404
        )
    return found


async def file_text(svc: Services, owner: str, file_id: str, want: str | None = None) -> tuple[str, str]:
    """(kind, what the model reads of an uploaded file): an image's description, a WAV's transcript,
    a plugin's text (``want``: the kind the part promises, ``image`` or ``audio``; None: any)."""
    meta, data = await load(svc, owner, file_id)
    if want is not None and meta.kind != want:
        raise FileRefused("invalid_file", f"file {file_id!r} is {meta.kind} ({meta.mime}), not {want}")
    return meta.kind, await content_text(svc, data, meta.mime)


async def content_text(svc: Services, data: bytes, mime: str) -> str:
    """What the model reads of ``data`` (its processor's text; blocking work in a thread)."""
    proc = svc.processors.find(mime)
    if proc is None:
        raise FileRefused("unsupported_content", f"no processor on this server reads {mime} content")
    return await asyncio.to_thread(proc.to_text, data, mime)


async def data_url_text(svc: Services, url: str, max_bytes: int) -> str:
    """An inline file (``data:<mime>;base64,…``): checked and read by its processor as an upload is."""
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise FileRefused("invalid_file", "file_data must be a data URL: data:<type>;base64,<data>")
    if len(payload) // 4 * 3 > max_bytes + 3:
        raise FileRefused("file_too_large", f"the file exceeds the limit of {max_bytes} bytes (files.max_file_bytes)")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise FileRefused("invalid_file", "file_data holds invalid base64") from None
    mime = sniff(data) or _mime(head[5:-7])
    proc = svc.processors.find(mime)
    if proc is None:
        raise FileRefused("unsupported_content", f"no processor on this server reads {mime} content")
    await asyncio.to_thread(proc.check, data, mime)
    return await asyncio.to_thread(proc.to_text, data, mime)


def admit_images(svc: Services, owner: str, n: int) -> None:
    """Before any image of a message is read: at most ``vision.max_images_per_message`` of them, and
    room for each in ``owner``'s images a minute (``ImageError`` too_many_images / rate_limit_exceeded)."""
    most = svc.config.vision.max_images_per_message
    if n > most:
        raise ImageError("too_many_images", f"{n} images in one message (limit {most}: vision.max_images_per_message)")
    limits = svc.image_key_limits
    for _ in range(n if limits is not None else 0):
        assert limits is not None
        spent = limits.admit(owner)
        if spent is not None:
            msg = f"this API key's images a minute ({spent.limit}, vision.images_per_key_per_minute) are spent; "
            raise ImageError("rate_limit_exceeded", msg + f"retry in {math.ceil(spent.reset_seconds)} s")


async def image_text(svc: Services, url: str) -> str:
    """An image (a data URL) as the describer words it, ``[image: …]``; ``ImageError`` when it
    cannot be read, or when this server reads no images."""
    describe = svc.image_describer
    if describe is None:
        raise ImageError("unsupported_content", "image input is not enabled on this server (config: vision.mode)")
    return str(await asyncio.to_thread(describe, url))


async def attached_text(
    svc: Services, owner: str, file_id: str | None, file_data: str | None, want: str | None = None
) -> str:
    """A file part, uploaded (``file_id``, ``owner``'s) or inline (``file_data``, a data URL), as
    its inline form reads (``want``: the kind the part promises, as in ``file_text``)."""
    if file_id is not None:
        _, text = await file_text(svc, owner, file_id, want)
        return text
    return await data_url_text(svc, file_data or "", svc.config.files.max_file_bytes)
