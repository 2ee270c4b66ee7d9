"""Every client event of /v1/realtime as a pydantic model, parsed once through a discriminated union.

Pure: no asyncio, Starlette or torch. Client events are validated strictly on their ``type`` and
on the fields we act on. An unknown key in a ``session.update`` or ``response.create`` is refused
as OpenAI refuses it (``unknown_parameter``, ``gateway.realtime.strict_keys``), except the few GA
keys documented as accepted and ignored. Server events are built in
``gateway.realtime.server_events``, one typed builder per event type.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from ..core.request_options import SamplingKnobs, SchedulerOptions
from ..tools.wire import McpApprovalResponseItem, McpTool, NamedMcpTool
from . import strict_keys

MAX_JSON_DEPTH = 32  # a nesting limit far below any parser's recursion limit
NOT_UTF8 = "invalid_utf8"  # a big text frame handed over undecoded (gateway.core.ws_frames) was not UTF-8: closed 1007

# WebSocket close codes the server sends (RFC 6455 section 7.4.1, and one of the private range)
CLOSE_NORMAL = 1000
CLOSE_NOT_UTF8 = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_RESTART = 1012
CLOSE_TRY_AGAIN = 1013
CLOSE_SUPERSEDED = 4009  # the session was resumed on a newer socket


class _LenientEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _StrictEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- session / response options


class AudioFormat(_LenientEvent):
    # any other type is refused (naming the field): G.711 taken for pcm16 would be noise
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"] = "audio/pcm"
    rate: int = 24000  # audio/pcm only; G.711 is 8 kHz


class VoiceId(_LenientEvent):
    id: str = Field(max_length=128)


class AudioOutput(_LenientEvent):
    format: AudioFormat | None = None
    voice: str | VoiceId | None = Field(default=None)
    speed: float | None = Field(default=None, ge=0.25, le=1.5)


class NoiseReduction(_LenientEvent):
    type: Literal["near_field", "far_field"]  # a headset / a speakerphone, kiosk or robot across the room


class EchoCancellation(_LenientEvent):
    """Extension: who cancels the echo of the session's own voice in its microphone."""

    type: Literal["server", "client"]  # "client": it cancels its own (a browser's WebRTC does), the server does not


class AudioInput(_LenientEvent):
    format: AudioFormat | None = None
    noise_reduction: NoiseReduction | None = None  # null: off
    # unset: the server cancels the echo of what it plays unless on a WebRTC call; null: off
    echo_cancellation: EchoCancellation | None = None
    turn_detection: dict[str, Any] | None = Field(default=None)
    transcription: dict[str, Any] | None = None


class AudioOptions(_LenientEvent):
    input: AudioInput | None = None
    output: AudioOutput | None = None


class ResponseAudio(_LenientEvent):
    output: AudioOutput | None = None


class SamplingOptions(SamplingKnobs, _LenientEvent):
    """Extension fields shared by session.update and response.create (sampling beyond GA's fields:
    ``gateway.core.request_options.SamplingKnobs``)."""

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    scheduler: SchedulerOptions | None = None


class FunctionTool(_LenientEvent):
    type: Literal["function"] = "function"
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    parameters: dict[str, Any] | None = None  # a JSON schema (checked by functions.plan)


class NamedTool(_LenientEvent):
    type: Literal["function"]
    name: str


ToolChoice = Literal["auto", "none", "required"] | NamedTool | NamedMcpTool


class ToolOptions(SamplingOptions):
    tools: list[FunctionTool | McpTool] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # false: at most one call per response


def _legacy_modalities(data: Any) -> Any:
    """The beta API's ``modalities`` (still sent by some clients) is GA's ``output_modalities``."""
    if isinstance(data, dict) and "modalities" in data and "output_modalities" not in data:
        data = {**data, "output_modalities": data["modalities"]}
    return data


class TokenLimits(_LenientEvent):
    post_instructions: int | None = Field(default=None, ge=1)  # tokens kept after the instructions


class RetentionRatio(_LenientEvent):
    type: Literal["retention_ratio"]
    retention_ratio: float = Field(ge=0.0, le=1.0)  # of the room after the instructions, kept after a cut
    token_limits: TokenLimits | None = None


Truncation = Literal["auto", "disabled"] | RetentionRatio


