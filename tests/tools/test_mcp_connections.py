"""MCP connections are bounded over a session's life (real uvicorn, a real MCP server, the openai SDK): a
``session.update`` that drops server labels closes their connections (the server sees each session
ended), a session and a key hold at most ``tools.mcp_max_connections_per_session`` / ``_per_key``
(past them a listing fails naming the key), and ``/metrics`` counts the open ones."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx

from tests.tools.conftest import McpHttp, ToolScript
from tests.tools.test_mcp_realtime import NO_AUDIO, open_session, recv, tool

WAIT_S = 60


def gauge(addr: str) -> float:
    text = httpx.get(f"http://{addr}/metrics", timeout=30).text
    m = re.search(r"^stream_omni:mcp_connections (\S+)$", text, re.M)
    assert m is not None, "no stream_omni:mcp_connections gauge"
    return float(m.group(1))


async def gauge_becomes(addr: str, value: float) -> float:
    """The gauge, polled until it reads ``value`` or ``WAIT_S`` pass (closing is asynchronous)."""
    deadline = time.monotonic() + WAIT_S
    for _ in range(10 * WAIT_S):
        now = await asyncio.to_thread(gauge, addr)
        if now == value or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    return now


async def listings(conn: Any, n: int) -> tuple[int, list[str]]:
    """Wait for ``n`` listings to end: how many completed, and the error messages seen meanwhile."""
    ok, errors, ended = 0, [], 0
    while ended < n:
        ev = await recv(conn)
        if ev.type == "mcp_list_tools.completed":
            ok, ended = ok + 1, ended + 1
        elif ev.type == "mcp_list_tools.failed":
            ended += 1
        elif ev.type == "error":
            errors.append(ev.error.message)
    return ok, errors


def labelled(server: McpHttp, prefix: str, n: int) -> list[dict[str, Any]]:
    return [tool(server, label=f"{prefix}{i}") for i in range(n)]


async def test_dropped_labels_are_closed_and_metrics_count_the_open_ones(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, "Hello there.")
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, _ = await open_session(addr, labelled(mcp_http, "a", 6))
        try:
            assert (await listings(conn, 6))[0] == 6
            assert await gauge_becomes(addr, 6) == 6
            deletes = sum(line.startswith("DELETE") for line in mcp_http.requests())
            await conn.session.update(session={"type": "realtime", "tools": labelled(mcp_http, "b", 6)})
            assert (await listings(conn, 6))[0] == 6
            assert await gauge_becomes(addr, 6) == 6  # the six "a" connections closed, not kept beside "b"
            await conn.session.update(session={"type": "realtime", "tools": []})
            assert await gauge_becomes(addr, 0) == 0
        finally:
            await manager.__aexit__(None, None, None)
    ended = sum(line.startswith("DELETE") for line in mcp_http.requests()) - deletes
    assert ended >= 12  # the server saw each dropped connection end its MCP session


async def test_a_session_and_a_key_hold_at_most_their_caps(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, "Hello there.")
    cfg = {
        "tools.mcp_allowed_urls": [mcp_http.url],
        "tools.mcp_max_connections_per_session": 4,
        "tools.mcp_max_connections_per_key": 6,
    }
    with server_factory(model, **NO_AUDIO, **cfg) as addr:  # no api_keys: every session is one tenant
        first, conn1, _ = await open_session(addr, labelled(mcp_http, "a", 6))
        second = None
        try:
            ok, errors = await listings(conn1, 6)
            assert ok == 4 and sum("tools.mcp_max_connections_per_session" in e for e in errors) == 2, errors
            second, conn2, _ = await open_session(addr, labelled(mcp_http, "b", 4))
            ok, errors = await listings(conn2, 4)
            assert ok == 2 and sum("tools.mcp_max_connections_per_key" in e for e in errors) == 2, errors
            assert await gauge_becomes(addr, 6) == 6
        finally:
            await first.__aexit__(None, None, None)
            if second is not None:
                await second.__aexit__(None, None, None)
        assert await gauge_becomes(addr, 0) == 0  # a closed session gives its seats back


async def test_twelve_updates_of_64_new_labels_stall_no_callback(tiny_backend, server_factory, mcp_http):
    """The attack as it was measured: the server's loop watch fails this test on any callback over 100 ms."""
    model = ToolScript(tiny_backend, "Hello there.")
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, _ = await open_session(addr, labelled(mcp_http, "a0_", 64))
        try:
            for i in range(1, 12):
                await conn.session.update(session={"type": "realtime", "tools": labelled(mcp_http, f"a{i}_", 64)})
            ok, errors = await listings(conn, 12 * 64)
            assert ok <= 12 * 16 and len(errors) >= 12 * 48
            assert await gauge_becomes(addr, 16) <= 16
        finally:
            await manager.__aexit__(None, None, None)
