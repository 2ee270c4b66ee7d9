"""What a client can make the gateway send to an MCP server, and what its logs keep of it: client headers
cannot set Host or the framing (refused naming the field, the server never contacted), the allow-list's path
prefix holds against percent-encoded dot segments, and request URLs and MCP session ids are redacted in logs."""

from __future__ import annotations

import logging

import pytest

from gateway.tools import policy
from tests.tools.conftest import ToolScript
from tests.tools.test_mcp_realtime import NO_AUDIO, open_session, tool, until
from tests.tools.test_mcp_session import make, mcp_tool, send


@pytest.mark.parametrize(
    "name", ["Host", "host", "Content-Length", "Transfer-Encoding", "Connection", "Mcp-Session-Id", "Bad Name"]
)
def test_a_header_the_gateway_sets_itself_is_refused_naming_the_field(name):
    s, _ = make()
    out = send(s, {"type": "session.update", "session": {"tools": [mcp_tool(headers={name: "x"})]}})
    assert not out.actions  # nothing listed: no connection is made
    (err,) = [e["error"] for e in out.events if e["type"] == "error"]
    assert err["param"] == "session.tools[0].headers" and repr(name)[:10] in err["message"]


def test_the_headers_mcp_needs_pass():
    policy.check_headers({"Authorization": "Bearer t", "X-Api-Key": "k", "Notion-Version": "2022-06-28"})
    with pytest.raises(policy.PolicyError, match="control character"):
        policy.check_headers({"X-Api-Key": "k\r\nHost: evil"})


@pytest.mark.parametrize(
    "url",
    [
        "http://h.example/mcp/%2e%2e/admin",
        "http://h.example/mcp/%2E%2e/admin",
        "http://h.example/mcp/.%2e/admin",
        "http://h.example/mcp/%2e/../admin",
        "http://h.example/mcp/../admin",
        "http://h.example/mcp/a%2f..%2f..%2fadmin",
    ],
)
def test_encoded_or_literal_dot_segments_cannot_climb_out_of_the_allowed_prefix(url):
    with pytest.raises(policy.PolicyError):
        policy.check_url(url, ("http://h.example/mcp",))


def test_dot_segments_inside_the_prefix_are_resolved_before_matching():
    assert policy.split("http://h.example/mcp/./tools/../x").path == "/mcp/x"
    assert policy.check_url("http://h.example/mcp/./x", ("http://h.example/mcp",)).path == "/mcp"


async def test_a_host_header_reaches_no_server(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, "Hello there.")
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, seen = await open_session(addr, [tool(mcp_http, headers={"Host": "admin.internal"})])
        try:
            err = await until(conn, "error", seen)
        finally:
            await manager.__aexit__(None, None, None)
    assert err.error.param == "session.tools[0].headers"
    assert mcp_http.requests() == []


async def test_mcp_request_urls_and_session_ids_are_redacted_in_logs(tiny_backend, server_factory, mcp_http, caplog):
    caplog.set_level(logging.INFO, logger="httpx2")
    caplog.set_level(logging.INFO, logger="mcp")
    model = ToolScript(tiny_backend, "Hello there.")
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, seen = await open_session(addr, [tool(mcp_http)])
        try:
            await until(conn, "mcp_list_tools.completed", seen)
        finally:
            await manager.__aexit__(None, None, None)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(("httpx2", "mcp"))]
    host = mcp_http.url.rsplit("/", 1)[0]  # http://127.0.0.1:PORT: the path /mcp stands for a token
    assert any(f"{host}/[redacted]" in line for line in lines), lines
    assert not [line for line in lines if mcp_http.url in line]
    assert not [line for line in lines if "session ID:" in line and "[redacted]" not in line]
