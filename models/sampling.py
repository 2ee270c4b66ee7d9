"""Token choice from logits: greedy, temperature, top-p, seeded. numpy only.

``probs`` is the distribution the sampler actually draws from; speculative sampling uses it
for the target side, so accept/reject preserves exactly this distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy (deterministic)
    top_p: float = 1.0  # nucleus mass kept (1.0: all)
    seed: int | None = None  # fixes the random stream of one response
    max_tokens: int = 512  # hard cap on generated tokens

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """``logits [..., V]`` → probabilities after temperature and top-p (float64)."""
    x = logits.astype(np.float64) / max(params.temperature, 1e-6)
    x -= x.max(axis=-1, keepdims=True)
    p = np.exp(x)
    p /= p.sum(axis=-1, keepdims=True)
    if params.top_p < 1.0:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=-1)
        cum = np.cumsum(sorted_p, axis=-1)
        keep_sorted = (cum - sorted_p) < params.top_p  # always keeps the top token
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


def choose(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token from ``logits [V]``."""
    if params.greedy:
        return int(np.argmax(logits))
    p = probs(logits, params)
    return int(rng.choice(p.shape[-1], p=p))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
