"""Speech over HTTP with the openai SDK: POST /v1/audio/speech and Chat Completions with audio.
A real uvicorn, the real Piper voice, a fake model that answers in words (testkit.fake_backend)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from openai import OpenAI

from testkit.fake_backend import FakeBackend
from tests.http.helpers import NO_AUDIO, user

MODEL = "fake"


@contextlib.contextmanager
def sdk_client(server_factory: Any) -> Iterator[tuple[str, OpenAI]]:
    """A server on the fake model and an openai SDK client of it, both closed after."""
    with (
        server_factory(FakeBackend(answer_tokens=12), **NO_AUDIO) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):
        yield addr, client


def voiced(pcm: bytes) -> bool:
    a = np.frombuffer(pcm, dtype="<i2")
    return len(a) > 2400 and int(np.abs(a).max()) > 1000


def test_speech_streams_pcm_with_the_sdk(server_factory):
    with sdk_client(server_factory) as (_, client):
        parts = []
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="Hello there. The train leaves at 3:30 pm.", response_format="pcm"
        ) as resp:
            assert resp.headers["content-type"].startswith("audio/pcm")
            for part in resp.iter_bytes():
                parts.append(part)
        pcm = b"".join(parts)
        assert len(pcm) % 2 == 0 and voiced(pcm)
        seconds = len(pcm) / 48_000
        assert 1.0 < seconds < 8.0


def test_speech_wav_and_sse(server_factory):
    with sdk_client(server_factory) as (addr, client):
        wav = client.audio.speech.create(model=MODEL, voice="joe", input="Good morning.", response_format="wav")
        audio, rate = sf.read(io.BytesIO(wav.content), dtype="int16")
        assert rate == 24_000 and voiced(audio.tobytes())
        r = httpx.post(
            f"http://{addr}/v1/audio/speech",
            json={
                "model": MODEL,
                "input": "One. Two.",
                "voice": "ash",
                "response_format": "pcm",
                "stream_format": "sse",
            },
            timeout=60,
        )
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.delta", "speech.audio.done"]
        assert voiced(b"".join(base64.b64decode(e["audio"]) for e in events[:-1]))
        assert events[-1]["usage"]["output_tokens"] > 0


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"voice": "nobody"}, "voice"),
        ({"response_format": "opus"}, "response_format"),
        ({"speed": 9}, "speed"),
        ({"input": ""}, "input"),
        ({"input": "Call " + "7" * 400 + " now."}, "input"),  # past num2words: was a 500, the number in the log
        ({"input": "nul \u0000 byte"}, "input"),
    ],
)
def test_speech_refuses_bad_requests_clearly(server_factory, payload, param):
    with server_factory(FakeBackend(answer_tokens=12), **NO_AUDIO) as addr:
        body = {"model": MODEL, "input": "hi", "voice": "alloy", "response_format": "pcm", **payload}
        r = httpx.post(f"http://{addr}/v1/audio/speech", json=body, timeout=60)
        assert r.status_code == 400
        assert r.json()["error"]["param"] == param


def test_chat_completion_with_audio(server_factory):
    with sdk_client(server_factory) as (_, client):
        r = client.chat.completions.create(
            model=MODEL,
            messages=user("Say hi"),
            max_tokens=16,
            temperature=0,
            modalities=["text", "audio"],
            audio={"voice": "alloy", "format": "wav"},
        )
        msg = r.choices[0].message
        assert msg.audio is not None and msg.content is None
        assert msg.audio.id.startswith("audio_") and msg.audio.expires_at > 0
        assert msg.audio.transcript
        audio, rate = sf.read(io.BytesIO(base64.b64decode(msg.audio.data)), dtype="int16")
        assert rate == 24_000 and len(audio) > 0


def test_chat_completion_streams_audio_deltas(server_factory):
    with sdk_client(server_factory) as (_, client):
        stream = client.chat.completions.create(
            model=MODEL,
            messages=user("Say hi"),
            max_tokens=16,
            temperature=0,
            stream=True,
            modalities=["text", "audio"],
            audio={"voice": "alloy", "format": "pcm16"},
        )
        transcript, pcm = "", b""
        for chunk in stream:
            if not chunk.choices:
                continue
            audio = chunk.choices[0].delta.audio  # the SDK's own ChoiceDeltaAudio
            if audio is not None:
                assert audio.id.startswith("audio_") and audio.data is not None
                transcript += audio.transcript or ""
                pcm += base64.b64decode(audio.data)
        assert transcript.split() and voiced(pcm)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(
                model=MODEL,
                messages=user("x"),
                stream=True,
                modalities=["text", "audio"],
                audio={"voice": "alloy", "format": "wav"},
            )
