"""The SIP server's cases a softphone will not do on cue, with a scripted caller (``testkit.sipclient``):
OPTIONS, a refused codec, a caller outside the allow-list, CANCEL before the answer, RFC 4733 keys,
a refer, a reject and a hangup from the app through the ``openai`` SDK (REFER, a final status, a BYE)."""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

from openai import OpenAI

from testkit.fake_backend import FakeBackend
from testkit.server import free_port
from testkit.sipclient import SipCaller
from tests.wsclient import RealtimeClient

SECRET = "whsec_" + base64.b64encode(b"call-control webhook secret 32b!").decode()


def sip_overrides(port: int, url: str | None = None, **more: Any) -> dict[str, Any]:
    out = {"telephony.enabled": True, "telephony.sip_port": port, **more}
    if url is not None:
        out |= {"telephony.webhook_url": url, "telephony.webhook_secret": SECRET}
    return out


def media_port(sdp_text: str) -> int:
    m = re.search(r"m=audio (\d+) ", sdp_text)
    assert m, sdp_text
    return int(m.group(1))


async def test_options_a_refused_codec_and_a_caller_not_allowed(server_factory):
    port = free_port()
    with server_factory(FakeBackend(), **sip_overrides(port)) as addr:
        c = await SipCaller.open(port)
        c.send("OPTIONS")
        ok = await c.final()
        assert ok.code == 200 and "INVITE" in (ok.headers.get("Allow") or "")
        c.send("INVITE", c.offer("9"))  # G.722 only
        refused = await c.final()
        assert refused.code == 488 and "G722" in (refused.headers.get("Warning") or "").upper()
        assert not addr.app.state.telephony.calls
        c.close()
    port = free_port()
    with server_factory(FakeBackend(), **sip_overrides(port, **{"telephony.sip_allow": ["10.0.0.0/8"]})) as addr:
        c = await SipCaller.open(port)
        c.send("INVITE", c.offer())
        assert (await c.final()).code == 403
        c.close()


async def test_cancel_before_the_answer_ends_the_call(server_factory, receiver):
    url, got = receiver
    port = free_port()
    with server_factory(FakeBackend(), **sip_overrides(port, url)) as addr:
        c = await SipCaller.open(port)
        c.send("INVITE", c.offer())
        codes = [(await c.response()).code, (await c.response()).code]
        assert codes == [100, 180]
        await asyncio.to_thread(got.get, timeout=10)  # the app was told; it does not answer
        c.send("CANCEL", cseq=1)
        finals = sorted([(await c.final()).code, (await c.final()).code])
        assert finals == [200, 487]  # the CANCEL's, and the INVITE's
        assert not addr.app.state.telephony.calls
        c.close()


async def test_sdk_accept_keys_then_hangup_sends_a_bye_and_reject_sends_the_status(server_factory, receiver):
    url, got = receiver
    port = free_port()
    with server_factory(FakeBackend(), **sip_overrides(port, url)) as addr:
        client = OpenAI(api_key="sk-local", base_url=f"http://{addr}/v1", max_retries=0)
        c = await SipCaller.open(port)
        c.send("INVITE", c.offer())
        body, headers = await asyncio.to_thread(got.get, timeout=10)
        event = client.webhooks.unwrap(body, headers, secret=SECRET)
        call_id = event.data.call_id  # type: ignore[union-attr]
        assert ("Call-ID", c.call_id) in [(h.name, h.value) for h in event.data.sip_headers]  # type: ignore[union-attr]
        await asyncio.to_thread(client.realtime.calls.accept, call_id, type="realtime", instructions="Acme.")
        ok = await c.final()
        assert ok.code == 200 and "PCMU/8000" in ok.body.decode()
        c.send("ACK", cseq=1)
        c.rtp_dest = ("127.0.0.1", media_port(ok.body.decode()))
        side = await RealtimeClient.connect(addr, query=f"call_id={call_id}")
        c.key(11, 8000, 100)  # "#"
        c.key(5, 9600, 104)
        keys = [(await side.until("input_audio_buffer.dtmf_event_received", 10))["event"] for _ in range(2)]
        assert keys == ["#", "5"]
        await asyncio.to_thread(client.realtime.calls.refer, call_id, target_uri="tel:+15550199")
        refer = await c.request(5)
        assert refer.method == "REFER" and refer.headers.get("Refer-To") == "<tel:+15550199>"  # type: ignore[attr-defined]
        await asyncio.to_thread(client.realtime.calls.hangup, call_id)
        bye = await c.request(1.0)  # the gateway hangs up with a BYE, within 1 s
        assert bye.method == "BYE"  # type: ignore[attr-defined]
        assert call_id not in addr.app.state.telephony.calls
        await side.ws.close()
        c.close()
        c = await SipCaller.open(port)
        c.send("INVITE", c.offer())
        body, headers = await asyncio.to_thread(got.get, timeout=10)
        call_id = client.webhooks.unwrap(body, headers, secret=SECRET).data.call_id  # type: ignore[union-attr]
        await asyncio.to_thread(client.realtime.calls.reject, call_id, status_code=486)
        assert (await c.final()).code == 486
        c.close()
        client.close()
