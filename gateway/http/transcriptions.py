"""``POST /v1/audio/transcriptions``: OpenAI's speech-to-text endpoint on the embedded Whisper.

The upload (multipart: ``file``, ``model``, ``language``, ``prompt``, ``response_format``, ``temperature``,
``stream``, ``include[]``, ``timestamp_granularities[]``) goes the way Realtime audio goes: the WAV
decoder and limits of every audio input (``processors.audio.decode_wav``; ``audio.max_buffer_s``), the
server VAD cutting it into turns (``processors.segments``), and each turn one pass on the Whisper worker
every voice session shares (``gateway.voice.asr_worker``). Decoding and the VAD run on a thread, never
on the event loop; at most ``audio.max_concurrent_transcriptions`` requests run at once (more: 503), and
each queues one pass at a time, so an upload never holds voice turns back by more than one pass.

``response_format`` json, text, verbose_json, srt, vtt (``gateway.http.transcript_formats``); with
``stream: true`` the answer is SSE, one ``transcript.text.delta`` per segment as it is transcribed, then
``transcript.text.done``. Every refusal is OpenAI's error shape with a 4xx status.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
from starlette.background import BackgroundTask
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from processors.audio import TARGET_RATE, AudioError, AudioLimits, decode_wav
from processors.segments import speech_segments

from ..core.services import Services
from ..voice.asr_worker import AsrWorker, shared_worker
from . import transcript_formats as tf
from .error_bodies import ApiError, busy
from .files_api import FORM_OVERHEAD
from .schemas import header_count

# OpenAI's transcription models; a client written for them works unchanged (the embedded Whisper answers)
OPENAI_MODELS = frozenset(
    {
        "whisper-1",
        "gpt-4o-transcribe",
        "gpt-4o-mini-transcribe",
        "gpt-4o-mini-transcribe-2025-12-15",
        "gpt-transcribe",
        "gpt-live-transcribe",
        "gpt-realtime-whisper",
    }
)
MAX_PROMPT_CHARS = 4096  # accepted, not applied (the shared passes carry no prompt)
_LANGUAGE = re.compile(r"^[a-z]{2,3}$")  # ISO 639-1 (or -3) codes
_TRUE, _FALSE = ("true", "1"), ("false", "0", "")


@dataclass(frozen=True)
class TranscriptionRequest:
    """The form's fields, checked."""

    model: str
    response_format: str
    stream: bool
    language: str | None  # the audio's, as the client says it


class _Slot:
    """A place among the requests running at once, given back exactly once (a stream ends, or never starts)."""

    def __init__(self, owner: Transcriptions):
        self.owner = owner
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.owner.running -= 1


class Transcriptions:
    """The endpoint, and how many of its requests are running."""

    def __init__(self) -> None:
        self.running = 0

    async def create(self, svc: Services, request: Request) -> Response:
        if svc.asr is None:
            raise ApiError(400, "audio_disabled", "audio input is not enabled on this server (audio.enabled)")
        cfg = svc.config.audio
        limit = cfg.transcription_max_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            count = header_count(declared)
            if count is None:
                raise ApiError(400, "invalid_request", "Content-Length is not a number", "Content-Length")
            if count > limit + FORM_OVERHEAD:
                raise ApiError(413, "file_too_large", _too_large(limit), "file")
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise ApiError(
                400, "invalid_request", "send the audio as multipart/form-data with fields 'file' and 'model'"
            )
        try:
            form = await request.form(max_files=1, max_fields=32, max_part_size=limit + FORM_OVERHEAD)
        except (HTTPException, MultiPartException) as exc:
            why = str(getattr(exc, "detail", "") or getattr(exc, "message", "") or "malformed")[:200]
            raise ApiError(400, "invalid_multipart", f"the multipart body cannot be read: {why}") from None
        except (ValueError, LookupError, AssertionError):  # python-multipart on a body it cannot parse
            raise ApiError(400, "invalid_multipart", "the multipart body cannot be read") from None
        try:
            req = _fields(form, svc)
            part = form.get("file")
            if not isinstance(part, UploadFile):
                raise ApiError(400, "missing_required_parameter", "the form has no 'file' part", "file")
            data = await part.read(limit + 1)
        finally:
            await form.close()
        if len(data) > limit:
            raise ApiError(413, "file_too_large", _too_large(limit), "file")
        if self.running >= cfg.max_concurrent_transcriptions:
            raise busy(
                f"{self.running} transcriptions are running (audio.max_concurrent_transcriptions); retry shortly"
            )
        self.running += 1
        slot = _Slot(self)
        try:
            limits = AudioLimits(max_buffer_s=cfg.max_buffer_s, max_frame_bytes=limit)
            segments = await asyncio.to_thread(_segments, data, limits)
        except AudioError as exc:
            slot.release()
            raise ApiError(400, exc.code, exc.message, "file") from None
        except BaseException:
            slot.release()
            raise
        seconds, parts = segments
        worker, sid = shared_worker(svc), f"http_{secrets.token_hex(6)}"
        language = req.language or svc.asr.config.effective_language
        if req.stream:
            return StreamingResponse(
                _events(worker, sid, parts, slot),
                media_type="text/event-stream",
                background=BackgroundTask(slot.release),
            )
        try:
            pieces = [
                tf.CaptionSegment(s / 1000, e / 1000, await worker.transcribe(sid, "final", a)) for s, e, a in parts
            ]
        finally:
            slot.release()
        body, media = tf.render(req.response_format, pieces, seconds, language)
        return Response(body, media_type=media)


