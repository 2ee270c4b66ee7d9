"""The browser client speaks: real headless Chromium, a real server with the Piper voice, the WebSocket.

The speaker button asks the session for audio; ``response.output_audio.delta`` chunks go into the
page's AudioWorklet (web/player-worklet.js), which counts what it played. Stop, or the user talking
over the reply (barge-in through the fake microphone), halts playback at once and sends
``conversation.item.truncate`` with the played milliseconds; the page then greys the reply past the
transcript the server kept.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from tests.conftest import requires_espeak
from tests.e2e.browser_fixtures import Recorder, requires_browser
from tests.e2e.browser_page import assert_clean, shot, wait_for

pytestmark = requires_browser

RATE = 24_000
VOICE = "window.streamOmni.state.voice"
SPOKEN_REPLY = {"session.temperature": 1.0, "session.max_output_tokens": 120}


def speaker_on(page: Any, rec: Recorder) -> None:
    page.click("#speaker")
    page.wait_for_selector('#speaker[aria-pressed="true"]')
    assert page.evaluate(f"{VOICE}.speaker.on")
    [update] = wait_for(page, lambda: rec.sent_of("session.update"))
    assert update["session"]["output_modalities"] == ["audio"]
    updated = wait_for(page, lambda: rec.received_of("session.updated"))
    assert updated[-1]["session"]["output_modalities"] == ["audio"]


def long_replies(page: Any, rec: Recorder) -> None:
    """The tiny random model's replies run to their token cap: it never samples the tokenizer's end
    tokens (<|endoftext|>, <|im_start|>, <|im_end|>), so a reply is always many words long and there
    is speech left unheard to stop."""
    before = len(rec.received_of("session.updated"))
    bias = {"0": -100, "1": -100, "2": -100}
    page.evaluate(f"b => {VOICE}.hooks.client().send({{type: 'session.update', session: {{logit_bias: b}}}})", bias)
    updated = wait_for(page, lambda: rec.received_of("session.updated")[before:])
    assert updated[-1]["session"]["logit_bias"] == {k: float(v) for k, v in bias.items()}


def wait_played(page: Any, ms: int, timeout_ms: int = 120_000) -> None:
    page.wait_for_function(f"n => {VOICE}.speaker.report.played >= n", arg=ms * RATE // 1000, timeout=timeout_ms)


def delta_samples(rec: Recorder, item_id: str) -> list[int]:
    """The samples in each output_audio.delta of ``item_id``, in arrival order."""
    return [
        len(base64.b64decode(e["delta"])) // 2
        for e in rec.received_of("response.output_audio.delta")
        if e["item_id"] == item_id
    ]


def check_truncated(page: Any, rec: Recorder, reason: str, some_unheard: bool) -> dict[str, Any]:
    """What every halt must show: the truncate carries the worklet's played ms; the worklet got whole
    chunks, in order; playback stopped there; the server's kept transcript is what the page shows heard."""
    page.wait_for_selector(".md[data-unheard]", state="attached", timeout=30_000)
    stop = page.evaluate(f"{VOICE}.lastStop")
    assert stop["reason"] == reason, stop
    trunc = next(t for t in rec.sent_of("conversation.item.truncate") if t["item_id"] == stop["itemId"])
    assert trunc["item_id"] == stop["itemId"] and trunc["content_index"] == 0
    # the played position, from the worklet's own sample count
    assert trunc["audio_end_ms"] == stop["audioEndMs"] == stop["played"] * 1000 // RATE, (trunc, stop)
    assert trunc["audio_end_ms"] >= 200, trunc
    # the chunks reached the worklet whole and in order: what it had received is a prefix of the deltas
    sizes = delta_samples(rec, stop["itemId"])
    prefixes = [sum(sizes[:k]) for k in range(len(sizes) + 1)]
    assert stop["received"] in prefixes and stop["received"] >= stop["played"] > 0, (stop, sizes)
    # playback stopped: nothing more of that item is played
    played = page.evaluate(f"{VOICE}.speaker.playedBy.get({stop['itemId']!r})")
    time.sleep(1.0)  # what would have played meanwhile: 24 000 samples
    assert page.evaluate(f"{VOICE}.speaker.playedBy.get({stop['itemId']!r})") == played == stop["played"]
    # the server cut the transcript to what was heard; the page greys the rest
    item = stop["itemId"]
    echoes = wait_for(page, lambda: [e for e in rec.received_of("conversation.item.truncated") if e["item_id"] == item])
    echo = echoes[0]
    assert echo["audio_end_ms"] == trunc["audio_end_ms"]
    kept = [
        e["item"]["content"][0]["transcript"]
        for e in wait_for(page, lambda: rec.received_of("conversation.item.retrieved"))
        if e["item"]["id"] == stop["itemId"]
    ]
    block = f'.md[data-item-id="{stop["itemId"]}"]'
    heard = page.evaluate(f"document.querySelector('{block}').heardText")
    full = page.evaluate(f"document.querySelector('{block}').rawText")
    assert kept == [heard], (kept, heard)
    assert full.startswith(heard.rstrip()), (heard, full)
    # greyed: exactly the shown text past the heard transcript's rendered length
    unheard = page.evaluate(f"[...document.querySelectorAll('{block} .unheard')].map(s => s.textContent).join('')")
    shown = page.evaluate(f"document.querySelector('{block}').textContent")
    keep = page.evaluate("async ([h, f]) => (await import('/heard.js')).renderedLength(h, f)", [heard, full])
    assert len(unheard) == len(shown) - keep == int(page.get_attribute(block, "data-unheard")), (unheard, shown, keep)
    assert shown.endswith(unheard)
    if some_unheard:  # the voice was stopped well before the end of the text shown
        assert len(heard) < len(full.rstrip()) and unheard.strip(), (heard, full)
    return stop


