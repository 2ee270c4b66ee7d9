"""Which oldest turns leave the model's context so that the next prompt fits (GA ``truncation``). Pure.

The conversation is cut in whole turns: a turn opens with a user message and holds everything after it up to
the next one (the reply, its function calls and their outputs), so a call is never separated from its output.
System items and the instructions always stay, and so does the newest turn. Dropped items leave the model's
context only: the client's view keeps them (no ``conversation.item.deleted``), as in GA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .conversation import Item

# "auto" keeps half the room after a cut: the KV cache is rebuilt from the first dropped token, so a cut costs a
# prefill of everything kept; keeping half makes that rare (every ~room/2 tokens of talk) and small
AUTO_RETENTION = 0.5
MESSAGE_OVERHEAD = 8  # chat-template tokens around each message (role markers, ends of turn)
TRIGGER = 0.95  # estimates come from each item's own text: cut a little before the exact limit


@dataclass(frozen=True)
class Policy:
    mode: Literal["auto", "disabled", "retention_ratio"] = "auto"
    retention_ratio: float = AUTO_RETENTION  # of the room after the instructions, kept after a cut
    post_instructions: int | None = None  # token_limits.post_instructions: the room after the instructions

    @classmethod
    def of(cls, value: Any) -> Policy:
        """The session's ``truncation`` value (already validated by ``protocol.Truncation``)."""
        if value is None or value == "auto":
            return cls()
        if value == "disabled":
            return cls("disabled")
        limits = getattr(value, "token_limits", None)
        return cls(
            "retention_ratio",
            float(value.retention_ratio),
            getattr(limits, "post_instructions", None) if limits is not None else None,
        )


def turns(items: list[Item], dropped: set[str]) -> list[list[Item]]:
    """The droppable items in turns, oldest first (items before the first user message form one)."""
    groups: list[list[Item]] = []
    for item in items:
        if item["id"] in dropped or item.get("role") == "system":
            continue
        if not groups or (item.get("type") == "message" and item.get("role") == "user"):
            groups.append([])
        groups[-1].append(item)
    return groups


def item_text(item: Item) -> str:
    """The text an item puts in the prompt (what ``Conversation.messages`` renders)."""
    if item.get("type") == "function_call":
        return f"{item.get('name', '')} {item.get('arguments', '')}"
    if item.get("type") == "function_call_output":
        return str(item.get("output", ""))
    return "".join(c.get("text") or c.get("transcript") or "" for c in item.get("content", []))


def to_drop(
    groups: list[list[Item]],
    count: Callable[[Item], int],
    fixed: int,
    max_context: int,
    reply_budget: int,
    policy: Policy,
    context_tokens: int | None = None,
) -> list[str]:
    """Ids of the oldest turns to leave the context, or [] when the prompt fits (or truncation is off).

    ``fixed``: tokens of the instructions and tool descriptions; ``count``: an item's tokens;
    ``context_tokens``: the server's cap on the room after the instructions (config ``session.context_tokens``),
    which a client's own ``token_limits.post_instructions`` replaces."""
    if policy.mode == "disabled" or len(groups) < 2:
        return []
    room = max_context - reply_budget - fixed
    limit = policy.post_instructions if policy.post_instructions is not None else context_tokens
    if limit is not None:
        room = min(room, limit)
    sizes = [sum(count(i) + MESSAGE_OVERHEAD for i in g) for g in groups]
    total = sum(sizes)
    if total <= room * TRIGGER:
        return []
    target = room * policy.retention_ratio
    out: list[str] = []
    for group, size in zip(groups[:-1], sizes[:-1], strict=True):  # the newest turn always stays
        if total <= target:
            break
        out.extend(i["id"] for i in group)
        total -= size
    return out
