"""What a decode job plugs in: the drafter, the verifier and the grammar over the next tokens."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .sampling import SamplingParams


class TokenDrafter(Protocol):
    """Proposes up to ``k`` next tokens for ``context`` (the ids so far, prompt included)."""

    def propose(self, context: list[int], k: int) -> list[int]: ...


class Verifier(Protocol):
    """Chooses the lookahead ``k`` and accepts drafted tokens (models.speculative)."""

    def lookahead(self, load: int = 0, left: int | None = None) -> int:
        """``load``: how many other sequences share this step's forward (the batch accounts for
        it); ``left``: the most tokens the response may still write (None: unknown)."""
        ...

    def accept(
        self, rows: np.ndarray, drafts: list[int], params: SamplingParams, rng: np.random.Generator
    ) -> tuple[list[int], int]:
        """``rows [len(drafts)+1, V]`` → (accepted draft prefix + one bonus/corrected token, n_accepted)."""
        ...

    def record(self, drafted: int, accepted: int, seconds: float) -> None: ...


class TokenConstraint(Protocol):
    """A grammar over the next tokens (models.constrain.Constraint): masks rows, follows chosen tokens."""

    def mask(self, row: np.ndarray, greedy: bool = False) -> np.ndarray: ...

    def mask_rows(self, rows: np.ndarray, drafts: list[int], greedy: bool = False) -> None: ...

    def valid_prefix(self, tokens: list[int]) -> int: ...

    def advance(self, tokens: list[int]) -> None: ...

    @property
    def complete(self) -> bool: ...
