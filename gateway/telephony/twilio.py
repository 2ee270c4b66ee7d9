"""Twilio's bidirectional Media Streams protocol (``<Connect><Stream>``; Telnyx speaks the same): frames both ways
and the request signature. Pure.

Inbound: ``connected``, ``start``, ``media`` (base64 µ-law 8 kHz), ``mark`` (a mark we sent has played),
``dtmf``, ``stop``. Outbound: ``media``, ``mark``, ``clear`` (drop what the provider has buffered; it
then echoes the marks that were still pending, which did *not* play).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

MAX_FRAME_BYTES = 64 * 1024  # a media frame is ~300 bytes; a start with custom parameters a few KiB


@dataclass(frozen=True)
class Connected:
    """The provider's first message."""


@dataclass(frozen=True)
class Start:
    stream_sid: str  # every outbound message names it
    call_sid: str  # the provider's call id
    encoding: str  # "audio/x-mulaw" (the only one Twilio sends)
    rate: int  # 8000
    custom: dict[str, str] = field(default_factory=dict)  # <Parameter> values of the TwiML


@dataclass(frozen=True)
class Media:
    payload: bytes  # µ-law, 8 kHz, usually 20 ms (160 bytes)
    track: str  # "inbound" (the caller)


@dataclass(frozen=True)
class Mark:
    name: str  # the mark we sent, now played (or flushed by a clear)


@dataclass(frozen=True)
class Dtmf:
    digit: str  # 0-9, *, #, A-D


@dataclass(frozen=True)
class Stop:
    """The stream ended (the call hung up, or the TwiML moved on)."""


@dataclass(frozen=True)
class FrameError:
    message: str  # names the field


Inbound = Connected | Start | Media | Mark | Dtmf | Stop
DIGITS = frozenset("0123456789*#ABCD")


def _str(obj: dict[str, Any], key: str, where: str) -> str | FrameError:
    v = obj.get(key)
    return v if isinstance(v, str) else FrameError(f"{where}.{key} must be a string")


def parse(raw: str | bytes) -> Inbound | FrameError | None:
    """One provider message; None for an event this gateway does not use (forward compatible)."""
    if len(raw) > MAX_FRAME_BYTES:
        return FrameError(f"message larger than {MAX_FRAME_BYTES} bytes")
    try:
        msg = json.loads(raw)
    except ValueError:
        return FrameError("not JSON")
    if not isinstance(msg, dict) or not isinstance(msg.get("event"), str):
        return FrameError("event must be a string")
    kind = msg["event"]
    if kind == "connected":
        return Connected()
    if kind == "stop":
        return Stop()
    body = msg.get(kind)
    if not isinstance(body, dict):
        return FrameError(f"{kind} must be an object") if kind in ("start", "media", "mark", "dtmf") else None
    if kind == "media":
        payload = _str(body, "payload", "media")
        if isinstance(payload, FrameError):
            return payload
        try:
            audio = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return FrameError("media.payload is not base64")
        return Media(audio, str(body.get("track", "inbound")))
    if kind == "mark":
        name = _str(body, "name", "mark")
        return name if isinstance(name, FrameError) else Mark(name)
    if kind == "dtmf":
        digit = _str(body, "digit", "dtmf")
        if isinstance(digit, FrameError):
            return digit
        return Dtmf(digit) if digit in DIGITS else FrameError("dtmf.digit must be one of 0-9 * # A-D")
    if kind == "start":
        fmt_v, custom_v = body.get("mediaFormat"), body.get("customParameters")
        fmt: dict[str, Any] = fmt_v if isinstance(fmt_v, dict) else {}
        custom: dict[str, Any] = custom_v if isinstance(custom_v, dict) else {}
        sid = _str(body, "streamSid", "start")
        if isinstance(sid, FrameError):
            sid = _str(msg, "streamSid", "start")  # Twilio puts it at the top level as well
            if isinstance(sid, FrameError):
                return sid
        return Start(
            sid,
            str(body.get("callSid", "")),
            str(fmt.get("encoding", "audio/x-mulaw")),
            int(fmt.get("sampleRate", 8000)) if str(fmt.get("sampleRate", "8000")).isdigit() else 8000,
            {str(k): str(v) for k, v in custom.items()},
        )
    return None


def media(stream_sid: str, ulaw: bytes) -> str:
    payload = base64.b64encode(ulaw).decode()
    return json.dumps({"event": "media", "streamSid": stream_sid, "media": {"payload": payload}})


def mark(stream_sid: str, name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear(stream_sid: str) -> str:
    return json.dumps({"event": "clear", "streamSid": stream_sid})


def signature(auth_token: str, url: str, params: dict[str, str] | None = None) -> str:
    """``X-Twilio-Signature``: base64 HMAC-SHA1 of the full URL followed by each POST parameter's name
    and value, sorted by name (a WebSocket upgrade has none)."""
    data = url + "".join(k + v for k, v in sorted((params or {}).items()))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def valid(auth_token: str, url: str, given: str, params: dict[str, str] | None = None) -> bool:
    return hmac.compare_digest(signature(auth_token, url, params), given)
