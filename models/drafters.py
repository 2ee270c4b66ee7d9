"""Drafters: cheap guesses of the next ``k`` tokens, checked by one target forward.

All share ``propose(context, k) -> list[int]`` (``context``: every id so far, prompt included;
the result may be shorter than ``k``, or empty), ``draft_probs()`` (None: the drafts are a
deterministic function of the context, i.e. a one-hot draft distribution) and ``last_class``
(which kind of guess the last proposal was; the lookahead policy keeps acceptance per class).

* ``PromptLookupDrafter`` — n-gram match (longest n first, most recent occurrence) over the
  whole context; the index grows with the context and rolls back when it diverges.
* ``ModelDrafter`` — greedy drafting with any ``Backend`` that shares the target's tokenizer,
  on its own ``KVState`` kept in step with the context by common prefix.
* ``SelfDraftBackend`` — the target's first ``n`` layers + its final norm + LM head (a
  ``Backend`` with its own small cache, no extra weights), used through ``ModelDrafter``.
* ``LookupFirstDrafter`` — prompt lookup where it has a match worth more than the model's
  drafts (it is free), else a ``ModelDrafter``; the policy's per-class rates decide.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .backend import Backend, KVState, common_prefix, crop_cache, sync_prefix


class PromptLookupDrafter:
    """Copies what followed the latest earlier occurrence of the context's last n tokens.

    The n-gram index grows by the new tokens only (one dict append per n per token) and rolls
    back token by token when the context diverges (a new turn, rejected history); checking
    that the context still extends the indexed one is a C-level list compare.
    """

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}..{ngram_max}")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._ctx: list[int] = []
        # n-gram → positions right after each of its occurrences, ascending
        self._index: dict[tuple[int, ...], list[int]] = {}
        self.last_class = 0  # n of the n-gram behind the last proposal (0: none); acceptance is kept per n

    def draft_probs(self) -> np.ndarray | None:
        return None

    def _ngrams_ending_at(self, j: int):
        for n in range(self.ngram_min, self.ngram_max + 1):
            if j - n + 1 >= 0:
                yield tuple(self._ctx[j - n + 1 : j + 1])

    def _truncate(self, length: int) -> None:
        for j in range(len(self._ctx) - 1, length - 1, -1):
            for key in self._ngrams_ending_at(j):
                positions = self._index[key]
                positions.pop()  # j + 1 is its last entry: positions are ascending
                if not positions:
                    del self._index[key]
        del self._ctx[length:]

    def _sync(self, context: list[int]) -> None:
        m = len(self._ctx)
        if len(context) < m or context[:m] != self._ctx:  # diverged: roll back to the common prefix
            common = 0
            limit = min(m, len(context))
            while common < limit and context[common] == self._ctx[common]:
                common += 1
            self._truncate(common)
        for j in range(len(self._ctx), len(context)):
            self._ctx.append(context[j])
            for key in self._ngrams_ending_at(j):
                self._index.setdefault(key, []).append(j + 1)

    def propose(self, context: list[int], k: int) -> list[int]:
        self._sync(context)
        self.last_class = 0
        end = len(self._ctx)
        if k <= 0 or end == 0:
            return []
        for n in range(min(self.ngram_max, end), self.ngram_min - 1, -1):
            positions = self._index.get(tuple(self._ctx[end - n :]))
            if not positions or len(positions) < 2:  # the only occurrence is the suffix itself
                continue
            start = positions[-2]  # most recent earlier occurrence
            # copy what followed it; past the end of the context the copy continues from its own
            # drafts, which extends a periodic pattern naturally
            period = end - start
            drafts: list[int] = []
            for i in range(k):
                drafts.append(self._ctx[start + i] if i < period else drafts[i - period])
            self.last_class = n
            return drafts
        return []


_DRAFT_SAVING = 0.5  # share of a plain step a drafted token saves once a good draft model runs (≈ 2×)


class ModelDrafter:
    """Greedy drafts from a small ``Backend`` that shares the target's tokenizer."""

    def __init__(
        self,
        backend: Backend,
        state: KVState | None = None,
        min_confidence: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
        seconds_per_token: float = 0.0,
        catch_up: tuple[float, float] = (0.0, 0.0),
    ):
        self.backend = backend
        self.state = state if state is not None else backend.new_state()
        self.min_confidence = min_confidence  # stop drafting once the top probability falls below
        self.clock = clock
        self._per_token_s = seconds_per_token  # EMA of wall seconds per drafted token (0: not known yet)
        # (draft prefill seconds per token, one target step's seconds): when both are known,
        # catching the draft up on many new tokens (a new prompt or turn) waits until the plain
        # steps taken meanwhile have lost about as much as the catch-up costs (ski rental), so
        # a short answer never pays for a long prefill it cannot earn back
        self.prefill_s, self.step_s = catch_up
        # what one chance to draft is expected to save, in one-token steps of the target (the
        # policy's gain at this batch size, ``DraftPolicy.catch_up_saving``); None: a good draft
        # model's typical saving alone
        self.saving: Callable[[], float] | None = None
        self.chances_left: Callable[[], int | None] | None = None  # the most steps the response may still take
        self._declined = 0
        self.last_class = 0  # one class: acceptance is not split further

    def draft_probs(self) -> np.ndarray | None:
        return None  # greedy drafting: the draft is a function of the context

    def seconds_per_token(self) -> float:
        return self._per_token_s

    def _defer(self, context: list[int]) -> bool:
        """True while the catch-up on ``context`` is not worth it yet (see ``catch_up``)."""
        if self.prefill_s <= 0.0 or self.step_s <= 0.0:
            return False
        have = common_prefix(self.state.tokens, context)
        cached = getattr(self.backend, "cached_prefix", None)  # a backend that shares prefixes across states
        if cached is not None:
            have = max(have, cached(context))
        pending = len(context) - have
        if pending <= 2:  # in step: nothing worth weighing
            self._declined = 0
            return False
        saving = _DRAFT_SAVING if self.saving is None else self.saving()
        cost = pending * self.prefill_s
        left = None if self.chances_left is None else self.chances_left()
        if left is not None and left * saving * self.step_s < cost:
            return True  # the rest of the response could not earn the catch-up back even drafting at every step
        if self._declined * saving * self.step_s < cost:
            self._declined += 1
            return True
        self._declined = 0
        return False

    def _confident(self, row: np.ndarray) -> bool:
        if self.min_confidence <= 0.0:
            return True
        x = row.astype(np.float64)
        top = 1.0 / np.exp(x - x.max()).sum()
        return bool(top >= self.min_confidence)

    def propose(self, context: list[int], k: int) -> list[int]:
        if k <= 0 or not context or len(context) + k > self.backend.max_context:
            return []
        if self._defer(context):
            return []
        t0 = self.clock()
        feed = sync_prefix(self.backend, self.state, context)
        row = self.backend.forward(self.state, feed, n_logits=1)[0]
        t1 = self.clock()
        drafts: list[int] = []
        while self._confident(row):
            tok = int(np.argmax(row))
            drafts.append(tok)
            if len(drafts) == k or tok in self.backend.eos_ids:
                break
            row = self.backend.forward(self.state, [tok], n_logits=1)[0]
        # cost per drafted token: the one-token forwards; the catch-up forward counts only when
        # it was short (the steady state: last accepted draft + the bonus token), not when it
        # prefilled a new prompt or turn, which would make drafting look dear for many steps
        steps, spent = len(drafts) - 1, self.clock() - t1
        if len(feed) <= 2:
            steps, spent = steps + 1, spent + (t1 - t0)
        if steps > 0:
            per = spent / steps
            self._per_token_s = per if self._per_token_s == 0.0 else 0.7 * self._per_token_s + 0.3 * per
        return drafts


