"""The browser chat client (web/) end to end: real headless Chromium, real uvicorn, tiny model.

Playwright's sync API drives Debian's /usr/bin/chromium (no browser download). Each test
starts a real server (``server_factory``) and loads ``GET /``; assertions look at the DOM the
person sees and, through Playwright's WebSocket frame events, at what crossed the wire.
Screenshots of the main states go to test-artifacts/browser/.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.config import Config
from testkit.speech import ESPEAK, silence, speak, wav_bytes
from tests.conftest import requires_espeak
from tests.e2e.browser_fixtures import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Recorder,
    SlowBackend,
    fake_microphone_args,
    requires_browser,
    tcp_proxy,
)

pytestmark = requires_browser

SPOKEN = "Please open the kitchen window."
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


# ---------------------------------------------------------------------------- fixtures


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
    """open_page(addr, viewport=(w, h)) → (page, recorder), connected to the server."""
    contexts: list[Any] = []

    def open_(addr: str, viewport: tuple[int, int] = (1000, 720), **ctx_kw: Any) -> tuple[Any, Recorder]:
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, **ctx_kw)
        contexts.append(ctx)
        ctx.set_default_timeout(30_000)
        page = ctx.new_page()
        rec = Recorder(page)
        page.goto(f"http://{addr}/")
        page.wait_for_selector('#conn[data-state="open"]')
        return page, rec

    yield open_
    for ctx in contexts:
        ctx.close()


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


# ---------------------------------------------------------------------------- text


def test_typed_message_streams_in_steps_with_figures(open_page, tiny_backend, server_factory):
    backend = SlowBackend(tiny_backend, STEP_S)
    overrides = {**NO_AUDIO, "session.max_output_tokens": 120, "scheduler.strategy": "fast"}
    with server_factory(backend, **overrides) as addr:
        page, rec = open_page(addr)
        assert page.title() == "Stream-Omni"
        assert page.inner_text("#conn-label") == "Connected"
        assert page.inner_text("#model") == "tiny-llama"
        shot(page, "01-empty-connected")

        # Shift+Enter is a new line, not a send
        page.click("#input")
        page.keyboard.type("Tell me a story")
        page.keyboard.press("Shift+Enter")
        page.keyboard.type("about a **lighthouse**.")
        assert page.input_value("#input") == "Tell me a story\nabout a **lighthouse**."
        assert rec.sent_of("conversation.item.create") == []

        page.evaluate(WATCH_GROWTH)
        page.keyboard.press("Enter")
        wait_reply_text(page, 30)
        assert not page.is_disabled("#stop")  # a reply in progress can be stopped
        shot(page, "02-streaming")
        page.wait_for_selector(ENDED, timeout=60_000)

        # what was sent: the typed text as one user item, then a response.create
        [create] = rec.sent_of("conversation.item.create")
        assert create["item"]["content"] == [{"type": "input_text", "text": "Tell me a story\nabout a **lighthouse**."}]
        assert len(rec.sent_of("response.create")) == 1
        assert page.input_value("#input") == ""
        # the user's words are shown exactly as typed (not as Markdown)
        assert page.inner_text("article.user .text") == "Tell me a story\nabout a **lighthouse**."

        # the reply grew in several visible steps, and ended as exactly the server's text
        growth = page.evaluate("window.__growth")
        assert len(growth) >= 3, growth
        assert growth == sorted(growth), growth
        [reply] = replies(page)
        [(rid, final)] = done_texts(rec).items()
        assert reply == final and len(final) > 30
        status = page.get_attribute("article.assistant", "data-status")
        assert status in ("completed", "incomplete")
        assert page.get_attribute("article.assistant .md", "data-repaired") is None
        # per-response figures, discreet, in the reply's footer
        figures = page.inner_text("article.assistant .figures")
        assert "first text" in figures and "tok/s" in figures and "tokens" in figures, figures
        assert page.is_disabled("#stop")
        assert not page.is_disabled("#send") or page.input_value("#input") == ""
        shot(page, "03-reply-done")
        assert_clean(rec)


def test_stop_sends_cancel_and_no_more_text_appears(open_page, tiny_backend, server_factory):
    backend = SlowBackend(tiny_backend, STEP_S)
    with server_factory(backend, **NO_AUDIO) as addr:
        page, rec = open_page(addr)
        page.fill("#input", "Write a very long essay.")
        page.press("#input", "Enter")
        wait_reply_text(page, 10)
        page.click("#stop")
        page.wait_for_selector('article.assistant[data-status="cancelled"]')
        stopped = replies(page)[0]
        shown = page.inner_text("article.assistant .body")
        time.sleep(1.5)  # the model would have written ~75 more tokens by now
        assert replies(page)[0] == stopped
        assert page.inner_text("article.assistant .body") == shown
        assert page.inner_text("article.assistant .status") == "Stopped."
        assert len(rec.sent_of("response.cancel")) == 1
        # on the wire: nothing of that response after its response.done
        done_at = next(i for i, e in enumerate(rec.received) if e["type"] == "response.done")
        rid = rec.received[done_at]["response"]["id"]
        assert rec.received[done_at]["response"]["status"] == "cancelled"
        assert not [
            e for e in rec.received[done_at:] if e["type"] == "response.output_text.delta" and e["response_id"] == rid
        ]
        # the page shows what was delivered: the text the server kept for the conversation
        kept = rec.received[done_at]["response"]["output"]
        if kept:
            assert kept[0]["content"][0]["text"] == stopped
        assert page.is_disabled("#stop") and not page.is_disabled("#send")
        shot(page, "04-stopped")

        # Esc stops a reply too (keyboard only)
        page.fill("#input", "Another one, please.")
        page.press("#input", "Enter")
        wait_reply_text(page, 5)
        page.keyboard.press("Escape")
        page.wait_for_function(
            "() => [...document.querySelectorAll('article.assistant')].every(a => a.dataset.status === 'cancelled')"
        )
        assert len(rec.sent_of("response.cancel")) == 2
        assert_clean(rec)


# ---------------------------------------------------------------------------- safety


HOSTILE = "<img src=x onerror=alert(1)>"


def test_html_in_a_message_renders_as_text(open_page, tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO, **{"session.max_output_tokens": 16}) as addr:
        page, rec = open_page(addr)
        page.fill("#input", HOSTILE + " <script>alert(2)</script> [x](javascript:alert(3))")
        page.press("#input", "Enter")
        page.wait_for_selector(ENDED)
        text = page.inner_text("article.user .text")
        assert text == HOSTILE + " <script>alert(2)</script> [x](javascript:alert(3))"
        assert page.locator("#log img").count() == 0
        assert page.locator("#log script").count() == 0
        assert page.locator("#log a").count() == 0
        shot(page, "05-html-as-text")

        # the Markdown renderer on hostile model output, in the same page
        out = page.evaluate(
            """async () => {
              const { renderMarkdown } = await import('/markdown.js');
              const box = document.createElement('div');
              box.append(renderMarkdown([
                '<img src=x onerror=alert(1)>', '',
                '**bold <b>x</b>** and *it* and `<code>` and ~~gone~~', '',
                '[ok](https://example.com/a?b=1) [bad](javascript:alert(1)) [rel](/x) [data](data:text/html,hi)',
                'bare https://example.org/path. end', '',
                '- one', '- two', '  1. nested', '', '> quote', '',
                '```html', '<script>alert(1)</script>', '```', '',
                '```', 'unclosed fence <iframe src=x>',
              ].join('\\n')));
              return {
                tags: [...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
                attrs: [...box.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name)),
                hrefs: [...box.querySelectorAll('a')].map(a => [a.href, a.rel, a.target]),
                code: [...box.querySelectorAll('pre code')].map(c => c.textContent),
                text: box.textContent,
              };
            }"""
        )
        assert not {"img", "script", "iframe", "b"} & set(out["tags"]), out["tags"]
        assert {"strong", "em", "code", "del", "ul", "ol", "li", "blockquote", "pre", "a"} <= set(out["tags"])
        assert set(out["attrs"]) <= {"href", "rel", "target", "class", "data-lang"}, out["attrs"]
        assert [h[0] for h in out["hrefs"]] == ["https://example.com/a?b=1", "https://example.org/path"]
        assert all("noopener" in rel and target == "_blank" for _, rel, target in out["hrefs"])
        assert out["code"] == ["<script>alert(1)</script>", "unclosed fence <iframe src=x>"]
        assert "<img src=x onerror=alert(1)>" in out["text"]
        time.sleep(0.3)
        assert rec.dialogs == []
        assert_clean(rec)


# ---------------------------------------------------------------------------- images


def test_image_attach_is_sent_and_answered_visibly(open_page, tiny_backend, server_factory, tmp_path):
    png = png_bytes()
    path = tmp_path / "photo.png"
    path.write_bytes(png)
    with server_factory(tiny_backend, **NO_AUDIO, **{"session.max_output_tokens": 24}) as addr:
        page, rec = open_page(addr)
        # file picker
        page.set_input_files("#file", str(path))
        page.wait_for_selector('#attachments .chip img[alt="Attached: photo.png"]')
        # paste and drag-and-drop put thumbnails there too
        b64 = base64.b64encode(png).decode()
        page.evaluate(
            """b64 => {
              const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
              const dt = () => { const d = new DataTransfer();
                                 d.items.add(new File([bytes], 'dropped.png', {type: 'image/png'})); return d; };
              const input = document.getElementById('input');
              input.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt(), bubbles: true, cancelable: true}));
              const d = dt();
              document.body.dispatchEvent(new DragEvent('dragenter', {dataTransfer: d, bubbles: true}));
              document.body.dispatchEvent(new DragEvent('drop', {dataTransfer: d, bubbles: true, cancelable: true}));
            }""",
            b64,
        )
        page.wait_for_function("() => document.querySelectorAll('#attachments .chip').length === 3")
        assert page.is_hidden("#dropzone")
        # remove one by its labelled button, keep two
        page.click('#attachments button[aria-label="Remove dropped.png"]')
        assert page.locator("#attachments .chip").count() == 2
        shot(page, "06-image-attached")

        page.fill("#input", "What is in this picture?")
        page.press("#input", "Enter")
        page.wait_for_function("() => document.querySelectorAll('#attachments .chip').length === 0")
        [create] = rec.sent_of("conversation.item.create")
        parts = create["item"]["content"]
        assert parts[0] == {"type": "input_text", "text": "What is in this picture?"}
        assert [p["type"] for p in parts[1:]] == ["input_image", "input_image"]
        assert parts[1]["image_url"] == "data:image/png;base64," + b64
        assert page.locator("article.user .thumbs img").count() == 2

        # the server answers either with a reply or with an error about the image: both visible
        page.wait_for_selector(f'{ENDED}, article.user[data-status="failed"]', timeout=60_000)
        errors = [e["error"] for e in rec.received_of("error")]
        if errors:
            assert rec.sent_of("response.create") == []  # no reply asked for a message the server refused
            status = page.inner_text("article.user .status")
            assert status.startswith("Not sent:") and errors[0]["message"] in status, (status, errors)
            assert page.locator("article.assistant").count() == 0
        else:
            assert page.get_attribute("article.assistant", "data-status") in ("completed", "incomplete")
            assert replies(page)[0] == next(iter(done_texts(rec).values()))
        shot(page, "07-image-answered")
        # the page stays usable: a plain message after it gets its reply
        page.fill("#input", "hello")
        page.press("#input", "Enter")
        page.wait_for_function(
            f"() => [...document.querySelectorAll('{ENDED}')].length >= {1 if errors else 2}", timeout=60_000
        )
        assert_clean(rec)


@pytest.mark.skipif("vision" not in Config.model_fields, reason="this server has no image input yet")
def test_image_attach_with_vision_on_gets_a_reply(
    open_page,
    tiny_backend,
    server_factory,
    tiny_clip_dir,  # noqa: F811 (a fixture)
    tmp_path,
):
    path = tmp_path / "red.png"
    path.write_bytes(png_bytes())
    overrides = {
        **NO_AUDIO,
        "session.max_output_tokens": 24,
        "vision.mode": "clip",
        "vision.clip_model": f"local-dir:{tiny_clip_dir}",
        "vision.clip_pretrained": None,
        "vision.clip_labels": ["a dog", "a cat", "a red square", "a car"],
    }
    with server_factory(tiny_backend, **overrides) as addr:
        page, rec = open_page(addr)
        page.set_input_files("#file", str(path))
        page.wait_for_selector("#attachments .chip img")
        page.fill("#input", "what is this?")
        page.press("#input", "Enter")
        page.wait_for_selector(f'{ENDED}, article.user[data-status="failed"]', timeout=60_000)
        assert rec.received_of("error") == []
        assert [p["type"] for p in rec.sent_of("conversation.item.create")[0]["item"]["content"]] == [
            "input_text",
            "input_image",
        ]
        assert page.get_attribute("article.assistant", "data-status") in ("completed", "incomplete")
        assert replies(page)[0] == next(iter(done_texts(rec).values()))
        assert_clean(rec)


WATCH_PREVIEWS = """() => {
  window.__previews = new Set();
  new MutationObserver(() => {
    for (const f of document.querySelectorAll('figure.gen[data-state="preview"] img')) window.__previews.add(f.src);
  }).observe(document.getElementById('log'), {subtree: true, childList: true, attributes: true});
}"""


@pytest.mark.skipif("image_gen" not in Config.model_fields, reason="this server has no image output yet")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # diffusers' scheduler casts float64 (harmless)
# diffusers' Euler scheduler calls np.array(tensor): numpy 2 warns about the copy keyword
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_generated_image_shows_previews_then_the_image(
    open_page,
    tiny_backend,
    server_factory,
    tiny_sd_dir,  # noqa: F811 (a fixture)
):
    overrides = {
        **NO_AUDIO,
        "session.max_output_tokens": 60,
        "scheduler.strategy": "fast",
        "image_gen.model": str(tiny_sd_dir),
        "image_gen.steps": 8,
    }
    with server_factory(tiny_backend, **overrides) as addr:
        page, rec = open_page(addr)
        page.evaluate(WATCH_PREVIEWS)
        page.click("#image-mode")
        assert page.get_attribute("#image-mode", "aria-pressed") == "true"
        page.fill("#input", "a red fox")
        page.press("#input", "Enter")
        page.wait_for_selector('figure.gen[data-state="done"]', timeout=120_000)
        page.wait_for_selector(ENDED, timeout=60_000)
        [create] = rec.sent_of("response.create")
        assert create["response"]["output_modalities"] == ["text", "image"]
        partials = rec.received_of("response.image_generation_call.partial_image")
        assert len(partials) >= 2
        assert page.evaluate("window.__previews.size") >= 2  # the previews were shown as they came
        final = page.evaluate(
            """() => { const i = document.querySelector('figure.gen img');
                       return [i.complete, i.naturalWidth, i.alt, i.src.slice(0, 22)]; }"""
        )
        assert final[0] and final[1] > 0 and final[2] == "Generated image" and final[3] == "data:image/png;base64,"
        assert page.get_attribute("article.assistant", "data-status") in ("completed", "incomplete")
        shot(page, "13-generated-image")
        assert_clean(rec)


# ---------------------------------------------------------------------------- voice


@requires_espeak
def test_microphone_streams_pcm16_and_the_transcript_appears(open_page, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"session.max_output_tokens": 24, "session.temperature": 1.0}) as addr:
        page, rec = open_page(addr)
        page.click("#mic")
        page.wait_for_selector('#mic[aria-pressed="true"]')
        assert page.get_attribute("#mic", "aria-label") == "Stop microphone"
        page.wait_for_selector('article.user.voice[data-final="true"]', timeout=90_000)
        transcript = page.inner_text('article.user.voice[data-final="true"] .text')
        words = transcript.lower()
        assert "kitchen" in words or "window" in words, transcript
        shot(page, "08-voice-transcript")
        # a reply follows by itself (server VAD turn)
        page.wait_for_selector(ENDED, timeout=60_000)
        page.click("#mic")
        page.wait_for_selector('#mic[aria-pressed="false"]')
        # audio went out as binary frames: 40 ms of pcm16 at 24 kHz each
        assert len(rec.binary_sizes) >= 25
        assert set(rec.binary_sizes) == {24_000 * 2 * 40 // 1000}
        assert rec.received_of("input_audio_buffer.speech_started")
        assert_clean(rec)


# ---------------------------------------------------------------------------- resume


def _resumable(rec: Recorder) -> bool:
    created = rec.received_of("session.created")
    return bool(created and created[0].get("resume"))


def test_socket_killed_mid_reply_resumes_and_completes_exactly_once(open_page, tiny_backend, server_factory):
    backend = SlowBackend(tiny_backend, STEP_S)
    with tcp_proxy() as proxy:
        overrides = {
            **NO_AUDIO,
            "session.max_output_tokens": 160,
            "server.allowed_origins": (proxy.origin,),
            "server.grace_period_s": 30.0,
        }
        with server_factory(backend, **overrides) as addr:
            proxy.forward_to(addr)
            page, rec = open_page(f"127.0.0.1:{proxy.port}")
            if not _resumable(rec):
                pytest.xfail("needs server resume: session.created carries no resume token")
            page.fill("#input", "Tell me everything about tides.")
            page.press("#input", "Enter")
            wait_reply_text(page, 20)
            before = replies(page)[0]
            proxy.refusing = True  # the network is down for a moment
            assert proxy.kill_all() >= 1
            page.wait_for_selector('#conn[data-state="reconnecting"], #conn[data-state="resuming"]')
            page.wait_for_selector('article.assistant[data-status="resuming"]')
            shot(page, "09-connection-lost-resuming")
            time.sleep(1.0)  # the reply goes on on the server meanwhile
            proxy.refusing = False
            page.wait_for_selector('#conn[data-state="open"]', timeout=30_000)
            page.wait_for_selector(ENDED, timeout=60_000)
            shot(page, "10-resumed-complete")

            assert any("resume_token=" in url and "last_seq=" in url for url in rec.sockets), rec.sockets
            assert rec.received_of("session.resumed")
            assert len(rec.received_of("session.created")) == 1  # never a fresh session
            [reply] = replies(page)
            assert reply.startswith(before)
            # exactly once: the server's final text, no repeated and no missing piece
            [(rid, final)] = done_texts(rec).items()
            assert reply == final
            assert page.get_attribute("article.assistant .md", "data-repaired") is None
            assert page.get_attribute("article.assistant", "data-status") in ("completed", "incomplete")
            # the page applied each seq once, even where the server replayed what it already had
            seqs = [e["seq"] for e in rec.received if isinstance(e.get("seq"), int)]
            applied = sorted(set(seqs))
            assert applied == list(range(applied[0], applied[-1] + 1))  # no gap
            assert page.locator("article.assistant").count() == 1
            assert page.locator(".notice-error").count() == 0
            assert_clean(rec, allow=("WebSocket connection to",))


def test_failed_resume_is_said_plainly_and_a_new_session_starts(open_page, tiny_backend, server_factory):
    backend = SlowBackend(tiny_backend, STEP_S)
    with tcp_proxy() as proxy:
        overrides = {**NO_AUDIO, "server.allowed_origins": (proxy.origin,), "server.grace_period_s": 30.0}
        with server_factory(backend, **overrides) as addr:
            proxy.forward_to(addr)
            page, rec = open_page(f"127.0.0.1:{proxy.port}")
            if not _resumable(rec):
                pytest.xfail("needs server resume: session.created carries no resume token")
            page.fill("#input", "Count to a thousand.")
            page.press("#input", "Enter")
            wait_reply_text(page, 5)
            # a token the server does not know (as after a server restart) → resume_failed
            page.evaluate("() => { window.streamOmni.client.resume.token = 'not-a-real-token'; }")
            proxy.kill_all()
            page.wait_for_selector(".notice-error")
            page.wait_for_selector('#conn[data-state="open"]')
            text = page.inner_text(".notice-error")
            assert "Could not resume the session" in text and "new session" in text, text
            assert rec.received_of("error") and rec.received_of("error")[0]["error"]["code"] == "resume_failed"
            assert page.get_attribute("article.assistant", "data-status") == "interrupted"
            assert len(rec.received_of("session.created")) == 2
            shot(page, "11-resume-failed")
            # and the new session works
            page.fill("#input", "hello again")
            page.press("#input", "Enter")
            wait_reply_text(page, 1)
            page.click("#stop")
            page.wait_for_function(
                "() => document.querySelectorAll('article.assistant')[1]?.dataset.status === 'cancelled'"
            )
            assert_clean(rec, allow=("WebSocket connection to",))


def test_client_applies_each_seq_once_and_restarts_numbering_on_a_new_session(open_page, tiny_backend, server_factory):
    """The page's protocol client, fed a replay that overlaps what it already applied."""
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        page, rec = open_page(addr)
        out = page.evaluate(
            """async () => {
              const { RealtimeClient } = await import('/protocol.js');
              const c = new RealtimeClient({ url: 'ws://127.0.0.1:9/unused' });
              const fake = { close() {}, send() {}, readyState: 1 };
              c.ws = fake;
              const got = [];
              c.addEventListener('event', e => {
                got.push(e.detail.type === 'session.resumed' ? 'resumed' : e.detail.seq);
              });
              const feed = ev => c._onMessage(fake, { data: JSON.stringify(ev) });
              const delta = seq => ({ type: 'response.output_text.delta', seq, delta: 'x' + seq });
              const resume = { token: 't', expires_in_s: 30 };
              feed({ type: 'session.created', seq: 0, session: { id: 's1' }, resume });
              feed(delta(1)); feed(delta(2)); feed(delta(3));
              feed({ type: 'session.resumed', replay_from_seq: 2 });
              feed(delta(2)); feed(delta(3)); feed(delta(4));   // overlap: 2 and 3 were applied already
              const afterResume = { last: c.lastSeq, dup: c.duplicates };
              feed({ type: 'session.created', seq: 0, session: { id: 's2' } });   // a fresh session: from 0 again
              feed(delta(1));
              return { got, afterResume, last: c.lastSeq, resumable: c.resume !== null };
            }"""
        )
        assert out["got"] == [0, 1, 2, 3, "resumed", 4, 0, 1]
        assert out["afterResume"] == {"last": 4, "dup": 2}
        assert out["last"] == 1 and out["resumable"] is False
        assert_clean(rec)


