"""The SSRF guard's HTTP transport against real loopback servers: every hop of a redirect is checked
before it is sent, names are resolved and checked, answers are capped."""

from __future__ import annotations

import httpx2
import pytest

from gateway.tools.ssrf import AddressRefused, Guard, client
from tests.tools.conftest import start_server, stop


async def test_each_redirect_hop_is_checked_before_it_is_sent(mcp_http, tmp_path):
    hop = start_server(tmp_path, f"redirect:{mcp_http.url}")
    try:
        guard = Guard((hop.url,), 1 << 20)
        before = len(mcp_http.requests())
        async with client(guard, {}, 5.0) as http:
            with pytest.raises(AddressRefused):
                await http.get(hop.url)
        assert "mcp_allowed_urls" in (guard.refusal or "") and guard.refused.is_set()
        assert len(hop.requests()) == 1 and len(mcp_http.requests()) == before  # the target saw nothing

        both = Guard((hop.url, mcp_http.url), 1 << 20)  # with the target allowed too, the hop is followed
        async with client(both, {}, 5.0) as http:
            r = await http.get(hop.url, headers={"Accept": "text/event-stream"})
        assert len(mcp_http.requests()) == before + 1 and r.status_code != 307
    finally:
        stop(hop)


async def test_a_name_resolving_to_loopback_is_refused_unsent(mcp_http):
    port = mcp_http.url.split(":")[2].split("/")[0]
    url = f"http://localhost:{port}/mcp"
    before = len(mcp_http.requests())
    async with client(Guard((url,), 1 << 20), {}, 5.0) as http:
        with pytest.raises(AddressRefused, match="internal address"):
            await http.get(url)
    assert len(mcp_http.requests()) == before


async def test_answers_over_the_cap_fail(mcp_http):
    guard = Guard(None, 64)  # a configured server: no address check, the cap still holds
    async with client(guard, {}, 5.0) as http:
        with pytest.raises(httpx2.TransportError):
            await http.post(
                mcp_http.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Accept": "application/json, text/event-stream"},
            )
    assert guard.refusal is not None and "over 64 bytes" in guard.refusal
