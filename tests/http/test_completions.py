"""POST /v1/completions through the openai SDK (and raw httpx for what the SDK cannot send): raw prompts,
batches, token ids, echo, logprobs, stop, seed, usage, errors."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError, OpenAI

from models.decode import DecodeJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from tests.http.helpers import MODEL, NO_AUDIO, assert_error, sse_events

PROMPT = "The capital of France is"


def reference(backend, ids: list[int], max_tokens: int) -> str:
    """Greedy text of ``ids`` decoded directly on the backend (call with no server running on it)."""
    job = DecodeJob(backend, backend.new_state(), ids, SamplingParams(max_tokens=max_tokens), SchedulerConfig())
    text = ""
    while not job.finished:
        text += "".join(c.text for c in job.step().chunks)
    return text


def client_for(addr: str) -> OpenAI:
    return OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0)


def test_sdk_non_stream_reads_the_prompt_raw(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        r = client_for(addr).completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    ids = tiny_backend.encode(PROMPT)
    assert ids != tiny_backend.chat_tokens([{"role": "user", "content": PROMPT}])
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == MODEL
    assert r.usage.prompt_tokens == len(ids)  # no chat template around it
    assert r.usage.completion_tokens == 12 and r.usage.total_tokens == len(ids) + 12
    assert r.choices[0].finish_reason == "length" and r.choices[0].index == 0
    assert r.choices[0].text == reference(tiny_backend, ids, 12)


async def test_sdk_stream_matches_non_stream_with_usage(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        async with AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client:
            ref = await client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=30, temperature=0)
            stream = await client.completions.create(
                model=MODEL,
                prompt=PROMPT,
                max_tokens=30,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [c async for c in stream]
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == ref.usage.completion_tokens
    assert all(c.object == "text_completion" and c.id == chunks[0].id and c.usage is None for c in body)
    assert len(body) >= 3  # several scheduler chunks, then the finish
    assert "".join(c.choices[0].text for c in body) == ref.choices[0].text
    assert [c.choices[0].finish_reason for c in body][-1] == ref.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in body[:-1])


def test_list_of_prompts_and_token_ids_are_one_choice_each(tiny_backend, server_factory):
    other = "Once upon a time"
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = client_for(addr)
        single = [c.completions.create(model=MODEL, prompt=p, max_tokens=10, temperature=0) for p in (PROMPT, other)]
        batch = c.completions.create(model=MODEL, prompt=[PROMPT, other], max_tokens=10, temperature=0)
        by_ids = c.completions.create(model=MODEL, prompt=tiny_backend.encode(other), max_tokens=10, temperature=0)
        by_id_lists = c.completions.create(
            model=MODEL, prompt=[tiny_backend.encode(PROMPT), tiny_backend.encode(other)], max_tokens=10, temperature=0
        )
        streamed = httpx.post(
            f"http://{addr}/v1/completions",
            json={"model": MODEL, "prompt": [PROMPT, other], "max_tokens": 10, "temperature": 0, "stream": True},
            timeout=60,
        ).text
    want = [s.choices[0].text for s in single]
    assert want[0] != want[1]
    assert [ch.index for ch in batch.choices] == [0, 1]
    assert [ch.text for ch in batch.choices] == want
    assert batch.usage.completion_tokens == sum(s.usage.completion_tokens for s in single)
    assert by_ids.choices[0].text == want[1]
    assert [ch.text for ch in by_id_lists.choices] == want
    texts = ["", ""]
    for _, data in sse_events(streamed)[:-1]:
        for ch in json.loads(data)["choices"]:
            texts[ch["index"]] += ch["text"]
    assert texts == want


def test_echo_puts_the_prompt_in_front(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = client_for(addr)
        plain = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)
        echoed = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, echo=True)
        ids = c.completions.create(
            model=MODEL, prompt=tiny_backend.encode(PROMPT), max_tokens=8, temperature=0, echo=True
        )
        streamed = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, echo=True, stream=True)
        streamed_text = "".join(ch.choices[0].text for ch in streamed if ch.choices)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert streamed_text == echoed.choices[0].text
    assert ids.choices[0].text == tiny_backend.decode(tiny_backend.encode(PROMPT)) + plain.choices[0].text


def test_logprobs_give_each_token_and_its_alternatives(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = client_for(addr)
        r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0, logprobs=3)
        streamed = list(
            c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0, logprobs=3, stream=True)
        )
    ch = r.choices[0]
    lp = ch.logprobs
    assert "".join(lp.tokens) == ch.text and len(lp.tokens) == r.usage.completion_tokens
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for tok, tok_lp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert tok_lp <= 0.0 and math.isfinite(tok_lp)
        assert 1 <= len(top) <= 4 and top[tok] == pytest.approx(tok_lp)
        assert max(top.values()) == pytest.approx(tok_lp)  # greedy: the chosen token is the most likely
    s_tokens = [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    s_lps = [v for c in streamed if c.choices and c.choices[0].logprobs for v in c.choices[0].logprobs.token_logprobs]
    assert s_tokens == lp.tokens
    assert s_lps == pytest.approx(lp.token_logprobs, abs=1e-4)


def test_stop_seed_and_max_tokens(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = client_for(addr)
        ref = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0).choices[0].text
        assert len(ref) > 16, ref
        stop = ref[8:12]
        stopped = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop])
        seeded = [
            c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=1.5, seed=s).choices[0].text
            for s in (7, 7, 8)
        ]
    assert stopped.choices[0].text == ref[: ref.index(stop)] and stopped.choices[0].finish_reason == "stop"
    assert seeded[0] == seeded[1] != seeded[2]


def test_refusals_are_openai_errors(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        c = client_for(addr)
        with pytest.raises(BadRequestError, match="logprobs"):
            c.completions.create(model=MODEL, prompt=PROMPT, logprobs=6)
        with pytest.raises(BadRequestError, match="echo"):
            c.completions.create(model=MODEL, prompt=PROMPT, logprobs=1, echo=True)
        with pytest.raises(NotFoundError):
            c.completions.create(model="nope", prompt=PROMPT)

        def post(**kw):
            return httpx.post(f"http://{addr}/v1/completions", json={"model": MODEL, **kw}, timeout=60)

        assert "vocabulary" in assert_error(post(prompt=[1, 10**9]), 400, "invalid_value")["message"]
        assert assert_error(post(prompt=PROMPT, suffix="x"), 400, "invalid_value")["param"] == "suffix"
        assert assert_error(post(prompt=[]), 400, "invalid_value")["param"] == "prompt"
        assert assert_error(post(prompt=PROMPT * 5000), 400, "context_length_exceeded")["param"] == "prompt"
        assert_error(post(), 400, "missing_required_parameter")
