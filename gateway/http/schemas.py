"""The body of ``POST /v1/chat/completions``: size-limited read, then one pydantic validation.

Field names and meanings follow OpenAI's Chat Completions API. Every top-level key is either
honoured, refused when set to what cannot be honoured (``n`` > 1), or in ``IGNORED`` (bookkeeping
clients send that changes no output here, such as ``user``); any other key is a 400
``unknown_parameter`` naming it, as OpenAI's "Unrecognized request argument supplied".
docs/API.md keeps the table.
"""

from __future__ import annotations

import gc
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator
from starlette.requests import Request

from ..core.request_options import SamplingKnobs, SchedulerOptions, Temperature, TopP
from .error_bodies import ApiError


class _StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class TextPart(_StrictBody):
    type: Literal["text"]
    text: str


class AudioData(_StrictBody):
    data: str  # base64 of a whole WAV file
    format: Literal["wav"]


class AudioPart(_StrictBody):
    type: Literal["input_audio"]
    input_audio: AudioData


class ImageUrl(_StrictBody):
    url: str  # a data: URL (or what the image describer allows)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_StrictBody):
    type: Literal["image_url"]
    image_url: ImageUrl


class FileRef(_StrictBody):
    file_id: str | None = None  # an uploaded file's id (POST /v1/files); or instead …
    file_data: str | None = None  # … the file inline, as a data URL (data:<type>;base64,…)
    filename: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> FileRef:
        if (self.file_id is None) == (self.file_data is None):
            raise ValueError("a file part needs exactly one of file_id and file_data")
        return self


class FilePart(_StrictBody):
    type: Literal["file"]
    file: FileRef


Part = Annotated[TextPart | AudioPart | ImagePart | FilePart, Field(discriminator="type")]


class FunctionCall(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str
    arguments: str  # a JSON object, serialised (as OpenAI sends it)


class ToolCall(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Part] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant turn that called tools
    tool_call_id: str | None = None  # a tool turn: which call it answers


class FunctionDef(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    parameters: dict[str, Any] | None = None  # a JSON schema (checked when the request is served)
    strict: bool | None = None


class ToolDef(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["function"]
    function: FunctionDef


class McpToolDef(_StrictBody):
    """An extension: a server of the gateway's ``tools.mcp_servers`` whose tools the gateway runs itself."""

    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64)
    allowed_tools: list[str] | None = Field(default=None, max_length=512)  # only these are listed and offered


class NamedFunction(_StrictBody):
    name: str


class NamedToolChoice(_StrictBody):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(_StrictBody):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_StrictBody):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False  # a last chunk with ``usage`` and no choices


# accepted and ignored: what clients send as bookkeeping (OpenAI stores, traces or bills by them); nothing here
# is stored or billed, so the output is the same either way
IGNORED = ("user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier")


class SamplingRequest(SamplingKnobs, _StrictBody):
    """What chat and text completions share: the model, sampling, stop sequences, streaming."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    model: str
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: int | None = Field(None, ge=0, lt=2**63)
    stop: str | list[Annotated[str, Field(min_length=1)]] | None = Field(None, max_length=4)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1)
    scheduler: SchedulerOptions | None = None
    user: str | None = None  # IGNORED
    metadata: dict[str, Any] | None = None  # IGNORED
    store: bool | None = None  # IGNORED
    service_tier: str | None = None  # IGNORED
    prompt_cache_key: str | None = None  # IGNORED (the prefix cache is automatic)
    safety_identifier: str | None = None  # IGNORED

    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return tuple(s for s in ([self.stop] if isinstance(self.stop, str) else self.stop) if s)


class ChatAudio(_StrictBody):
    """``audio`` of a request with ``modalities: ["text", "audio"]``."""

    model_config = ConfigDict(extra="ignore", strict=True)
    voice: str | dict[str, Any]
    format: Literal["wav", "pcm16", "mp3", "flac", "opus", "aac"]


class ChatRequest(SamplingRequest):
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[ToolDef | McpToolDef] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool = True
    response_format: ResponseFormat | None = None
    modalities: list[Literal["text", "audio"]] | None = Field(None, min_length=1, max_length=2)
    audio: ChatAudio | None = None  # voice and format of a spoken answer (gateway.http.chat_audio)
    logprobs: StrictBool = False  # each output token's logprob (choices[].logprobs.content)
    top_logprobs: int | None = Field(None, ge=0, le=20)  # with that many alternatives (needs logprobs)

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def report_logprobs(self) -> int | None:
        """The ``top_logprobs`` a job reports (None: no logprobs)."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def token_cap(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict"}
