"""Request messages → the ``[{role, content}]`` text the chat template takes.

``input_audio`` parts (base64 WAV) are transcribed in the Whisper queue every voice session shares
(so they count against the same capacity); ``image_url`` parts
are described in words by ``services.image_describer`` when the server has one, else refused.
Both run in a worker thread: decoding and models block.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from processors.audio import AudioError, b64decode_strict, decode_wav
from processors.image import ImageError

from ..core.services import Services
from ..core.uploads import REFUSALS, FileRefused, admit_images, attached_text, image_text
from ..voice.asr_worker import transcribe_clip
from .error_bodies import ApiError
from .schemas import AudioPart, FilePart, ImagePart, Message

log = logging.getLogger("stream_omni.http")

_ROLE = {"developer": "system"}


async def chat_messages(svc: Services, messages: list[Message], owner: str = "") -> list[dict[str, Any]]:
    """``owner``: whose uploaded files the messages may use (a key digest). ``{role, content}`` per message;
    an assistant's ``tool_calls`` ride along as ``[{name, arguments}]`` (models.toolcalls renders them)."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.content is None or isinstance(m.content, str):
            text = m.content or ""
        else:
            try:
                admit_images(svc, owner, sum(isinstance(part, ImagePart) for part in m.content))
            except ImageError as exc:
                status = 429 if exc.code == "rate_limit_exceeded" else 400
                raise ApiError(status, exc.code, exc.message, f"messages[{i}].content") from None
            pieces = []
            for j, part in enumerate(m.content):
                where = f"messages[{i}].content[{j}]"
                if isinstance(part, AudioPart):
                    pieces.append(await _transcribe(svc, part, where))
                elif isinstance(part, ImagePart):
                    pieces.append(await _describe(svc, part, where))
                elif isinstance(part, FilePart):
                    pieces.append(await _file(svc, owner, part, where))
                else:
                    pieces.append(part.text)
            text = "\n".join(pieces)
        turn: dict[str, Any] = {"role": _ROLE.get(m.role, m.role), "content": text}
        if m.tool_calls:
            turn["tool_calls"] = [{"name": c.function.name, "arguments": c.function.arguments} for c in m.tool_calls]
        out.append(turn)
    if svc.config.session.instructions and not any(m["role"] == "system" for m in out):
        out.insert(0, {"role": "system", "content": svc.config.session.instructions})
    return out


async def _transcribe(svc: Services, part: AudioPart, where: str) -> str:
    asr = svc.asr
    if asr is None:
        raise ApiError(400, "audio_disabled", "audio input is not enabled on this server", where)
    limits = svc.audio_limits

    def decode() -> np.ndarray:
        return decode_wav(b64decode_strict(part.input_audio.data), limits)

    try:
        return await transcribe_clip(svc, await asyncio.to_thread(decode))
    except AudioError as exc:
        raise ApiError(400, exc.code, exc.message, f"{where}.input_audio") from None
    except Exception as exc:  # a failed transcription refuses this request only
        log.error("transcription failed: %s", type(exc).__name__)
        raise ApiError(500, "transcription_failed", "could not transcribe the audio", where) from None


async def _file(svc: Services, owner: str, part: FilePart, where: str) -> str:
    """An uploaded file, read as its inline form would be: a WAV transcribed, an image described."""
    try:
        return await attached_text(svc, owner, part.file.file_id, part.file.file_data)
    except FileRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, f"{where}.file") from None
    except REFUSALS as exc:
        raise ApiError(400, exc.code, exc.message, f"{where}.file") from None


async def _describe(svc: Services, part: ImagePart, where: str) -> str:
    try:
        return await image_text(svc, part.image_url.url)
    except ImageError as exc:
        raise ApiError(400, exc.code, exc.message, f"{where}.image_url" if svc.image_describer else where) from None
    except Exception as exc:  # a failed describer refuses this request only
        log.error("image description failed: %s", type(exc).__name__)
        raise ApiError(500, "image_failed", "could not read the image", where) from None