# ---------------------------------------------------------------------------- phone + keyboard


def test_phone_width_keyboard_only_and_labelled_controls(open_page, tiny_backend, server_factory):
    backend = SlowBackend(tiny_backend, STEP_S)
    with server_factory(backend, **NO_AUDIO, **{"session.max_output_tokens": 60}) as addr:
        page, rec = open_page(addr, viewport=(390, 844), is_mobile=True, has_touch=True)
        # every control has an accessible name
        unnamed = page.evaluate(
            """() => [...document.querySelectorAll('button, textarea, input:not([type=file])')]
                 .filter(e => !(e.getAttribute('aria-label') || (e.labels && e.labels.length) || e.textContent.trim()))
                 .map(e => e.outerHTML)"""
        )
        assert unnamed == []
        labels = {
            sel: page.get_attribute(sel, "aria-label")
            for sel in ("#input", "#send", "#stop", "#attach", "#mic", "#image-mode")
        }
        assert all(labels.values()), labels
        # keyboard alone: Tab to the message box, type, Enter, Esc
        page.keyboard.press("Tab")
        for _ in range(12):
            if page.evaluate("document.activeElement && document.activeElement.id") == "input":
                break
            page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "input"
        page.keyboard.type("Hi from a phone")
        page.keyboard.press("Enter")
        wait_reply_text(page, 10)
        page.wait_for_selector(ENDED, timeout=60_000)
        # nothing wider than the screen, controls still on screen
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for sel in ("#input", "#send", "#stop", "#mic", "#attach"):
            box = page.locator(sel).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, (sel, box)
            assert box["y"] + box["height"] <= 844, (sel, box)
        shot(page, "12-phone")
        assert_clean(rec)
