"""POST /v1/chat/completions against a real uvicorn with the tiny random-init Llama.

Driven with the official ``openai`` SDK (sync and async, stream and not) and with raw httpx
for error statuses, SSE ids and resume. The tiny model's text is noise, but greedy decoding
(temperature 0) makes it deterministic, which is what the comparisons rely on.
"""

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

from tests.audio_fixtures import requires_espeak, speak, wav_bytes
from tests.wsclient import RealtimeClient

MODEL = "tiny-llama"
NO_AUDIO = {"audio.enabled": False}  # no Whisper load for text-only servers
# long responses that must still be running when the test acts: without drafting, whose speed-up on the
# tiny model's repetitive output would finish them first
LONG = {"audio.enabled": False, "session.max_output_tokens": 4000, "speculative.drafter": "none"}


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def body(messages: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages or user("hello"), "temperature": 0, **kw}


def post(addr: str, payload: Any, **kw: Any) -> httpx.Response:
    kw.setdefault("timeout", 120)
    return httpx.post(f"http://{addr}/v1/chat/completions", json=payload, **kw)


def sse_events(raw: str) -> list[tuple[str, str]]:
    """(id, data) of each event in an SSE body."""
    out = []
    for block in raw.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            out.append((fields.get("id", ""), fields["data"]))
    return out


def content_of(events: list[tuple[str, str]]) -> str:
    text = ""
    for _, data in events:
        if data != "[DONE]":
            for choice in json.loads(data).get("choices", []):
                text += choice["delta"].get("content") or ""
    return text


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code
    for leak in ("Traceback", "0x", "/work", "site-packages", ".py"):
        assert leak not in err["message"], err["message"]
    return err


def prompt_len(backend: Any, messages: list[dict[str, str]]) -> int:
    return len(backend.chat_tokens(messages))


# ---------------------------------------------------------------------- the SDK, four ways


def test_sdk_sync_non_stream(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        client = OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)
        r = client.chat.completions.create(model=MODEL, messages=user("Say hi"), max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == MODEL
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.prompt_tokens == prompt_len(tiny_backend, user("Say hi"))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_sdk_sync_stream_matches_non_stream(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        client = OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)
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
        client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)
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
        await client.close()
    *body_chunks, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.model_dump()["completion_tokens"] == ref.usage.completion_tokens
    assert last.usage.prompt_tokens == ref.usage.prompt_tokens
    assert all(c.usage is None for c in body_chunks)
    assert "".join(c.choices[0].delta.content or "" for c in body_chunks) == ref.choices[0].message.content


async def test_sdk_async_non_stream(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)
        a, b = await asyncio.gather(
            client.chat.completions.create(model=MODEL, messages=user("one"), max_tokens=10, temperature=0),
            client.chat.completions.create(model=MODEL, messages=user("one"), max_tokens=10, temperature=0),
        )
        await client.close()
    assert a.id != b.id
    assert a.choices[0].message.content == b.choices[0].message.content  # concurrent, greedy: same text


# ---------------------------------------------------------------------- parameters


def test_max_tokens_gives_finish_reason_length(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        client = OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)
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


def test_bad_bodies_are_400_in_openai_shape(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        url = f"http://{addr}/v1/chat/completions"
        assert_error(httpx.post(url, content=b"{not json", timeout=30), 400, "invalid_json")
        assert_error(httpx.post(url, content=b"[1, 2]", timeout=30), 400, "invalid_json")
        err = assert_error(post(addr, {"model": MODEL}), 400, "missing_required_parameter")
        assert err["param"] == "messages"
        err = assert_error(post(addr, body(temperature=5)), 400, "invalid_value")
        assert err["param"] == "temperature" and err["type"] == "invalid_request_error"
        err = assert_error(post(addr, body(user("x") + [{"role": "tool", "content": "y"}])), 400, "invalid_value")
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
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        client = OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)
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
        ok = OpenAI(base_url=f"http://{addr}/v1", api_key="k-right", max_retries=0)
        assert ok.chat.completions.create(model=MODEL, messages=user("hi"), max_tokens=2).choices
        r = httpx.get(f"http://{addr}/v1/chat/completions/chatcmpl-x/stream", timeout=30)
        assert_error(r, 401, "invalid_api_key")


def test_body_over_the_limit_is_413(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO, **{"limits.max_http_body_bytes": 2048}) as addr:
        big = body(user("x" * 4000))
        assert_error(post(addr, big), 413, "request_too_large")  # by Content-Length

        def chunked():  # no Content-Length: counted as it streams in
            yield json.dumps(big).encode()

        r = httpx.post(f"http://{addr}/v1/chat/completions", content=chunked(), timeout=30)
        assert "content-length" not in r.request.headers
        assert_error(r, 413, "request_too_large")
        assert post(addr, body(max_tokens=2)).status_code == 200


