"""With no API keys (loopback only) a web page cannot drive the API: JSON bodies only,
and a Host that is not this server's (DNS rebinding) is refused."""

from __future__ import annotations

import httpx
import pytest

from gateway.core.config import ServerConfig
from gateway.core.security import host_allowed

from .conftest import raw_exchange, upgrade_request

BODY = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
LOCAL = {"audio.enabled": False}


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_a_page_can_post_without_preflight_is_415(fake, server_factory, ctype):
    with server_factory(fake, **LOCAL) as addr:
        headers = {"Content-Type": ctype} if ctype else {}
        r = httpx.post(f"http://{addr}/v1/chat/completions", content=BODY, headers=headers, timeout=5)
        assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
        ok = httpx.post(
            f"http://{addr}/v1/chat/completions",
            content=BODY,
            headers={"Content-Type": "application/json; charset=utf-8"},
            timeout=5,
        )
        assert ok.status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models", "/"])
def test_a_rebound_host_is_refused_403(fake, server_factory, path):
    with server_factory(fake, **LOCAL) as addr:
        port = addr.split(":")[1]
        for host in (f"attacker.example:{port}", "attacker.example", "localhost.attacker.example"):
            r = httpx.request(
                "POST" if "chat" in path else "GET",
                f"http://{addr}{path}",
                content=BODY,
                headers={"Host": host, "Content-Type": "application/json"},
                timeout=5,
            )
            assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed", host
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "127.0.0.1"):
            assert httpx.get(f"http://{addr}/v1/models", headers={"Host": host}, timeout=5).status_code == 200


def test_a_rebound_host_cannot_open_a_websocket(fake, server_factory):
    with server_factory(fake, **LOCAL) as addr:
        assert raw_exchange(addr, upgrade_request("attacker.example")).startswith(b"HTTP/1.1 403")
        assert raw_exchange(addr, upgrade_request(addr)).startswith(b"HTTP/1.1 101")


def test_configured_names_and_keys_mode(fake, server_factory):
    with server_factory(fake, **LOCAL, **{"server.allowed_hosts": ["box.lan"]}) as addr:
        assert httpx.get(f"http://{addr}/v1/models", headers={"Host": "box.lan:1"}, timeout=5).status_code == 200
    # with API keys a page has no key to send: Host is the deployment's business (a proxy's name)
    with server_factory(fake, **LOCAL, **{"server.api_keys": ["k"]}) as addr:
        r = httpx.get(f"http://{addr}/v1/models", headers={"Host": "api.example.com"}, timeout=5)
        assert r.status_code == 200


def test_host_allowed_rules():
    server = ServerConfig(host="127.0.0.1", allowed_hosts=("box.lan",))
    assert host_allowed("[::1]:8000", server) and host_allowed("10.0.0.5", server)
    assert host_allowed("LOCALHOST:8000", server) and host_allowed("box.lan", server)
    assert not host_allowed("", server) and not host_allowed("evil.com", server)
    assert not host_allowed("[::1", server) and not host_allowed("box.lan.evil.com", server)
