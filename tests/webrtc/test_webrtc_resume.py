"""A dropped WebRTC call resumes with a new offer (a spoken reply plays on); the sideband WebSocket controls a
call's session."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np

from testkit.fake_backend import FakeBackend
from testkit.rtcclient import RtcClient, post_offer
from tests.http.test_tools import ANSWER, ScriptedBackend
from tests.realtime.test_functions import RT_TOOLS
from tests.webrtc.test_signalling import real_offer
from tests.wsclient import RealtimeClient

NO_AUDIO = {"audio.enabled": False}


async def test_a_dropped_call_resumes_and_loses_nothing(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = await RtcClient.call(addr)
        token = (await c.until("session.created", 20))["resume"]["token"]
        await c.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Count"}]},
            }
        )
        await c.send({"type": "response.create", "response": {"max_output_tokens": 48}})
        await c.until("response.created", 30)
        last = c.events[-1]["seq"]
        await c.close()  # the peer connection goes mid-response; the session runs on
        c2 = await RtcClient.call(addr, query=f"resume_token={token}&last_seq={last}")
        hello = await c2.until("session.resumed", 20)
        assert hello["replay_from_seq"] == last + 1
        done = await c2.until("response.done", 60)
        seqs = [e["seq"] for e in c2.events if "seq" in e and e["type"] != "session.resumed"]
        assert seqs[0] == last + 1 and seqs == list(range(last + 1, done["seq"] + 1))  # no gap, no repeat
        r = await post_offer(addr, await real_offer(), query="resume_token=nope&last_seq=0")
        assert r.status_code == 410 and r.json()["error"]["code"] == "resume_failed"
        await c2.close()


async def test_a_dropped_call_plays_the_rest_of_its_spoken_reply_after_the_resume(server_factory):
    cfg = {**NO_AUDIO, "speculative.drafter": "none"}
    with server_factory(FakeBackend(answer_tokens=24, step_s=0.005), **cfg) as addr:
        c = await RtcClient.call(addr, session={"output_modalities": ["audio"]})
        token = (await c.until("session.created", 20))["resume"]["token"]
        await c.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Talk"}]},
            }
        )
        await c.send({"type": "response.create"})
        started = await c.until("output_audio_buffer.started", 60)
        last = c.events[-1]["seq"]
        await c.close()  # the peer connection goes while the reply is playing
        c2 = await RtcClient.call(addr, query=f"resume_token={token}&last_seq={last}", record=True)
        await c2.until("session.resumed", 20)
        stopped = await c2.until("output_audio_buffer.stopped", 90)
        assert stopped["response_id"] == started["response_id"]
        seqs = [e["seq"] for e in c2.events if "seq" in e and e["type"] != "session.resumed"]
        assert seqs == list(range(last + 1, stopped["seq"] + 1))  # no gap, no repeat
        events = c.events + c2.events
        done = next(e for e in events if e["type"] == "response.done")
        item_id = next(e["item"]["id"] for e in events if e["type"] == "response.output_item.added")
        audio_ms = done["response"]["usage"]["output_token_details"]["audio_tokens"] * 50
        call = addr.app.state.webrtc.calls[c2.call_id]
        played = addr.call(lambda: call.source.played_ms(item_id))
        assert played >= audio_ms - 50  # the whole reply went out, across the two calls
        assert np.abs(c2.audio()).max() > 1000  # and the new track played the rest of it
        assert "response.output_audio.delta" not in [e["type"] for e in events]
        await c2.close()


async def test_a_call_whose_channel_never_opens_ends_within_the_timeout(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO, **{"webrtc.connect_timeout_s": 1.0}) as addr:
        r = await post_offer(addr, await real_offer())  # the answer is never applied: no ICE, no channel
        assert r.status_code == 201
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        async with httpx.AsyncClient() as http:
            while True:
                metrics = (await http.get(f"http://{addr}/metrics")).text
                if "stream_omni:webrtc_calls_active 0.0" in metrics:
                    break
                assert loop.time() < deadline, "the call did not end"
                await asyncio.sleep(0.1)  # polling server state: nothing to wait on from outside
        assert len(addr.services.registry) == 1  # the session waits its grace period for a resume


async def test_sideband_websocket_runs_a_tool_call_to_completion(tiny_backend, server_factory):
    scripted = ScriptedBackend(tiny_backend, ANSWER)
    key = {"Authorization": "Bearer k1"}
    cfg = {**NO_AUDIO, "session.instructions": None, "server.api_keys": ["k1", "k2"]}
    with server_factory(scripted, **cfg) as addr:
        phone = await RtcClient.call(addr, headers=key)
        await phone.until("session.created", 20)
        intruder = await RealtimeClient.connect(
            addr, f"call_id={phone.call_id}", additional_headers={"Authorization": "Bearer k2"}
        )
        assert (await intruder.until("error", 10))["error"]["code"] == "call_not_found"
        app = await RealtimeClient.connect(addr, f"call_id={phone.call_id}", additional_headers=key)
        await app.send({"type": "session.update", "session": {"tools": RT_TOOLS, "tool_choice": "auto"}})
        await app.until("session.updated", 20)
        await phone.until("session.updated", 20)  # the same session: both see it
        await phone.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            }
        )
        await phone.send({"type": "response.create"})
        first = (await app.until("response.done", 60))["response"]
        calls = [o for o in first["output"] if o["type"] == "function_call"]
        assert calls and calls[0]["name"] == "get_weather"
        output = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": json.dumps({"temp": 21})}
        await app.send({"type": "conversation.item.create", "item": output})
        await app.send({"type": "response.create"})
        second = (await app.until("response.done", 60))["response"]
        assert second["status"] == "completed" and second["id"] != first["id"]
        seen = await phone.until("response.done", 60)
        while seen["response"]["id"] != second["id"]:
            seen = await phone.until("response.done", 60)
        assert '<tool_response>\n{"temp": 21}\n</tool_response>' in scripted.prompts[-1]
        await app.ws.close()
        await phone.close()


async def test_a_caller_that_goes_silent_is_ended_and_its_session_kept_for_resume(tiny_backend, server_factory):
    cfg = {**NO_AUDIO, "webrtc.media_timeout_s": 1.0, "webrtc.stats_interval_s": 0.2}
    with server_factory(tiny_backend, **cfg) as addr:
        c = await RtcClient.call(addr)
        token = (await c.until("session.created", 20))["resume"]["token"]
        c.mic.stop()  # RTP stops as it does when the network goes: no goodbye
        closed = asyncio.Event()
        c.channel.on("close", closed.set)
        await asyncio.wait_for(closed.wait(), 15)  # the server ended the call
        c2 = await RtcClient.call(addr, query=f"resume_token={token}&last_seq=0")
        assert (await c2.until("session.resumed", 20))["replay_from_seq"] == 1
        await c.close()
        await c2.close()
