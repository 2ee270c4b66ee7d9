"""The pure cores of the SIP server's transports and policies: stream framing, digest authentication (RFC test
vectors, nonces, replays) and session timers (RFC 4028) on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from gateway.telephony import digest, session_timer
from gateway.telephony.digest import DigestAuth
from gateway.telephony.framing import FramingError, StreamFramer
from gateway.telephony.session_timer import Expire, Refresh, SessionClock, Timer, TooSmall, negotiate

INVITE = (
    b"INVITE sip:a@127.0.0.1 SIP/2.0\r\nCall-ID: 1\r\nContent-Type: application/sdp\r\n"
    b"Content-Length: 10\r\n\r\n0123456789"
)
BYE = b"BYE sip:a@127.0.0.1 SIP/2.0\r\nCall-ID: 1\r\nl: 0\r\n\r\n"


def test_stream_framing_cuts_messages_by_content_length_whatever_the_chunks():
    stream = b"\r\n\r\n" + INVITE + b"\r\n" + BYE + INVITE  # keep-alive CRLFs between messages are skipped
    for size in (1, 7, 64, len(stream)):
        f = StreamFramer()
        got = [m for i in range(0, len(stream), size) for m in f.feed(stream[i : i + size])]
        assert got == [INVITE, BYE, INVITE], size
    f = StreamFramer()
    assert f.feed(INVITE[:-3]) == []  # the body is not all there yet
    assert f.feed(INVITE[-3:]) == [INVITE]


def test_stream_framing_refuses_what_cannot_be_framed():
    with pytest.raises(FramingError, match="Content-Length"):
        StreamFramer().feed(b"BYE sip:a@b SIP/2.0\r\nCall-ID: 1\r\n\r\n")
    with pytest.raises(FramingError, match="bytes"):
        StreamFramer(max_message=100).feed(b"INVITE sip:a@b SIP/2.0\r\nContent-Length: 500\r\n\r\n")
    with pytest.raises(FramingError, match="end of headers"):
        StreamFramer(max_message=100).feed(b"INVITE sip:a@b SIP/2.0\r\n" + b"X: y\r\n" * 40)


def test_digest_response_matches_the_rfc_test_vectors():
    # RFC 2617 §3.5
    assert (
        digest.response(
            "MD5",
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
            "GET",
            "/dir/index.html",
            "dcd98b7102dd2f0e8b11d0f600bfb0c093",
            "00000001",
            "0a4f113b",
            "auth",
        )  # fmt: skip
        == "6629fae49393a05397450978507c4ef1"
    )
    # RFC 7616 §3.9.1 (the computation RFC 8760 uses for SIP): the same request in MD5 and SHA-256
    args = (
        "Mufasa", "http-auth@example.org", "Circle of Life", "GET", "/dir/index.html",
        "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", "00000001",
        "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", "auth",
    )  # fmt: skip
    assert digest.response("MD5", *args) == "8ca523f5e9506fed4657c9700eebdbec"
    assert digest.response("SHA-256", *args) == "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"


def answer(auth: DigestAuth, challenge: str, password: str = "secret", nc: str = "00000001", **over: str) -> dict:
    fields = dict(p.split("=", 1) for p in challenge.removeprefix("Digest ").split(", "))
    nonce, algorithm = fields["nonce"].strip('"'), fields["algorithm"]
    params = {"username": "trunk", "realm": auth.realm, "nonce": nonce, "uri": "sip:a@127.0.0.1", "qop": "auth"}
    params |= {"nc": nc, "cnonce": "c0ffee", "algorithm": algorithm} | over
    params["response"] = digest.response(
        algorithm, params["username"], auth.realm, password, "INVITE", params["uri"], nonce, params["nc"],
        params["cnonce"], params["qop"],
    )  # fmt: skip
    return params


def test_digest_auth_lets_in_the_right_answer_and_names_what_is_wrong_with_the_others():
    auth = DigestAuth("stream-omni", {"trunk": "secret"}, b"k" * 32, nonce_ttl_s=300)
    sha, md5 = auth.challenges(1000.0)
    assert "algorithm=SHA-256" in sha and "algorithm=MD5" in md5  # RFC 8760: the preferred one first
    assert auth.check("INVITE", answer(auth, sha), 1010.0).ok
    assert auth.check("INVITE", answer(auth, md5, nc="00000002"), 1010.0).ok  # one nonce in both challenges
    wrong = auth.check("INVITE", answer(auth, sha, password="guess"), 1010.0)
    assert not wrong.ok and "wrong response" in wrong.reason and not wrong.stale
    assert "no user" in auth.check("INVITE", answer(auth, sha, username="mallory"), 1010.0).reason
    assert "realm" in auth.check("INVITE", answer(auth, sha, realm="elsewhere"), 1010.0).reason
    # a nonce this server did not sign, and one whose time was altered
    nonce = answer(auth, sha)["nonce"]
    forged = answer(auth, sha.replace(nonce, DigestAuth("x", {}, b"j" * 32).nonce(1000.0)))
    assert "did not make" in auth.check("INVITE", forged, 1010.0).reason
    altered = answer(auth, sha.replace(nonce, DigestAuth("x", {}, b"j" * 32).nonce(1001.0)[:11] + nonce[11:]))
    assert "did not make" in auth.check("INVITE", altered, 1010.0).reason
    assert "did not make" in auth.check("INVITE", answer(auth, sha, nonce="!!"), 1010.0).reason
    # the same Authorization again is a replay; a higher nonce count is the phone's next request
    replayed = answer(auth, sha, nc="00000005")
    assert auth.check("INVITE", replayed, 1010.0).ok
    assert "replay" in auth.check("INVITE", replayed, 1011.0).reason
    assert auth.check("INVITE", answer(auth, sha, nc="00000006"), 1012.0).ok
    # past its lifetime the right answer is stale: the phone retries on a fresh nonce without asking the user
    late = auth.check("INVITE", answer(auth, md5, nc="00000009"), 1000.0 + 301)
    assert not late.ok and late.stale
    assert "stale=true" in auth.challenges(1301.0, stale=True)[0]


def test_digest_auth_offers_only_the_configured_algorithms():
    auth = DigestAuth("r", {"trunk": "secret"}, b"k" * 32, algorithms=("MD5",))
    (md5,) = auth.challenges(0.0)
    sha_answer = answer(auth, md5.replace("algorithm=MD5", "algorithm=SHA-256"))
    assert "not offered" in auth.check("INVITE", sha_answer, 1.0).reason
    with pytest.raises(ValueError, match="SHA-512"):
        DigestAuth("r", {}, b"k", algorithms=("SHA-512",))


def test_session_timer_negotiation_follows_rfc_4028():
    # the caller supports timers and asks: its interval, its refresher (uac unless it asks for us)
    assert negotiate("1800", None, True, 90, None) == Timer(1800, "uac", True)
    assert negotiate("1800;refresher=uas", None, True, 90, None) == Timer(1800, "uas", True)
    # a caller that cannot refresh (no Supported: timer) but sent Session-Expires (a proxy did): we refresh
    assert negotiate("600;refresher=uac", None, False, 90, None) == Timer(600, "uas", False)
    # below our Min-SE: 422 naming it; the caller's own Min-SE raises the floor of an interval we pick
    assert negotiate("60", None, True, 90, None) == TooSmall(90)
    assert negotiate("300", "90", True, 600, None) == TooSmall(600)
    assert negotiate(None, "2000", True, 90, 1800) == Timer(2000, "uac", True)
    # nothing asked: our default for a caller that supports timers, none for one that does not
    assert negotiate(None, None, True, 90, 1800) == Timer(1800, "uac", True)
    assert negotiate(None, None, False, 90, 1800) is None
    assert negotiate(None, None, True, 90, None) is None
    with pytest.raises(session_timer.TimerError, match="Session-Expires"):
        negotiate("soon", None, True, 90, None)
    with pytest.raises(session_timer.TimerError, match="Min-SE"):
        negotiate("1800", "-1", True, 90, None)


def test_session_clock_refreshes_at_half_and_ends_an_unrefreshed_session():
    # the gateway refreshes (uas): at half the interval, once per period; a refresh answered restarts it
    clock = SessionClock(Timer(120, "uas", False), last=0.0)
    assert clock.next_at() == 60.0 and clock.due(59.9) is None
    assert clock.due(60.0) == Refresh() and clock.due(61.0) is None  # sent once
    clock.refreshed(65.0)
    assert clock.next_at() == 125.0 and clock.due(125.0) == Refresh()
    # never answered: ended at the expiry less min(32 s, a third of the interval)
    assert clock.next_at() == 65.0 + 120 - 32 and clock.due(153.0) == Expire()
    # the caller refreshes (uac): nothing to send; ended if its refresh does not come
    caller = SessionClock(Timer(90, "uac", True), last=0.0)
    assert caller.due(59.0) is None and caller.next_at() == 60.0  # 90 - min(32, 30)
    caller.refreshed(45.0)
    assert caller.due(60.0) is None and caller.due(105.0) == Expire()
    caller.refreshed(110.0, Timer(1800, "uac", True))  # a refresh may change the interval
    assert caller.next_at() == 110.0 + 1800 - 32


def test_lead_refills_the_far_ends_buffer_and_drains_with_the_clock():
    from gateway.telephony.pacer import Lead

    lead = Lead(frames=10)
    assert lead.budget(1) == 11  # the first tick of a reply: this tick's frame and the lead
    lead.sent(11, 1)
    assert lead.ahead == 10 and lead.budget(1) == 1  # then one frame a tick keeps it full
    lead.sent(1, 1)
    lead.sent(0, 3)  # a stall (or the reply's text still being spoken): the far end played 3 of its 10
    assert lead.ahead == 7 and lead.budget(1) == 4
    lead.sent(0, 50)
    assert lead.ahead == 0  # drained: never below empty
    rtp = Lead(frames=0)
    assert rtp.budget(3) == 3  # RTP: only what real time owes, the catch-up of a late tick included


async def test_one_pacer_ticks_every_call_and_stops_when_none_is_left():
    from gateway.telephony.pacer import pacer

    got: dict[str, list[int]] = {"a": [], "b": []}
    two = asyncio.Event()

    def tick(name: str):
        def on(owed: int) -> None:
            got[name].append(owed)
            if len(got["a"]) >= 5 and len(got["b"]) >= 5:
                two.set()

        return on

    clock = pacer()
    assert pacer() is clock  # one per loop
    leave_a, leave_b = clock.join(tick("a")), clock.join(tick("b"))
    await asyncio.wait_for(two.wait(), 5)
    assert len(got["a"]) - len(got["b"]) in (0, 1) and all(1 <= o <= 6 for o in got["a"] + got["b"])
    leave_a()
    leave_b()
    task = clock._task
    assert task is not None
    await asyncio.wait_for(task, 1)  # no call left: the clock stops, and the loop holds no pacer
    assert pacer() is not clock
