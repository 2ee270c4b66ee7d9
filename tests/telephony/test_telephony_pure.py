"""The pure cores of telephony: Twilio frames and signatures, Standard Webhooks, and the marked playout."""

from __future__ import annotations

import base64
import json
import time

import pytest
from openai import OpenAI
from openai.types.webhooks import RealtimeCallIncomingWebhookEvent

from gateway.telephony import phone_sdp as sdp
from gateway.telephony import rtp, twilio, webhooks
from gateway.telephony.call import telephone_session
from gateway.telephony.playout import FRAME_BYTES, Frame, MarkOut, Playout, PlayoutStarted, PlayoutStopped

SECRET = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes!!!!").decode()


def test_twilio_signature_matches_twilios_published_example():
    # the example of Twilio's request-validation docs (and twilio-python's own test)
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+14158675309",
        "Digits": "1234",
        "From": "+14158675309",
        "To": "+18005551212",
    }
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert twilio.signature("12345", url, params) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    assert twilio.valid("12345", url, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", params)
    assert not twilio.valid("12346", url, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", params)


def test_frames_parse_and_bad_ones_name_the_field():
    assert twilio.parse('{"event":"connected","protocol":"Call"}') == twilio.Connected()
    start = {"streamSid": "MZ1", "callSid": "CA1", "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}}
    start["customParameters"] = {"caller": "+1555"}
    assert twilio.parse(json.dumps({"event": "start", "start": start})) == twilio.Start(
        "MZ1", "CA1", "audio/x-mulaw", 8000, {"caller": "+1555"}
    )
    payload = base64.b64encode(b"\xff" * 160).decode()
    got = twilio.parse(json.dumps({"event": "media", "media": {"track": "inbound", "payload": payload}}))
    assert got == twilio.Media(b"\xff" * 160, "inbound")
    assert twilio.parse('{"event":"mark","mark":{"name":"m3"}}') == twilio.Mark("m3")
    assert twilio.parse('{"event":"dtmf","dtmf":{"digit":"#"}}') == twilio.Dtmf("#")
    assert twilio.parse('{"event":"stop"}') == twilio.Stop()
    assert twilio.parse('{"event":"something-new","x":{}}') is None  # forward compatible
    assert twilio.parse("{") == twilio.FrameError("not JSON")
    assert twilio.parse('{"event":"media","media":{"payload":"***"}}') == twilio.FrameError(
        "media.payload is not base64"
    )
    assert twilio.parse('{"event":"dtmf","dtmf":{"digit":"x"}}') == twilio.FrameError(
        "dtmf.digit must be one of 0-9 * # A-D"
    )
    assert twilio.parse('{"event":"mark","mark":{}}') == twilio.FrameError("mark.name must be a string")
    assert twilio.parse('{"event":"start","start":{}}') == twilio.FrameError("start.streamSid must be a string")


def test_webhooks_verify_with_the_openai_sdk_and_reject_tampering():
    now = int(time.time())
    body = webhooks.call_incoming("evt_1", "rtc_abc", [("From", "sip:+1555@example.com")], now)
    headers = webhooks.signed_headers(SECRET, "wh_1", now, body)
    client = OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    event = client.webhooks.unwrap(body, headers, secret=SECRET)  # the SDK's own verifier and parser
    assert isinstance(event, RealtimeCallIncomingWebhookEvent)
    assert event.data.call_id == "rtc_abc" and event.data.sip_headers[0].value == "sip:+1555@example.com"
    assert webhooks.verify(SECRET, headers, body, now)
    assert not webhooks.verify(SECRET, headers, body.replace(b"rtc_abc", b"rtc_abd"), now)
    assert not webhooks.verify(SECRET, headers, body, now + 301)  # a replay, too late
    assert not webhooks.verify("whsec_" + base64.b64encode(b"another").decode(), headers, body, now)
    assert not webhooks.verify(SECRET, {**headers, "webhook-timestamp": "soon"}, body, now)


def _marks(out):
    return [o.name for o in out if isinstance(o, MarkOut)]


def test_playout_paces_frames_marks_chunks_and_the_playhead_follows_the_acks():
    play = Playout(mark_ms=100)
    play.push(b"\x01" * 800, "resp_1", "item_1")  # 100 ms
    play.push(b"\x02" * 100, "resp_1", "item_1")  # 12.5 ms: a short tail chunk
    first = play.take()
    assert first[0] == PlayoutStarted("resp_1") and first[1] == Frame(b"\x01" * FRAME_BYTES)
    out = [first] + [play.take() for _ in range(5)]
    names = [n for o in out for n in _marks(o)]
    assert names == ["m1", "m2"]  # after 5 frames (100 ms, also the chunk's end), after the tail chunk
    tail = [o for o in out[5] if isinstance(o, Frame)][0]
    assert tail.ulaw == b"\x02" * 100 + b"\xff" * 60  # padded with µ-law silence
    assert play.take() == [] and play.playing  # sent, not yet played
    assert play.heard_ms("item_1") == 0
    assert play.ack("m1", open_response="resp_1") == []
    assert play.heard_ms("item_1") == 100
    assert play.ack("m2", open_response="resp_1") == []  # still running: more may come
    assert play.finished("resp_1") == [PlayoutStopped("resp_1")]
    assert not play.playing


def test_a_clear_cuts_at_the_acknowledged_mark_and_ignores_flushed_marks():
    play = Playout(mark_ms=20)
    play.push(b"\x01" * 1600, "resp_1", "item_1")  # 200 ms
    play.push(b"\x03" * 800, "resp_1", "item_2")
    sent = [n for _ in range(4) for n in _marks(play.take())]  # 80 ms sent, a mark per frame
    play.ack(sent[1])  # the provider played 40 ms (and so the mark before it)
    assert play.heard_ms("item_1") == 40
    cut = play.clear()
    assert cut.response_id == "resp_1"
    assert cut.items == (("item_1", 40), ("item_2", 0))
    assert play.ack(sent[3]) == [] and play.heard_ms("item_1") == 40  # echoed by the clear: not played
    assert play.take() == [] and not play.playing


def test_a_full_queue_refuses_a_chunk():
    play = Playout(max_queued_s=0.1)
    assert play.push(b"\x01" * 800, "r", "i")
    assert not play.push(b"\x01", "r", "i")


def test_a_phone_session_is_ulaw_both_ways_whatever_else_it_sets():
    session = {"instructions": "be brief", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}
    got = telephone_session(session)
    assert got["instructions"] == "be brief"
    assert got["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert got["audio"]["output"]["format"] == {"type": "audio/pcmu"}


# ---------------------------------------------------------------- SIP: SDP and RTP

OFFER = "\r\n".join(
    [
        "v=0",
        "o=- 1 1 IN IP4 127.0.0.1",
        "s=-",
        "c=IN IP4 127.0.0.1",
        "t=0 0",
        "m=audio 40000 RTP/AVP 9 8 0 101",
        "a=rtpmap:9 G722/8000",
        "a=rtpmap:8 PCMA/8000",
        "a=rtpmap:0 PCMU/8000",
        "a=rtpmap:101 telephone-event/8000",
        "a=sendrecv",
    ]
)


def test_an_offer_gets_ulaw_first_and_telephone_events():
    offer = sdp.parse_offer(OFFER)
    assert (offer.address, offer.port, offer.payload_type, offer.codec, offer.dtmf_type) == (
        "127.0.0.1",
        40000,
        0,
        "audio/pcmu",
        101,
    )
    ans = sdp.answer(offer, "127.0.0.1", 41000, 7)
    assert "m=audio 41000 RTP/AVP 0 101" in ans and "a=rtpmap:0 PCMU/8000" in ans and "a=sendrecv" in ans
    alaw = sdp.parse_offer(OFFER.replace("9 8 0 101", "8 101"))
    assert alaw.codec == "audio/pcma" and alaw.payload_type == 8
    held = sdp.parse_offer(OFFER.replace("a=sendrecv", "a=sendonly"))
    assert "a=recvonly" in sdp.answer(held, "127.0.0.1", 41000, 7)  # the caller holds: we only listen


def test_an_offer_without_g711_is_refused_naming_what_was_offered():
    with pytest.raises(sdp.SdpError, match="no PCMU or PCMA offered .offered: g722/8000"):
        sdp.parse_offer(OFFER.replace("9 8 0 101", "9"))
    with pytest.raises(sdp.SdpError, match="no audio m-line"):
        sdp.parse_offer("v=0\r\nc=IN IP4 127.0.0.1\r\n")


def test_rtp_round_trips_and_skips_rtcp():
    data = rtp.build(0, 65535, 160, 1234, b"\xff" * 160, marker=True)
    pkt = rtp.parse(data)
    assert pkt == rtp.Packet(0, 65535, 160, 1234, True, b"\xff" * 160)
    assert rtp.parse(bytes([0x80, 200]) + bytes(30)) is None  # an RTCP sender report
    assert rtp.parse(b"\x00" * 12) is None  # not version 2


def test_the_jitter_buffer_reorders_drops_late_and_skips_lost():
    jb = rtp.JitterBuffer(depth=2)
    assert jb.push(65534, b"a") == [b"a"]
    assert jb.push(0, b"c") == []  # 65535 is missing: held
    assert jb.push(65535, b"b") == [b"b", b"c"]  # reordered across the wrap
    assert jb.push(65535, b"b") == [] and jb.late == 1  # a duplicate comes too late
    assert jb.push(3, b"f") == [] and jb.push(4, b"g") == []
    assert jb.push(5, b"h") == [b"f", b"g", b"h"] and jb.lost == 2  # 1 and 2 given up


def test_a_key_press_is_reported_once_per_event():
    dtmf = rtp.DtmfReceiver()
    press = [rtp.Packet(101, n, 8000, 1, n == 0, bytes([11, 0x0A if n < 3 else 0x8A, 0, 160])) for n in range(6)]
    assert [dtmf.push(p) for p in press] == ["#", None, None, None, None, None]
    assert dtmf.push(rtp.Packet(101, 9, 9600, 1, True, bytes([1, 0x0A, 0, 160]))) == "1"