class SessionOptions(ToolOptions):
    type: Literal["realtime", "transcription"] | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[Literal["text", "audio", "image"]] | None = None
    audio: AudioOptions | None = None
    truncation: Truncation | None = None  # None: "auto" (gateway.realtime.truncation)
    # accepted and echoed; with the server's tracing on, its fields land on the session's spans (realtime.tracing)
    tracing: Literal["auto"] | dict[str, Any] | None = None
    # accepted and echoed; the embedded Whisper gives no token logprobs (gateway.realtime.transcription)
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = Field(default=None, max_length=1)

    _modalities = model_validator(mode="before")(_legacy_modalities)


class ResponseOptions(ToolOptions):
    instructions: str | None = None
    output_modalities: list[Literal["text", "audio", "image"]] | None = None
    conversation: Literal["auto", "none"] | None = None
    audio: ResponseAudio | None = None
    metadata: dict[str, Any] | None = Field(default=None, max_length=16)  # echoed (16 pairs, as in GA)
    # the response's whole context instead of the conversation ([] is an empty one); defined below
    input: list[InputItem] | None = Field(default=None, max_length=512)

    _modalities = model_validator(mode="before")(_legacy_modalities)


# ---------------------------------------------------------------- conversation items


class InputText(_StrictEvent):
    type: Literal["input_text", "text", "output_text"]
    text: str


class InputImage(_LenientEvent):
    type: Literal["input_image"]
    image_url: str | None = None  # a data URL; or instead …
    file_id: str | None = None  # … an uploaded image (POST /v1/files)
    detail: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> InputImage:
        if (self.image_url is None) == (self.file_id is None):
            raise ValueError("input_image needs exactly one of image_url and file_id")
        return self


class InputAudio(_LenientEvent):
    type: Literal["input_audio"]
    audio: str | None = None  # base64 pcm16 at the session's input rate; or instead …
    file_id: str | None = None  # … an uploaded WAV file (POST /v1/files)
    transcript: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> InputAudio:
        if self.transcript is None and (self.audio is None) == (self.file_id is None):
            raise ValueError("input_audio needs exactly one of audio and file_id")
        return self


class InputFile(_LenientEvent):
    """Content a processor plugin reads (processors.registry): an uploaded file or inline data."""

    type: Literal["input_file"]
    file_id: str | None = None  # an uploaded file (POST /v1/files); or instead …
    file_data: str | None = None  # … a data URL (data:<type>;base64,…)
    filename: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> InputFile:
        if (self.file_id is None) == (self.file_data is None):
            raise ValueError("input_file needs exactly one of file_id and file_data")
        return self


ContentPart = Annotated[InputText | InputImage | InputAudio | InputFile, Field(discriminator="type")]


class MessageItem(_LenientEvent):
    type: Literal["message"] = "message"
    id: str | None = Field(default=None, max_length=64)
    role: Literal["user", "system", "assistant"]
    content: list[ContentPart] = Field(min_length=1, max_length=64)


class FunctionCallItem(_LenientEvent):
    type: Literal["function_call"]
    id: str | None = Field(default=None, max_length=64)
    call_id: str = Field(min_length=1, max_length=64)
    name: str
    arguments: str = "{}"


class FunctionCallOutputItem(_LenientEvent):
    type: Literal["function_call_output"]
    id: str | None = Field(default=None, max_length=64)
    call_id: str = Field(min_length=1, max_length=64)
    output: str


class ItemReference(_LenientEvent):
    type: Literal["item_reference"]
    id: str = Field(min_length=1, max_length=64)  # an item of the conversation


InputItem = Annotated[
    MessageItem | FunctionCallItem | FunctionCallOutputItem | ItemReference, Field(discriminator="type")
]
ResponseOptions.model_rebuild()


# ---------------------------------------------------------------- client events


class _ClientEvent(_LenientEvent):
    event_id: str | None = Field(default=None, max_length=128)


class SessionUpdate(_ClientEvent):
    type: Literal["session.update"]
    session: SessionOptions


class ItemCreate(_ClientEvent):
    type: Literal["conversation.item.create"]
    previous_item_id: str | None = None
    item: MessageItem | FunctionCallItem | FunctionCallOutputItem | McpApprovalResponseItem


