"""Every sampling knob honoured or refused, on Chat Completions (openai SDK), Completions, Realtime and
in-process: each one changes the output the way it says, unknown keys are a 400 naming them."""

from __future__ import annotations

import numpy as np
from openai import OpenAI

from gateway import StreamOmni, StreamOmniError
from tests.http.helpers import MODEL, NO_AUDIO, post, sse_events, user
from tests.ngrams import repeats
from tests.wsclient import RealtimeClient

# drafting off: the tiny model's repetitive output is what the penalties are about, and drafting's exactness
# under penalties has its own tests (tests/engine/test_penalties.py)
CONF = {**NO_AUDIO, "speculative.drafter": "none"}
PROMPT = user("count to ten")


def tokens_of(r) -> list[str]:
    return [t.token for t in r.choices[0].logprobs.content]


def test_penalties_bias_and_logprobs_on_chat(tiny_backend, server_factory):
    with (
        server_factory(tiny_backend, **CONF) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):

        def ask(**kw):
            kw = {"max_tokens": 40, "temperature": 0, **kw}
            return client.chat.completions.create(model=MODEL, messages=PROMPT, logprobs=True, **kw)

        plain = ask()
        plain_tokens = tokens_of(plain)
        assert len(plain_tokens) == plain.usage.completion_tokens == 40
        assert repeats(plain_tokens, 2) > 5  # the tiny model repeats itself: room for the penalties to show
        for kw in (
            {"frequency_penalty": 2.0},
            {"presence_penalty": 2.0},
            {"extra_body": {"repetition_penalty": 1.5}},
        ):
            pen = tokens_of(ask(**kw))
            assert repeats(pen, 2) < repeats(plain_tokens, 2), (kw, plain_tokens, pen)
        # DRY spares runs that cross a newline (a sequence breaker), which is all the tiny model says here:
        # compare with newlines banned
        no_nl = {str(tiny_backend.encode("\n")[-1]): -100}
        loose = tokens_of(ask(logit_bias=no_nl))
        dry = tokens_of(ask(logit_bias=no_nl, extra_body={"dry_multiplier": 2.0}))
        assert "\n" not in loose and repeats(dry, 2) < repeats(loose, 2), (loose, dry)

        favoured = 100
        biased = ask(logit_bias={str(favoured): 100})
        assert set(tokens_of(biased)) == {tiny_backend.decode([favoured])}
        first = tiny_backend.encode(plain_tokens[0])[-1]  # the plain answer's first token, banned
        banned = ask(logit_bias={str(first): -100})
        assert tokens_of(banned)[0] != plain_tokens[0]

        # logprobs: the chosen token heads its alternatives at greedy, and they sum below one
        top = ask(top_logprobs=2)
        for t in top.choices[0].logprobs.content:
            assert len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token
            assert t.top_logprobs[0].logprob == t.logprob and sum(np.exp(a.logprob) for a in t.top_logprobs) <= 1
            assert bytes(t.bytes) == t.token.encode()
        streamed = client.chat.completions.create(
            model=MODEL, messages=PROMPT, max_tokens=40, temperature=0, logprobs=True, top_logprobs=2, stream=True
        )
        got = [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
        assert [(t.token, t.logprob) for t in got] == [(t.token, t.logprob) for t in top.choices[0].logprobs.content]

        # top_k 1 is greedy at any temperature; min_p 1 keeps only the top token too
        hot = {"temperature": 1.5, "seed": 3}
        assert tokens_of(ask(**{**hot, "extra_body": {"top_k": 1}})) == plain_tokens
        assert tokens_of(ask(**{**hot, "extra_body": {"min_p": 1.0}})) == plain_tokens
        assert tokens_of(ask(**hot)) != plain_tokens


def test_unknown_keys_are_refused_and_bookkeeping_keys_ignored(tiny_backend, server_factory):
    base = {"model": MODEL, "messages": PROMPT, "max_tokens": 8, "temperature": 0}
    with server_factory(tiny_backend, **CONF) as addr:
        r = post(addr, {**base, "frobnicate": 1})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "unknown_parameter" and err["param"] == "frobnicate"
        assert err["message"] == "Unrecognized request argument supplied: frobnicate"
        ref = post(addr, base).json()["choices"][0]["message"]["content"]
        kept = post(addr, {**base, "user": "u1", "metadata": {"a": "b"}, "store": False, "service_tier": "auto"})
        assert kept.status_code == 200 and kept.json()["choices"][0]["message"]["content"] == ref
        for bad, param in (
            ({"logit_bias": {"x": 1}}, "logit_bias"),
            ({"logit_bias": {"5": 101}}, "logit_bias"),
            ({"logit_bias": {"999999": 1}}, None),  # outside the vocabulary: named in the message
            ({"frequency_penalty": 2.5}, "frequency_penalty"),
            ({"top_logprobs": 2}, None),  # without logprobs
            ({"dry_base": 1.0}, "dry_base"),
        ):
            r = post(addr, {**base, **bad})
            assert r.status_code == 400, bad
            e = r.json()["error"]
            assert (e["param"] == param) if param else ("logit_bias" in e["message"] or "top_logprobs" in e["message"])
        # the legacy completions endpoint takes the same knobs
        c = httpx_completion(addr, {"prompt": "one two", "max_tokens": 12, "logit_bias": {"100": 100}})
        assert c["choices"][0]["text"] == tiny_backend.decode([100] * 12)
        r = httpx_completion(addr, {"prompt": "x", "wat": 1}, status=400)
        assert r["error"]["code"] == "unknown_parameter"


def httpx_completion(addr: str, payload: dict, status: int = 200) -> dict:
    import httpx

    r = httpx.post(f"http://{addr}/v1/completions", json={"model": MODEL, "temperature": 0, **payload}, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


async def test_realtime_response_and_session_take_the_knobs(tiny_backend, server_factory):
    with server_factory(tiny_backend, **CONF) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        plain = await c.ask("count to ten", temperature=0, max_output_tokens=30)
        biased = await c.ask("count to ten", temperature=0, max_output_tokens=30, logit_bias={"100": 100})
        assert c.text_of(biased["response"]["id"]) == tiny_backend.decode([100] * 30)
        assert c.text_of(plain["response"]["id"]) != c.text_of(biased["response"]["id"])
        await c.send({"type": "session.update", "session": {"type": "realtime", "logit_bias": {"100": 100}}})
        await c.until("session.updated")
        by_session = await c.ask("count to ten", temperature=0, max_output_tokens=30)
        assert c.text_of(by_session["response"]["id"]) == tiny_backend.decode([100] * 30)
        # the response's own value wins over the session's
        off = await c.ask("count to ten", temperature=0, max_output_tokens=30, logit_bias={"100": 0})
        assert c.text_of(off["response"]["id"]) != tiny_backend.decode([100] * 30)
        await c.close()


async def test_inprocess_takes_the_knobs_and_refuses_unknown_ones(tiny_backend):
    async with StreamOmni(backend=tiny_backend, **CONF, **{"audio.output.enabled": False}) as so:
        text = await so.generate(PROMPT, temperature=0, max_output_tokens=10, logit_bias={"100": 100})
        assert text == tiny_backend.decode([100] * 10)
        try:
            await so.generate(PROMPT, temperature=0, frobnicate=1)
        except StreamOmniError as exc:
            assert "frobnicate" in exc.message
        else:
            raise AssertionError("an unknown option was accepted")


def test_sse_chunks_carry_logprobs(tiny_backend, server_factory):
    with server_factory(tiny_backend, **CONF) as addr:
        r = post(
            addr,
            {"model": MODEL, "messages": PROMPT, "max_tokens": 10, "temperature": 0, "stream": True, "logprobs": True},
        )
        frames = [d for _, d in sse_events(r.text) if d != "[DONE]"]
    import json

    n = sum(len((json.loads(f)["choices"][0].get("logprobs") or {}).get("content", [])) for f in frames)
    assert n == 10
