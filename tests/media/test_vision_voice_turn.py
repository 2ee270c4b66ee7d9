"""An image sent, then a question about it spoken: the spoken turn is answered from the image (Whisper, SmolLM2)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from testkit.espeak import silence, speak
from testkit.live_server import ServerAddr, run_server
from testkit.vision_images import data_url, render_lines
from tests.conftest import requires_espeak
from tests.media.test_realtime_voice import pcm24, stream
from tests.wsclient import RealtimeClient

pytestmark = [requires_espeak, pytest.mark.real_model, pytest.mark.server]


@pytest.fixture(scope="module")
def addr() -> Iterator[ServerAddr]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    from gateway.core.config import load_config
    from gateway.wiring.loading import default_loader

    with run_server(load_config(None, **{"speculative.drafter": "none"}), None, loader=default_loader) as a:
        yield a


async def ask_by_voice(addr: str) -> tuple[str, str]:
    c = await RealtimeClient.connect(addr, query="model=SmolLM2-135M-Instruct")
    try:
        await c.until("session.created")
        image = {"type": "input_image", "image_url": data_url(render_lines(["Library closed on Monday"]))}
        await c.send(
            {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [image]}}
        )
        added = await c.until("conversation.item.added")
        assert "Library closed on Monday" in added["item"]["content"][0]["text"]
        await stream(c, pcm24(np.concatenate([silence(0.4), speak("What does the text say?"), silence(1.2)])))
        heard = await c.until("conversation.item.input_audio_transcription.completed")
        done = await c.until("response.done")
        text = "".join(p.get("text", "") for item in done["response"]["output"] for p in item.get("content", []))
        return heard["transcript"], text
    finally:
        await c.close()


def test_a_question_spoken_after_an_image_is_answered_from_the_image(addr):
    transcript, answer = asyncio.run(ask_by_voice(addr))
    assert "text" in transcript.lower(), transcript
    assert "Library closed on Monday" in answer, answer