_PART_TAGS = {"text", "input_audio", "image_url", "file"}


def _param(loc: tuple[int | str, ...]) -> str | None:
    """pydantic's error location → ``messages[0].content[1].text`` (union branch and tag names dropped)."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in _TYPE_NAMES:
            continue  # a union branch, not a field
        elif part in _PART_TAGS and i > 0 and isinstance(loc[i - 1], int) and i + 1 < len(loc):
            continue  # the discriminator's tag of a content part
        else:
            out += f".{part}" if out else part
    return out or None


Body = TypeVar("Body", bound=BaseModel)


MAX_JSON_CONTAINERS = 50_000  # objects and arrays in one request body (at most; counted as brackets)


def parse(body: bytes, model: type[Body] = ChatRequest) -> Body:  # type: ignore[assignment]
    """Bytes → a validated request (``model``: Chat Completions' by default), or ``ApiError`` 400
    naming the first bad field.

    The parse runs on the event loop, so its cost is bounded before it starts: it grows with the
    number of JSON objects and arrays, not with bytes (a 16 MB image data URL is one string, cheap),
    so a body with more than ``MAX_JSON_CONTAINERS`` brackets (an over-count: brackets inside
    strings count too) is refused: 50,000 parse in about 20 ms. The cyclic GC is paused meanwhile:
    every container the parse makes stays alive, and collections passing over them took 2-3 times
    the parse itself."""
    if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
        raise ApiError(
            400,
            "request_too_complex",
            f"the request body holds more than {MAX_JSON_CONTAINERS} JSON objects and arrays",
        )
    paused = gc.isenabled()
    gc.disable()
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        first = max(errors, key=lambda e: len(e["loc"]))  # the most specific: the branch the input meant
        if first["type"] == "json_invalid":
            raise ApiError(400, "invalid_json", "the request body is not valid JSON") from None
        if first["type"] in ("model_type", "model_attributes_type") and not first["loc"]:
            raise ApiError(400, "invalid_json", "the request body must be a JSON object") from None
        param = _param(tuple(first["loc"]))
        if first["type"] == "extra_forbidden":
            message = f"Unrecognized request argument supplied: {param}"  # OpenAI's words
            raise ApiError(400, "unknown_parameter", message, param) from None
        code = "missing_required_parameter" if first["type"] == "missing" else "invalid_value"
        raise ApiError(400, code, f"{param or 'body'}: {first['msg']}", param) from None
    finally:
        if paused:
            gc.enable()


def header_count(value: str) -> int | None:
    """A header's non-negative integer (at most 18 ASCII digits), or None when it is not one: Python's
    ``int`` refuses more than 4,300 digits with an error, and no count here needs more than 18."""
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


async def read_body(request: Request, limit: int) -> bytes:
    """The whole JSON body, refusing more than ``limit`` bytes (by Content-Length and as it streams in).

    ``Content-Type`` must be ``application/json``: a web page may POST ``text/plain`` to any
    server without a CORS preflight, but not JSON (local mode has no key to stop it)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(415, "unsupported_media_type", "Content-Type must be application/json", "Content-Type")
    declared = request.headers.get("content-length")
    if declared is not None:
        count = header_count(declared)
        if count is None:
            raise ApiError(400, "invalid_request", "Content-Length is not a number", "Content-Length")
        if count > limit:
            raise _too_large(limit)
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "request_too_large", f"the request body exceeds the limit of {limit} bytes")
