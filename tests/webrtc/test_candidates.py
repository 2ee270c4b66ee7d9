"""An offer's ICE candidates are addresses the server would send STUN to: screened before aiortc sees the
offer (``gateway.webrtc.webrtc_sdp.screen_candidates``), pure, and end to end with a real aiortc offer on loopback
whose extra candidate is a UDP socket of the test's own that must hear nothing. No packet leaves 127.0.0.0/8:
what must not be contacted is shown by the pure screen, never by trying it."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription

from gateway.core.config import Config
from gateway.core.config_calls import WebRtcConfig
from gateway.webrtc.checks import CheckPacer
from gateway.webrtc.signalling import private_candidates_checked
from gateway.webrtc.webrtc_sdp import CandidatePolicy, OfferError, check_offer, screen_candidates
from testkit.rtcclient import PlayTrack, post_offer
from tests.webrtc.test_webrtc_pure import OFFER

REFUSED_ALWAYS = [
    "127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "169.254.169.254", "fe80::1", "0.0.0.0", "::",
    "224.0.0.251", "ff02::1", "240.0.0.1", "metadata.internal", "evil.example.com",
]  # fmt: skip
PRIVATE = ["10.0.0.5", "172.16.3.4", "192.168.1.2", "fd00::1", "100.64.0.1", "laptop-1234.local"]
PUBLIC = ["8.8.8.8", "2001:4860:4860::8888"]


def candidate(address: str, port: int = 40000, n: int = 1) -> str:
    return f"a=candidate:{n} 1 udp 2130706431 {address} {port} typ host"


def kept(addresses: list[str], policy: CandidatePolicy) -> list[str]:
    sdp = OFFER + "".join(candidate(a, n=i) + "\n" for i, a in enumerate(addresses))
    return re.findall(r"^a=candidate:\S+ \d+ \S+ \d+ (\S+) ", screen_candidates(sdp, policy), re.M)


def test_loopback_link_local_and_names_are_never_kept_and_private_ones_only_where_allowed():
    everything = REFUSED_ALWAYS + PRIVATE + PUBLIC
    assert kept(everything, CandidatePolicy(max_candidates=64, allow_private=True)) == PRIVATE + PUBLIC
    assert kept(everything, CandidatePolicy(max_candidates=64, allow_private=False)) == PUBLIC


def test_private_candidates_are_refused_unless_the_config_allows_them():
    assert kept(PRIVATE + PUBLIC, CandidatePolicy(max_candidates=64)) == PUBLIC
    assert WebRtcConfig().allow_private_candidates is None  # auto: see the next test


def test_private_candidates_are_checked_by_default_only_on_a_local_server():
    local = Config()  # loopback, no API keys: the caller is on this machine
    assert private_candidates_checked(local)
    keyed = Config.model_validate({"server": {"api_keys": ["sk-test"]}})
    assert not private_candidates_checked(keyed)
    public = Config.model_validate({"server": {"host": "0.0.0.0", "api_keys": ["sk-test"]}})
    assert not private_candidates_checked(public)
    forced = Config.model_validate({"server": {"api_keys": ["sk-test"]}, "webrtc": {"allow_private_candidates": True}})
    assert private_candidates_checked(forced)
    refused = Config.model_validate({"webrtc": {"allow_private_candidates": False}})
    assert not private_candidates_checked(refused)


def test_check_starts_are_paced_after_a_burst():
    now = [0.0]
    pacer = CheckPacer(rate_per_s=10, burst=3, clock=lambda: now[0])
    assert [pacer.reserve() for _ in range(3)] == [0, 0, 0]  # the burst goes at once
    waits = [pacer.reserve() for _ in range(4)]  # then each waits its turn behind the last
    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.4])
    now[0] = 10.0  # a quiet while refills the burst, never past it
    assert [pacer.reserve() for _ in range(3)] == [0, 0, 0]
    assert pacer.reserve() == pytest.approx(0.1)


def test_an_offer_over_the_candidate_cap_is_refused_naming_the_key():
    many = OFFER + "".join(candidate(f"8.8.{i // 250}.{i % 250}", n=i) + "\n" for i in range(750))
    with pytest.raises(OfferError, match=r"750 ICE candidates.*webrtc\.max_candidates"):
        check_offer(many)
    assert check_offer(OFFER + candidate("8.8.8.8") + "\n", CandidatePolicy(1)).sdp.count("a=candidate") == 1


@pytest.mark.parametrize(
    "sdp",
    [
        OFFER.replace("a=sendrecv\n", "a=sendrecv\na=maxptime:" + "9" * 4300 + "\n"),
        OFFER.replace("a=sendrecv\n", "a=sendrecv\na=maxptime:0\n"),
        OFFER.replace("111 0", "9" * 5000 + " 0").replace("rtpmap:111", "rtpmap:" + "9" * 5000),
    ],
)
def test_huge_numbers_in_an_offer_are_an_offer_error_not_a_crash(sdp):
    with pytest.raises(OfferError, match="maxptime|Opus"):
        check_offer(sdp)


async def test_a_real_offer_is_answered_and_its_loopback_candidate_never_hears_a_stun_check(
    tiny_backend, server_factory
):
    canary = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    canary.bind(("127.0.0.1", 0))
    canary.setblocking(False)
    port = canary.getsockname()[1]
    pc = RTCPeerConnection()
    try:
        pc.addTrack(PlayTrack())
        channel = pc.createDataChannel("oai-events")
        opened = asyncio.Event()
        channel.on("open", opened.set)
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        first = re.search(r"^a=candidate:.*$", sdp, re.M)
        assert first is not None
        planted = candidate("127.0.0.1", port, 99) + "\r\n" + candidate("::ffff:127.0.0.1", port, 98) + "\r\n"
        sdp = sdp[: first.start()] + planted + sdp[first.start() :]
        with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
            resp = await post_offer(addr, sdp)
            assert resp.status_code == 201, resp.text
            await pc.setRemoteDescription(RTCSessionDescription(sdp=resp.text, type="answer"))
            await asyncio.wait_for(opened.wait(), 20)  # the call connects on the offer's real candidate
            loop = asyncio.get_running_loop()
            heard = None
            try:  # checks start as soon as the answer is made; the planted one is the highest priority
                heard = await asyncio.wait_for(loop.sock_recv(canary, 2048), 3)
            except TimeoutError:
                pass
            assert heard is None, "the server sent a STUN check to a loopback candidate"
            r = await post_offer(addr, sdp.replace("a=sendrecv", "a=sendrecv\r\na=maxptime:" + "9" * 4300))
            assert r.status_code == 400 and "a=maxptime" in r.json()["error"]["message"]
    finally:
        await pc.close()
        canary.close()


async def test_a_call_starts_its_stun_checks_at_the_configured_rate(tiny_backend, server_factory):
    """Sixteen candidates of the offer are UDP sockets of the test's own on this machine's LAN address:
    the server sends binding requests to them at ``webrtc.stun_checks_per_s`` after its burst, counted by
    transaction (a retransmission repeats one), not all sixteen within aioice's 20 ms pacing."""
    pc = RTCPeerConnection()
    canaries: list[socket.socket] = []
    try:
        pc.addTrack(PlayTrack())
        pc.createDataChannel("oai-events")
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        first = re.search(r"^a=candidate:\S+ \d+ \S+ \d+ (\d+\.\d+\.\d+\.\d+) .*$", sdp, re.M)
        assert first is not None, "the client gathered no IPv4 host candidate"
        for _ in range(16):
            canary = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            canary.bind((first.group(1), 0))
            canary.setblocking(False)
            canaries.append(canary)
        address = first.group(1)
        planted = "".join(candidate(address, c.getsockname()[1], 90 + i) + "\r\n" for i, c in enumerate(canaries))
        sdp = sdp[: first.start()] + planted + sdp[first.start() :]
        cfg = {"audio.enabled": False, "webrtc.max_candidates": 32}
        cfg |= {"webrtc.stun_checks_per_s": 2.0, "webrtc.stun_checks_burst": 2}
        with server_factory(tiny_backend, **cfg) as addr:
            resp = await post_offer(addr, sdp)
            assert resp.status_code == 201, resp.text
            window = 1.5
            seen: set[bytes] = set()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + window
            while loop.time() < deadline:
                for c in canaries:
                    try:
                        data = c.recv(2048)
                    except BlockingIOError:
                        continue
                    if data[:2] == b"\x00\x01":  # a STUN binding request
                        seen.add(data[8:20])  # its transaction id
                await asyncio.sleep(0.01)
    finally:
        await pc.close()
        for c in canaries:
            c.close()
    assert 1 <= len(seen) <= 2 + 2 * window + 1, len(seen)
