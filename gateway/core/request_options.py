"""Request options shared by the WebSocket, HTTP and in-process APIs: one schema, one set of bounds, one builder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig

# the bounds of each scheduler knob, shared with the server's defaults (gateway.core.config.SchedulerDefaults)
MinChunkTokens = Annotated[int, Field(ge=1, le=512)]
MaxChunkTokens = Annotated[int, Field(ge=1, le=2048)]
LookaheadTokens = Annotated[int, Field(ge=0, le=32)]
Strategy = Literal["fast", "balanced", "quality"]
TaskHint = Literal["chat", "code", "summarize", "creative"]


class SchedulerOptions(BaseModel):
    """Extension: the chunk scheduler's knobs (``session.scheduler``, ``response.scheduler``, and
    ``scheduler`` in a Chat Completions body). Unset fields keep the server's defaults."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    strategy: Strategy | None = None  # chunking preset
    min_chunk_tokens: MinChunkTokens | None = None  # no cut at a boundary before this
    max_chunk_tokens: MaxChunkTokens | None = None  # a chunk is forced out here
    lookahead_tokens: LookaheadTokens | None = None  # most draft tokens per verify (0: none)
    task_hint: TaskHint | None = None  # models.scheduler.TASK_HINTS
    eager_first: bool | None = None  # first chunk without waiting for its word's end (docs/REMOTE.md)


def layered(*layers: SchedulerOptions | None) -> SchedulerOptions:
    """Scheduler options laid over each other: each layer's set fields over the ones before (later wins)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is not None:
            merged.update(layer.model_dump(exclude_none=True))
    return SchedulerOptions(**merged)


@dataclass(frozen=True)
class ServerChunking:
    """The server's side of every response's chunk scheduler: the ``scheduler`` config, under every
    client's options, and what the loaded parts add (``Services.chunking``)."""

    base: SchedulerOptions = SchedulerOptions()  # the ``scheduler`` config (gateway.core.config.SchedulerDefaults)
    intercept: tuple[str, str] | None = None  # an image model's request tags (image output on)
    lookahead: int | None = None  # drafts per verify where no one sets it; None: nothing drafts (always 0)


def scheduler_config(
    server: ServerChunking,
    *layers: SchedulerOptions | None,
    spoken: bool = False,
    stop: tuple[str, ...] = (),
    tool_intercept: tuple[str, str] | None = None,
) -> SchedulerConfig:
    """The one builder of a response's ``SchedulerConfig``: the server's ``scheduler`` config, then each
    layer's set fields (a request body; a Realtime session's options then its response's …; later wins),
    then what the response itself needs. ``spoken``: every chunk is one ``Speak`` and is said as it is, so
    it must end where a word ends (an eager first chunk, ``B`` of ``Boil``, would be read as a letter).
    Raises ``ValueError`` for values the scheduler refuses."""
    d: dict[str, Any] = layered(server.base, *layers).model_dump(exclude_none=True)
    strategy = d.pop("strategy", "balanced")
    if spoken:
        d["eager_first"] = False
    if server.intercept is not None:
        d["intercept"] = server.intercept
    # the first token goes out as it comes, as a plain OpenAI stream's first delta does: waiting for its
    # word's end costs one decode step of TTFT, a step of the whole batch (50-100 ms with 8 sessions here)
    d.setdefault("eager_first", True)
    if d["eager_first"]:
        # ... and that token alone is the first chunk: a preset's 2-token first chunk would wait a step
        # all the same (a remote engine's RemoteJob counts a word as one token)
        d["first_chunk_tokens"] = 1
    if server.lookahead is None:
        d["lookahead_tokens"] = 0  # nothing drafts
    else:
        d.setdefault("lookahead_tokens", server.lookahead)
    return SchedulerConfig.for_strategy(strategy, **d, stop=stop, tool_intercept=tool_intercept)


def model_refusal(served: Sequence[str], model: str, also: Sequence[str] = ()) -> str | None:
    """None when a server answering to ``served`` (its name, then its aliases) takes ``model``, or
    ``model`` is in ``also`` (ids an endpoint's clients send by default); else why not: the one
    ``model_not_found`` message of every endpoint."""
    if model in served or model in also:
        return None
    return f"the model {model[:100]!r} is not served here; this server serves {', '.join(repr(m) for m in served)}"


# ---------------------------------------------------------------------------- sampling

Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
MAX_LOGIT_BIAS = 300  # tokens one logit_bias may name (as OpenAI)


class SamplingKnobs(BaseModel):
    """The sampling knobs beyond temperature and top-p, one set for every API: OpenAI's penalties
    and ``logit_bias``, vLLM's ``top_k`` / ``min_p`` / ``repetition_penalty``, llama.cpp's DRY
    (``models.penalties``). Unset fields keep the server's defaults (``Services.sampling_defaults``)."""

    top_k: int | None = Field(default=None, ge=-1, le=1_000_000)  # keep the k most likely tokens (0 or -1: all)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)  # drop tokens below min_p x the top one's probability
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)  # per earlier occurrence in the output
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)  # once a token occurs in the output
    repetition_penalty: float | None = Field(
        default=None, gt=0.0, le=10.0
    )  # 1: off; > 1: prompt and output tokens less likely
    logit_bias: dict[str, float] | None = Field(default=None, max_length=MAX_LOGIT_BIAS)  # token id → -100..100
    dry_multiplier: float | None = Field(default=None, ge=0.0, le=100.0)  # DRY's scale (0: off)
    dry_base: float | None = Field(default=None, gt=1.0, le=100.0)  # DRY's growth per token past the allowed length
    dry_allowed_length: int | None = Field(default=None, ge=1, le=1000)  # repeated runs this long go free
    dry_penalty_last_n: int | None = Field(default=None, ge=-1, le=1_000_000)  # tokens searched (-1: all, 0: off)

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (v or {}).items():
            if not (key.isascii() and key.isdigit() and len(key) <= 9):
                raise ValueError(f"logit_bias keys are token ids; {key[:20]!r} is not one")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias values are from -100 to 100; token {key} has {bias}")
        return v


SAMPLING_KEYS = ("temperature", "top_p", "seed", *SamplingKnobs.model_fields)


def sampling_params(
    base: SamplingParams, *layers: object | None, max_tokens: int, top_logprobs: int | None = None
) -> SamplingParams:
    """The one builder of a response's ``SamplingParams`` (and of the server's defaults, from
    ``SamplingParams()``): ``base``, then each layer's set fields (a model's recommended sampling, the
    ``session`` config; a request body, a Realtime session's options then its response's …; later wins).
    A layer is an object whose attributes are the request keys, or a mapping of them."""
    kw: dict[str, Any] = {}
    for layer in layers:
        if isinstance(layer, (int, float, str, bytes)):  # a bare value would read as "nothing set"
            raise TypeError(f"a sampling layer is a request or a mapping of its keys, not {type(layer).__name__}")
        for key in SAMPLING_KEYS:
            if isinstance(layer, Mapping):
                value = layer.get(key)
            else:
                value = getattr(layer, key, None) if layer is not None else None
            if value is not None:
                kw[key] = value
    if "logit_bias" in kw:
        kw["logit_bias"] = tuple(sorted((int(t), float(b)) for t, b in kw["logit_bias"].items()))
    if kw.get("top_k") == -1:
        kw["top_k"] = 0  # vLLM's "all"
    return replace(base, **kw, max_tokens=max_tokens, top_logprobs=top_logprobs)