class ItemTruncate(_ClientEvent):
    type: Literal["conversation.item.truncate"]
    item_id: str
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0)


class ItemDelete(_ClientEvent):
    type: Literal["conversation.item.delete"]
    item_id: str


class ItemRetrieve(_ClientEvent):
    type: Literal["conversation.item.retrieve"]
    item_id: str


class AudioAppend(_ClientEvent):
    type: Literal["input_audio_buffer.append"]
    audio: str


class AudioCommit(_ClientEvent):
    type: Literal["input_audio_buffer.commit"]


class AudioClear(_ClientEvent):
    type: Literal["input_audio_buffer.clear"]


class ResponseCreate(_ClientEvent):
    type: Literal["response.create"]
    response: ResponseOptions | None = None


class ResponseCancel(_ClientEvent):
    type: Literal["response.cancel"]
    response_id: str | None = None


ClientEvent = Annotated[
    SessionUpdate
    | ItemCreate
    | ItemTruncate
    | ItemDelete
    | ItemRetrieve
    | AudioAppend
    | AudioCommit
    | AudioClear
    | ResponseCreate
    | ResponseCancel,
    Field(discriminator="type"),
]

_CLIENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ClientEvent)
CLIENT_EVENT_TYPES = frozenset(  # the ``type`` of each class in the union, read from the union itself
    get_args(m.model_fields["type"].annotation)[0] for m in get_args(get_args(ClientEvent)[0])
)


