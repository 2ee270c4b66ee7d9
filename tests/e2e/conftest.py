"""Fixtures of the browser tests: one headless Chromium per module (with a fake microphone), pages per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from testkit.espeak import ESPEAK, silence, speak, wav_bytes
from tests.conftest import checking_private_candidates
from tests.e2e.browser_fixtures import (
    CHROMIUM,
    CHROMIUM_ARGS,
    Recorder,
    fake_microphone_args,
)
from tests.e2e.browser_page import SPOKEN
from tests.e2e.node_clients import js_clients  # noqa: F401  (the fixture of the Node tests: tests/e2e/js installed)

# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def server_factory(server_factory: Callable[..., Any]) -> Callable[..., Any]:
    """Servers that check private candidates: Chromium and the Node clients run on this machine."""
    return checking_private_candidates(server_factory)


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """espeak-ng speech with silence around it, as the fake microphone's WAV (looped)."""
    if ESPEAK is None:
        return None
    rate = 48_000
    audio = np.concatenate([silence(1.0, rate), speak(SPOKEN, rate), silence(3.0, rate)])
    path = tmp_path_factory.mktemp("fake-mic") / "speech.wav"
    path.write_bytes(wav_bytes(audio, rate))
    return path


@pytest.fixture(scope="module")
def browser(speech_wav: Path | None) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    args = list(CHROMIUM_ARGS)
    if speech_wav is not None:
        args += fake_microphone_args(speech_wav)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[..., tuple[Any, Recorder]]]:
    """open_page(addr, viewport=(w, h), query=…) → (page, recorder), connected to the server. The page
    uses the WebSocket unless ``query`` says otherwise (these tests read its frames)."""
    contexts: list[Any] = []

    def open_(
        addr: str, viewport: tuple[int, int] = (1000, 720), query: str = "transport=websocket", **ctx_kw: Any
    ) -> tuple[Any, Recorder]:
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, **ctx_kw)
        contexts.append(ctx)
        ctx.set_default_timeout(30_000)
        page = ctx.new_page()
        rec = Recorder(page)
        page.goto(f"http://{addr}/?{query}")
        page.wait_for_selector('#conn[data-state="open"]')
        return page, rec

    yield open_
    for ctx in contexts:
        ctx.close()
