"""A deterministic fake LLM behind the Backend interface: fast, tokenizer-free, integer logic.

Words are token ids; the next token is a pure function of the cached tokens, so greedy output is
a fixed reference text for any prompt, whatever the chunking, cancels or reconnects.
"""

from __future__ import annotations

import time
import zlib

import numpy as np

from models.backend import KVState, forward_each

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "fox",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "nov",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
]
V = 64  # ids: 0 = eos, 1..20 words, 21.. punctuation/prompt hash buckets
EOS = 0


class FakeBackend:
    name = "fake"
    vocab_size = V
    eos_ids = frozenset({EOS})
    max_context = 100_000

    def __init__(self, answer_tokens: int = 40, step_s: float = 0.0):
        self.answer_tokens = answer_tokens  # tokens in every answer before eos
        self.step_s = step_s  # simulated compute per forward call
        self.batches: list[list[tuple[int, int]]] = []  # per forward_batch call: (tokens, n_logits) per item

    def new_state(self) -> KVState:
        return KVState(tokens=[], cache=None)

    def _next(self, tokens: list[int]) -> int:
        # position in the current answer = tokens since the last prompt marker (id 63)
        since = len(tokens) - 1 - max((i for i, t in enumerate(tokens) if t == 63), default=0)
        if since >= self.answer_tokens:
            return EOS
        if since % 7 == 6:
            return 21  # "."
        return 1 + (sum(tokens[-3:]) * 7 + since) % len(WORDS)

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        if self.step_s:
            time.sleep(self.step_s)
        state.tokens.extend(tokens)
        out = np.zeros((n_logits, V), dtype=np.float32)
        for i in range(n_logits):
            out[i, self._next(state.tokens[: len(state.tokens) - n_logits + i + 1])] = 10.0
        return out

    def forward_batch(self, items: list[tuple[KVState, list[int], int]]) -> list[np.ndarray]:
        """One simulated step for every item (``step_s`` once, not per item: batching's point)."""
        self.batches.append([(len(tokens), n) for _, tokens, n in items])
        step_s, self.step_s = self.step_s, 0.0
        try:
            return forward_each(self, items)  # all-or-nothing: a failing item rolls the others back
        finally:
            self.step_s = step_s
            if step_s:
                time.sleep(step_s)

    def crop(self, state: KVState, length: int) -> None:
        del state.tokens[length:]

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        ids: list[int] = []
        for m in messages:
            ids += [22 + zlib.crc32(w.encode()) % 40 for w in m["content"].split()] + [62]
        return ids + [63]

    def encode(self, text: str) -> list[int]:
        """Raw text: the words' hash ids, then the answer marker (this fake answers only after one)."""
        return [22 + zlib.crc32(w.encode()) % 40 for w in text.split()] + [63]

    def decode(self, ids: list[int]) -> str:
        return "".join(" " + WORDS[i - 1] if 1 <= i <= 20 else "." if i == 21 else "" for i in ids if i != EOS)