def test_context_length_exceeded_is_400(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        err = assert_error(post(addr, body(user("hello " * 5000))), 400, "context_length_exceeded")
    assert err["param"] == "messages"


def test_busy_engine_is_503_server_busy(tiny_backend, server_factory):
    cfg = {**LONG, "engine.max_running": 1, "engine.max_waiting": 0, "server.grace_period_s": 0.2}
    with server_factory(tiny_backend, **cfg) as addr:
        with httpx.stream(
            "POST", f"http://{addr}/v1/chat/completions", json=body(max_tokens=4000, stream=True), timeout=60
        ) as first:
            next(first.iter_lines())  # the job is in the engine
            r = post(addr, body(max_tokens=2))
            err = assert_error(r, 503, "server_busy")
            assert r.headers["retry-after"] == "1" and err["type"] == "server_error"
        # the dropped stream is cancelled after its grace period; then there is room again
        deadline = time.monotonic() + 30
        while (r := post(addr, body(max_tokens=2))).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200


def test_image_part_without_describer_is_unsupported(tiny_backend, server_factory):
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
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


# ---------------------------------------------------------------------- disconnects and resume


def metric(addr: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://{addr}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    return 0.0


def wait_for(pred: Any, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_non_stream_client_disconnect_cancels_the_job(tiny_backend, server_factory):
    with server_factory(tiny_backend, **LONG) as addr:
        with pytest.raises(httpx.ReadTimeout):
            post(addr, body(max_tokens=4000), timeout=0.5)
        assert wait_for(lambda: metric(addr, "stream_omni:cancels_total") == 1)
        assert wait_for(lambda: metric(addr, "stream_omni:num_requests_running") == 0)


def read_events(resp: httpx.Response, n: int) -> list[tuple[str, str]]:
    """The first ``n`` SSE events of a streaming response."""
    events: list[tuple[str, str]] = []
    fields: dict[str, str] = {}
    for line in resp.iter_lines():
        if line:
            key, _, value = line.partition(": ")
            fields[key] = value
        elif "data" in fields:
            events.append((fields.get("id", ""), fields["data"]))
            fields = {}
            if len(events) == n:
                break
    return events


def test_sse_ids_are_numbered_and_resume_returns_exactly_the_missing_events(tiny_backend, server_factory):
    req = body(user("tell me a story"), max_tokens=600, stream=True, scheduler={"strategy": "fast"})
    with server_factory(tiny_backend, **LONG) as addr:
        whole = sse_events(post(addr, req).text)
        cid = json.loads(whole[0][1])["id"]
        assert [i for i, _ in whole] == [f"{cid}:{n}" for n in range(len(whole))]
        assert whole[-1][1] == "[DONE]" and len(whole) > 6
        with httpx.stream("POST", f"http://{addr}/v1/chat/completions", json=req, timeout=60) as r:
            head = read_events(r, 3)  # then drop the connection mid-stream
        rid = json.loads(head[0][1])["id"]
        assert rid != cid and head[-1][0] == f"{rid}:2"
        assert metric(addr, "stream_omni:num_requests_running") == 1  # still decoding: the resume goes live
        resumed = httpx.get(
            f"http://{addr}/v1/chat/completions/{rid}/stream", headers={"Last-Event-ID": head[-1][0]}, timeout=60
        )
        assert resumed.status_code == 200 and resumed.headers["content-type"].startswith("text/event-stream")
        tail = sse_events(resumed.text)
        assert [i for i, _ in tail] == [f"{rid}:{n}" for n in range(3, 3 + len(tail))]
        assert tail[-1][1] == "[DONE]"
        assert content_of(head + tail) == content_of(whole)  # nothing lost, nothing twice
        assert len(head + tail) == len(whole)
        # delivered to the end: the completion is gone
        gone = httpx.get(f"http://{addr}/v1/chat/completions/{rid}/stream", timeout=30)
        assert_error(gone, 404, "completion_not_found")
        assert metric(addr, "stream_omni:resumes_total") == 1


def test_resume_after_the_job_finished_replays_from_the_buffer(tiny_backend, server_factory):
    req = body(user("hi"), max_tokens=20, stream=True, stream_options={"include_usage": True})
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        sdk_like = {"Authorization": "Bearer anything"}  # the server has no keys: any (or no) key may resume
        with httpx.stream("POST", f"http://{addr}/v1/chat/completions", json=req, headers=sdk_like, timeout=60) as r:
            (first,) = read_events(r, 1)
        rid = first[0].split(":")[0]
        assert wait_for(lambda: metric(addr, "stream_omni:num_requests_running") == 0)
        url = f"http://{addr}/v1/chat/completions/{rid}/stream"
        replay = sse_events(httpx.get(url, timeout=60).text)  # no Last-Event-ID: from the start
        assert replay[0] == first
        assert json.loads(replay[-2][1])["usage"]["completion_tokens"] == 20
        assert_error(httpx.get(url, headers={"Last-Event-ID": "chatcmpl-other:1"}, timeout=30), 400, "invalid_value")


def test_resume_refuses_unknown_ids_other_keys_and_expired_streams(tiny_backend, server_factory):
    cfg = {**LONG, "server.grace_period_s": 1.0, "server.api_keys": ["k1", "k2"]}
    with server_factory(tiny_backend, **cfg) as addr:
        k1 = {"Authorization": "Bearer k1"}
        k2 = {"Authorization": "Bearer k2"}
        missing = httpx.get(f"http://{addr}/v1/chat/completions/chatcmpl-nope/stream", headers=k1, timeout=30)
        assert_error(missing, 404, "completion_not_found")
        with httpx.stream(
            "POST",
            f"http://{addr}/v1/chat/completions",
            json=body(max_tokens=4000, stream=True),
            headers=k1,
            timeout=60,
        ) as r:
            (first,) = read_events(r, 1)
        # the client is gone but the completion keeps decoding (a ~6 s job) for its grace period
        assert metric(addr, "stream_omni:num_requests_running") == 1
        url = f"http://{addr}/v1/chat/completions/{first[0].split(':')[0]}/stream"
        assert_error(httpx.get(url, headers={**k2, "Last-Event-ID": first[0]}, timeout=30), 404, "completion_not_found")
        # past the grace period nobody came back: the job is cancelled and the stream forgotten
        assert wait_for(lambda: metric(addr, "stream_omni:cancels_total") == 1)
        assert_error(httpx.get(url, headers={**k1, "Last-Event-ID": first[0]}, timeout=30), 404, "completion_not_found")
        assert metric(addr, "stream_omni:num_requests_running") == 0


# ---------------------------------------------------------------------- the pieces, without a server


def fake_services(**kw: Any) -> Any:
    from types import SimpleNamespace

    session = SimpleNamespace(instructions=kw.pop("instructions", None))
    return SimpleNamespace(config=SimpleNamespace(session=session), asr=None, **kw)


def messages(*raw: dict[str, Any]) -> list[Any]:
    from gateway.http_request import Message

    return [Message.model_validate(m) for m in raw]


async def test_image_parts_go_through_the_describer_when_there_is_one():
    from gateway.http_content import chat_messages
    from gateway.http_errors import ApiError
    from processors.image import ImageError

    seen: list[str] = []

    def describe(url: str) -> str:
        seen.append(url)
        if url.startswith("data:bad"):
            raise ImageError("invalid_image", "image data is not a PNG, JPEG or WebP")
        return "a red square"

    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    svc = fake_services(image_describer=describe)
    out = await chat_messages(svc, messages({"role": "user", "content": [{"type": "text", "text": "What?"}, img]}))
    assert out == [{"role": "user", "content": "What?\n[Image: a red square]"}]
    assert seen == ["data:image/png;base64,AAAA"]
    bad = {"type": "image_url", "image_url": {"url": "data:bad"}}
    with pytest.raises(ApiError) as info:
        await chat_messages(svc, messages({"role": "user", "content": [bad]}))
    err = info.value
    assert (err.status, err.code, err.param) == (400, "invalid_image", "messages[0].content[0].image_url")


async def test_default_instructions_apply_only_without_a_system_message():
    from gateway.http_content import chat_messages

    svc = fake_services(instructions="Be brief.")
    out = await chat_messages(svc, messages({"role": "user", "content": "hi"}))
    assert out == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    own = await chat_messages(svc, messages({"role": "developer", "content": "Be long."}, {"role": "user"}))
    assert own == [{"role": "system", "content": "Be long."}, {"role": "user", "content": ""}]


async def test_stream_buffer_is_bounded_and_never_skips_silently():
    from gateway.http_stream import CompletionStream, ReplayGap

    s = CompletionStream("c1", "owner", grace_s=1.0, max_bytes=200)
    for i in range(20):
        s.push(json.dumps({"i": i}))
    assert s.nbytes <= 200 and s.count == 20 and s.base > 0
    assert not s.covers(s.base - 2) and s.covers(s.base - 1)
    s.finish()
    got = [f async for f in s.frames_after(s.base - 1)]
    assert got[0].startswith(f"id: c1:{s.base}\n".encode()) and len(got) == 20 - s.base
    with pytest.raises(ReplayGap):
        async for _ in s.frames_after(0):
            pass


async def test_store_evicts_idle_finished_first_and_refuses_when_all_are_read():
    from gateway.http_stream import CompletionStore, CompletionStream

    store = CompletionStore(max_streams=2)
    cancelled: list[str] = []
    a, b, c, d = (CompletionStream(n, "o", grace_s=60) for n in "abcd")
    for s in (a, b, c, d):
        s.cancel = lambda n=s.id: cancelled.append(n)  # type: ignore[misc]
    assert store.add(a) and store.add(b)
    b.finish()
    assert store.add(c)  # evicts b (finished) before a (still running)
    assert store.get("b", "o") is None and store.get("a", "o") is a and cancelled == []
    assert store.get("a", "someone else") is None
    store.attach(a)
    store.attach(c)
    assert not store.add(d)  # both kept streams have readers: nothing to evict
    store.detach(a, delivered=False)  # a running stream left alone: kept for its grace period
    assert a.timer is not None and store.get("a", "o") is a
    assert store.add(d)  # now a is idle: evicted, and its job cancelled
    assert cancelled == ["a"] and store.get("a", "o") is None and a.timer is None
    c.finish()
    store.detach(c, delivered=True)  # read to the end: freed at once
    assert store.get("c", "o") is None and len(store) == 1
