"""``GET /v1/realtime/calls``: whether the server takes calls and with which ICE servers (how the browser
client picks WebRTC or the WebSocket), behind the same origin and key rules as an offer."""

from __future__ import annotations

import httpx

TURN = {"urls": ["turn:turn.example.net:3478?transport=udp"], "username": "gw", "credential": "secret"}
STUN = {"urls": "stun:stun.example.net:3478"}


def test_the_server_says_it_takes_calls_and_gives_its_ice_servers(tiny_backend, server_factory):
    cfg = {"audio.enabled": False, "server.api_keys": ["k1"], "webrtc.ice_servers": [STUN, TURN]}
    with server_factory(tiny_backend, **cfg) as addr:
        url = f"http://{addr}/v1/realtime/calls"
        ok = httpx.get(url, headers={"Authorization": "Bearer k1"}, timeout=10)
        assert ok.status_code == 200
        assert ok.json() == {"object": "realtime.calls", "webrtc": True, "ice_servers": [STUN, TURN]}
        # a TURN credential is not for everyone: no key, a wrong key, a foreign page
        assert httpx.get(url, timeout=10).status_code == 401
        wrong = httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        foreign = httpx.get(url, headers={"Authorization": "Bearer k1", "Origin": "http://evil.example"}, timeout=10)
        assert foreign.status_code == 403


def test_a_server_without_webrtc_says_so_with_404(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False, "webrtc.enabled": False}) as addr:
        r = httpx.get(f"http://{addr}/v1/realtime/calls", timeout=10)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert "webrtc.enabled" in r.json()["error"]["message"]
