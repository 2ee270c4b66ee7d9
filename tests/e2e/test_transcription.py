"""Transcription against a real uvicorn server, driven by the clients people use: the ``openai`` SDK's realtime
client in a transcription session, its ``audio.transcriptions.create`` in every format, and the Agents SDK's
``OpenAISTTModel`` (its streamed transcription session and its HTTP transcription), each unmodified.

Speech is espeak-ng's; Whisper is the embedded tiny.en; the language model is the tiny random one, wrapped
so a test sees any prompt that reaches it (a transcription session must send none).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import openai
import pytest
import websockets
from openai import AsyncOpenAI

from processors.asr import word_error_rate
from processors.audio import float32_to_pcm16
from testkit.espeak import silence, speak, wav_bytes
from testkit.recording import Recording
from tests.conftest import requires_espeak
from tests.sdk_events import SERVER_EVENT
from tests.wsclient import RealtimeClient

pytestmark = requires_espeak

SENTENCE_1 = "Please open the kitchen window."
SENTENCE_2 = "My favorite color is blue."
BOTH = f"{SENTENCE_1} {SENTENCE_2}"
GAP_S = 1.5  # between the sentences: more than any VAD's silence window here (semantic_vad's longest is 1.25 s)


def _two_sentences(rate: int) -> np.ndarray:
    return np.concatenate(
        [silence(0.4, rate), speak(SENTENCE_1, rate), silence(GAP_S, rate), speak(SENTENCE_2, rate), silence(1.5, rate)]
    )


def _pcm24_frames(frame_ms: int = 100) -> list[bytes]:
    pcm = float32_to_pcm16(_two_sentences(24_000))
    step = 24_000 * 2 * frame_ms // 1000
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]


async def test_openai_sdk_realtime_transcription_session(tiny_backend, server_factory):
    model = Recording(tiny_backend)
    with server_factory(model) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally") as client:
            events: list[dict[str, Any]] = []

            async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:

                async def until(type_: str) -> dict[str, Any]:
                    while True:
                        ev = json.loads(await asyncio.wait_for(conn.recv_bytes(), 90))
                        SERVER_EVENT.validate_python(ev)  # what a strict client does before it acts on an event
                        events.append(ev)
                        if ev["type"] == type_:
                            return ev

                created = await until("session.created")
                assert created["session"]["type"] == "transcription"
                await conn.session.update(
                    session={
                        "type": "transcription",
                        "include": ["item.input_audio_transcription.logprobs"],
                        "audio": {
                            "input": {
                                "format": {"type": "audio/pcm", "rate": 24000},
                                "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                                "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                            }
                        },
                    }
                )
                updated = (await until("session.updated"))["session"]
                assert updated["type"] == "transcription" and updated["include"] == [
                    "item.input_audio_transcription.logprobs"
                ]
                assert updated["audio"]["input"]["turn_detection"]["create_response"] is False
                for frame in _pcm24_frames():
                    await conn.input_audio_buffer.append(audio=base64.b64encode(frame).decode("ascii"))
                first = await until("conversation.item.input_audio_transcription.completed")
                second = await until("conversation.item.input_audio_transcription.completed")
                await conn.response.create(event_id="no-reply")
                err = (await until("error"))["error"]
            assert err["code"] == "unsupported_event" and err["event_id"] == "no-reply"
            types = [e["type"] for e in events]
            assert not [t for t in types if t.startswith("response.")]  # no reply, ever
            assert types.count("input_audio_buffer.speech_started") == 2
            assert word_error_rate(SENTENCE_1, first["transcript"]) <= 0.25, first["transcript"]
            assert word_error_rate(SENTENCE_2, second["transcript"]) <= 0.25, second["transcript"]
            assert first["usage"]["type"] == "duration" and first["usage"]["seconds"] > 1.0
            assert "logprobs" not in first  # asked for, but the embedded Whisper gives none: none are invented
            assert [e for e in events if e["type"].endswith("transcription.delta") and e["item_id"] == first["item_id"]]
    assert model.prompts == []  # the language model never saw a prompt


async def test_an_unknown_intent_is_refused_naming_the_parameter(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        c = await RealtimeClient.connect(addr, "intent=translation")
        err = await c.until("error", timeout=30)
        assert err["error"]["param"] == "intent" and err["error"]["code"] == "invalid_value"
        with pytest.raises(websockets.ConnectionClosed) as info:
            await asyncio.wait_for(c.ws.recv(), 30)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008


async def test_agents_sdk_stt_model_streamed_session_and_http(tiny_backend, server_factory):
    from agents.voice import AudioInput, StreamedAudioInput, STTModelSettings
    from agents.voice.models.openai_stt import OpenAISTTModel

    with server_factory(tiny_backend) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally") as client:
            stt = OpenAISTTModel("gpt-4o-transcribe", client)
            audio = np.frombuffer(b"".join(_pcm24_frames()), dtype="<i2")

            streamed = StreamedAudioInput()
            session = await stt.create_session(streamed, STTModelSettings(), False, False)  # the SDK's defaults

            async def feed() -> None:
                for i in range(0, audio.size, 2400):
                    await streamed.add_audio(audio[i : i + 2400])
                await streamed.add_audio(None)

            async def turns() -> list[str]:
                return [t async for t in session.transcribe_turns()]

            feeding = asyncio.create_task(feed())
            said = await asyncio.wait_for(turns(), 120)
            await feeding
            assert len(said) >= 2, said
            assert word_error_rate(BOTH, " ".join(said)) <= 0.25, said

            text = await asyncio.wait_for(
                stt.transcribe(AudioInput(buffer=audio), STTModelSettings(), False, False), 120
            )
            assert word_error_rate(BOTH, text) <= 0.25, text


async def test_openai_sdk_audio_transcriptions_in_every_format(tiny_backend, server_factory):
    wav = wav_bytes(_two_sentences(16_000), 16_000)
    with server_factory(tiny_backend, **{"audio.max_concurrent_transcriptions": 1}) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally") as client:
            f = ("speech.wav", wav, "audio/wav")

            async def create(**kw: Any) -> Any:
                return await asyncio.wait_for(client.audio.transcriptions.create(model="whisper-1", file=f, **kw), 120)

            plain = await create(language="en", prompt="kitchen, color")
            assert word_error_rate(BOTH, plain.text) <= 0.25, plain.text
            assert plain.usage.type == "duration" and 5.0 < plain.usage.seconds < 10.0
            text = await create(response_format="text")
            assert isinstance(text, str) and text.strip() == plain.text
            verbose = await create(response_format="verbose_json", timestamp_granularities=["segment"])
            assert verbose.text == plain.text and verbose.language == "english"
            assert abs(verbose.duration - plain.usage.seconds) < 0.01
            segs = verbose.segments
            assert len(segs) == 2, segs
            first_end = 0.4 + len(speak(SENTENCE_1)) / 16_000
            assert 0.0 <= segs[0].start <= 0.4 < first_end - 0.6 < segs[0].end <= first_end + 0.35
            assert first_end + GAP_S - 0.4 <= segs[1].start < segs[1].end <= verbose.duration
            assert word_error_rate(SENTENCE_1, segs[0].text) <= 0.25
            srt = await create(response_format="srt")
            cues = srt.strip().split("\n\n")
            assert [c.split("\n")[0] for c in cues] == ["1", "2"] and " --> " in cues[0]
            vtt = await create(response_format="vtt")
            assert vtt.startswith("WEBVTT\n\n") and vtt.count(" --> ") == 2
            stream = await create(stream=True)
            events = [e async for e in stream]
            assert [e.type for e in events] == ["transcript.text.delta"] * (len(events) - 1) + ["transcript.text.done"]
            assert len(events) == 3
            assert "".join(e.delta for e in events[:-1]) == events[-1].text == plain.text


async def test_bad_transcription_requests_get_openai_errors_never_a_500(tiny_backend, server_factory):
    import httpx

    wav = wav_bytes(silence(0.5) + 0.1, 16_000)
    with server_factory(tiny_backend, **{"audio.transcription_max_bytes": 64_000}) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally", max_retries=0) as client:

            async def refused(status: int, code: str, param: str | None, **kw: Any) -> None:
                kw.setdefault("file", ("a.wav", wav, "audio/wav"))
                kw.setdefault("model", "whisper-1")
                with pytest.raises(openai.APIStatusError) as caught:
                    await asyncio.wait_for(client.audio.transcriptions.create(**kw), 60)
                assert caught.value.status_code == status, caught.value.body
                body = caught.value.body
                assert isinstance(body, dict) and body["code"] == code and body["param"] == param, body

            await refused(400, "invalid_audio", "file", file=("a.mp3", b"ID3\x03not audio at all", "audio/mpeg"))
            await refused(400, "empty_audio", "file", file=("a.wav", b"", "audio/wav"))
            await refused(413, "file_too_large", "file", file=("a.wav", wav_bytes(silence(3.0), 16_000), "audio/wav"))
            await refused(400, "unsupported_value", "response_format", response_format="diarized_json")
            await refused(400, "unsupported_value", "language", language="fr")
            await refused(400, "invalid_value", "language", language="English!")
            await refused(400, "unsupported_value", "timestamp_granularities", timestamp_granularities=["word"])
            await refused(400, "unsupported_value", "stream", stream=True, response_format="srt")
            await refused(404, "model_not_found", "model", model="no-such-model")
            async with httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http:
                url = "/v1/audio/transcriptions"
                r = await http.post(url, files={"file": ("a.wav", wav, "audio/wav")})
                assert r.status_code == 400 and r.json()["error"]["param"] == "model"
                r = await http.post(url, data={"model": "whisper-1"}, files={"nofile": ("x", b"x")})
                assert r.status_code == 400 and r.json()["error"]["param"] == "file"
                r = await http.post(
                    url, content=b"--x\r\nbroken", headers={"content-type": "multipart/form-data; boundary=x"}
                )
                assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
                r = await http.post(url, json={"model": "whisper-1"})
                assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
                r = await http.post(
                    url,
                    data={"model": "whisper-1"},
                    files={"file": ("a.wav", wav, "audio/wav")},
                    headers={"Origin": "https://evil.example"},
                )
                assert r.status_code == 403
                ok = await http.post(url, data={"model": "whisper-1"}, files={"file": ("a.wav", wav, "audio/wav")})
                assert ok.status_code == 200 and "text" in ok.json()  # the server is fine after all of it
