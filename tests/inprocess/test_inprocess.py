"""The in-process API (``from gateway import StreamOmni``): the same chunks as the HTTP API, token ids,
the final chunk's metrics, callbacks, config files, and cancellation within one step."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from gateway import StreamChunk, StreamOmni, StreamOmniError
from testkit.fake_backend import FakeBackend
from tests.http.helpers import sse_events

NO_AUDIO = {"audio.enabled": False, "audio.output.enabled": False}  # no Whisper, no voice to load
MESSAGES = [{"role": "user", "content": "tell me a story"}]


class CountingBackend(FakeBackend):
    """FakeBackend that counts its forwards (thread-safe: read from the test's thread)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.forwards = 0
        self.lock = threading.Lock()

    def forward(self, state, tokens, n_logits=1):
        with self.lock:
            self.forwards += 1
        return super().forward(state, tokens, n_logits)


async def wait_idle(so: StreamOmni) -> None:
    deadline = time.monotonic() + 10
    while so.services.engine.depth != (0, 0):
        assert time.monotonic() < deadline, "the engine never went idle"
        await asyncio.sleep(0.005)


async def test_stream_gives_chunks_ids_and_final_metrics():
    backend = FakeBackend()
    async with StreamOmni(backend=backend, **NO_AUDIO) as so:
        chunks = [c async for c in so.stream(MESSAGES, temperature=0, max_output_tokens=64)]
    assert len(chunks) > 2 and all(isinstance(c, StreamChunk) for c in chunks)
    assert [c.is_final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    final = chunks[-1]
    assert final.finish_reason == "stop" and final.metrics is not None
    ids = [t for c in chunks for t in c.token_ids]
    assert final.metrics["tokens"] == len(ids) == backend.answer_tokens
    assert "".join(c.text for c in chunks) == backend.decode(ids)
    assert all(c.text == backend.decode(list(c.token_ids)) for c in chunks)  # each chunk's ids are its text
    assert all(c.metrics is None and c.finish_reason is None for c in chunks[:-1])


async def test_same_chunks_as_the_http_api(server_factory):
    async with StreamOmni(backend=FakeBackend(), **NO_AUDIO) as so:
        mine = [c.text async for c in so.stream(MESSAGES, temperature=0, max_output_tokens=30)]
    with server_factory(FakeBackend(), **NO_AUDIO) as addr:
        body = {"model": "fake", "messages": MESSAGES, "temperature": 0, "max_tokens": 30, "stream": True}
        async with httpx.AsyncClient(timeout=60) as client:
            raw = (await client.post(f"http://{addr}/v1/chat/completions", json=body)).text
    deltas = []
    for _, data in sse_events(raw)[1:-1]:
        choices = json.loads(data)["choices"]
        if choices and choices[0]["delta"].get("content"):
            deltas.append(choices[0]["delta"]["content"])
    assert [t for t in mine if t] == deltas


async def test_generate_calls_back_with_every_chunk():
    seen: list[StreamChunk] = []
    seen_async: list[str] = []

    async def collect(chunk: StreamChunk) -> None:
        await asyncio.sleep(0)
        seen_async.append(chunk.text)

    async with StreamOmni(backend=FakeBackend(), **NO_AUDIO) as so:
        text = await so.generate(MESSAGES, on_chunk=seen.append, temperature=0)
        again = await so.generate(MESSAGES, on_chunk=collect, temperature=0)
    assert text == again == "".join(c.text for c in seen) == "".join(seen_async)
    assert seen[-1].is_final and len(seen) > 2


async def test_a_config_file_and_sampling_options(tmp_path):
    cfg = tmp_path / "my.yaml"
    cfg.write_text("audio:\n  enabled: false\n  output:\n    enabled: false\nsession:\n  max_output_tokens: 5\n")
    async with StreamOmni(str(cfg), backend=FakeBackend()) as so:
        capped = [c async for c in so.stream(MESSAGES)]
        asked = [c async for c in so.stream(MESSAGES, max_output_tokens=3)]
        with pytest.raises(StreamOmniError) as err:
            [c async for c in so.stream(MESSAGES, temperature=7)]
        with pytest.raises(StreamOmniError, match="context_length_exceeded|server_busy|invalid"):
            [c async for c in so.stream(MESSAGES, scheduler={"strategy": "nope"})]
    assert capped[-1].finish_reason == "length" and capped[-1].metrics["tokens"] == 5
    assert asked[-1].metrics["tokens"] == 3
    assert err.value.code == "invalid_value" and "temperature" in err.value.message


async def test_not_started_is_a_clear_error():
    so = StreamOmni(backend=FakeBackend(), **NO_AUDIO)
    with pytest.raises(RuntimeError, match="async with"):
        so.stream(MESSAGES)


async def test_cancelling_the_consumer_cancels_the_response_within_one_step():
    backend = CountingBackend(answer_tokens=100_000, step_s=0.005)
    async with StreamOmni(backend=backend, **NO_AUDIO) as so:
        first = asyncio.Event()

        async def consume() -> None:
            async for _ in so.stream(MESSAGES, max_output_tokens=100_000):
                first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        at_cancel = backend.forwards  # the stream cancelled its job before the task ended
        await wait_idle(so)
        assert backend.forwards - at_cancel <= 1  # at most the step that was already running


async def test_breaking_out_of_the_loop_stops_the_response():
    backend = CountingBackend(answer_tokens=100_000, step_s=0.005)
    async with StreamOmni(backend=backend, **NO_AUDIO) as so:
        async with so.stream(MESSAGES, max_output_tokens=100_000) as chunks:
            async for _ in chunks:
                break
        await wait_idle(so)  # a 100,000-token job left running would keep the engine busy for minutes
        assert backend.forwards < 1000
