"""The browser client over WebRTC, and its fall back to the WebSocket: real headless Chromium, real server.

With no ``?transport=`` the page asks ``GET /v1/realtime/calls`` and, when the server takes calls,
makes one: its fake microphone goes out as an Opus track (echo cancellation, noise suppression and
gain control on), the events come on ``oai-events``, and no WebSocket is opened. When the server has
WebRTC off, or the call's ICE cannot get through (UDP blocked), the page goes on over the WebSocket.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import requires_espeak
from tests.e2e.browser_fixtures import Recorder, requires_browser
from tests.e2e.browser_page import (
    ENDED,
    NO_AUDIO,
    assert_clean,
    one_turn_wav,
    replies,
    shot,
    wait_for,
    wait_reply_text,
)

pytestmark = requires_browser

CLIENT = "window.streamOmni.client"


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """This module's fake microphone: one voice turn (``one_turn_wav``)."""
    return one_turn_wav(tmp_path_factory, "fake-mic-webrtc")


def open_auto(browser: Any, addr: str, query: str = "") -> tuple[Any, Any, Recorder, list[tuple[str, int]]]:
    """A page with no ``transport`` forced; also returns the (url, status) of every POST it made."""
    ctx = browser.new_context()
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    rec = Recorder(page)
    posts: list[tuple[str, int]] = []
    page.on("response", lambda r: posts.append((r.url, r.status)) if r.request.method == "POST" else None)
    page.goto(f"http://{addr}/{query}")
    return ctx, page, rec, posts


def type_and_get_reply(page: Any) -> None:
    page.fill("#input", "Hello there")
    page.press("#input", "Enter")
    wait_reply_text(page, 1)
    page.wait_for_selector(ENDED, timeout=60_000)
    assert replies(page)[0]


@requires_espeak
def test_the_client_talks_over_webrtc_and_shows_the_transcript_and_reply(browser, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"session.max_output_tokens": 16, "session.temperature": 1.0}) as addr:
        ctx, page, rec, posts = open_auto(browser, addr)
        try:
            page.wait_for_selector('#conn[data-state="open"][data-transport="webrtc"]')
            assert page.evaluate(f"{CLIENT}.pc.connectionState") == "connected"
            assert [st for url, st in posts if url == f"http://{addr}/v1/realtime/calls"] == [201]
            page.click("#mic")
            page.wait_for_selector('#mic[aria-pressed="true"]')
            # the microphone is the call's track, with the browser's voice processing on
            settings = page.evaluate(f"{CLIENT}.micStream.getAudioTracks()[0].getSettings()")
            assert settings.get("echoCancellation") is True, settings
            sender = page.evaluate(f"{CLIENT}.sender.track && {CLIENT}.sender.track.id")
            assert sender == page.evaluate(f"{CLIENT}.micStream.getAudioTracks()[0].id")
            page.wait_for_selector('article.user.voice[data-final="true"]', timeout=90_000)
            transcript = page.inner_text('article.user.voice[data-final="true"] .text').lower()
            assert "kitchen" in transcript or "window" in transcript, transcript
            page.wait_for_selector(ENDED, timeout=120_000)  # the reply follows the voice turn by itself
            assert replies(page)[0], "the reply is shown"
            shot(page, "15-webrtc-voice-turn")
            page.click("#mic")  # off: the call goes on sending silence, and the microphone is released
            page.wait_for_selector('#mic[aria-pressed="false"]')
            assert page.evaluate(f"{CLIENT}.sender.track && {CLIENT}.sender.track.readyState") == "live"
            assert page.evaluate(f"{CLIENT}.micStream") is None
            assert rec.sockets == [], rec.sockets  # no WebSocket at all
            assert page.evaluate(f"{CLIENT}.transport") == "webrtc"
            assert_clean(rec)
        finally:
            ctx.close()


def test_a_server_without_webrtc_gets_the_websocket(browser, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{**NO_AUDIO, "webrtc.enabled": False, "session.max_output_tokens": 12}) as addr:
        ctx, page, rec, posts = open_auto(browser, addr)
        try:
            page.wait_for_selector('#conn[data-state="open"][data-transport="websocket"]')
            assert httpx.get(f"http://{addr}/v1/realtime/calls", timeout=10).status_code == 404
            assert posts == []  # no offer was made
            assert [u.split("?")[0] for u in rec.sockets] == [f"ws://{addr}/v1/realtime"]
            type_and_get_reply(page)
            assert rec.sent_of("conversation.item.create")
            assert_clean(rec, allow=("404",))  # the probe's 404 is logged by Chromium as a failed resource
        finally:
            ctx.close()


UNREACHABLE = "198.51.100.1"  # TEST-NET-2: routed nowhere


def unreachable_answer(route: Any) -> None:
    """Answer the page's offer with the server's real answer whose ICE candidates cannot be reached, as
    behind a firewall that drops UDP: every IPv4 candidate names a documentation address, and the IPv6
    ones are gone. (Chromium's own ``--force-webrtc-ip-handling-policy=disable_non_proxied_udp`` still
    let a loopback call through here.)"""
    if route.request.method != "POST":
        route.continue_()
        return
    response = route.fetch()
    sdp = response.text()
    sdp = re.sub(r"^a=candidate:\S+ \d+ udp \d+ [0-9a-f:]*:[0-9a-f:]* \d+ .*\r?\n", "", sdp, flags=re.M | re.I)
    sdp = re.sub(r"^(a=candidate:\S+ \d+ udp \d+ )\d+\.\d+\.\d+\.\d+", rf"\g<1>{UNREACHABLE}", sdp, flags=re.M | re.I)
    route.fulfill(response=response, body=sdp)


def test_ice_blocked_the_call_falls_back_to_the_websocket(browser, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{**NO_AUDIO, "session.max_output_tokens": 12}) as addr:
        ctx = browser.new_context()
        ctx.route(f"http://{addr}/v1/realtime/calls", unreachable_answer)
        ctx.set_default_timeout(30_000)
        page = ctx.new_page()
        rec = Recorder(page)
        posts: list[tuple[str, int]] = []
        page.on("response", lambda r: posts.append((r.url, r.status)) if r.request.method == "POST" else None)
        page.goto(f"http://{addr}/?rtc_timeout_ms=4000")
        try:
            page.wait_for_selector('#conn[data-state="open"][data-transport="websocket"]')
            reason = page.evaluate("window.streamOmni.state.fallbackReason")
            assert "no connection" in reason or "ICE" in reason, reason
            # the call was offered (201), then hung up when it could not connect
            assert (f"http://{addr}/v1/realtime/calls", 201) in posts, posts
            hangups = wait_for(page, lambda: [st for url, st in posts if url.endswith("/hangup")])
            assert hangups == [200], posts
            assert [u.split("?")[0] for u in rec.sockets] == [f"ws://{addr}/v1/realtime"]
            type_and_get_reply(page)
            shot(page, "16-webrtc-fell-back")
            assert_clean(rec)
        finally:
            ctx.close()
