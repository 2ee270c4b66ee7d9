"""A reply prepared at a pause in the user's speech: its job, and the events held back until the turn commits."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from models.decode import JobEvents
from models.engine_client import Handle

from .actions import StartResponse


@dataclass
class PreparedReply:
    """A reply prepared at a pause in the user's speech: running in the engine, nothing sent yet."""

    key: int  # the TurnTaker's id for it
    action: StartResponse  # what it generates; its response_id is the job's own ("spec_…")
    handle: Handle
    events: list[JobEvents] = field(default_factory=list)  # held back until the turn commits
    submitted_at: float = field(default_factory=time.perf_counter)  # its job reached the engine (turn latency)

    @property
    def finished(self) -> bool:
        return any(e.done is not None for e in self.events)

    def serves(self, action: StartResponse) -> bool:
        """Is it exactly the generation ``action`` asks for (same prompt, same sampling)?"""
        a = self.action
        return (a.messages, a.sampling, a.scheduler, a.output_modalities) == (
            action.messages,
            action.sampling,
            action.scheduler,
            action.output_modalities,
        )


class TokenizingHandle:
    """Stands in a session's ``handles`` for a response whose prompt is being tokenized; ``cancel`` like a Handle's."""

    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class AfterPrepare(TokenizingHandle):
    """A response whose turn committed while its reply was still being prepared unseen: it waits for
    that preparation (milliseconds of tokenizing), then adopts the prepared job or starts normally."""
