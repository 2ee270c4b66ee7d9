"""The web client's camera button: a frame from Chromium's fake camera is attached and sent as an input_image."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from tests.e2e.browser_fixtures import requires_browser
from tests.e2e.browser_page import ENDED, assert_clean

pytestmark = requires_browser

NO_AUDIO = {"audio.enabled": False, "vision.mode": "none"}


def test_a_camera_snapshot_is_attached_and_sent_as_a_jpeg(open_page, speech_wav, tiny_backend, server_factory):
    if speech_wav is None:  # the fake media devices come with the fake microphone (needs espeak-ng)
        pytest.skip("Chromium's fake camera is set up with the fake microphone, which needs espeak-ng")
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        page, rec = open_page(addr)
        assert page.is_visible("#camera")
        page.click("#camera")
        page.wait_for_selector('#attachments .chip img[alt="Attached: camera snapshot.jpg"]')
        page.fill("#input", "what is this?")
        page.press("#input", "Enter")
        page.wait_for_function("() => document.querySelectorAll('#attachments .chip').length === 0")
        [create] = rec.sent_of("conversation.item.create")
        image, question = create["item"]["content"]
        assert question == {"type": "input_text", "text": "what is this?"}
        head, b64 = image["image_url"].split(",", 1)
        assert head == "data:image/jpeg;base64"
        frame = Image.open(io.BytesIO(base64.b64decode(b64)))
        assert frame.format == "JPEG" and frame.width >= 320 and frame.height >= 240
        # vision is off on this server: the refusal is shown, not lost
        page.wait_for_selector('article.user[data-status="failed"]', timeout=30_000)
        assert_clean(rec, allow=("unsupported_content",))


def test_over_webrtc_the_snapshot_goes_on_the_data_channel_and_is_read_by_the_server(
    open_page, speech_wav, tiny_backend, server_factory
):
    if speech_wav is None:
        pytest.skip("Chromium's fake camera is set up with the fake microphone, which needs espeak-ng")
    conf = {"audio.enabled": False, "session.max_output_tokens": 8}  # vision.mode: local, the default
    with server_factory(tiny_backend, **conf) as addr:
        page, rec = open_page(addr, query="transport=webrtc")
        assert page.evaluate("window.streamOmni.client.constructor.name") == "RtcClient"
        page.click("#camera")
        page.wait_for_selector('#attachments .chip img[alt="Attached: camera snapshot.jpg"]')
        page.fill("#input", "what is this?")
        page.press("#input", "Enter")
        page.wait_for_selector(ENDED, timeout=60_000)
        (live,) = list(addr.services.registry.sessions.values())
        texts = [p.get("text", "") for item in live.session.items for p in item.get("content", [])]
        assert any(t.startswith("[image: ") for t in texts), texts  # described by the offline models
        assert_clean(rec)
