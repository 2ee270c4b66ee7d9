"""backend: openai — the gateway in front of real engine processes on free ports.

The main paths run against llama-cpp-python's own OpenAI server (``python -m llama_cpp.server``)
on the embedded GGUF and against a second ``stream-omni serve``; only the faults that a real
engine cannot show on demand (429/503, a stalled stream) use the small ``BadEngine``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.live_server import free_port
from testkit.remote_engines import BadEngine, EngineProcess, gateway, llama_server, stream_omni_engine, tcp_states
from tests.conftest import requires_espeak
from tests.wsclient import RealtimeClient

pytestmark = [pytest.mark.real_model, pytest.mark.server]  # engine and gateway processes

LONG = "Write a very long story about a dragon who learns to bake bread, with many chapters."


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    e = llama_server(tmp_path_factory.mktemp("llama_server")).start()
    yield e
    e.stop()


def direct(base_url: str, messages: list[dict[str, str]], **kw: Any) -> dict[str, Any]:
    """The engine asked directly (non-streamed): the reference for what the gateway must pass on."""
    r = httpx.post(f"{base_url}/chat/completions", json={"model": "x", "messages": messages, **kw}, timeout=120)
    r.raise_for_status()
    return dict(r.json())


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as h:
        return await h.get(url)


async def post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as h:
        return await h.post(url, json=body)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def connect(addr: str, model: str) -> RealtimeClient:
    c = await RealtimeClient.connect(addr, f"model={model}")
    await c.until("session.created", timeout=30)
    return c


def wait_for(cond: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------------- main paths


async def test_realtime_turns_through_llama_server(engine):
    with gateway(engine.base_url) as addr:
        listed = (await get(f"http://{addr}/v1/models")).json()["data"]
        assert [m["id"] for m in listed] == ["smollm2-engine"]  # model: auto = the engine's first id
        assert (await get(f"http://{addr}/ready")).json()["status"] == "ready"
        c = await connect(addr, "smollm2-engine")
        done = await c.ask("Name three colors.", max_output_tokens=24)
        r = done["response"]
        assert r["status"] in ("completed", "incomplete")
        want = direct(engine.base_url, user("Name three colors."), max_tokens=24, temperature=0.0, top_p=1.0)
        assert c.text_of(r["id"]) == want["choices"][0]["message"]["content"]  # greedy: the engine's own text
        # llama_cpp.server ignores stream_options (no usage chunk): one token per streamed delta
        assert r["usage"]["output_tokens"] == want["usage"]["completion_tokens"]
        deltas = [e for e in c.events if e["type"] == "response.output_text.delta" and e["response_id"] == r["id"]]
        assert 1 <= len(deltas) == r["metrics"]["chunks"] < r["usage"]["output_tokens"]  # chunks, not tokens
        # the next turn sends the whole conversation: the engine answers it as it would directly
        done2 = await c.ask("And three animals?", max_output_tokens=12)
        assert done2["response"]["status"] in ("completed", "incomplete")
        convo = [*user("Name three colors."), {"role": "assistant", "content": c.text_of(r["id"])}]
        want2 = direct(engine.base_url, [*convo, *user("And three animals?")], max_tokens=12, temperature=0.0)
        assert c.text_of(done2["response"]["id"]) == want2["choices"][0]["message"]["content"]
        await c.close()


def test_chat_completions_stream_and_not_with_sampling_passed_through(engine):
    from openai import OpenAI

    with (
        gateway(engine.base_url) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="unused", max_retries=0, timeout=120) as client,
    ):
        msgs = user("What is the capital of France?")
        want = direct(engine.base_url, msgs, max_tokens=20, temperature=0.0, top_p=1.0)
        full = client.chat.completions.create(model="smollm2-engine", messages=msgs, max_tokens=20)  # type: ignore[arg-type]
        assert full.choices[0].message.content == want["choices"][0]["message"]["content"]
        assert full.usage is not None and full.usage.completion_tokens == want["usage"]["completion_tokens"]
        parts, usage = [], None
        for ch in client.chat.completions.create(
            model="smollm2-engine",
            messages=msgs,  # type: ignore[arg-type]
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
        ):
            parts += [c.delta.content or "" for c in ch.choices]
            usage = ch.usage or usage
        assert "".join(parts) == full.choices[0].message.content
        assert usage is not None and usage.completion_tokens == want["usage"]["completion_tokens"]
        # max_tokens, temperature and seed reach the engine: a seeded sample equals the engine's own
        capped = client.chat.completions.create(model="smollm2-engine", messages=msgs, max_tokens=3)  # type: ignore[arg-type]
        assert capped.choices[0].finish_reason == "length" and capped.usage and capped.usage.completion_tokens == 3
        story = user("Tell me a short story.")
        sampled = client.chat.completions.create(
            model="smollm2-engine",
            messages=story,  # type: ignore[arg-type]
            max_tokens=24,
            temperature=1.3,
            seed=1234,
        )
        ref = direct(engine.base_url, story, max_tokens=24, temperature=1.3, top_p=1.0, seed=1234)
        greedy = direct(engine.base_url, story, max_tokens=24, temperature=0.0, top_p=1.0)
        assert sampled.choices[0].message.content == ref["choices"][0]["message"]["content"]
        assert ref["choices"][0]["message"]["content"] != greedy["choices"][0]["message"]["content"]


def first_deltas(url: str, body: dict[str, Any], n: int = 2) -> list[str]:
    """The first ``n`` text deltas of a streamed Chat Completion."""
    out: list[str] = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data:") and line.strip() != "data: [DONE]":
                out += [c["delta"]["content"] for c in json.loads(line[5:])["choices"] if c["delta"].get("content")]
            if len(out) >= n:
                break
    return out[:n]


def test_the_first_chunk_is_the_engines_first_delta_unless_whole_words_are_asked(engine):
    # greedy, this prompt's answer starts "B" + "oil…" on the embedded model: a first delta that is
    # only the start of a word, the case where eager_first and whole words differ
    body = {"model": "smollm2-engine", "messages": user("How do I boil an egg?"), "max_tokens": 6, "temperature": 0.0}
    d1, d2 = first_deltas(f"{engine.base_url}/chat/completions", body)
    assert d2[:1].isalnum(), (d1, d2)  # the engine's first delta does not end its word
    with gateway(engine.base_url) as addr:
        url = f"http://{addr}/v1/chat/completions"
        fast = {"strategy": "fast"}
        eager = first_deltas(url, {**body, "scheduler": fast}, 1)[0]  # backend: openai default
        whole = first_deltas(url, {**body, "scheduler": {**fast, "eager_first": False}}, 1)[0]
    assert eager == d1  # at once, as the engine sent it: no wait for the second delta
    assert whole.startswith(d1 + d2) and len(whole) > len(d1)  # waits until the word is known to end


async def test_concurrent_sessions_each_get_their_own_answer(engine):
    questions = ["Name three colors.", "What is the capital of France?", "Say hello."]
    with gateway(engine.base_url) as addr:
        clients = [await connect(addr, "smollm2-engine") for _ in questions]
        dones = await asyncio.gather(*(c.ask(q, max_output_tokens=16) for c, q in zip(clients, questions, strict=True)))
        for c, q, done in zip(clients, questions, dones, strict=True):
            want = direct(engine.base_url, user(q), max_tokens=16, temperature=0.0)
            assert c.text_of(done["response"]["id"]) == want["choices"][0]["message"]["content"]
            await c.close()


async def long_response(c: RealtimeClient, addr: Any, engine: EngineProcess) -> int:
    """Start a long response; at its first delta return our end's port of the engine connection."""
    await c.say(LONG)
    await c.send({"type": "response.create", "response": {"max_output_tokens": 600, "scheduler": {"strategy": "fast"}}})
    await c.until("response.output_text.delta")
    jobs = addr.services.engine.running_jobs()
    assert len(jobs) == 1 and jobs[0].sock is not None
    ours = int(jobs[0].sock.getsockname()[1])
    assert tcp_states(engine.port)[(ours, engine.port)] == "ESTABLISHED"
    return ours


