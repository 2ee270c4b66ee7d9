"""A session's conversation: the items in order, bounded, and their text as chat messages. Pure."""

from __future__ import annotations

from typing import Any

from ..tools.events import messages as mcp_messages

Item = dict[str, Any]  # a realtime.item as sent on the wire: {id, type, role, status, content: [...]}


class ItemError(Exception):
    """An item operation the client asked for is not possible (becomes an ``error`` event)."""

    def __init__(self, code: str, message: str, param: str):
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


class Conversation:
    def __init__(self, max_items: int):
        self.max_items = max_items  # oldest non-system items are dropped past this
        self.items: list[Item] = []

    def find(self, item_id: str) -> int:
        """Index of ``item_id``, or -1."""
        for i, item in enumerate(self.items):
            if item["id"] == item_id:
                return i
        return -1

    def get(self, item_id: str) -> Item | None:
        i = self.find(item_id)
        return self.items[i] if i >= 0 else None

    @property
    def last_id(self) -> str | None:
        return self.items[-1]["id"] if self.items else None

    def insert(self, item: Item, previous_item_id: str | None = None) -> str | None:
        """Insert after ``previous_item_id`` (None/"": at the end; "root": first); the id before it."""
        if self.find(item["id"]) >= 0:
            raise ItemError("item_already_exists", f"item {item['id']} already exists", "item.id")
        if previous_item_id in (None, ""):
            pos = len(self.items)
        elif previous_item_id == "root":
            pos = 0
        else:
            pos = self.find(previous_item_id) + 1
            if pos == 0:
                raise ItemError("item_not_found", f"previous_item_id {previous_item_id} not found", "previous_item_id")
        prev = self.items[pos - 1]["id"] if pos > 0 else None
        self.items.insert(pos, item)
        self._bound(keep=item)
        return prev

    def append(self, item: Item) -> None:
        self.items.append(item)
        self._bound(keep=item)

    def delete(self, item_id: str) -> None:
        i = self.find(item_id)
        if i < 0:
            raise ItemError("item_not_found", f"item {item_id} not found", "item_id")
        del self.items[i]

    def _bound(self, keep: Item) -> None:
        if len(self.items) > self.max_items:  # oldest non-system items go first
            for i, old in enumerate(self.items):
                if old.get("role") != "system" and old is not keep:
                    del self.items[i]
                    break

    def messages(self, system: str | None, skip: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        """The conversation as chat messages (the text of each item's parts joined); function calls join
        an assistant turn's ``tool_calls``, their outputs are ``tool`` turns (models.toolcalls renders both).
        ``skip``: ids of items truncated out of the model's context (gateway.realtime.truncation)."""
        msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        requests = {i["id"]: i for i in self.items if i.get("type") == "mcp_approval_request"}
        for item in self.items:
            if item["id"] in skip:
                continue
            if str(item.get("type")).startswith("mcp_"):  # server-side tools (gateway.tools)
                msgs.extend(mcp_messages(item, requests))
                continue
            if item.get("type") == "function_call":
                call = {"name": item["name"], "arguments": item["arguments"]}
                if msgs and msgs[-1]["role"] == "assistant":
                    msgs[-1].setdefault("tool_calls", []).append(call)
                else:
                    msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
                continue
            if item.get("type") == "function_call_output":
                msgs.append({"role": "tool", "content": item["output"]})
                continue
            text = "".join(c.get("text") or c.get("transcript") or "" for c in item["content"])
            msgs.append({"role": item["role"], "content": text})
        return msgs
