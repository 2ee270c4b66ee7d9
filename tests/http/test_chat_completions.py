"""POST /v1/chat/completions through the openai SDK and raw httpx: shapes, sampling, errors, audio and images in."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import numpy as np
import pytest
from openai import APIStatusError, AsyncOpenAI, OpenAI

from testkit.espeak import speak, wav_bytes
from testkit.fake_backend import FakeBackend
from tests.conftest import requires_espeak
from tests.http.helpers import LONG, MODEL, NO_AUDIO, assert_error, body, content_of, post, prompt_len, sse_events, user
from tests.wsclient import RealtimeClient

# ---------------------------------------------------------------------- the SDK, four ways


def test_sdk_sync_non_stream(tiny_backend, server_factory):
    with (
        server_factory(tiny_backend, **NO_AUDIO) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):
        r = client.chat.completions.create(model=MODEL, messages=user("Say hi"), max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == MODEL
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.prompt_tokens == prompt_len(tiny_backend, user("Say hi"))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_sdk_sync_stream_matches_non_stream(tiny_backend, server_factory):
    with (
        server_factory(tiny_backend, **NO_AUDIO) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):
        ref = client.chat.completions.create(model=MODEL, messages=user("count"), max_tokens=30, temperature=0)
        stream = client.chat.completions.create(
            model=MODEL, messages=user("count"), max_tokens=30, temperature=0, stream=True
        )
        chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ref.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks][-1] == ref.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage anywhere


async def test_sdk_async_stream_with_usage(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client:
            ref = await client.chat.completions.create(model=MODEL, messages=user("go"), max_tokens=20, temperature=0)
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=user("go"),
                max_tokens=20,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [c async for c in stream]
    *body_chunks, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.model_dump()["completion_tokens"] == ref.usage.completion_tokens
    assert last.usage.prompt_tokens == ref.usage.prompt_tokens
    assert all(c.usage is None for c in body_chunks)
    assert "".join(c.choices[0].delta.content or "" for c in body_chunks) == ref.choices[0].message.content


async def test_sdk_async_non_stream(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client:
            a, b = await asyncio.gather(
                client.chat.completions.create(model=MODEL, messages=user("one"), max_tokens=10, temperature=0),
                client.chat.completions.create(model=MODEL, messages=user("one"), max_tokens=10, temperature=0),
            )
    assert a.id != b.id
    assert a.choices[0].message.content == b.choices[0].message.content  # concurrent, greedy: same text


# ---------------------------------------------------------------------- parameters


def test_max_tokens_gives_finish_reason_length(tiny_backend, server_factory):
    with (
        server_factory(tiny_backend, **NO_AUDIO) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):
        r = client.chat.completions.create(model=MODEL, messages=user("talk"), max_tokens=5, temperature=0)
        r2 = client.chat.completions.create(model=MODEL, messages=user("talk"), max_completion_tokens=7)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    assert r2.choices[0].finish_reason == "length" and r2.usage.completion_tokens == 7


def test_stop_sequence_ends_the_text_and_is_never_shown(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        ref = post(addr, body(max_tokens=40)).json()["choices"][0]["message"]["content"]
        assert len(ref) > 16, ref
        stop = ref[8:12]
        expected = ref[: ref.index(stop)]
        r = post(addr, body(max_tokens=40, stop=stop)).json()
        streamed = post(addr, body(max_tokens=40, stop=["never-there-zz", stop], stream=True)).text
    assert r["choices"][0]["message"]["content"] == expected
    assert r["choices"][0]["finish_reason"] == "stop"
    events = sse_events(streamed)
    assert content_of(events) == expected
    assert json.loads(events[-2][1])["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_repeats_and_seed_changes_it(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        replies = [post(addr, body(max_tokens=16, temperature=1.5, top_p=0.95, seed=s)).json() for s in (7, 7, 8)]
    texts = [r["choices"][0]["message"]["content"] for r in replies]
    assert texts[0] == texts[1]
    assert texts[0] != texts[2]


def test_system_prompt_and_multi_turn_reach_the_model(tiny_backend, server_factory):
    convo = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": [{"type": "text", "text": "Another"}, {"type": "text", "text": "one?"}]},
    ]
    rendered = [*convo[:3], {"role": "user", "content": "Another\none?"}]
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        full = post(addr, body(convo, max_tokens=8)).json()
        as_developer = post(addr, body([{**convo[0], "role": "developer"}, *convo[1:]], max_tokens=8)).json()
        last_only = post(addr, body(convo[3:], max_tokens=8)).json()
    assert full["usage"]["prompt_tokens"] == prompt_len(tiny_backend, rendered)
    assert as_developer["usage"]["prompt_tokens"] == full["usage"]["prompt_tokens"]
    assert as_developer["choices"][0]["message"] == full["choices"][0]["message"]
    assert last_only["usage"]["prompt_tokens"] == prompt_len(tiny_backend, rendered[3:])


async def test_each_sse_delta_is_one_scheduler_chunk_as_on_realtime(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        done = await c.ask("alpha beta", max_output_tokens=40, scheduler={"strategy": "fast"})
        await c.close()
        ws_deltas = [e["delta"] for e in c.events if e["type"] == "response.output_text.delta"]
        async with httpx.AsyncClient(timeout=120) as h:
            r = await h.post(
                f"http://{addr}/v1/chat/completions",
                json=body(user("alpha beta"), max_tokens=40, stream=True, scheduler={"strategy": "fast"}),
            )
    events = sse_events(r.text)
    http_deltas = [json.loads(d)["choices"][0]["delta"].get("content") for _, d in events[1:-2]]
    assert done["response"]["metrics"]["chunks"] == len(ws_deltas) > 3
    assert http_deltas == ws_deltas


# ---------------------------------------------------------------------- errors

JSON = {"Content-Type": "application/json"}  # what a raw body must declare (a page may POST text/plain)


def test_bad_bodies_are_400_in_openai_shape(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        url = f"http://{addr}/v1/chat/completions"
        assert_error(httpx.post(url, content=b"{not json", headers=JSON, timeout=30), 400, "invalid_json")
        assert_error(httpx.post(url, content=b"[1, 2]", headers=JSON, timeout=30), 400, "invalid_json")
        err = assert_error(post(addr, {"model": MODEL}), 400, "missing_required_parameter")
        assert err["param"] == "messages"
        err = assert_error(post(addr, body(temperature=5)), 400, "invalid_value")
        assert err["param"] == "temperature" and err["type"] == "invalid_request_error"
        err = assert_error(post(addr, body(user("x") + [{"role": "robot", "content": "y"}])), 400, "invalid_value")
        assert err["param"] == "messages[1].role"
        err = assert_error(
            post(addr, body([{"role": "user", "content": [{"type": "text"}]}])), 400, "missing_required_parameter"
        )
        assert err["param"] == "messages[0].content[0].text"
        assert_error(post(addr, body(n=2)), 400, "invalid_value")
        assert_error(post(addr, body(stream="yes")), 400, "invalid_value")
        # the server is fine afterwards
        assert post(addr, body(max_tokens=2)).status_code == 200


def test_unknown_model_is_404(tiny_backend, server_factory):
    # the client is closed by its ``with``: ``info`` holds it in a reference cycle (the error's traceback
    # holds this frame), and a socket the cycle collector frees unclosed warns in a later test
    with (
        server_factory(tiny_backend, **NO_AUDIO) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):
        with pytest.raises(APIStatusError) as info:
            client.chat.completions.create(model="gpt-nope", messages=user("hi"))
    assert info.value.status_code == 404
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"


def test_api_keys_are_required_when_configured(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO, **{"server.api_keys": ["k-right"]}) as addr:
        assert_error(post(addr, body(max_tokens=2)), 401, "invalid_api_key")
        assert_error(
            post(addr, body(max_tokens=2), headers={"Authorization": "Bearer k-wrong"}), 401, "invalid_api_key"
        )
        with OpenAI(base_url=f"http://{addr}/v1", api_key="k-right", max_retries=0) as ok:
            assert ok.chat.completions.create(model=MODEL, messages=user("hi"), max_tokens=2).choices
            r = httpx.get(f"http://{addr}/v1/chat/completions/chatcmpl-x/stream", timeout=30)
            assert_error(r, 401, "invalid_api_key")


def test_body_over_the_limit_is_413(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO, **{"limits.max_http_body_bytes": 2048}) as addr:
        big = body(user("x" * 4000))
        assert_error(post(addr, big), 413, "request_too_large")  # by Content-Length

        def chunked():  # no Content-Length: counted as it streams in
            yield json.dumps(big).encode()

        r = httpx.post(f"http://{addr}/v1/chat/completions", content=chunked(), headers=JSON, timeout=30)
        assert "content-length" not in r.request.headers
        assert_error(r, 413, "request_too_large")
        assert post(addr, body(max_tokens=2)).status_code == 200


def test_context_length_exceeded_is_400(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        err = assert_error(post(addr, body(user("hello " * 5000))), 400, "context_length_exceeded")
    assert err["param"] == "messages"


def test_busy_engine_is_503_server_busy(server_factory):
    # a model that takes 40 s to answer: the first stream surely still runs when the second asks
    # (the tiny random model decoded 4000 tokens before the second request arrived, now and then)
    slow = FakeBackend(answer_tokens=4000, step_s=0.01)
    cfg = {**LONG, "engine.max_running": 1, "engine.max_waiting": 0, "server.grace_period_s": 0.2}
    with server_factory(slow, **cfg) as addr:
        with httpx.stream(
            "POST", f"http://{addr}/v1/chat/completions", json=body(model="fake", stream=True), timeout=60
        ) as first:
            next(first.iter_lines())  # the job is in the engine
            r = post(addr, body(model="fake", max_tokens=2))
            err = assert_error(r, 503, "server_busy")
            assert r.headers["retry-after"] == "1" and err["type"] == "server_error"
        # the dropped stream is cancelled after its grace period; then there is room again
        deadline = time.monotonic() + 30
        while (r := post(addr, body(model="fake", max_tokens=2))).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200


def test_image_part_without_describer_is_unsupported(tiny_backend, server_factory):
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with server_factory(tiny_backend, **NO_AUDIO, **{"vision.mode": "none"}) as addr:
        err = assert_error(post(addr, body([{"role": "user", "content": [part]}])), 400, "unsupported_content")
    assert err["param"] == "messages[0].content[0]"


def test_audio_part_when_audio_is_disabled(tiny_backend, server_factory):
    part = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        assert_error(post(addr, body([{"role": "user", "content": [part]}])), 400, "audio_disabled")


# ---------------------------------------------------------------------- audio in


def audio_message(wav: bytes, text: str | None = None) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts.append({"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}})
    return [{"role": "user", "content": parts}]


def test_bad_wavs_are_400_without_internals(tiny_backend, server_factory):
    nan = np.full(1600, np.nan, dtype=np.float32)
    with server_factory(tiny_backend) as addr:
        err = assert_error(post(addr, body(audio_message(wav_bytes(nan, 16_000, "FLOAT")))), 400, "invalid_audio")
        assert "NaN" in err["message"] and err["param"] == "messages[0].content[0].input_audio"
        assert_error(post(addr, body(audio_message(b"RIFF" + b"\0" * 64))), 400, "invalid_audio")
        bad_b64 = [
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "%%", "format": "wav"}}]}
        ]
        assert_error(post(addr, body(bad_b64)), 400, "invalid_base64")


@requires_espeak
def test_wav_input_audio_is_transcribed_and_answered(tiny_backend, server_factory):
    from processors.asr import AsrConfig, load_asr
    from processors.audio import decode_wav

    wav = wav_bytes(speak("What is the capital of France?"), 16_000)
    with server_factory(tiny_backend) as addr:
        r = post(addr, body(audio_message(wav, text="Answer:"), max_tokens=8))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    # the prompt the model saw is exactly the text part plus the server's transcript of the WAV
    transcript = load_asr(AsrConfig()).transcribe(decode_wav(wav))  # the instance the server loaded
    assert "france" in transcript.lower()
    expected = prompt_len(tiny_backend, [{"role": "user", "content": f"Answer:\n{transcript}"}])
    assert r.json()["usage"]["prompt_tokens"] == expected
