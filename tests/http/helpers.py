"""Shared helpers of the HTTP API tests: request bodies, SSE parsing, error-shape checks."""

from __future__ import annotations

import json
from typing import Any

import httpx

MODEL = "tiny-llama"
NO_AUDIO = {"audio.enabled": False}  # no Whisper load for text-only servers
# long responses that must still be running when the test acts: without drafting, whose speed-up on the
# tiny model's repetitive output would finish them first
LONG = {"audio.enabled": False, "session.max_output_tokens": 4000, "speculative.drafter": "none"}


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def body(messages: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages or user("hello"), "temperature": 0, **kw}


def post(addr: str, payload: Any, **kw: Any) -> httpx.Response:
    kw.setdefault("timeout", 120)
    return httpx.post(f"http://{addr}/v1/chat/completions", json=payload, **kw)


def sse_events(raw: str) -> list[tuple[str, str]]:
    """(id, data) of each event in an SSE body."""
    out = []
    for block in raw.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            out.append((fields.get("id", ""), fields["data"]))
    return out


def content_of(events: list[tuple[str, str]]) -> str:
    text = ""
    for _, data in events:
        if data != "[DONE]":
            for choice in json.loads(data).get("choices", []):
                text += choice["delta"].get("content") or ""
    return text


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code
    for leak in ("Traceback", "0x", "/work", "site-packages", ".py"):
        assert leak not in err["message"], err["message"]
    return err


def prompt_len(backend: Any, messages: list[dict[str, str]]) -> int:
    return len(backend.chat_tokens(messages))