MODEL_CLASS = 0  # LookupFirstDrafter: the class of the model's drafts (prompt lookup's are n >= 1)


class LookupFirstDrafter:
    """Prompt lookup when its n-gram match (``n >= min_ngram``) is expected to pay at least as
    well as the draft model, else the model's drafts (class ``MODEL_CLASS``).

    ``rate(cls) -> (k, expected speed-up)`` and ``budget(cls) -> drafts worth producing`` come
    from the lookahead policy (``AdaptiveLookahead.rate`` / ``.budget``), which knows each
    class's acceptance and that lookup drafts are free while model drafts cost time; they are
    wired by ``Speculator.for_job``. Without them lookup wins whenever it matches.
    """

    def __init__(
        self,
        lookup: PromptLookupDrafter,
        model: ModelDrafter,
        min_ngram: int = 2,
        rate: Callable[[int], tuple[int, float]] | None = None,
        budget: Callable[[int], int] | None = None,
    ):
        self.lookup = lookup
        self.model = model
        self.min_ngram = min_ngram
        self.rate = rate
        self.budget = budget
        self.last_class = MODEL_CLASS

    def draft_probs(self) -> np.ndarray | None:
        return None  # both are deterministic functions of the context

    def seconds_per_token(self) -> float:
        return self.model.seconds_per_token()

    def propose(self, context: list[int], k: int) -> list[int]:
        drafts = self.lookup.propose(context, k)
        n = self.lookup.last_class
        if drafts and n >= self.min_ngram and (self.rate is None or self.rate(n)[1] >= self.rate(MODEL_CLASS)[1]):
            self.last_class = n
            return drafts
        if self.budget is not None:
            k = min(k, self.budget(MODEL_CLASS))
        guess = self.model.propose(context, k) if k > 0 else []
        if guess or not drafts:
            self.last_class = MODEL_CLASS
            return guess
        self.last_class = n  # the model has nothing now (not worth it, or waiting to catch up): lookup's
        return drafts  # match, which the policy still cuts to what its class earns


