"""The OpenAI Agents SDK for JS, unmodified, over its WebRTC transport in real Chromium: one voice turn.

``@openai/agents-realtime`` (pinned in tests/e2e/jsweb/package.json, bundled by the pinned esbuild in a
fixture) runs a ``RealtimeSession`` with ``OpenAIRealtimeWebRTC({baseUrl})`` aimed at the gateway's
``/v1/realtime/calls``; the SDK opens the (fake) microphone itself. The page is served on the gateway's
origin (Playwright answers its two files), so the offer is same-origin, as an app behind one host is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import requires_espeak
from tests.e2e.browser_fixtures import requires_browser
from tests.e2e.browser_jsweb import JsSetupError, bundle
from tests.e2e.browser_page import one_turn_wav

pytestmark = requires_browser

PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Agents SDK over WebRTC</title>
<script type="module" src="agents_webrtc.js"></script></head><body></body></html>"""


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """This module's fake microphone: one voice turn (``one_turn_wav``)."""
    return one_turn_wav(tmp_path_factory, "fake-mic-agents")


@pytest.fixture(scope="module")
def agents_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return bundle("agents_webrtc.mjs", tmp_path_factory.mktemp("jsweb"))
    except JsSetupError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))


def serve_page(bundled: Path) -> Any:
    def handle(route: Any) -> None:
        path = urlsplit(route.request.url).path
        if path.endswith("/agents_webrtc.js"):
            route.fulfill(status=200, body=bundled.read_bytes(), content_type="text/javascript")
        else:
            route.fulfill(status=200, body=PAGE, content_type="text/html")

    return handle


@requires_espeak
def test_the_agents_sdk_webrtc_transport_makes_a_voice_turn(browser, agents_bundle, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"session.max_output_tokens": 16, "session.temperature": 1.0}) as addr:
        ctx = browser.new_context()
        try:
            page = ctx.new_page()
            page_errors: list[str] = []
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.route(f"http://{addr}/__jsweb/**", serve_page(agents_bundle))
            page.goto(f"http://{addr}/__jsweb/index.html")
            page.wait_for_function("() => typeof window.agentsRun === 'function'", timeout=30_000)
            [model] = [m["id"] for m in httpx.get(f"http://{addr}/v1/models", timeout=10).json()["data"]][:1]
            call_id = page.evaluate("([u, m]) => window.agentsRun(u, m)", [f"http://{addr}/v1/realtime/calls", model])
            assert isinstance(call_id, str) and call_id.startswith("rtc_"), call_id
            said = "() => window.agentsReport.history.some(i => i.role === 'user' && i.text.trim())"
            page.wait_for_function(said, timeout=90_000)
            answered = "() => window.agentsReport.history.some(i => i.role === 'assistant' && i.text.trim())"
            page.wait_for_function(answered, timeout=120_000)
            page.wait_for_function("() => window.agentsReport.events.includes('response.done')", timeout=60_000)
            report = page.evaluate("window.agentsReport")
            [user] = [i for i in report["history"] if i["role"] == "user"][:1]
            words = user["text"].lower()
            assert "kitchen" in words or "window" in words, report["history"]
            for seen in ("session.created", "input_audio_buffer.speech_started", "response.done"):
                assert seen in report["events"], (seen, report["events"])
            assert report["connected"] and report["errors"] == [], report["errors"]
            assert page_errors == []
            page.evaluate("window.agentsSession.close()")
        finally:
            ctx.close()
