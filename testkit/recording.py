"""A backend wrapper that records the messages of every prompt: tests see what reached the model."""

from __future__ import annotations

from typing import Any


class Recording:
    """``inner`` unchanged, except that each ``chat_tokens`` call's messages land in ``prompts``."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.prompts: list[list[dict[str, str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def chat_tokens(self, messages: list[dict[str, str]], *args: Any, **kwargs: Any) -> Any:
        self.prompts.append(messages)
        return self.inner.chat_tokens(messages, *args, **kwargs)
