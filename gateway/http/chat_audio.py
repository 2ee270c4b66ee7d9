"""Chat Completions with ``modalities: ["text", "audio"]``: the answer spoken, as OpenAI returns it.

Not streamed: ``message.audio {id, data, transcript, expires_at}`` (``data``: base64 of a WAV
file, or pcm16 24 kHz) and ``message.content`` null. Streamed (``audio.format: "pcm16"``, as
OpenAI requires): each scheduler chunk is synthesized as it comes and sent as
``delta.audio {id, transcript, data, expires_at}``, the transcript and its audio together.
"""

from __future__ import annotations

import base64
import io
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from processors.audio_formats import PCM_RATE
from processors.speech_text import SpeechText, spoken_text

from ..core.services import Services
from ..realtime.speech_out import OPENAI_VOICES
from ..voice.speech_actions import SpeechSettings
from .error_bodies import ApiError
from .schemas import ChatRequest

AUDIO_TTL_S = 3600  # expires_at: the audio id is not kept for later turns here; the hour is OpenAI's


@dataclass
class ChatSpeech:
    """One completion's spoken answer."""

    settings: SpeechSettings
    format: str  # "wav" or "pcm16"
    id: str = field(default_factory=lambda: f"audio_{secrets.token_hex(12)}")
    text: SpeechText = field(default_factory=SpeechText)

    @property
    def expires_at(self) -> int:
        return int(time.time()) + AUDIO_TTL_S


def plan(svc: Services, req: ChatRequest) -> ChatSpeech | None:
    """The spoken answer ``req`` asks for (None: text only), or a 400 saying what is wrong."""
    if not req.modalities or "audio" not in req.modalities:
        return None
    if req.audio is None:
        raise ApiError(400, "invalid_value", "audio {voice, format} is required with modalities audio", "audio")
    if svc.speech is None:
        raise ApiError(400, "speech_disabled", "speech output is not enabled on this server (audio.output)")
    fmt = req.audio.format
    if fmt not in ("wav", "pcm16"):
        raise ApiError(400, "unsupported_value", f"audio.format {fmt} is not available (wav, pcm16)", "audio.format")
    if req.stream and fmt != "pcm16":
        raise ApiError(400, "unsupported_value", "a streamed spoken answer needs audio.format pcm16", "audio.format")
    voice = req.audio.voice if isinstance(req.audio.voice, str) else str(req.audio.voice.get("id", ""))
    if voice in OPENAI_VOICES:
        voice = svc.speech.default.voice
    if voice not in svc.speech.names:
        raise ApiError(400, "invalid_value", f"voice {voice!r} is not installed here", "audio.voice")
    return ChatSpeech(SpeechSettings("audio/pcm", voice, svc.speech.default.speed), fmt)


def _wav(pcm: bytes) -> bytes:
    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.frombuffer(pcm, dtype="<i2"), PCM_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


async def attach(svc: Services, body: dict[str, Any], text: str, speech: ChatSpeech) -> None:
    """Speak ``text`` into the completion ``body``'s message."""
    assert svc.speech is not None
    pcm = (await svc.speech.run(spoken_text(speech.text.feed(text)), speech.settings)).audio
    data = _wav(pcm) if speech.format == "wav" else pcm
    message = body["choices"][0]["message"]
    message["audio"] = {
        "id": speech.id,
        "data": base64.b64encode(data).decode("ascii"),
        "transcript": text,
        "expires_at": speech.expires_at,
    }
    message["content"] = None


async def delta(svc: Services, text: str, speech: ChatSpeech) -> dict[str, Any]:
    """A streamed chunk's delta: its text as transcript and its audio."""
    assert svc.speech is not None
    pcm = (await svc.speech.run(spoken_text(speech.text.feed(text)), speech.settings)).audio
    audio = {"id": speech.id, "transcript": text, "data": base64.b64encode(pcm).decode("ascii")}
    return {"audio": {**audio, "expires_at": speech.expires_at}}
