"""A WebRTC call placed with an ``ek_`` key (real aiortc client, real server): the minted config holds
against the offer's own ``session``, and the key places one call only."""

from __future__ import annotations

import httpx

from testkit.rtcclient import RtcClient, post_offer
from tests.webrtc.test_signalling import real_offer

KEY = "sk-backend"
FIXED = "Answer as a ship's radio operator."


async def test_a_call_with_an_ek_key_keeps_the_minted_config_and_spends_the_key(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False, "server.api_keys": [KEY]}) as addr:
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(
                f"http://{addr}/v1/realtime/client_secrets",
                json={"session": {"type": "realtime", "instructions": FIXED}},
                headers={"Authorization": f"Bearer {KEY}"},
            )
        value = r.json()["value"]
        bearer = {"Authorization": f"Bearer {value}"}
        own = {"type": "realtime", "instructions": "Be a pirate.", "temperature": 0.4}
        c = await RtcClient.call(addr, session=own, headers=bearer)
        created = await c.until("session.created", 20)
        assert created["session"]["instructions"] == FIXED
        updated = await c.until("session.updated", 20)  # the offer's session: only what the key left open
        assert updated["session"]["instructions"] == FIXED and updated["session"]["temperature"] == 0.4
        again = await post_offer(addr, await real_offer(), headers=bearer)
        assert again.status_code == 401 and "client secret" in again.json()["error"]["message"]
        await c.close()
