"""``POST /v1/audio/speech``: OpenAI's text-to-speech endpoint on the server's Piper voices.

``response_format`` ``pcm`` (24 kHz pcm16, streamed sentence by sentence as a chunked body) and
``wav`` (sent whole: its header carries the length); ``flac`` too where libsndfile writes it.
``stream_format: "sse"`` streams ``speech.audio.delta`` events (base64 pcm16 24 kHz, or the
format asked for) and ends with ``speech.audio.done`` and its usage, as OpenAI does.

The voices are shared with every session's spoken replies: a key runs at most
``audio.output.http_max_concurrent_per_key`` requests and ``http_chars_per_min_per_key`` characters a
minute (``gateway.voice.speech_budget``: 429 past either), its pieces take the key's turn in the queue
(``gateway.voice.tts_queue``), and no piece is longer than ``audio.output.max_piece_chars``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from processors.audio_formats import PCM_RATE
from processors.speech_text import SpeechText, bounded_pieces, spoken_text

from ..core.security import bearer, key_digest
from ..core.services import Services
from ..realtime.speech_out import OPENAI_VOICES
from ..voice.speech_actions import SpeechSettings
from .error_bodies import ApiError, check_model
from .schemas import read_body

MAX_INPUT_CHARS = 4096  # OpenAI's limit for one request
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")
_MEDIA = {"pcm": "audio/pcm", "wav": "audio/wav", "flac": "audio/flac"}
MAX_DIGITS = 64  # the longest run of digits a request may ask to be read (a number is read as words)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not text a voice reads (tab and newlines are)
_DIGIT_RUN = re.compile(rf"\d{{{MAX_DIGITS + 1},}}")


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    voice: str | dict[str, Any] = "alloy"
    instructions: str | None = None  # accepted; a Piper voice has no style control
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    stream_format: Literal["sse", "audio"] = "audio"


def _parse(body: bytes, svc: Services) -> tuple[SpeechRequest, str]:
    try:
        req = SpeechRequest.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(x) for x in first["loc"]) or None
        raise ApiError(400, "invalid_value", f"{loc or 'body'}: {first['msg']}", loc) from None
    if (bad := _CONTROL.search(req.input)) is not None:
        raise ApiError(400, "invalid_value", f"input: holds a control character (U+{ord(bad.group()):04X})", "input")
    if (run := _DIGIT_RUN.search(req.input)) is not None:
        raise ApiError(
            400, "invalid_value", f"input: a run of {len(run.group())} digits is over the {MAX_DIGITS} read", "input"
        )
    if svc.speech is None:
        raise ApiError(400, "speech_disabled", "speech output is not enabled on this server (audio.output)")
    check_model(svc, req.model, also=("tts-1", "tts-1-hd", "gpt-4o-mini-tts"))  # OpenAI's TTS ids
    name = req.voice if isinstance(req.voice, str) else str(req.voice.get("id", ""))
    if name in OPENAI_VOICES:
        name = svc.speech.default.voice
    if name not in svc.speech.names:
        raise ApiError(400, "invalid_value", f"voice {name!r} is not installed here", "voice")
    if req.response_format not in _MEDIA or (req.response_format == "flac" and not _can_write("FLAC")):
        known = ", ".join(f for f in _MEDIA if f != "flac" or _can_write("FLAC"))
        raise ApiError(
            400,
            "unsupported_value",
            f"response_format {req.response_format} is not available ({known})",
            "response_format",
        )
    return req, name


def _can_write(fmt: str) -> bool:
    import soundfile as sf

    return fmt in sf.available_formats()


def _sentences(text: str, max_chars: int) -> list[str]:
    """The input in sentences (each synthesized and sent as soon as it is ready), said as words, a sentence
    longer than ``max_chars`` cut into pieces of at most that many (at spaces)."""
    st = SpeechText()
    out = []
    for part in _SENTENCE_END.split(text):
        words = spoken_text(st.feed(part + "\n"))
        out.extend(bounded_pieces(words, max_chars))
    return out


def _container(pcm: bytes, fmt: str) -> bytes:
    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    audio = np.frombuffer(pcm, dtype="<i2")
    sf.write(buf, audio, PCM_RATE, format=fmt.upper(), subtype="PCM_16")
    return buf.getvalue()


async def speech(svc: Services, request: Request) -> Response:
    req, voice = _parse(await read_body(request, svc.config.limits.max_http_body_bytes), svc)
    speaker = svc.speech
    assert speaker is not None
    settings = SpeechSettings("audio/pcm", voice, req.speed)
    sentences = _sentences(req.input, speaker.max_piece_chars)
    key = key_digest(bearer(request)) if svc.config.server.api_keys else ""
    chars = sum(len(s) for s in sentences)
    refused = speaker.budget.admit(key, chars, time.monotonic())
    if refused is not None:
        retry = speaker.budget.retry_after_s(key, chars)
        raise ApiError(429, "rate_limit_exceeded", refused, headers={"Retry-After": str(retry)})
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            speaker.budget.release(key)

    async def pcm_chunks() -> AsyncIterator[bytes]:
        try:
            for rank, words in enumerate(sentences):
                yield (await speaker.run(words, settings, rank, key, bulk=True)).audio
        finally:
            release()

    def streamed(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``body``, releasing the request's budget even if it is dropped unstarted (a client gone early)."""
        weakref.finalize(body, release)
        return body

    if req.stream_format == "sse":

        async def events() -> AsyncIterator[bytes]:
            total = 0
            async for pcm in pcm_chunks():
                total += len(pcm)
                data = pcm if req.response_format == "pcm" else _container(pcm, req.response_format)
                ev = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
                yield f"data: {json.dumps(ev)}\n\n".encode()
            n_in = len(req.input.split())
            n_out = -(-total // (2 * PCM_RATE // 20))  # 50 ms of audio per token, as in the realtime usage
            usage = {"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out}
            yield f"data: {json.dumps({'type': 'speech.audio.done', 'usage': usage})}\n\n".encode()

        return StreamingResponse(streamed(events()), media_type="text/event-stream")
    if req.response_format == "pcm":
        return StreamingResponse(streamed(pcm_chunks()), media_type=_MEDIA["pcm"])
    try:
        pcm = b"".join([c async for c in pcm_chunks()])
    finally:
        release()
    return Response(_container(pcm, req.response_format), media_type=_MEDIA[req.response_format])
