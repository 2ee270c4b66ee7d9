"""The pure cores of the WebRTC transport: offer checks, the public-IP rewrite, the paced outbound queue."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.webrtc.track_pacing import FRAME, RATE, Cleared, OutboundAudio, TrackStarted, TrackStopped, track_samples
from gateway.webrtc.webrtc_sdp import OfferError, check_offer, with_opus_bitrate, with_public_ip

OFFER = """v=0
o=- 1 1 IN IP4 0.0.0.0
s=-
t=0 0
a=group:BUNDLE 0 1
a=fingerprint:sha-256 AA:BB
a=ice-ufrag:abcd
a=ice-pwd:abcdefghijklmnopqrstuv
m=audio 9 UDP/TLS/RTP/SAVPF 111 0
c=IN IP4 0.0.0.0
a=sendrecv
a=rtpmap:111 opus/48000/2
a=rtpmap:0 PCMU/8000
m=application 9 UDP/DTLS/SCTP webrtc-datachannel
a=sctp-port:5000
"""


def test_a_browser_shaped_offer_passes():
    offer = check_offer(OFFER)
    assert offer.opus_payload == 111 and offer.audio_direction == "sendrecv"
    assert offer.sdp.endswith("\r\n") and "\r\n" in offer.sdp and "\n\n" not in offer.sdp
    assert offer.maxptime_ms is None  # no limit stated: 60 ms idle packets are fine (Opus frames reach 120 ms)
    assert check_offer(OFFER.replace("a=sendrecv\n", "a=sendrecv\na=maxptime:40\n")).maxptime_ms == 40


@pytest.mark.parametrize(
    ("sdp", "why"),
    [
        ("", "v=0"),
        ("v=0\nthis is not sdp", "line 2"),
        (OFFER.replace("a=fingerprint:sha-256 AA:BB\n", ""), "fingerprint"),
        (OFFER.replace("a=ice-pwd:abcdefghijklmnopqrstuv\n", ""), "ICE credentials"),
        (OFFER.split("m=audio")[0] + "m=application" + OFFER.split("m=application")[1], "no audio"),
        (OFFER.split("m=application")[0], "no data channel"),
        (OFFER.replace("opus/48000/2", "G722/8000").replace("111 0", "111"), "(?i)G722"),
        (OFFER + "m=audio 9 UDP/TLS/RTP/SAVPF 111\na=rtpmap:111 opus/48000/2\n", "more than one audio"),
        ("v=0\n" + "a=x\n" * 20_000, "larger than"),
        (OFFER.replace("m=audio 9 UDP/TLS/RTP/SAVPF 111 0", "m=audio 9"), "m-line"),
    ],
)
def test_a_bad_offer_says_why(sdp, why):
    with pytest.raises(OfferError, match=why):
        check_offer(sdp)


def test_public_ip_rewrites_ipv4_host_candidates_only():
    answer = (
        "c=IN IP4 10.0.0.5\r\n"
        "a=candidate:1 1 udp 2130706431 10.0.0.5 40000 typ host\r\n"
        "a=candidate:2 1 udp 2130706431 fe80::1 40001 typ host\r\n"
        "a=candidate:3 1 udp 1694498815 198.51.100.7 40000 typ srflx raddr 10.0.0.5 rport 40000\r\n"
    )
    out = with_public_ip(answer, "203.0.113.9")
    assert "c=IN IP4 203.0.113.9\r\n" in out
    assert "203.0.113.9 40000 typ host" in out and "fe80::1 40001 typ host" in out
    assert "198.51.100.7 40000 typ srflx raddr 10.0.0.5" in out


def tone(ms: int) -> np.ndarray:
    return np.full(RATE * ms // 1000, 1000, dtype=np.int16)


def test_silence_when_empty_then_started_played_stopped():
    q = OutboundAudio()
    frame, events = q.next_frame()
    assert not frame.any() and events == []
    assert q.push(tone(50), "resp_1", "item_1")
    frames = [q.next_frame() for _ in range(4)]
    assert frames[0][1] == [TrackStarted("resp_1")]
    assert frames[1][1] == []
    assert frames[2][1] == [TrackStopped("resp_1")]  # 50 ms: the third frame is half audio, half silence
    assert frames[2][0][: FRAME // 2].all() and not frames[2][0][FRAME // 2 :].any()
    assert frames[3][1] == [] and q.played_ms("item_1") == 50 and not q.playing


def test_clear_cuts_playback_and_reports_the_truncation_point():
    q = OutboundAudio()
    q.push(tone(1000), "resp_1", "item_1")
    for _ in range(10):
        q.next_frame()
    assert q.queued_ms == 800
    cut = q.clear()
    assert cut == Cleared("resp_1", "item_1", 200, (("item_1", 200),))
    frame, events = q.next_frame()
    assert not frame.any() and events == [] and q.clear() == Cleared(None, None, 0)


def test_two_responses_back_to_back_stop_and_start_between_them():
    q = OutboundAudio()
    q.push(tone(20), "r1", "i1")
    q.push(tone(20), "r2", "i2")
    assert q.next_frame()[1] == [TrackStarted("r1")]
    assert q.next_frame()[1] == [TrackStopped("r1"), TrackStarted("r2"), TrackStopped("r2")]


def test_a_response_still_open_underruns_instead_of_stopping():
    q = OutboundAudio()
    q.push(tone(20), "r1", "i1")
    assert q.next_frame("r1")[1] == [TrackStarted("r1")]
    frame, events = q.next_frame("r1")  # synthesis is behind: silence, but the reply goes on
    assert not frame.any() and events == [] and q.playing and q.underruns == 1
    q.push(tone(20), "r1", "i1")
    assert q.next_frame("r1")[1] == []  # no second started
    assert q.next_frame(None)[1] == [TrackStopped("r1")]  # the response ended: no more audio is coming


def test_clear_names_every_item_it_cut_with_what_of_it_played():
    q = OutboundAudio()
    q.push(tone(100), "r1", "i1")
    q.push(tone(100), "r2", "i2")
    q.next_frame()
    q.next_frame()
    cut = q.clear()
    assert cut.response_id == "r1" and cut.items == (("i1", 40), ("i2", 0))
    assert q.last_response == "r1" and q.silent and not q.playing


@pytest.mark.parametrize(("fmt", "rate", "width"), [("audio/pcm", 24_000, 2), ("audio/pcmu", 8000, 1)])
def test_track_samples_are_48k_int16_of_the_same_length(fmt, rate, width):
    from processors.audio_formats import encode

    t = np.arange(rate // 10) / rate  # 100 ms of 440 Hz
    wire = encode((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, fmt)
    assert len(wire) == rate // 10 * width
    out = track_samples(wire, fmt)
    assert out.dtype == np.int16 and abs(len(out) - RATE // 10) <= 2
    assert 12_000 < np.abs(out).max() < 20_000  # the tone's level, through G.711 too


def test_the_queue_is_bounded_and_takes_only_48k_int16():
    q = OutboundAudio(max_queued_s=0.1)
    assert q.push(tone(100), "r", "i") and not q.push(tone(20), "r", "i")
    with pytest.raises(ValueError, match="int16"):
        q.push(np.zeros(10, dtype=np.float32), "r", "i")


def test_the_answer_asks_for_a_voice_bitrate():
    with_fmtp = "a=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;maxaveragebitrate=510000;useinbandfec=1\r\n"
    out = with_opus_bitrate(with_fmtp, 111, 32000)
    assert "a=fmtp:111 minptime=10;useinbandfec=1;maxaveragebitrate=32000\r\n" in out
    bare = "a=rtpmap:111 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
    out = with_opus_bitrate(bare, 111, 32000)
    assert out == "a=rtpmap:111 opus/48000/2\r\na=fmtp:111 maxaveragebitrate=32000\r\na=rtpmap:0 PCMU/8000\r\n"


def test_webrtc_config_keys_are_checked():
    from gateway.core.config import ConfigError, load_config

    cfg = load_config(None, **{"webrtc.udp_ports": [40000, 40099], "webrtc.public_ip": "203.0.113.9"})
    assert cfg.webrtc.udp_ports == (40000, 40099) and cfg.webrtc.public_ip == "203.0.113.9"
    turn = {"urls": "turn:t.example:3478", "username": "u", "credential": "p"}
    ice = load_config(None, **{"webrtc.ice_servers": [turn]})
    assert ice.webrtc.ice_servers[0].username == "u"
    for bad in ({"webrtc.udp_ports": [40099, 40000]}, {"webrtc.udp_ports": [80, 90]}, {"webrtc.offers_per_s": 0}):
        with pytest.raises(ConfigError):
            load_config(None, **bad)
