"""The pure cores of telephony: Twilio frames and signatures, Standard Webhooks, and the marked playout."""

from __future__ import annotations

import base64
import json
import time

from openai import OpenAI
from openai.types.webhooks import RealtimeCallIncomingWebhookEvent

from gateway.telephony import twilio, webhooks
from gateway.telephony.call import telephone_session
from gateway.telephony.playout import FRAME_BYTES, Frame, MarkOut, Playout, Started, Stopped

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
    assert first[0] == Started("resp_1") and first[1] == Frame(b"\x01" * FRAME_BYTES)
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
    assert play.finished("resp_1") == [Stopped("resp_1")]
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
