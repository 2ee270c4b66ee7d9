"""The browser client end to end, continued: the microphone, resume after a killed socket, seq
handling, a phone-sized keyboard-only session. Same setup as test_browser.py."""

from __future__ import annotations

import time

import pytest

from tests.conftest import requires_espeak
from tests.e2e.browser_fixtures import (
    Recorder,
    SlowBackend,
    requires_browser,
    tcp_proxy,
)
from tests.e2e.browser_page import ENDED, NO_AUDIO, STEP_S, assert_clean, done_texts, replies, shot, wait_reply_text

pytestmark = requires_browser


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
