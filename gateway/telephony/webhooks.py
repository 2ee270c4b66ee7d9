"""Standard Webhooks signing and checking, and the ``realtime.call.incoming`` event OpenAI sends. Pure.

The scheme (standardwebhooks.com, the one OpenAI's SDK verifies with ``client.webhooks.unwrap``):
``webhook-signature: v1,<base64 HMAC-SHA256(secret, "<webhook-id>.<webhook-timestamp>.<body>")>``.
A ``whsec_`` secret is base64 after its prefix; any other secret is used as its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping

TOLERANCE_S = 300  # a signature older or newer than this is refused (replays)


def secret_bytes(secret: str) -> bytes:
    return base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of ``body``."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, webhook_id, timestamp, body),
        "content-type": "application/json",
    }


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: int, tolerance: int = TOLERANCE_S) -> bool:
    """Whether ``body`` carries a valid signature of ``secret``, timestamped within ``tolerance`` of ``now``."""
    wid, ts, sigs = headers.get("webhook-id"), headers.get("webhook-timestamp"), headers.get("webhook-signature")
    if not wid or not ts or not sigs or not ts.isascii() or not ts.isdigit():
        return False
    if abs(now - int(ts)) > tolerance:
        return False
    expected = signature(secret, wid, int(ts), body)
    return any(hmac.compare_digest(expected, s) for s in sigs.split())


def call_incoming(event_id: str, call_id: str, sip_headers: list[tuple[str, str]], created_at: int) -> bytes:
    """The ``realtime.call.incoming`` webhook body (OpenAI's shape: ``data.call_id``, ``data.sip_headers``)."""
    headers = [{"name": n, "value": v} for n, v in sip_headers]
    event = {
        "object": "event",
        "id": event_id,
        "type": "realtime.call.incoming",
        "created_at": created_at,
        "data": {"call_id": call_id, "sip_headers": headers},
    }
    return json.dumps(event, separators=(",", ":")).encode()
