"""The same protocol behaviours on both LLM backends: transformers (bf16) and llama.cpp (the default).

Both run the embedded SmolLM2 weights; the scheduler, cancel, cache reuse across turns, resume and
speculative drafting must behave alike.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest

from tests.resume_client import run_with_drops
from tests.wsclient import RealtimeClient

pytestmark = pytest.mark.real_model

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None


@pytest.fixture(scope="session")
def llama_backend():
    if not HAVE_LLAMA and not os.environ.get("CI"):
        pytest.skip("llama-cpp-python is not installed")
    from models.llama_cpp import LlamaCppConfig, load_llama_backend

    return load_llama_backend(LlamaCppConfig(n_seq=4))


@pytest.fixture(params=["transformers", "llama_cpp"])
def backend(request):
    return request.getfixturevalue("real_backend" if request.param == "transformers" else "llama_backend")


NO_AUDIO = {"audio.enabled": False}


async def test_streams_a_coherent_answer_then_reuses_the_cache(backend, server_factory):
    with server_factory(backend, **NO_AUDIO) as addr:
        c = await RealtimeClient.connect(addr, query="")
        await c.until("session.created")
        done = await c.ask("What is the capital of France? Answer in one sentence.", max_output_tokens=40)
        assert done["response"]["status"] == "completed" and "Paris" in c.text_of(done["response"]["id"])
        deltas = [e for e in c.events if e["type"] == "response.output_text.delta"]
        assert len(deltas) >= 2
        done2 = await c.ask("And the capital of Italy?", max_output_tokens=40)
        m = done2["response"]["metrics"]
        assert m["cached_tokens"] > m["prompt_tokens"]
        await c.close()


async def test_cancel_within_a_step_and_nothing_after_done(backend, server_factory):
    with server_factory(backend, **NO_AUDIO) as addr:
        c = await RealtimeClient.connect(addr, query="")
        await c.until("session.created")
        await c.say("Write a long story about the sea.")
        await c.send(
            {"type": "response.create", "response": {"max_output_tokens": 400, "scheduler": {"strategy": "fast"}}}
        )
        await c.until("response.output_text.delta")
        await c.send({"type": "response.cancel"})
        done = await c.until("response.done")
        assert done["response"]["status"] == "cancelled"
        try:
            while True:
                ev = await c.recv(timeout=0.5)
                assert ev["type"] != "response.output_text.delta"
        except TimeoutError:
            pass
        await c.close()


@pytest.mark.server
def test_resume_with_drops_gives_the_same_text(backend):
    from gateway.core.config import load_config
    from testkit.live_server import run_server

    greedy = {"session.temperature": 0.0}  # the two runs are compared token for token
    with run_server(load_config(None, **NO_AUDIO, **greedy), backend) as addr:
        ref = asyncio.run(run_with_drops(addr, [], limit_s=120)).text()
        got = asyncio.run(run_with_drops(addr, [(3, "abort"), (2, "close")], limit_s=120))
    assert got.text() == ref and got.count("response.done") == 1


def test_drafting_on_grounded_text_matches_plain_greedy(backend):
    from models.decode import DecodeJob
    from models.sampling import SamplingParams
    from models.scheduler import SchedulerConfig
    from models.speculative import SpecConfig, Speculator

    text = "The quick brown fox jumps over the lazy dog near the river bank every morning."
    prompt = backend.chat_tokens([{"role": "user", "content": f"Repeat this sentence exactly: {text}"}])
    spec = Speculator(backend, SpecConfig(drafter="prompt_lookup", k_max=8, adaptive=False, calibrate=False))

    def run(drafting: bool):
        s = spec.for_job() if drafting else None
        sched = SchedulerConfig.for_strategy("balanced", lookahead_tokens=8 if drafting else 0)
        job = DecodeJob(backend, backend.new_state(), prompt, SamplingParams(max_tokens=32), sched, s, s)
        while not job.finished:
            job.step()
        return job

    plain, drafted = run(False), run(True)
    assert drafted.generated == plain.generated
    assert drafted.accepted > 0
