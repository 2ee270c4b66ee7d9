"""Hypothesis strategies for random HTTP requests against the gateway: any route, method, headers
(valid and malformed), and bodies (random bytes, JSON near the real schemas, multipart forms)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

PATHS = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/files",
    "/v1/files/{id}",
    "/v1/files/{id}/content",
    "/v1/chat/completions/{id}/stream",
    "/v1/completions/{id}/stream",
    "/v1/models",
    "/v1/realtime",
    "/v1/realtime/client_secrets",
    "/health",
    "/ready",
    "/metrics",
    "/",
    "/index.html",
]
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]

_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=60)
_ids = st.one_of(st.just("file-0123456789abcdef01234567"), st.just("chatcmpl-x"), _text.filter(lambda s: "/" not in s))

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool", "developer", "x"]), "content": _json}
)
_chatish = st.fixed_dictionaries(
    {"model": st.sampled_from(["fake", "x", ""]), "messages": st.lists(_message, max_size=3)},
    optional={
        "max_tokens": st.integers(-5, 100),
        "stream": st.booleans(),
        "temperature": _json,
        "tools": st.lists(
            st.fixed_dictionaries(
                {"type": st.just("function"), "function": st.fixed_dictionaries({"name": _text, "parameters": _json})}
            ),
            max_size=3,
        ),
        "tool_choice": _json,
        "response_format": _json,
        "stop": _json,
        "logprobs": _json,
        "prompt": st.one_of(_text, st.lists(st.integers(-3, 60_000), max_size=5), _json),
        "echo": _json,
        "n": _json,
        "scheduler": _json,
    },
)

# POST /v1/realtime/client_secrets: GA's body with random values where a session config goes
_secretish = st.fixed_dictionaries(
    {},
    optional={
        "expires_after": _json
        | st.fixed_dictionaries(
            {"anchor": st.sampled_from(["created_at", "x"]), "seconds": st.integers(-5, 8000) | _json}
        ),
        "session": _json
        | st.fixed_dictionaries(
            {"type": st.sampled_from(["realtime", "transcription", "x"])},
            optional={name: _json for name in ("model", "instructions", "tools", "tool_choice", "audio", "truncation")},
        ),
    },
)


@dataclass(frozen=True)
class FuzzRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def _multipart(parts: list[tuple[str, str | None, bytes]], boundary: str) -> bytes:
    out = b""
    for name, filename, value in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + value + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


@st.composite
def requests(draw: st.DrawFn) -> FuzzRequest:
    method = draw(st.sampled_from(METHODS))
    path = draw(st.sampled_from(PATHS)).replace("{id}", draw(_ids) or "x")
    if draw(st.booleans()):
        path += (
            "?"
            + draw(st.sampled_from(["limit=", "after=", "order=", "purpose=", "resume_token=", "x="]))
            + draw(_text).replace("#", "")
        )
    headers: dict[str, str] = {}
    kind = draw(st.sampled_from(["json", "chatish", "secretish", "bytes", "multipart", "none"]))
    body = b""
    if kind == "json":
        body = json.dumps(draw(_json)).encode()
        headers["Content-Type"] = "application/json"
    elif kind in ("chatish", "secretish"):
        body = json.dumps(draw(_chatish if kind == "chatish" else _secretish)).encode()
        headers["Content-Type"] = "application/json"
    elif kind == "bytes":
        body = draw(st.binary(max_size=300))
        headers["Content-Type"] = draw(st.sampled_from(["application/json", "text/plain", "multipart/form-data"]))
    elif kind == "multipart":
        boundary = draw(st.sampled_from(["B", "xyz", "", "a b", "-" * 80]))
        parts = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["file", "purpose", "x", ""]),
                    st.none() | _text,
                    st.sampled_from([b"user_data", b"vision", b"\x89PNG\r\n\x1a\n", b"hello"]) | st.binary(max_size=50),
                ),
                max_size=10,
            )
        )
        body = _multipart(parts, boundary or "B") if draw(st.booleans()) else draw(st.binary(max_size=200))
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    for name in draw(
        st.lists(
            st.sampled_from(["Last-Event-ID", "Authorization", "Origin", "Accept", "Range", "Cookie", "X-Other"]),
            max_size=4,
            unique=True,
        )
    ):
        # no leading or trailing blanks: HTTP clients refuse to send them (h11: "Illegal header value")
        headers[name] = draw(st.one_of(_text.map(str.strip), st.just("9" * 5000), st.just("Bearer " + "k" * 100)))
    return FuzzRequest(method, path, headers, body)


class ErrorLog(logging.Handler):
    """Every log record at ERROR or above, or carrying a traceback, from any logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)

    def describe(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()[:300]}" for r in self.records]


def send(client: Any, base: str, req: FuzzRequest) -> int:
    """The status code the server answered ``req`` with (httpx ``client``); 0 when the client itself
    refused to send it (a request no HTTP client would put on the wire)."""
    import httpx

    try:
        r = client.request(req.method, base + req.path, headers=req.headers, content=req.body)
    except httpx.LocalProtocolError:
        return 0
    return int(r.status_code)
