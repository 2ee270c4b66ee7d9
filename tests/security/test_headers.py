"""Malformed headers are the client's error (4xx), never a 500 with a traceback in the log."""

from __future__ import annotations

import logging

import httpx
import pytest
import websockets

from .conftest import TWO_KEYS


@pytest.mark.parametrize("origin", ["http://127.0.0.1:99999", "http://127.0.0.1:port", "http://[::1", "http://"])
async def test_malformed_origin_is_403(fake, server_factory, caplog, origin):
    caplog.set_level(logging.INFO)
    with server_factory(fake, **TWO_KEYS) as addr:
        with pytest.raises(websockets.InvalidStatus) as info:
            await websockets.connect(f"ws://{addr}/v1/realtime", origin=origin, open_timeout=5)
        assert info.value.response.status_code == 403
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("last", ["c1:²", "c1:١", "c1:-1", "c1:", "c1:1e3", "c1:٣٤"])
def test_malformed_last_event_id_is_400(fake, server_factory, caplog, last):
    caplog.set_level(logging.INFO)
    with server_factory(fake, **TWO_KEYS) as addr:
        r = httpx.get(
            f"http://{addr}/v1/chat/completions/c1/stream",
            headers={"Authorization": "Bearer key-bob", "Last-Event-ID": last.encode()},
            timeout=5,
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "Last-Event-ID"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
