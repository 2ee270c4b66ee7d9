"""Real Chromium calls the gateway over WebRTC the way a page calls OpenAI: its own offer (posted before
ICE gathering ends, as the OpenAI examples do), its fake microphone as Opus, events on ``oai-events``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from processors.asr import word_error_rate
from tests.conftest import requires_espeak
from tests.e2e.browser_fixtures import requires_browser
from tests.e2e.browser_page import SPOKEN, one_turn_wav

pytestmark = requires_browser


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """This module's fake microphone: one voice turn (``one_turn_wav``)."""
    return one_turn_wav(tmp_path_factory, "fake-mic-rtc")


CALL = """async () => {
  window.rtcEvents = [];
  const pc = new RTCPeerConnection();
  const mic = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  pc.addTrack(mic.getAudioTracks()[0], mic);
  pc.ontrack = (e) => { window.rtcTrackKind = e.track.kind; };
  const events = pc.createDataChannel("oai-events");
  const sent = async () => {  // the microphone track's bytes so far: upstream while the user speaks
    for (const s of (await pc.getStats()).values())
      if (s.type === "outbound-rtp" && s.kind === "audio")
        return { bytes: s.bytesSent, headers: s.headerBytesSent, t: s.timestamp };
  };
  events.onmessage = async (m) => {  // marked on <body>: the page's CSP allows no eval, so no wait_for_function
    const ev = JSON.parse(m.data);
    if (ev.type === "input_audio_buffer.speech_started" && !window.rtcSpeechStart) window.rtcSpeechStart = await sent();
    if (ev.type === "input_audio_buffer.speech_stopped" && !window.rtcSpeechStop) window.rtcSpeechStop = await sent();
    window.rtcEvents.push(ev);
    document.body.dataset["rtc_" + ev.type.replaceAll(".", "_")] = "1";
  };
  pc.onconnectionstatechange = () => { document.body.dataset.rtcState = pc.connectionState; };
  await pc.setLocalDescription(await pc.createOffer());
  const r = await fetch("/v1/realtime/calls", {
    method: "POST", body: pc.localDescription.sdp, headers: { "Content-Type": "application/sdp" },
  });
  const answer = await r.text();
  if (r.status !== 201) return { status: r.status, body: answer };
  await pc.setRemoteDescription({ type: "answer", sdp: answer });
  window.rtcPc = pc;
  return { status: r.status, location: r.headers.get("Location"), type: r.headers.get("Content-Type") };
}"""


UPSTREAM = """() => {
  const [a, b] = [window.rtcSpeechStart, window.rtcSpeechStop];
  const s = (b.t - a.t) / 1000;
  return { payload: (b.bytes - a.bytes) / s, headers: (b.headers - a.headers) / s, seconds: s };
}"""
PCM16_24K_BYTES_S = 48_000  # the WebSocket path's audio, before base64


def events_of(page: Any, type_: str) -> list[dict[str, Any]]:
    return list(page.evaluate(f"window.rtcEvents.filter((e) => e.type === {type_!r})"))


@requires_espeak
def test_chromium_speaks_over_webrtc_and_gets_the_transcript_and_reply(browser, tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"session.max_output_tokens": 16}) as addr:
        ctx = browser.new_context()
        try:
            page = ctx.new_page()
            page.goto(f"http://{addr}/?transport=websocket")  # the page's own client keeps out of this call
            answer = page.evaluate(CALL)
            assert answer["status"] == 201, answer
            assert answer["type"].startswith("application/sdp") and answer["location"].startswith("/v1/realtime/calls/")
            page.wait_for_selector('body[data-rtc-state="connected"]', state="attached", timeout=30_000)
            page.wait_for_selector(
                "body[data-rtc_conversation_item_input_audio_transcription_completed]", state="attached", timeout=90_000
            )
            transcript = events_of(page, "conversation.item.input_audio_transcription.completed")[0]["transcript"]
            assert word_error_rate(SPOKEN, transcript) <= 0.25, transcript
            page.wait_for_selector("body[data-rtc_response_done]", state="attached", timeout=120_000)
            assert events_of(page, "session.created")[0]["seq"] == 0
            assert page.evaluate("window.rtcTrackKind") == "audio"
            up = page.evaluate(UPSTREAM)  # from speech_started to speech_stopped: while the user speaks
            print(f"chromium upstream, {up['seconds']:.2f} s of speech: {up['payload']:.0f} B/s Opus", end="")
            print(f" + {up['headers']:.0f} B/s RTP headers")
            assert up["seconds"] > 1.0, up
            # RTP headers included: ≤ 1/8 of the WebSocket's pcm16 (the answer's maxaveragebitrate=32000 is obeyed)
            assert up["payload"] + up["headers"] <= PCM16_24K_BYTES_S / 8, up
            page.evaluate("window.rtcPc.close()")
        finally:
            ctx.close()