async def upstream_closed(engine: EngineProcess, ours: int) -> None:
    def closed() -> bool:  # our end shut, and the engine closed its end (it saw us go)
        s = tcp_states(engine.port)
        return s.get((ours, engine.port)) != "ESTABLISHED" and s.get((engine.port, ours)) not in (
            "ESTABLISHED",
            "CLOSE_WAIT",
        )

    await asyncio.to_thread(wait_for, closed, 10.0, "the upstream connection to close")


async def test_cancel_closes_the_upstream_stream(engine):
    with gateway(engine.base_url) as addr:
        c = await connect(addr, "smollm2-engine")
        ours = await long_response(c, addr, engine)
        await c.send({"type": "response.cancel"})
        done = await c.until("response.done", timeout=10)
        assert done["response"]["status"] == "cancelled"
        rid = done["response"]["id"]
        await upstream_closed(engine, ours)
        with pytest.raises(TimeoutError):  # nothing of that response follows its done
            while True:
                ev = await c.recv(timeout=0.5)
                assert ev.get("response_id") != rid, ev
        done = await c.ask("Say hi.", max_output_tokens=8)  # the session goes on
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()


async def test_engine_dies_mid_response_then_comes_back(tmp_path):
    e = llama_server(tmp_path).start()
    try:
        with gateway(e.base_url, **{"model.connect_timeout_s": 1.0, "model.retries": 1}) as addr:
            c = await connect(addr, "smollm2-engine")
            await c.say(LONG)
            await c.send({"type": "response.create", "response": {"max_output_tokens": 600}})
            await c.until("response.output_text.delta")
            e.kill()
            done = await c.until("response.done", timeout=10)
            r = done["response"]
            assert r["status"] == "failed" and r["status_details"]["error"]["code"] == "engine_unavailable"
            ready = await get(f"http://{addr}/ready")
            assert ready.status_code == 503 and ready.json()["status"] == "engine_unavailable"
            # the session stays usable: the next turn fails cleanly while the engine is down …
            down = await c.ask("Are you there?", max_output_tokens=8)
            assert down["response"]["status_details"]["error"]["code"] == "engine_unavailable"
            for ev in c.events:
                assert "127.0.0.1" not in json.dumps(ev) and str(e.port) not in json.dumps(ev)
            # … and succeeds once it is back
            e.start()
            await asyncio.to_thread(
                wait_for, lambda: httpx.get(f"http://{addr}/ready", timeout=10).status_code == 200, 30.0, "/ready"
            )
            back = await c.ask("Say hi.", max_output_tokens=8)
            assert back["response"]["status"] in ("completed", "incomplete")
            await c.close()
    finally:
        e.stop()