class ProtocolError(Exception):
    """A client event we cannot act on; becomes an ``error`` server event."""

    def __init__(self, code: str, message: str, event_id: str | None = None, param: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.event_id = event_id
        self.param = param

    def __reduce__(self) -> tuple[Any, ...]:  # it comes back pickled from a parse process (realtime.bigframes)
        return (ProtocolError, (self.code, self.message, self.event_id, self.param))


# byte → what it means to the scan: 1 quote, 2 opening bracket, 3 closing bracket, 4 backslash, 0 nothing
_KIND = bytes(
    1 if c == 0x22 else 2 if c in (0x5B, 0x7B) else 3 if c in (0x5D, 0x7D) else 4 if c == 0x5C else 0
    for c in range(256)
)


def _depth(raw: str) -> int:
    """Maximum bracket nesting of a JSON text (strings skipped). Linear, never recursive, and in C:
    the per-character Python loop it replaces took ≈ 0.46 s for a 12 MB frame, on the event loop.
    Only the structural bytes are looked at (UTF-8 keeps ASCII bytes unambiguous); a big string
    costs one ``bytes.translate`` pass. Agrees with a character walk on every valid JSON text."""
    kinds = np.frombuffer(raw.encode("utf-8", "surrogatepass").translate(_KIND), dtype=np.uint8)  # [n]
    pos = np.flatnonzero(kinds)  # [m] positions of quotes, brackets and backslashes
    kind = kinds[pos]  # [m]
    quote = kind == 1  # [m]
    slashes = pos[kind == 4]  # [k]
    if len(slashes):  # a quote after an odd run of backslashes is escaped
        starts = np.flatnonzero(np.diff(slashes, prepend=-2) != 1)  # [r] index of each run's first backslash
        lengths = np.diff(starts, append=len(slashes))  # [r]
        escaped = (slashes[starts] + lengths)[lengths % 2 == 1]  # [e] byte positions right after odd runs
        at = np.asarray(np.searchsorted(pos, escaped))  # [e]
        hit = at[at < len(pos)]
        quote[hit[pos[hit] == escaped[at < len(pos)]]] = False
    outside = (np.cumsum(quote, dtype=np.int64) & 1) == 0  # [m] an even number of quotes before: not in a string
    steps = ((kind == 2) & outside).astype(np.int32) - ((kind == 3) & outside)  # [m] +1 open, -1 close
    return int(max(0, np.cumsum(steps).max())) if len(steps) else 0


_EVENT_ID = re.compile(r'"event_id"\s*:\s*"([^"\\]{0,128})"')


def _event_id_of(raw: str | bytes) -> str | None:
    if len(raw) > 64 * 1024:  # a big bad frame is not parsed twice just to name it in the error
        found = _EVENT_ID.search(raw if isinstance(raw, str) else raw.decode("utf-8", "replace"))
        return found.group(1) if found else None
    import json

    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    event_id = obj.get("event_id") if isinstance(obj, dict) else None
    return event_id[:128] if isinstance(event_id, str) else None


def parse(raw: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """One JSON text frame → a client event model, or ``ProtocolError``."""
    try:
        text = raw.decode("utf-8", "strict") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise ProtocolError(NOT_UTF8, "text frame is not valid UTF-8") from None
    if _depth(text) > max_depth:
        raise ProtocolError("invalid_json", f"JSON nesting deeper than {max_depth} levels")
    try:
        event = _CLIENT_ADAPTER.validate_json(text)
    except ValidationError as exc:
        event_id = _event_id_of(text)
        errs = exc.errors(include_url=False, include_input=False)
        first = errs[0] if errs else {"type": "", "loc": (), "msg": "invalid event"}
        if first["type"] == "json_invalid":
            raise ProtocolError("invalid_json", "frame is not valid JSON", event_id) from None
        if first["type"] in ("union_tag_invalid", "union_tag_not_found", "model_attributes_type"):
            raise ProtocolError(
                "invalid_event_type",
                "unknown or missing event 'type'",
                event_id,
                "type",
            ) from None
        loc = ".".join(str(p) for p in first["loc"][1:]) or None
        raise ProtocolError("invalid_value", f"{loc or 'event'}: {first['msg']}", event_id, loc) from None
    if isinstance(event, SessionUpdate | ResponseCreate):  # their options refuse keys they do not know
        unknown = strict_keys.unknown_key(event, json.loads(text), "")
        if unknown is not None:
            raise ProtocolError("unknown_parameter", f"Unknown parameter: '{unknown}'.", event.event_id, unknown)
    return event


def _item_chars(item: object) -> int:
    if isinstance(item, MessageItem):
        return sum(
            len(c.text) if isinstance(c, InputText) else len(c.transcript or "") if isinstance(c, InputAudio) else 0
            for c in item.content
        )
    # a function call's output (or arguments) goes into the prompt (and the replay buffer) the same way
    return len(getattr(item, "output", "") or getattr(item, "arguments", "") or "")


def check_sizes(ev: Any, max_item_chars: int, max_instructions_chars: int) -> None:
    """``ProtocolError("input_too_large")`` for an item whose text (all parts, transcripts too) or
    instructions are over their caps (``limits.max_item_text_chars`` / ``max_instructions_chars``,
    sized so that the events echoing them fit the replay buffer)."""
    if isinstance(ev, ItemCreate):
        chars = _item_chars(ev.item)
        if chars > max_item_chars:
            raise ProtocolError(
                "input_too_large",
                f"item text is {chars} characters; the limit is {max_item_chars}",
                ev.event_id,
                "item.content",
            )
    if isinstance(ev, ResponseCreate) and ev.response is not None and ev.response.input:
        for i, entry in enumerate(ev.response.input):  # each out-of-band item under the same cap as a created one
            if not isinstance(entry, ItemReference) and _item_chars(entry) > max_item_chars:
                raise ProtocolError(
                    "input_too_large",
                    f"item text is {_item_chars(entry)} characters; the limit is {max_item_chars}",
                    ev.event_id,
                    f"response.input[{i}]",
                )
    options = ev.session if isinstance(ev, SessionUpdate) else ev.response if isinstance(ev, ResponseCreate) else None
    text = getattr(options, "instructions", None)
    if text is not None and len(text) > max_instructions_chars:
        where = "session" if isinstance(ev, SessionUpdate) else "response"
        raise ProtocolError(
            "input_too_large",
            f"instructions are {len(text)} characters; the limit is {max_instructions_chars}",
            ev.event_id,
            f"{where}.instructions",
        )


# ---------------------------------------------------------------- error messages

_ADDRESS = re.compile(r"<[^<>]*\bat 0x[0-9a-fA-F]+>")
_PATH = re.compile(r"(?<![\w/])/(?:[\w.-]+/)+[\w.-]*")


def clean(message: str) -> str:
    """An error message fit for a client: no object addresses, no file paths."""
    return _PATH.sub("<path>", _ADDRESS.sub("the data", message))
