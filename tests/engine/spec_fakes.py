"""Fakes for the speculative-decoding tests: a clock, a deterministic LM, list and oracle drafters."""

from __future__ import annotations

import zlib

import numpy as np

from models.backend import KVState
from models.decode import DecodeJob
from models.scheduler import SchedulerConfig

# ----------------------------------------------------------------------------- fakes


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeLM:
    """A ``Backend`` whose next-token logits are a fixed function of the last two tokens.

    ``cost`` (optional) maps the number of tokens in a forward to fake seconds on ``clock``.
    """

    name = "fake"

    def __init__(self, vocab: int = 12, eos: int | None = None, scale: float = 3.0, clock=None, cost=None):
        self.vocab_size = vocab
        self.eos_ids = frozenset() if eos is None else frozenset({eos})
        self.max_context = 4096
        self.scale = scale
        self.clock = clock
        self.cost = cost
        self.calls: list[int] = []

    def logits(self, prefix: list[int]) -> np.ndarray:
        key = zlib.crc32(bytes(str(prefix[-2:]), "ascii"))
        return np.random.default_rng(key).normal(size=self.vocab_size).astype(np.float32) * self.scale

    def new_state(self) -> KVState:
        return KVState()

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        state.tokens.extend(tokens)
        self.calls.append(len(tokens))
        if self.clock is not None:
            self.clock.t += self.cost(len(tokens))
        n = len(state.tokens)
        return np.stack([self.logits(state.tokens[: n - n_logits + i + 1]) for i in range(n_logits)])

    def crop(self, state: KVState, length: int) -> None:
        del state.tokens[length:]

    def chat_tokens(self, messages, add_generation_prompt=True):  # pragma: no cover - unused
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        return "".join(f" t{i}" for i in ids)


def oracle_drafts(backend):
    """A drafter function that proposes exactly the target's greedy continuation."""

    def oracle(ctx, k):
        out, c = [], list(ctx)
        for _ in range(k):
            out.append(int(np.argmax(backend.logits(c))))
            c.append(out[-1])
        return out

    return oracle


class ListDrafter:
    """Proposes tokens from a fixed function of the context (``last_class`` 0)."""

    last_class = 0

    def __init__(self, fn):
        self.fn = fn

    def propose(self, context: list[int], k: int) -> list[int]:
        return self.fn(context, k)

    def draft_probs(self):
        return None


def decode(backend, prompt, params, drafter=None, verifier=None, lookahead=8):
    # draft from the very first token: these tests are about drafting, not time to first text
    sched = SchedulerConfig(lookahead_tokens=lookahead if drafter is not None else 0, draft_before_first_text=True)
    job = DecodeJob(backend, backend.new_state(), prompt, params, sched, drafter=drafter, verifier=verifier)
    for _ in range(10_000):
        if job.finished:
            break
        job.step()
    return job