def test_unreachable_engine_at_start_is_a_one_line_error(tmp_path):
    cfg = tmp_path / "remote.yaml"
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cfg.write_text(f"model:\n  backend: openai\n  base_url: {dead}\n  startup_wait_s: 0\naudio:\n  enabled: false\n")
    argv = [sys.executable, "-m", "gateway.wiring.cli", "serve", "--config", str(cfg), "--port", str(free_port())]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("stream-omni: the engine at model.base_url") and "did not answer" in last, r.stderr


async def test_a_second_stream_omni_as_the_engine(tmp_path):
    e = stream_omni_engine(tmp_path).start(timeout=180)
    try:
        with gateway(e.base_url) as addr:
            c = await connect(addr, "omni-engine")
            done = await c.ask("Name three fruits.", max_output_tokens=20)
            r = done["response"]
            assert r["status"] in ("completed", "incomplete")
            want = direct(e.base_url, user("Name three fruits."), model="omni-engine", max_tokens=20, temperature=0.0)
            assert c.text_of(r["id"]) == want["choices"][0]["message"]["content"]
            assert r["usage"]["output_tokens"] == want["usage"]["completion_tokens"]  # the engine's count
            assert r["usage"]["input_tokens"] == want["usage"]["prompt_tokens"]  # (its deltas are chunks, not tokens)
            assert r["usage"]["output_tokens"] > r["metrics"]["chunks"]
            await c.close()
    finally:
        e.stop()


@requires_espeak
async def test_a_voice_turn_reaches_the_engine_as_text(engine):
    import numpy as np

    from testkit.espeak import silence, speak
    from tests.media.test_realtime_voice import pcm24, stream

    with gateway(engine.base_url, **{"audio.enabled": True, "session.max_output_tokens": 24}) as addr:
        c = await connect(addr, "smollm2-engine")
        await stream(c, pcm24(np.concatenate([silence(0.5), speak("What is the capital of France?"), silence(1.2)])))
        heard = await c.until("conversation.item.input_audio_transcription.completed")
        done = await c.until("response.done")  # server VAD creates the response by itself
        r = done["response"]
        assert r["status"] in ("completed", "incomplete")
        want = direct(engine.base_url, user(heard["transcript"]), max_tokens=24, temperature=0.0)
        assert c.text_of(r["id"]) == want["choices"][0]["message"]["content"]
        await c.close()


