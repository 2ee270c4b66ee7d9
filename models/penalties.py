"""Logit penalties over a response's token history: repetition, frequency, presence, DRY, logit bias. numpy only.

One function, ``penalize``, serves every decoding path: plain decoding applies it to the next
row, and speculative verification applies it to each verify row with the history that row
follows (the generated tokens plus the drafts before it), so drafts are accepted against exactly
the penalised distribution plain decoding would draw from.

Which tokens each penalty counts (the OpenAI / vLLM meanings, since those are the APIs served):

* ``frequency_penalty`` and ``presence_penalty``: the generated tokens only (OpenAI);
* ``repetition_penalty``: prompt and generated tokens (vLLM, HF): a seen token's logit is divided
  by it when positive and multiplied when negative;
* DRY ("don't repeat yourself", llama.cpp's sampler and names): prompt and generated tokens, the
  last ``dry_penalty_last_n`` of them. For each candidate token it finds the longest run of the
  latest tokens that occurred earlier followed by that candidate; a run of ``n`` tokens,
  ``n >= dry_allowed_length``, costs ``dry_multiplier * dry_base ** (n - dry_allowed_length)``.
  Runs do not extend across a sequence breaker (a token holding a newline, ``:``, ``"`` or
  ``*``, llama.cpp's default breakers), so lists, dialogue and the chat template's own markup
  are not what it punishes;
* ``logit_bias``: added as given.

A response with every penalty off gets its logits back unchanged (the same array): greedy
decoding stays bitwise what it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .sampling import SamplingParams

DRY_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's default dry_sequence_breakers
_DRY_MAX_RUN = 64  # runs are measured up to this many tokens past the allowed length (the penalty is huge by then)
_MAX_PENALTY = 1e9  # no logit moves further than this (keeps float32 finite)


def active(params: SamplingParams) -> bool:
    """Whether any penalty changes the logits."""
    return bool(
        params.frequency_penalty
        or params.presence_penalty
        or params.repetition_penalty != 1.0
        or params.logit_bias
        or dry_active(params)
    )


def dry_active(params: SamplingParams) -> bool:
    return params.dry_multiplier > 0.0 and params.dry_penalty_last_n != 0


def penalize(
    logits: np.ndarray,
    params: SamplingParams,
    prompt: Sequence[int],
    generated: Sequence[int],
    breakers: np.ndarray | None = None,
) -> np.ndarray:
    """``logits [V]`` of the position after ``prompt + generated`` → the penalised logits (a new
    float32 array; ``logits`` itself when nothing applies). ``breakers``: a bool ``[V]`` mask of
    the DRY sequence breakers (None: none)."""
    if not active(params):
        return logits
    out: np.ndarray = np.array(logits, dtype=np.float32, copy=True)
    if params.logit_bias:
        ids = np.fromiter((t for t, _ in params.logit_bias), dtype=np.int64)
        out[ids] += np.fromiter((b for _, b in params.logit_bias), dtype=np.float32)
    if params.repetition_penalty != 1.0 and (len(prompt) or len(generated)):
        seen = np.unique(np.concatenate([np.asarray(prompt, dtype=np.int64), np.asarray(generated, dtype=np.int64)]))
        v = out[seen]
        out[seen] = np.where(v > 0, v / params.repetition_penalty, v * params.repetition_penalty)
    if (params.frequency_penalty or params.presence_penalty) and len(generated):
        ids, counts = np.unique(np.asarray(generated, dtype=np.int64), return_counts=True)
        out[ids] -= (params.frequency_penalty * counts + params.presence_penalty).astype(np.float32)
    if dry_active(params):
        hist = np.concatenate([np.asarray(prompt, dtype=np.int64), np.asarray(generated, dtype=np.int64)])
        if params.dry_penalty_last_n > 0:
            hist = hist[-params.dry_penalty_last_n :]
        cand, run = dry_runs(hist, params.dry_allowed_length + _DRY_MAX_RUN, breakers)
        hit = run >= max(params.dry_allowed_length, 1)
        if hit.any():
            top = math.log(_MAX_PENALTY) / math.log(max(params.dry_base, 1.0 + 1e-6))  # no overflow
            exp = np.minimum(run[hit] - params.dry_allowed_length, top)
            pen = np.minimum(params.dry_multiplier * params.dry_base**exp, _MAX_PENALTY)
            out[cand[hit]] -= pen.astype(np.float32)
    return out


def dry_runs(hist: np.ndarray, max_run: int, breakers: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """DRY's repeated runs: (candidate ids, run lengths), one per distinct candidate.

    A candidate is a token that followed an earlier occurrence of the history's last token; its
    run is the longest common suffix (at most ``max_run``, stopping at a breaker) of the history
    and the history cut just before that candidate."""
    n = len(hist)
    empty: np.ndarray = np.zeros(0, dtype=np.int64)
    if n < 2 or (breakers is not None and breakers[hist[-1]]):
        return empty, empty
    ends = np.flatnonzero(hist[:-1] == hist[-1])  # earlier occurrences of the last token
    if not len(ends):
        return empty, empty
    run: np.ndarray = np.zeros(len(ends), dtype=np.int64)
    alive: np.ndarray = np.ones(len(ends), dtype=bool)
    for j in range(min(max_run, n - 1)):
        tail = hist[n - 1 - j]
        if breakers is not None and breakers[tail]:
            break
        idx: np.ndarray = ends - j
        ok = alive & (idx >= 0)
        ok[ok] = hist[idx[ok]] == tail
        run += ok
        alive = ok
        if not alive.any():
            break
    cand = hist[ends + 1]
    ids = np.unique(cand)
    best: np.ndarray = np.zeros(len(ids), dtype=np.int64)
    np.maximum.at(best, np.searchsorted(ids, cand), run)
    return ids, best


def breaker_mask(
    vocab_size: int, token_text: Callable[[int], str], breakers: Sequence[str] = DRY_BREAKERS
) -> np.ndarray:
    """bool ``[V]``: the tokens whose text holds a sequence breaker (one vocabulary scan)."""
    mask: np.ndarray = np.zeros(vocab_size, dtype=bool)
    for t in range(vocab_size):
        text = token_text(t)
        mask[t] = any(b in text for b in breakers)
    return mask


def check_bias(params: SamplingParams, vocab_size: int) -> None:
    """ValueError naming the first ``logit_bias`` token outside the vocabulary."""
    for t, _ in params.logit_bias:
        if not 0 <= t < vocab_size:
            raise ValueError(f"logit_bias: token id {t} is outside the vocabulary (0..{vocab_size - 1})")
