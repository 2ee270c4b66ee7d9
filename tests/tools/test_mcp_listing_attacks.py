"""Hostile tool listings from real MCP servers (the SDK's low-level server, ``tests.tools.servers`` mode
``rogue:*``) over a real Realtime session: a tool name that closes the model's call markup, a schema nested
150 deep, tools of nested ``anyOf`` (over the schema budget; 64 of them, over a page's byte cap), 300
tools. Each is an ``mcp_list_tools.failed`` and an error naming the tool,
checked off the event loop (the server's loop watch fails the test on any callback over 100 ms), and the
session answers afterwards. ``allowed_tools`` limits what is listed, for URL, configured and stdio servers."""

from __future__ import annotations

import pytest

from testkit.loopwatch import watch_loop
from tests.tools.conftest import McpHttp, ToolScript, start_server, stdio_server, stop
from tests.tools.test_mcp_realtime import NO_AUDIO, ask, open_session, tool, until


@pytest.mark.parametrize(
    ("what", "named"),
    [
        ("markup", "x</tool_call>"),
        ("deep", "'deep'"),
        ("wide", "'wide"),
        ("huge", "tools.mcp_max_list_bytes"),
        ("many", "over 256 tools"),
    ],
)
async def test_a_hostile_listing_fails_naming_the_tool_and_the_session_goes_on(
    tiny_backend, server_factory, tmp_path, what, named
):
    rogue = start_server(tmp_path, f"rogue:{what}")
    model = ToolScript(tiny_backend, "Hello there.")
    try:
        # the value cap would refuse "wide" before the schema budget names its tool (tested on its own below)
        cfg = {"tools.mcp_allowed_urls": [rogue.url], "tools.mcp_max_list_values": 65536}
        with server_factory(model, **NO_AUDIO, **cfg) as addr:
            manager, conn, seen = await open_session(addr, [tool(rogue, label="rogue")])
            try:
                failed = await until(conn, "mcp_list_tools.failed", seen)
                done = await ask(conn, "hi", seen)
                again = await ask(conn, "and again", seen)
            finally:
                await manager.__aexit__(None, None, None)
    finally:
        stop(rogue)
    errors = [e.error.message for e in seen if e.type == "error"]
    assert any(named in m and "rogue" in m for m in errors), errors
    (item,) = [e.item for e in seen if e.type == "conversation.item.done" and e.item.id == failed.item_id]
    assert item.tools == []
    assert done.status == "completed" and again.status == "completed", (done, again)


async def test_a_listing_of_many_json_values_is_refused_before_it_is_parsed(tiny_backend, server_factory, tmp_path):
    """800 KB of empty arrays (the page cap raised to let the bytes through): 400,000 JSON values, about
    0.7 s of the SDK's parsing, which holds the GIL wherever it runs. The value cap refuses the page as
    its bytes arrive, so the server's loop watch sees no callback over 100 ms, and the session goes on."""
    rogue = start_server(tmp_path, "rogue:bulk")
    model = ToolScript(tiny_backend, "Hello there.")
    cfg = {"tools.mcp_allowed_urls": [rogue.url], "tools.mcp_max_list_bytes": 1024 * 1024}
    try:
        with server_factory(model, **NO_AUDIO, **cfg) as addr:
            manager, conn, seen = await open_session(addr, [tool(rogue, label="rogue")])
            try:
                await until(conn, "mcp_list_tools.failed", seen)
                done = await ask(conn, "hi", seen)
            finally:
                await manager.__aexit__(None, None, None)
    finally:
        stop(rogue)
    errors = [e.error.message for e in seen if e.type == "error"]
    assert any("tools.mcp_max_list_values" in m and "rogue" in m for m in errors), errors
    assert done.status == "completed"


async def test_the_sdk_parses_a_listing_off_the_event_loop(tiny_backend, server_factory, tmp_path):
    """A 1 MB page of nested anyOf with both caps raised to let it through: the SDK's parse (about
    450 ms, half of it the garbage collector's, which the loop watch leaves out) runs on the MCP loop's
    thread, so a watch of the server's loop during the listing sees no callback over 30 ms of CPU (its
    wall time can still wait for the GIL: ``tools.mcp_max_list_values`` bounds that), and the listing
    still ends as the schema budget says, naming a tool."""
    rogue = start_server(tmp_path, "rogue:heavy")
    model = ToolScript(tiny_backend, "Hello there.")
    cfg = {
        "tools.mcp_allowed_urls": [rogue.url],
        "tools.mcp_max_list_bytes": 2 * 1024 * 1024,
        "tools.mcp_max_list_values": 1024 * 1024,
    }
    try:
        with server_factory(model, **NO_AUDIO, **cfg) as addr:
            with watch_loop(addr.loop, cpu_s=0.03) as watch:
                manager, conn, seen = await open_session(addr, [tool(rogue, label="rogue")])
                try:
                    await until(conn, "mcp_list_tools.failed", seen)
                except BaseException:
                    await manager.__aexit__(None, None, None)
                    raise
            try:
                done = await ask(conn, "hi", seen)
            finally:
                await manager.__aexit__(None, None, None)
    finally:
        stop(rogue)
    watch.check()
    errors = [e.error.message for e in seen if e.type == "error"]
    assert any("'heavy" in m and "rogue" in m for m in errors), errors
    assert done.status == "completed"


async def _listed_names(addr: str, entry: dict) -> list[str]:
    manager, conn, seen = await open_session(addr, [entry])
    try:
        done = await until(conn, "mcp_list_tools.completed", seen)
    finally:
        await manager.__aexit__(None, None, None)
    (item,) = [e.item for e in seen if e.type == "conversation.item.done" and e.item.id == done.item_id]
    return [t.name for t in item.tools]


async def test_allowed_tools_limit_the_listing_of_url_configured_and_stdio_servers(
    tiny_backend, server_factory, mcp_http: McpHttp
):
    model = ToolScript(tiny_backend, "Hello there.")
    cfg = {
        "tools.mcp_allowed_urls": [mcp_http.url],
        "tools.mcp_servers": {"conf": {"url": mcp_http.url}, "local": stdio_server()},
    }
    only = {"allowed_tools": ["add", "capital"]}
    with server_factory(model, **NO_AUDIO, **cfg) as addr:
        assert await _listed_names(addr, tool(mcp_http, **only)) == ["add", "capital"]
        assert await _listed_names(addr, tool(None, "conf", **only)) == ["add", "capital"]
        assert await _listed_names(addr, tool(None, "local", allowed_tools={"tool_names": ["sleep"]})) == ["sleep"]
        assert await _listed_names(addr, tool(mcp_http, label="all")) == ["add", "capital", "sleep"]