@requires_espeak
async def test_barge_in_closes_the_upstream_stream(engine):
    import numpy as np

    from testkit.espeak import silence, speak
    from tests.media.test_realtime_voice import pcm24, stream

    with gateway(engine.base_url, **{"audio.enabled": True}) as addr:
        c = await connect(addr, "smollm2-engine")
        ours = await long_response(c, addr, engine)
        await stream(c, pcm24(np.concatenate([speak("Stop, please."), silence(1.0)])), frame_ms=20)
        done = await c.until("response.done", timeout=30)
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        await upstream_closed(engine, ours)
        await c.until("conversation.item.input_audio_transcription.completed")
        await c.close()


# ---------------------------------------------------------------------- faults a real engine won't show on cue


@pytest.mark.parametrize("mode", ["429", "503"])
async def test_engine_busy_is_server_busy(mode):
    bad = BadEngine(mode)
    try:
        with gateway(bad.base_url) as addr:
            c = await connect(addr, "bad-engine")
            done = await c.ask("hi", max_output_tokens=8)
            assert done["response"]["status"] == "failed"
            assert done["response"]["status_details"]["error"]["code"] == "server_busy"
            r = await post(f"http://{addr}/v1/chat/completions", {"model": "bad-engine", "messages": user("hi")})
            assert r.status_code == 503 and r.json()["error"]["code"] == "server_busy"
            assert "10.1.2.3" not in r.text and "10.1.2.3" not in json.dumps(c.events)  # the engine's words stay inside
            await c.close()
    finally:
        bad.close()


@pytest.mark.parametrize("mode", ["stall", "hang"])
async def test_a_silent_engine_hits_our_timeout(mode):
    bad = BadEngine(mode)
    try:
        with gateway(bad.base_url, **{"model.read_timeout_s": 0.5}) as addr:
            c = await connect(addr, "bad-engine")
            done = await c.ask("hi", max_output_tokens=8)
            r = done["response"]
            assert r["status"] == "failed" and r["status_details"]["error"]["code"] == "engine_timeout"
            r2 = await post(f"http://{addr}/v1/chat/completions", {"model": "bad-engine", "messages": user("hi")})
            assert r2.status_code == 504 and r2.json()["error"]["code"] == "engine_timeout"
            assert str(bad.port) not in r2.text and "127.0.0.1" not in r2.text
            await c.close()
    finally:
        bad.close()


@pytest.mark.parametrize(
    ("mode", "code", "status"), [("context", "context_length_exceeded", 400), ("json", "engine_error", 502)]
)
async def test_an_engine_refusal_has_our_code_and_none_of_its_words(mode, code, status):
    bad = BadEngine(mode)
    try:
        with gateway(bad.base_url) as addr:
            c = await connect(addr, "bad-engine")
            done = await c.ask("hi", max_output_tokens=8)
            assert done["response"]["status_details"]["error"]["code"] == code
            r = await post(f"http://{addr}/v1/chat/completions", {"model": "bad-engine", "messages": user("hi")})
            assert r.status_code == status and r.json()["error"]["code"] == code
            assert "10.1.2.3" not in r.text and "maximum context" not in json.dumps(c.events)
            await c.close()
    finally:
        bad.close()


def test_remote_engine_admission_busy_and_cancel_of_running_and_waiting_jobs():
    import queue

    from models.engine import EngineBusy
    from models.remote import RemoteConfig, RemoteJob, load_remote
    from models.remote_engine import RemoteEngine
    from models.sampling import SamplingParams
    from models.scheduler import SchedulerConfig

    bad = BadEngine("hang")
    model = load_remote(RemoteConfig(base_url=bad.base_url, startup_wait_s=0))
    eng = RemoteEngine(max_running=1, max_waiting=1)
    got: queue.Queue[tuple[str, Any]] = queue.Queue()

    def job() -> RemoteJob:
        return RemoteJob(model, user("hi"), SamplingParams(), SchedulerConfig())

    try:
        running = eng.submit(job(), lambda ev: got.put(("running", ev)))
        wait_for(lambda: eng.depth == (1, 0), 10.0, "the first job to run")
        waiting = eng.submit(job(), lambda ev: got.put(("waiting", ev)))
        with pytest.raises(EngineBusy):
            eng.submit(job(), lambda ev: None)
        with pytest.raises(TypeError):
            eng.submit(object(), lambda ev: None)
        waiting.cancel()
        who, ev = got.get(timeout=5)
        assert who == "waiting" and ev.done.reason == "cancelled"
        running.cancel()  # blocked before the engine's first byte: ends at once all the same
        who, ev = got.get(timeout=5)
        assert who == "running" and ev.done.reason == "cancelled"
        assert got.empty()
    finally:
        bad.close()  # (first: it wakes the worker still waiting for the engine's headers)
        eng.close()
        model.close()