def test_speaker_plays_the_stream_and_stop_truncates_at_the_played_position(open_page, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False, **SPOKEN_REPLY}) as addr:
        page, rec = open_page(addr)
        speaker_on(page, rec)
        long_replies(page, rec)
        page.fill("#input", "Tell me a long story about the sea.")
        page.press("#input", "Enter")
        wait_played(page, 600)
        # and more of it already here than played: words shown, not yet heard (a chunk is a clause or more)
        page.wait_for_function(f"() => {VOICE}.speaker.report.queued >= {RATE // 2}", timeout=120_000)
        assert not page.is_disabled("#stop")  # the voice can be stopped, even after the text has ended
        shot(page, "13-speaking")
        page.click("#stop")
        stop = check_truncated(page, rec, "stop", some_unheard=True)
        assert not page.evaluate(f"{VOICE}.speaker.playing")
        # the reply is shown as the audio transcript; no text deltas for a spoken reply
        assert rec.received_of("response.output_audio_transcript.delta")
        assert not rec.received_of("response.output_text.delta")
        chunks = page.evaluate(f"{VOICE}.speaker.report.chunks")
        assert chunks == page.evaluate(f"{VOICE}.speaker.pushed") and chunks >= 1
        assert stop["played"] <= page.evaluate(f"{VOICE}.speaker.samplesPushed")
        shot(page, "14-stopped-greyed")
        assert_clean(rec)


@requires_espeak
def test_barge_in_stops_the_voice_and_truncates_what_was_played(open_page, tiny_backend, server_factory):
    with server_factory(tiny_backend, **SPOKEN_REPLY) as addr:
        page, rec = open_page(addr)
        speaker_on(page, rec)
        long_replies(page, rec)
        page.fill("#input", "Tell me a long story about the sea.")
        page.press("#input", "Enter")
        wait_played(page, 300)
        page.click("#mic")  # the fake microphone: 1 s of silence, then the user talks over the reply
        page.wait_for_selector('#mic[aria-pressed="true"]')
        stop = check_truncated(page, rec, "barge-in", some_unheard=False)
        assert rec.received_of("input_audio_buffer.speech_started")
        # the reply ended (cut by the server if it was still being written); its item is the one truncated
        item = stop["itemId"]
        ended = wait_for(page, lambda: [e for e in rec.received_of("response.done") if item in str(e["response"])])
        assert ended[0]["response"]["status"] in ("cancelled", "completed"), ended[0]["response"]["status"]
        page.click("#mic")
        page.wait_for_selector('#mic[aria-pressed="false"]')
        assert_clean(rec)
