"""Constants and helpers of the browser tests: reading the page, checking it stayed clean."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from testkit.espeak import ESPEAK, silence, speak, wav_bytes
from tests.e2e.browser_fixtures import (
    ARTIFACTS,
    Recorder,
)

SPOKEN = "Please open the kitchen window."


def one_turn_wav(tmp_path_factory: Any, folder: str) -> Path | None:
    """Chromium's fake microphone for one voice turn (None without espeak-ng): the speech, then 20 s of silence
    before the WAV loops. With less, a loaded box transcribes slower than the loop repeats, every turn finds the
    next one pending, and the held reply waits for it (the session answers turns in order)."""
    if ESPEAK is None:
        return None
    rate = 48_000
    audio = np.concatenate([silence(1.0, rate), speak(SPOKEN, rate), silence(20.0, rate)])
    path = Path(tmp_path_factory.mktemp(folder)) / "speech.wav"
    path.write_bytes(wav_bytes(audio, rate))
    return path


# Whisper is only loaded for the microphone test. The tiny random-init model, greedy, writes
# little but newlines; sampled (temperature 1) it writes visible gibberish — what these tests need.
NO_AUDIO = {"audio.enabled": False, "session.temperature": 1.0}
STEP_S = 0.02  # per model step: a reply of N tokens lasts about N × 20 ms
ENDED = 'article.assistant:not([data-status="in_progress"]):not([data-status="resuming"])'

# Records each distinct length of the assistant's rendered text as the DOM changes.
WATCH_GROWTH = """() => {
  window.__growth = [];
  const log = document.getElementById('log');
  new MutationObserver(() => {
    const a = log.querySelector('article.assistant:last-of-type .md');
    const n = a ? a.textContent.length : 0;
    const g = window.__growth;
    if (n > 0 && g[g.length - 1] !== n) g.push(n);
  }).observe(log, {childList: true, subtree: true, characterData: true});
}"""

RAW_REPLIES = """() => [...document.querySelectorAll('article.assistant')].map(
  a => [...a.querySelectorAll('.md')].map(b => b.rawText || '').join(''))"""


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def replies(page: Any) -> list[str]:
    return list(page.evaluate(RAW_REPLIES))


def wait_reply_text(page: Any, min_chars: int = 1) -> None:
    page.wait_for_function(
        """n => { const a = document.querySelector('article.assistant:last-of-type .md');
                  return a && (a.rawText || '').length >= n; }""",
        arg=min_chars,
    )


def done_texts(rec: Recorder) -> dict[str, str]:
    """response id → the final text the server said it sent (response.output_text.done)."""
    return {e["response_id"]: e["text"] for e in rec.received_of("response.output_text.done")}


def assert_clean(rec: Recorder, allow: tuple[str, ...] = ()) -> None:
    assert rec.page_errors == [], rec.page_errors
    assert rec.dialogs == [], rec.dialogs
    assert rec.unexpected_console_errors(allow) == [], rec.console_errors


def png_bytes(width: int = 48, height: int = 32) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(7)
    im = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def wait_for(page: Any, cond: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """Poll ``cond`` (a check of what the Recorder saw) until it is truthy, and return it. Playwright
    delivers frame and response events only while the page is being waited on, hence the short waits."""
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < deadline, "timed out waiting for the page"
        page.wait_for_timeout(50)
    return value
