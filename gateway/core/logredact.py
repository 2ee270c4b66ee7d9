"""Secrets out of every log line: query strings, URL paths and MCP session ids are redacted when a record is made.

uvicorn logs each WebSocket handshake as ``"WebSocket /v1/realtime?resume_token=…" [accepted]``
at INFO, and exception messages (an httpx error, a URL in a ValueError) can carry a query too. A
``logging.Filter`` on one logger misses records that propagate from its children, and one on a
handler misses handlers added later (a user's dictConfig, pytest's capture); the record factory
sees every record of the process once, after the level check, so dropped DEBUG lines cost nothing.

URL paths go too: the HTTP client logs every MCP request's URL at INFO (``HTTP Request: POST
https://host/…``), and real MCP URLs often carry a token in the path (``/mcp/<key>/sse``); the scheme and
host stay, which is what reading a log needs. The MCP SDK logs each server's session id at INFO.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "[redacted]"
# a query string: '?' then anything up to whitespace or a quote; "what?" followed by a space is untouched
_QUERY = re.compile(r"\?[^\s\"'<>]+")
# key=value pairs that name a secret, wherever they appear (a form body, a header echoed in an error)
_SECRET_PAIR = re.compile(r"(?i)\b(api_key|apikey|access_token|resume_token|token|key|password|secret)=[^&\s\"'<>]+")
# a URL's path (the host kept): from the first '/' after the host up to whitespace, a quote or a query
_URL_PATH = re.compile(r"\b((?:https?|wss?)://[^/\s\"'<>?#]+)/[^\s\"'<>?#]+")
_SESSION_ID = re.compile(r"(?i)\b(session id:\s*)[^\s\"'<>]+")
_FORMATTER = logging.Formatter()


def redact(text: str) -> str:
    """``text`` with every query string, URL path, ``secret=value`` pair and session id replaced by a marker."""
    if "?" not in text and "=" not in text and "://" not in text and "ession" not in text:
        return text  # the common case: a few scans, no regex
    text = _URL_PATH.sub(lambda m: f"{m.group(1)}/{REDACTED}", text)
    text = _QUERY.sub("?" + REDACTED, text)
    text = _SESSION_ID.sub(lambda m: m.group(1) + REDACTED, text)
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}={REDACTED}", text)


def _redacted_factory(inner: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = inner(*args, **kwargs)
        if isinstance(record.args, tuple) and record.name == "uvicorn.access":
            # its formatter unpacks the args (client, method, path, version, status): keep their shape
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        else:
            try:
                message = record.getMessage()
            except Exception:  # a broken format string stays the handler's problem, as without us
                return record
            clean = redact(message)
            if clean != message:  # only a record that held a secret loses its args (pre-formatted)
                record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(_FORMATTER.formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    make._stream_omni_redacts = True  # type: ignore[attr-defined]
    return make


def install_log_redaction() -> None:
    """Make every log record of this process redacted (idempotent; chains any factory already set)."""
    current = logging.getLogRecordFactory()
    if not getattr(current, "_stream_omni_redacts", False):
        logging.setLogRecordFactory(_redacted_factory(current))
