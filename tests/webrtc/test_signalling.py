"""GA WebRTC signalling against a real server: offer → 201 answer, the events channel, refusals before media work."""

from __future__ import annotations

import asyncio
import re

import httpx
from aiortc import RTCPeerConnection

from testkit.rtcclient import PlayTrack, RtcClient, post_offer


async def real_offer(channel: bool = True, audio: bool = True) -> str:
    pc = RTCPeerConnection()
    if audio:
        pc.addTrack(PlayTrack())
    if channel:
        pc.createDataChannel("oai-events")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return str(sdp)


async def test_offer_gets_an_answer_and_the_events_channel_carries_a_text_turn(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        c = await RtcClient.call(addr)
        assert re.fullmatch(r"/v1/realtime/calls/rtc_[0-9a-f]{24}", c.location)
        created = await c.until("session.created", 20)
        assert created["seq"] == 0 and created["resume"]["token"]
        await c.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            }
        )
        await c.send({"type": "response.create", "response": {"max_output_tokens": 4}})
        done = await c.until("response.done", 60)
        assert done["response"]["status"] in ("completed", "incomplete")
        seqs = [e["seq"] for e in [created, *c.events[c.events.index(created) + 1 :]]]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # contiguous, as on the WebSocket
        await asyncio.wait_for(c.audio_arrived.wait(), 10)  # the outbound track runs (silence until speech output)
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://{addr}/metrics")).text
        assert "stream_omni:webrtc_calls_total 1.0" in metrics
        await c.close()


async def test_the_events_channel_gets_the_websockets_errors(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        c = await RtcClient.call(addr)
        await c.until("session.created", 20)
        c.channel.send("{not json")
        err = await c.until("error", 10)
        assert err["error"]["code"] == "invalid_json"
        c.channel.send("[" * 100 + "]" * 100)  # deeper than limits.max_json_depth
        err = await c.until("error", 10)
        assert "depth" in err["error"]["message"] or err["error"]["code"] in ("invalid_json", "too_deep")
        await c.send({"type": "no.such.event"})
        err = await c.until("error", 10)
        assert err["error"]["code"]
        await c.close()


async def test_bad_offers_are_refused_with_400_and_a_reason(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        good = await real_offer()
        cases = {
            "hello": "starts with 'v=0'",
            await real_offer(audio=False): "no audio",
            await real_offer(channel=False): "no data channel",
            re.sub(r"opus/48000/2", "foo/48000/2", good): "no Opus",
            good.replace("a=fingerprint", "a=fingerprin"): "fingerprint",
        }
        for sdp, why in cases.items():
            r = await post_offer(addr, sdp)
            assert r.status_code == 400, (why, r.text)
            assert r.json()["error"]["code"] == "invalid_offer"
            assert why in r.json()["error"]["message"], r.json()
        async with httpx.AsyncClient() as http:
            url = f"http://{addr}/v1/realtime/calls"
            r = await http.post(url, content=good, headers={"Content-Type": "text/plain"})
            assert r.status_code == 415
        r = await post_offer(addr, good, session={"temperature": "hot"})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("session:")


async def test_offers_are_rate_limited_before_media_work(tiny_backend, server_factory):
    limits = {"audio.enabled": False, "webrtc.offers_burst": 3, "webrtc.offers_per_s": 0.01}
    with server_factory(tiny_backend, **limits) as addr:
        codes = [(await post_offer(addr, "not sdp")).status_code for _ in range(5)]
        assert codes == [400, 400, 400, 429, 429]


async def test_calls_count_against_the_per_key_session_limit_and_hangup_frees_one(tiny_backend, server_factory):
    key = {"Authorization": "Bearer k1"}
    with server_factory(
        tiny_backend, **{"audio.enabled": False, "server.api_keys": ["k1"], "limits.max_sessions_per_key": 1}
    ) as addr:
        assert (await post_offer(addr, await real_offer())).status_code == 401
        c = await RtcClient.call(addr, headers=key)
        await c.until("session.created", 20)
        r = await post_offer(addr, await real_offer(), headers=key)
        assert r.status_code == 429 and "too many sessions" in r.json()["error"]["message"]
        async with httpx.AsyncClient() as http:
            hang = await http.post(f"http://{addr}{c.location}/hangup", headers={"Authorization": "Bearer nope"})
            assert hang.status_code == 401
            hang = await http.post(f"http://{addr}{c.location}/hangup", headers=key)
            assert hang.status_code == 200
        await c.close()
        c2 = await RtcClient.call(addr, headers=key)
        await c2.until("session.created", 20)
        await c2.close()


async def test_udp_ports_and_public_ip_shape_the_answers_candidates(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False, "webrtc.udp_ports": [41000, 41009]}) as addr:
        c = await RtcClient.call(addr)  # a whole call through ports of the range
        await c.until("session.created", 20)
        answer = c.pc.remoteDescription.sdp
        ports = [int(m) for m in re.findall(r"^a=candidate:\S+ \d+ udp \d+ \S+ (\d+) typ host", answer, re.M)]
        assert ports and all(41000 <= port <= 41009 for port in ports), answer
        await c.close()
    with server_factory(tiny_backend, **{"audio.enabled": False, "webrtc.public_ip": "203.0.113.9"}) as addr:
        r = await post_offer(addr, await real_offer())
        assert r.status_code == 201
        hosts = re.findall(r"^a=candidate:\S+ \d+ udp \d+ (\S+) \d+ typ host", r.text, re.M)
        assert hosts and all(h == "203.0.113.9" or ":" in h for h in hosts), r.text