class SelfDraftBackend:
    """The first ``n_layers`` of a ``TransformersBackend``'s model, its final norm and LM head.

    Works for the Llama-style layout transformers uses for most decoders
    (``model.model.{embed_tokens, layers, norm, rotary_emb}`` + ``model.lm_head``). Same
    ``Backend`` contract; the cache holds K/V for the first ``n_layers`` only.
    """

    def __init__(self, main: Any, n_layers: int):
        base = getattr(main.model, "model", None)
        parts = ("embed_tokens", "layers", "norm", "rotary_emb")
        if base is None or not all(hasattr(base, p) for p in parts) or not hasattr(main.model, "lm_head"):
            raise ValueError(f"self-drafting needs a Llama-style decoder; {type(main.model).__name__} is not")
        total = len(base.layers)
        if not 1 <= n_layers <= total:
            raise ValueError(f"self-drafting layers must be in 1..{total}, got {n_layers}")
        self.main = main
        self.n_layers = n_layers
        self.name = f"{main.name}[:{n_layers}]"
        self.vocab_size = main.vocab_size
        self.eos_ids = main.eos_ids
        self.max_context = main.max_context
        self._base = base
        import torch

        self._torch = torch

    def new_state(self) -> KVState:
        from transformers import DynamicCache

        # its own cache, whatever cache the main backend uses; only the first n layers fill
        return KVState(tokens=[], cache=DynamicCache(config=self.main.model.config))

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        from transformers.masking_utils import create_causal_mask

        torch = self._torch
        if not tokens:
            raise ValueError("forward needs at least one token")
        base = self._base
        ids = torch.tensor([tokens], dtype=torch.long, device=self.main.model.device)
        with torch.inference_mode():
            h = base.embed_tokens(ids)  # [1, T, hidden]
            past = state.cache.get_seq_length()
            pos = (torch.arange(len(tokens), device=h.device) + past).unsqueeze(0)  # [1, T]
            mask = create_causal_mask(
                config=base.config,
                inputs_embeds=h,
                attention_mask=None,
                past_key_values=state.cache,
                position_ids=pos,
            )
            rope = base.rotary_emb(h, position_ids=pos)
            for layer in base.layers[: self.n_layers]:
                h = layer(
                    h,
                    attention_mask=mask,
                    position_embeddings=rope,
                    position_ids=pos,
                    past_key_values=state.cache,
                    use_cache=True,
                )
            h = base.norm(h[:, -n_logits:])
            logits = self.main.model.lm_head(h)  # [1, n_logits, V]
        state.tokens.extend(tokens)
        return logits[0].float().cpu().numpy()

    def crop(self, state: KVState, length: int) -> None:
        crop_cache(state, length, lambda: self.new_state().cache)

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return self.main.chat_tokens(messages, add_generation_prompt)

    def decode(self, ids: list[int]) -> str:
        return self.main.decode(ids)
