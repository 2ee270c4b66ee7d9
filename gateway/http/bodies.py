"""OpenAI response objects: ``chat.completion``, ``chat.completion.chunk``, ``usage``. Pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from models.lifecycle import TokenLogprob

FINISH = {"stop": "stop", "length": "length"}  # Done.reason → finish_reason
STATUS = {"stop": "completed", "length": "incomplete", "cancelled": "cancelled", "error": "failed"}


@dataclass(frozen=True)
class Header:
    id: str
    created: int
    model: str


def usage(m: dict[str, Any]) -> dict[str, Any]:
    cached = int(m.get("cached_tokens", 0))
    prompt = int(m.get("prompt_tokens", 0)) + cached
    out = int(m.get("tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def chunk(h: Header, delta: dict[str, Any], finish: str | None = None, with_usage: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": h.id,
        "object": "chat.completion.chunk",
        "created": h.created,
        "model": h.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if with_usage:
        out["usage"] = None  # as OpenAI: null on every chunk but the last
    return out


def logprobs(tokens: Sequence[TokenLogprob]) -> dict[str, Any]:
    """Chat Completions' ``choices[].logprobs``: each token, its logprob, its UTF-8 bytes and alternatives."""

    def entry(text: str, lp: float) -> dict[str, Any]:
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    content = [{**entry(t.text, t.logprob), "top_logprobs": [entry(a, v) for a, v in t.top]} for t in tokens]
    return {"content": content, "refusal": None}


def usage_chunk(h: Header, m: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": h.id,
        "object": "chat.completion.chunk",
        "created": h.created,
        "model": h.model,
        "choices": [],
        "usage": usage(m),
    }


def completion(h: Header, text: str, finish: str, m: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": h.id,
        "object": "chat.completion",
        "created": h.created,
        "model": h.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": usage(m),
    }
