"""The SIP server's cases a softphone will not do on cue, with a scripted caller (``testkit.sipclient``):
OPTIONS, a refused codec, a caller outside the allow-list, CANCEL before the answer, RFC 4733 keys,
a refer, a reject and a hangup from the app through the ``openai`` SDK (REFER, a final status, a BYE)."""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

from openai import OpenAI

from gateway.telephony import digest
from testkit.fake_backend import FakeBackend
from testkit.live_server import free_port
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


def _digest(challenge: str, password: str, uri: str, nc: int) -> str:
    """The Authorization a phone answers ``challenge`` (a WWW-Authenticate value) with, as user ``trunk``."""
    fields = {k.strip(): v.strip().strip('"') for k, v in (p.split("=", 1) for p in challenge[7:].split(","))}
    algorithm, cnonce, count = fields["algorithm"], "0a4f113b", f"{nc:08x}"
    answer = digest.response(
        algorithm, "trunk", fields["realm"], password, "INVITE", uri, fields["nonce"], count, cnonce, "auth"
    )
    return (
        f'Digest username="trunk", realm="{fields["realm"]}", nonce="{fields["nonce"]}", uri="{uri}", '
        f'response="{answer}", algorithm={algorithm}, cnonce="{cnonce}", qop=auth, nc={count}'
    )


async def test_tcp_caller_outside_the_allow_list_answers_a_digest_challenge_and_agrees_a_session_timer(
    server_factory,
):
    port = free_port()
    more = {
        "telephony.sip_allow": [],
        "telephony.sip_users": {"trunk": "right-pass"},
        "telephony.sip_min_se": 120,
        "telephony.default_session": {"instructions": "Acme."},
    }
    with server_factory(FakeBackend(), **sip_overrides(port, **more)) as addr:
        c = await SipCaller.open(port, "tcp")
        uri = f"sip:assistant@127.0.0.1:{port}"
        c.send("INVITE", c.offer())
        challenged = await c.final()
        assert challenged.code == 401 and not addr.app.state.telephony.calls
        sha, md5 = challenged.headers.getlist("WWW-Authenticate")
        assert "algorithm=SHA-256" in sha and "algorithm=MD5" in md5  # the preferred first (RFC 8760)
        c.send("ACK", cseq=1)
        c.send("INVITE", c.offer(), cseq=2, headers=[("Authorization", _digest(sha, "wrong-pass", uri, 1))])
        assert (await c.final()).code == 401 and not addr.app.state.telephony.calls
        c.send("ACK", cseq=2)
        timer = [("Supported", "timer"), ("Session-Expires", "100")]
        c.send("INVITE", c.offer(), cseq=3, headers=[("Authorization", _digest(md5, "right-pass", uri, 1)), *timer])
        too_small = await c.final()
        assert too_small.code == 422 and too_small.headers.get("Min-SE") == "120"
        c.send("ACK", cseq=3)
        timer = [("Supported", "timer"), ("Session-Expires", "150;refresher=uac"), ("Min-SE", "120")]
        c.send("INVITE", c.offer(), cseq=4, headers=[("Authorization", _digest(sha, "right-pass", uri, 2)), *timer])
        ok = await c.final()
        assert ok.code == 200 and "PCMU/8000" in ok.body.decode()
        assert ok.headers.get("Session-Expires") == "150;refresher=uac" and ok.headers.get("Require") == "timer"
        assert ";transport=tcp" in (ok.headers.get("Contact") or "")
        c.send("ACK", cseq=4)
        (call_id,) = addr.app.state.telephony.calls
        refresh = [("Supported", "timer"), ("Session-Expires", "300;refresher=uac")]
        c.send("UPDATE", cseq=5, headers=refresh)  # the caller refreshes, and lengthens the interval
        refreshed = await c.final()
        assert refreshed.code == 200 and refreshed.headers.get("Session-Expires") == "300;refresher=uac"
        c.send("BYE", cseq=6)
        assert (await c.final()).code == 200
        async with asyncio.timeout(1.0):  # the caller's hangup frees the call within 1 s
            while call_id in addr.app.state.telephony.calls:  # noqa: ASYNC110 (the server's loop is another thread's)
                await asyncio.sleep(0.01)
        c.close()


async def test_session_timer_refreshes_with_update_and_ends_an_unrefreshed_call(monkeypatch):
    """The gateway's side of RFC 4028 on the wire, in-process with intervals of seconds (the RFC's 90 s floor
    lowered for the test): an UPDATE at half the interval when it is the refresher, a BYE when nobody refreshed."""
    from gateway.telephony import session_timer
    from gateway.telephony.sip import SipPolicy, SipServer

    monkeypatch.setattr(session_timer, "RFC_MIN_SE", 1)

    async def incoming(dialog: Any, call: Any, headers: Any) -> None:
        dialog.answered.set_result((200, "OK"))  # answered at once; no session: the timer is what is tested

    loop = asyncio.get_running_loop()
    server = SipServer("127.0.0.1", SipPolicy(("127.0.0.0/8",), min_se=1), 100, incoming, lambda call_id: None)
    port = free_port()
    await loop.create_datagram_endpoint(lambda: server, local_addr=("127.0.0.1", port))
    try:
        # the caller cannot refresh (no Supported: timer): the gateway refreshes at half of 2 s
        c = await SipCaller.open(port)
        c.send("INVITE", c.offer(), headers=[("Session-Expires", "2")])
        ok = await c.final()
        assert ok.code == 200 and ok.headers.get("Session-Expires") == "2;refresher=uas"
        c.send("ACK", cseq=1)
        started = loop.time()
        update = await c.request(3)
        assert update.method == "UPDATE" and 0.8 <= loop.time() - started <= 1.6  # type: ignore[attr-defined]
        c.reply(update)  # answered: the session goes on
        answered = loop.time()
        again = await c.request(3)  # the next refresh, a period after the answer; this one is not answered
        assert again.method == "UPDATE" and loop.time() - answered >= 0.8  # type: ignore[attr-defined]
        bye = await c.request(3)  # expired unrefreshed: 2 s less a third after the answer
        assert bye.method == "BYE" and 1.2 <= loop.time() - answered <= 2.0  # type: ignore[attr-defined]
        assert not server.dialogs
        c.close()
        # the caller refreshes (uac) and does not: the gateway ends the call
        c = await SipCaller.open(port)
        c.send("INVITE", c.offer(), headers=[("Supported", "timer"), ("Session-Expires", "2;refresher=uac")])
        assert (await c.final()).headers.get("Session-Expires") == "2;refresher=uac"
        c.send("ACK", cseq=1)
        started = loop.time()
        bye = await c.request(3)
        assert bye.method == "BYE" and 1.2 <= loop.time() - started <= 2.0  # type: ignore[attr-defined]
        c.close()
    finally:
        await server.close()
