"""An ``ek_`` key's MCP secrets are sealed in its grant: the store (memory, or Redis with replicas) holds
ciphertext only the ``ek_`` value opens (pure, ``gateway.core.ephemeral_keys``), and a redeemed key's session
still sends them to its MCP server (real uvicorn, a real MCP server that logs whether a request carried them)."""

from __future__ import annotations

import httpx

from gateway.core.ephemeral_keys import SEALED, MemoryVault, mint, unseal
from testkit.fake_backend import FakeBackend
from tests.tools.conftest import McpHttp
from tests.wsclient import RealtimeClient

TOKEN = "s3cret-mcp-token"  # tests.tools.servers marks requests that carry it
HEADER = "s3cret-header-value"


def mcp_entry(url: str) -> dict[str, object]:
    return {
        "type": "mcp",
        "server_label": "calc",
        "server_url": url,
        "require_approval": "never",
        "authorization": TOKEN,
        "headers": {"X-Api-Key": HEADER},
    }


def test_the_stored_grant_holds_no_mcp_secret_and_only_the_ek_value_opens_them():
    session = {"type": "realtime", "tools": [mcp_entry("http://h.example/mcp"), {"type": "function", "name": "f"}]}
    value, grant = mint("parent", session, 60, 0.0)
    vault = MemoryVault(lambda: 1.0)
    assert vault.put_now(value, grant, 10)
    stored = grant.to_json() + repr(vault._waiting)  # what memory and Redis hold
    assert TOKEN not in stored and HEADER not in stored and SEALED in stored
    taken = vault.take_now(value)
    assert not isinstance(taken, str)
    opened = unseal(taken.session, value)["tools"]
    assert opened[0]["authorization"] == TOKEN and opened[0]["headers"] == {"X-Api-Key": HEADER}
    assert opened[1] == {"type": "function", "name": "f"}
    other = unseal(taken.session, "ek_" + "x" * 43)["tools"][0]  # another value: nothing opens
    assert "authorization" not in other and "headers" not in other and SEALED not in other


async def test_a_redeemed_key_sends_its_sealed_mcp_secret(server_factory, mcp_http: McpHttp):
    cfg = {"audio.enabled": False, "server.api_keys": ["sk-parent"], "tools.mcp_allowed_urls": [mcp_http.url]}
    with server_factory(FakeBackend(answer_tokens=6, step_s=0.001), **cfg) as addr:
        async with httpx.AsyncClient() as h:
            minted = await h.post(
                f"http://{addr}/v1/realtime/client_secrets",
                json={"session": {"type": "realtime", "tools": [mcp_entry(mcp_http.url)]}},
                headers={"Authorization": "Bearer sk-parent"},
                timeout=30,
            )
        assert minted.status_code == 200, minted.text
        assert TOKEN not in minted.text and HEADER not in minted.text
        c = await RealtimeClient.connect(
            addr, "", additional_headers={"Authorization": f"Bearer {minted.json()['value']}"}
        )
        try:
            await c.until("session.created", 30)
            await c.send({"type": "response.create", "response": {"max_output_tokens": 4}})  # waits for the listing
            await c.until("mcp_list_tools.completed", 60)
        finally:
            await c.ws.close()
    posts = [line for line in mcp_http.requests() if line.startswith("POST")]
    assert posts and all(line.endswith(" authorized") for line in posts), posts
