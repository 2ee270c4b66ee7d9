"""Resume tokens and ``?api_key=`` never reach a log line, uvicorn's own included."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator

import pytest
import websockets

from gateway.core.logredact import redact

from .conftest import TWO_KEYS

SECRETS = ("s3cret-api-key-value", "s3cret-resume-token")


def test_redact_hides_query_strings_and_secret_pairs():
    assert redact('"WebSocket /v1/realtime?resume_token=abc&last_seq=3" [accepted]') == (
        '"WebSocket /v1/realtime?[redacted]" [accepted]'
    )
    assert redact("form api_key=xyz sent") == "form api_key=[redacted] sent"
    assert redact("what? nothing here") == "what? nothing here"


@contextlib.contextmanager
def hearing_uvicorn(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """caplog hears uvicorn too: uvicorn logs to the "uvicorn" logger's own handler (set by its
    dictConfig when the server is made, hence after that), which does not propagate to the root."""
    caplog.set_level(logging.INFO, logger="uvicorn.error")  # each handshake at INFO (the test server: WARNING)
    logging.getLogger("uvicorn").addHandler(caplog.handler)
    try:
        yield
    finally:
        logging.getLogger("uvicorn").removeHandler(caplog.handler)


async def test_uvicorn_handshake_lines_carry_no_query(fake, server_factory, caplog):
    with server_factory(fake, **TWO_KEYS) as addr, hearing_uvicorn(caplog):
        url = f"ws://{addr}/v1/realtime"
        accepted = await websockets.connect(
            f"{url}?api_key={SECRETS[0]}&resume_token={SECRETS[1]}&last_seq=0",
            additional_headers={"Authorization": "Bearer key-bob"},
            open_timeout=5,
        )
        assert json.loads(await asyncio.wait_for(accepted.recv(), 5))["error"]["code"] == "resume_failed"
        with pytest.raises(websockets.InvalidStatus):  # refused before accept: uvicorn logs a 403 line
            await websockets.connect(f"{url}?api_key={SECRETS[0]}", origin="http://evil.example", open_timeout=5)
        logging.getLogger("stream_omni.test").error("failed to fetch http://x/y?token=%s", SECRETS[1])
    lines = [r.getMessage() + (r.exc_text or "") for r in caplog.records if not r.name.startswith("websockets.")]
    assert any("WebSocket /v1/realtime?[redacted]" in line for line in lines), lines
    assert not [line for line in lines for secret in SECRETS if secret in line]
