"""Request options shared by the WebSocket, HTTP and in-process APIs: one schema, one set of bounds, one builder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.sampling import SamplingParams

# the bounds of each scheduler knob, shared with the server's defaults (gateway.core.config.SchedulerDefaults)
MinChunkTokens = Annotated[int, Field(ge=1, le=512)]
MaxChunkTokens = Annotated[int, Field(ge=1, le=2048)]
LookaheadTokens = Annotated[int, Field(ge=0, le=32)]
Strategy = Literal["fast", "balanced", "quality"]
TaskHint = Literal["chat", "code", "summarize", "creative"]


class SchedulerOptions(BaseModel):
    """Extension: the chunk scheduler's knobs (``session.scheduler``, ``response.scheduler``, and
    ``scheduler`` in a Chat Completions body). Unset fields keep the server's defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Strategy | None = None  # chunking preset
    min_chunk_tokens: MinChunkTokens | None = None  # no cut at a boundary before this
    max_chunk_tokens: MaxChunkTokens | None = None  # a chunk is forced out here
    lookahead_tokens: LookaheadTokens | None = None  # most draft tokens per verify (0: none)
    task_hint: TaskHint | None = None  # models.scheduler.TASK_HINTS
    eager_first: bool | None = None  # first chunk without waiting for its word's end (docs/REMOTE.md)


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
    """The one builder of a response's ``SamplingParams``: ``base`` (the server's defaults), then each
    layer's set fields (a request body, a Realtime session's options then its response's …; later wins)."""
    kw: dict[str, Any] = {}
    for layer in layers:
        for key in SAMPLING_KEYS:
            value = getattr(layer, key, None) if layer is not None else None
            if value is not None:
                kw[key] = value
    if "logit_bias" in kw:
        kw["logit_bias"] = tuple(sorted((int(t), float(b)) for t, b in kw["logit_bias"].items()))
    if kw.get("top_k") == -1:
        kw["top_k"] = 0  # vLLM's "all"
    return replace(base, **kw, max_tokens=max_tokens, top_logprobs=top_logprobs)
