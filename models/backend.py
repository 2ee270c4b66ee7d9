"""The model-step interface every LLM backend implements.

The chunk scheduler and the speculative decoder only ever talk to a backend through
``Backend``: tokens in, logits out, on a per-conversation ``KVState`` that the backend
owns. Verification of ``k`` drafted tokens is a single ``forward`` of those ``k`` tokens
with ``n_logits=k + 1`` (one logit row for the last accepted token plus one per draft);
rejection is ``crop``.

Shapes: ``forward`` returns a float32 numpy array ``[n_logits, vocab_size]`` whose row ``i``
is the next-token distribution after ``state.tokens[len(state.tokens) - n_logits + i]``.

Batching: ``forward_batch([(state_j, tokens_j, n_logits_j), ...])`` is one model call for many
conversations (continuous batching: every running response's next token(s) in one step); item
``j`` of the result is exactly what ``forward(state_j, tokens_j, n_logits_j)`` would return,
``[n_logits_j, vocab_size]``. States in one batch are distinct. It is all-or-nothing: when it
raises, no state has changed, so the caller can retry the items one by one to find the bad one.
A backend without a batched kernel loops (``forward_each``); ``forward`` is the batch of one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass
class KVState:
    """One conversation's cache. ``tokens`` are exactly the ids whose K/V the cache holds."""

    tokens: list[int] = field(default_factory=list)
    cache: Any = None  # backend-specific (a transformers DynamicCache, a llama.cpp sequence…)


BatchItem = tuple[KVState, list[int], int]  # (state, tokens to append, n_logits)


@runtime_checkable
class Backend(Protocol):
    """A causal LM driven one step at a time. All calls happen on the engine's worker thread."""

    name: str  # the model id shown in /v1/models
    vocab_size: int
    eos_ids: frozenset[int]  # ids that end an assistant turn
    max_context: int  # the most tokens one KVState may hold

    def new_state(self) -> KVState:
        """An empty cache for a new conversation."""
        ...

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        """Append ``tokens`` to ``state`` and return logits for the last ``n_logits`` positions.

        ``n_logits`` may not exceed ``len(state.tokens)`` after the append. Returns
        float32 ``[n_logits, vocab_size]``.
        """
        ...

    def forward_batch(self, items: list[BatchItem]) -> list[np.ndarray]:
        """``forward`` of every ``(state, tokens, n_logits)`` in one call; item j → ``[n_logits_j, V]``."""
        ...

    def crop(self, state: KVState, length: int) -> None:
        """Drop every cached position from ``length`` on (``state.tokens`` shrinks too)."""
        ...

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Render ``[{role, content}]`` with the model's chat template and tokenize it."""
        ...

    def decode(self, ids: list[int]) -> str:
        """Token ids → text (special tokens skipped)."""
        ...


@runtime_checkable
class Parking(Protocol):
    """A backend whose conversations share a fixed set of cache slots (llama.cpp sequences)."""

    def park(self, state: KVState) -> None:
        """``state``'s client is away: a new conversation may take its slot before a free one that
        would decode apart from the others. The cache stays until then; a state whose slot was
        taken re-prefills on its next step. Engine thread only."""
        ...


def crop_cache(state: KVState, length: int, empty: Callable[[], Any]) -> None:
    """Drop positions from ``length`` on from a cache with transformers' ``crop(-n)`` (a
    ``DynamicCache``); cropping to 0 takes a fresh ``empty()`` cache instead."""
    drop = len(state.tokens) - length
    if drop <= 0:
        return
    if length == 0:
        state.cache = empty()
    else:
        state.cache.crop(-drop)
    del state.tokens[length:]


@runtime_checkable
class PromptEncoder(Protocol):
    """A backend that can read raw text as a prompt (``/v1/completions``: no chat template)."""

    def encode(self, text: str) -> list[int]:
        """``text`` → ids as the model reads a document: its BOS when it wants one, special tokens parsed."""
        ...


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists (vectorised: contexts run to thousands)."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


def sync_prefix(backend: Backend, state: KVState, target: list[int]) -> list[int]:
    """Reuse the longest cached prefix of ``target``; return the ids still to prefill.

    Crops ``state`` where it diverges from ``target``. At least one token is always left to
    feed so the caller gets logits for the next position.
    """
    common = common_prefix(state.tokens, target)
    if common == len(target):  # fully cached: re-feed the last token to get its logits
        common -= 1
    if common < len(state.tokens):
        backend.crop(state, common)
    return target[common:]


def forward_each(backend: Any, items: list[BatchItem]) -> list[np.ndarray]:
    """``forward_batch`` for a backend without a batched kernel: one ``forward`` per item.

    Keeps the all-or-nothing contract by rolling back (``crop``) the items already applied
    when a later one raises."""
    out: list[np.ndarray] = []
    done: list[tuple[KVState, int]] = []
    try:
        for state, tokens, n_logits in items:
            before = len(state.tokens)
            out.append(backend.forward(state, tokens, n_logits))
            done.append((state, before))
    except BaseException:
        for state, before in done:
            backend.crop(state, before)
        raise
    return out


def run_batch(backend: Any, items: list[BatchItem]) -> list[np.ndarray]:
    """``backend.forward_batch(items)`` where the backend has it, else ``forward_each``."""
    batch = getattr(backend, "forward_batch", None)
    return list(batch(items)) if batch is not None else forward_each(backend, items)
