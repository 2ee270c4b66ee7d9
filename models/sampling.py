"""Token choice from logits: greedy, temperature, top-k, top-p, min-p, seeded. numpy only.

``probs`` is the distribution the sampler actually draws from; speculative sampling uses it
for the target side, so accept/reject preserves exactly this distribution. Penalties over the
token history (repetition, frequency, presence, DRY, logit bias) change the logits before this
(``models.penalties``); ``SamplingParams`` carries their settings too, so one value says how a
response picks its tokens.
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
    top_k: int = 0  # keep the k most likely tokens (0: all)
    min_p: float = 0.0  # drop tokens below min_p times the top token's probability (0: none)
    frequency_penalty: float = 0.0  # OpenAI's: logit -= this x the token's count in the generated text
    presence_penalty: float = 0.0  # OpenAI's: logit -= this once a token was generated
    repetition_penalty: float = 1.0  # vLLM's / HF's: a seen token's logit divided (>0) or multiplied (<0) by it
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit), OpenAI's logit_bias
    dry_multiplier: float = 0.0  # DRY (llama.cpp's names): 0 off; the penalty's scale
    dry_base: float = 1.75  # DRY: the penalty grows by this factor per token past the allowed length
    dry_allowed_length: int = 2  # DRY: repeated runs up to this long go unpenalised
    dry_penalty_last_n: int = -1  # DRY: tokens of history it searches (-1: the whole context, 0: off)
    top_logprobs: int | None = None  # report each token's logprob with this many alternatives (None: none)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1


# the fields of a model's repetition guard (models.llm.EMBEDDED_SAMPLING): ``session.repetition_guard: off`` drops them
REPETITION_GUARD_KEYS = ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "frequency_penalty")


def probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """``logits [..., V]`` → probabilities after temperature, top-k, top-p and min-p (float64)."""
    x: np.ndarray = logits.astype(np.float64) / max(params.temperature, 1e-6)
    x -= x.max(axis=-1, keepdims=True)
    p: np.ndarray = np.exp(x)
    p /= p.sum(axis=-1, keepdims=True)
    if 0 < params.top_k < p.shape[-1]:
        kth = -np.partition(-p, params.top_k - 1, axis=-1)[..., params.top_k - 1 : params.top_k]
        p = np.where(p >= kth, p, 0.0)  # ties at the k-th are all kept
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
    if params.min_p > 0.0:
        p = np.where(p >= params.min_p * p.max(axis=-1, keepdims=True), p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


def choose(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token from ``logits [V]``."""
    if params.greedy:
        return int(np.argmax(logits))
    p = probs(logits, params)
    return int(rng.choice(p.shape[-1], p=p))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x: np.ndarray = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    out: np.ndarray = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return out