async def _events(
    worker: AsrWorker, sid: str, parts: list[tuple[int, int, np.ndarray]], slot: _Slot
) -> AsyncIterator[bytes]:
    """One delta per segment with words, as each pass finishes, then the done event."""
    pieces: list[tf.CaptionSegment] = []
    try:
        for start, end, audio in parts:
            text = await worker.transcribe(sid, "final", audio)
            if text.strip():
                yield tf.sse(tf.delta_event(text, first=not tf.spoken(pieces)))
            pieces.append(tf.CaptionSegment(start / 1000, end / 1000, text))
        yield tf.sse(tf.done_event(pieces))
    finally:
        slot.release()


def _segments(data: bytes, limits: AudioLimits) -> tuple[float, list[tuple[int, int, np.ndarray]]]:
    """On a thread: (the audio's seconds, its speech segments as (start ms, end ms, audio))."""
    audio = decode_wav(data, limits)
    return audio.size / TARGET_RATE, [(s.start_ms, s.end_ms, s.audio) for s in speech_segments(audio)]


def _too_large(limit: int) -> str:
    return f"the file exceeds the limit of {limit} bytes (audio.transcription_max_bytes)"


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(400, "invalid_value", f"{name} must be a text field, not a file", name)
    return value


def _fields(form: FormData, svc: Services) -> TranscriptionRequest:
    """The form's fields, each checked (400 naming the field)."""
    model = _text(form, "model")
    if not model:
        raise ApiError(400, "missing_required_parameter", "the form has no 'model' field", "model")
    assert svc.asr is not None
    whisper = svc.asr.config.model
    if model not in OPENAI_MODELS and model not in (whisper, f"whisper-{whisper}") and model not in svc.model_ids:
        raise ApiError(404, "model_not_found", f"model {model[:100]!r} is not served here; use whisper-1", "model")
    fmt = _text(form, "response_format") or "json"
    if fmt not in tf.FORMATS:
        known = ", ".join(tf.FORMATS)
        raise ApiError(
            400, "unsupported_value", f"response_format {fmt[:40]!r} is not available ({known})", "response_format"
        )
    stream_field = (_text(form, "stream") or "").lower()
    if stream_field not in _TRUE + _FALSE:
        raise ApiError(400, "invalid_value", "stream must be true or false", "stream")
    stream = stream_field in _TRUE
    if stream and fmt not in ("json", "text"):
        raise ApiError(400, "unsupported_value", "stream needs response_format json or text", "stream")
    language = _text(form, "language") or None
    if language is not None:
        if not _LANGUAGE.match(language):
            raise ApiError(400, "invalid_value", "language must be an ISO 639-1 code such as 'en'", "language")
        fixed = svc.asr.config.effective_language
        if fixed is not None and language != fixed:
            raise ApiError(
                400,
                "unsupported_value",
                f"this server's Whisper ({whisper}) transcribes {fixed!r} only (audio.model, audio.language)",
                "language",
            )
    prompt = _text(form, "prompt")
    if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
        raise ApiError(400, "invalid_value", f"prompt is over {MAX_PROMPT_CHARS} characters", "prompt")
    temperature = _text(form, "temperature")
    if temperature:
        try:
            ok = 0.0 <= float(temperature) <= 1.0
        except ValueError:
            ok = False
        if not ok:
            raise ApiError(400, "invalid_value", "temperature must be a number from 0 to 1", "temperature")
    for value in form.getlist("include[]"):
        if value != "logprobs":
            raise ApiError(400, "invalid_value", f"include {str(value)[:40]!r} is not known (logprobs)", "include")
    for value in form.getlist("timestamp_granularities[]"):
        if value == "word":
            raise ApiError(
                400,
                "unsupported_value",
                "word timestamps are not available here (segment only)",
                "timestamp_granularities",
            )
        if value != "segment":
            raise ApiError(400, "invalid_value", "timestamp_granularities must be segment", "timestamp_granularities")
    return TranscriptionRequest(model, fmt, stream, language)
