"""A Realtime message's media parts as text: audio as its transcript, an image as its description, a file as text."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..core.services import Services
from ..core.uploads import admit_images, attached_text, image_text
from . import protocol as p

Part = p.InputText | p.InputImage | p.InputAudio | p.InputFile


async def resolve_parts(
    svc: Services, owner: str, content: Sequence[Part], transcribe: Callable[[str], Awaitable[str]]
) -> list[Part]:
    """Each part as the model sees it; raises one of ``gateway.core.uploads.REFUSALS`` for a part it cannot use.

    ``owner``: the key the files belong to, as the HTTP API names it; ``transcribe``: base64 audio → text.
    """
    admit_images(svc, owner, sum(isinstance(part, p.InputImage) for part in content))
    parts: list[Part] = []
    for part in content:
        if isinstance(part, p.InputAudio) and part.transcript is None and part.file_id is not None:
            text = await attached_text(svc, owner, part.file_id, None, "audio")
        elif isinstance(part, p.InputImage) and part.file_id is not None:
            text = await attached_text(svc, owner, part.file_id, None, "image")
        elif isinstance(part, p.InputFile):
            text = await attached_text(svc, owner, part.file_id, part.file_data)
        elif isinstance(part, p.InputAudio):
            text = part.transcript or await transcribe(part.audio or "")
        elif isinstance(part, p.InputImage):
            text = await image_text(svc, part.image_url or "")
        else:
            parts.append(part)
            continue
        parts.append(p.InputText(type="input_text", text=text))
    return parts


async def resolve_item(
    svc: Services, owner: str, ev: p.ItemCreate, transcribe: Callable[[str], Awaitable[str]]
) -> p.ItemCreate:
    """``ev`` (a message) with its media parts as text (``resolve_parts``; raises the same)."""
    assert isinstance(ev.item, p.MessageItem)  # only messages carry media
    parts = await resolve_parts(svc, owner, ev.item.content, transcribe)
    return ev.model_copy(update={"item": ev.item.model_copy(update={"content": parts})})
