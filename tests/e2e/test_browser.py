"""The browser chat client (web/) end to end: real headless Chromium, real uvicorn, tiny model.

Playwright's sync API drives Debian's /usr/bin/chromium (no browser download). Each test
starts a real server (``server_factory``) and loads ``GET /``; assertions look at the DOM the
person sees and, through Playwright's WebSocket frame events, at what crossed the wire.
Screenshots of the main states go to test-artifacts/browser/.
"""

from __future__ import annotations

import base64
import time

import pytest

from tests.e2e.browser_fixtures import (
    SlowBackend,
    requires_browser,
)
from tests.e2e.browser_page import (
    ENDED,
    NO_AUDIO,
    STEP_S,
    WATCH_GROWTH,
    assert_clean,
    done_texts,
    png_bytes,
    replies,
    shot,
    wait_reply_text,
)

pytestmark = requires_browser


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
        # the images first, the question last (a small model answers what comes last)
        assert parts[-1] == {"type": "input_text", "text": "What is in this picture?"}
        assert [p["type"] for p in parts[:-1]] == ["input_image", "input_image"]
        assert parts[0]["image_url"] == "data:image/png;base64," + b64
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
            "input_image",
            "input_text",
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
