"""OpenAI's call control against a real server, driven by the unmodified ``openai`` SDK
(``client.realtime.calls.accept/reject/refer/hangup``): the server POSTs the signed
``realtime.call.incoming`` webhook to a tiny HTTP receiver on loopback, the app answers through the
SDK, and watches the call over the sideband socket."""

from __future__ import annotations

import asyncio
import base64
import queue
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.webhooks import RealtimeCallIncomingWebhookEvent

from testkit.fake_backend import FakeBackend
from testkit.phonecall import PhoneCaller
from tests.wsclient import RealtimeClient

SECRET = "whsec_" + base64.b64encode(b"call-control webhook secret 32b!").decode()
KEY = "sk-phone-app"


def overrides(url: str) -> dict[str, Any]:
    return {
        "telephony.enabled": True,
        "telephony.webhook_url": url,
        "telephony.webhook_secret": SECRET,
        "telephony.accept_timeout_s": 20,
        "server.api_keys": [KEY],
    }


async def incoming(got: queue.Queue[tuple[bytes, dict[str, str]]], client: OpenAI) -> RealtimeCallIncomingWebhookEvent:
    body, headers = await asyncio.to_thread(got.get, timeout=10)
    event = client.webhooks.unwrap(body, headers, secret=SECRET)  # the SDK checks the signature
    assert isinstance(event, RealtimeCallIncomingWebhookEvent)
    return event


async def test_accept_through_the_sdk_then_sideband_dtmf_refer_and_hangup(server_factory, receiver):
    url, got = receiver
    with server_factory(FakeBackend(), **overrides(url)) as addr:
        client = OpenAI(api_key=KEY, base_url=f"http://{addr}/v1", max_retries=0)
        call = await PhoneCaller.dial(addr, custom={"caller": "+15550100"})
        event = await incoming(got, client)
        call_id = event.data.call_id
        assert ("X-Twilio-Param-caller", "+15550100") in [(h.name, h.value) for h in event.data.sip_headers]
        await asyncio.to_thread(
            client.realtime.calls.accept, call_id, type="realtime", instructions="You answer the phone for Acme."
        )
        side = await RealtimeClient.connect(
            addr, query=f"call_id={call_id}", additional_headers={"Authorization": f"Bearer {KEY}"}
        )
        await call.dtmf("7")
        dtmf = await side.until("input_audio_buffer.dtmf_event_received", 10)
        assert dtmf["event"] == "7"
        live = addr.app.state.telephony.calls[call_id].call.live
        options = addr.call(lambda: live.session.options)
        assert options.instructions == "You answer the phone for Acme."
        assert options.audio.input.format.type == options.audio.output.format.type == "audio/pcmu"  # a phone line
        with pytest.raises(openai.BadRequestError):
            await asyncio.to_thread(client.realtime.calls.refer, call_id, target_uri="mailto:x@example.com")
        with pytest.raises(openai.ConflictError):  # a media stream is transferred by its provider
            await asyncio.to_thread(client.realtime.calls.refer, call_id, target_uri="tel:+15550199")
        with pytest.raises(openai.ConflictError):
            await asyncio.to_thread(client.realtime.calls.accept, call_id, type="realtime")
        other = OpenAI(api_key="sk-someone-else", base_url=f"http://{addr}/v1", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await asyncio.to_thread(other.realtime.calls.hangup, call_id)
        await asyncio.to_thread(client.realtime.calls.hangup, call_id)
        await asyncio.wait_for(call.closed.wait(), 1.0)  # the stream closed
        assert call_id not in addr.app.state.telephony.calls and live.closed  # everything freed
        with pytest.raises(openai.NotFoundError):
            await asyncio.to_thread(client.realtime.calls.hangup, call_id)
        await side.ws.close()
        await call.close()
        client.close()
        other.close()


async def test_reject_through_the_sdk_ends_the_stream_and_a_bad_session_is_a_400(server_factory, receiver):
    url, got = receiver
    with server_factory(FakeBackend(), **overrides(url)) as addr:
        client = OpenAI(api_key=KEY, base_url=f"http://{addr}/v1", max_retries=0)
        call = await PhoneCaller.dial(addr)
        call_id = (await incoming(got, client)).data.call_id
        with pytest.raises(openai.BadRequestError) as bad:
            await asyncio.to_thread(client.realtime.calls.accept, call_id, type="realtime", output_modalities=["video"])
        assert "output_modalities" in str(bad.value)
        with pytest.raises(openai.BadRequestError) as bad:
            await asyncio.to_thread(client.realtime.calls.reject, call_id, status_code=200)
        assert bad.value.body["param"] == "status_code"  # type: ignore[index]
        await asyncio.to_thread(client.realtime.calls.reject, call_id, status_code=486)
        await asyncio.wait_for(call.closed.wait(), 1.0)
        assert call_id not in addr.app.state.telephony.calls
        await call.close()
        client.close()


async def test_a_call_nobody_accepts_is_dropped_after_accept_timeout(server_factory, receiver):
    url, got = receiver
    with server_factory(FakeBackend(), **{**overrides(url), "telephony.accept_timeout_s": 0.5}) as addr:
        call = await PhoneCaller.dial(addr)
        await asyncio.to_thread(got.get, timeout=10)
        await asyncio.wait_for(call.closed.wait(), 5.0)
        assert not addr.app.state.telephony.calls
        await call.close()
