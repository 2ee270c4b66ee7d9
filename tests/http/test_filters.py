"""Chunk filters (config ``filters``): rewrite, stop with content_filter, fail cleanly — on Chat Completions,
the Realtime API and the in-process API; and the pure ``ResponseFilter`` / ``load_filters``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway import StreamOmni
from gateway.core.filters import FilterContext, ResponseFilter, load_filters
from testkit.fake_backend import FakeBackend
from tests.http.helpers import assert_error, sse_events
from tests.wsclient import RealtimeClient

SEEN: list[FilterContext] = []  # contexts the recording filter was called with
NO_AUDIO = {"audio.enabled": False, "audio.output.enabled": False}  # no Whisper, no voice to load
UPPER = {**NO_AUDIO, "filters": ["tests.http.test_filters:upper"]}
STOP = {**NO_AUDIO, "filters": ["tests.http.test_filters:record", "tests.http.test_filters:first_chunk_only"]}
BOOM = {**NO_AUDIO, "filters": ["tests.http.test_filters:boom"]}
MESSAGES = [{"role": "user", "content": "tell me"}]


def upper(text: str, ctx: FilterContext) -> str:
    return text.upper()


def record(text: str, ctx: FilterContext) -> str:
    SEEN.append(ctx)
    return text


def first_chunk_only(text: str, ctx: FilterContext) -> str | None:
    return None if ctx.text_so_far else text


def boom(text: str, ctx: FilterContext) -> str:
    raise ValueError("secret detail /etc/passwd")


def chat(addr: str, **kw: Any) -> httpx.Response:
    body = {"model": "fake", "messages": MESSAGES, "temperature": 0, "max_tokens": 30, **kw}
    return httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=60)


def deltas(raw: str) -> tuple[list[str], list[Any]]:
    texts, finishes = [], []
    for _, data in sse_events(raw):
        if data == "[DONE]":
            continue
        obj = json.loads(data)
        for ch in obj.get("choices", []):
            if ch["delta"].get("content"):
                texts.append(ch["delta"]["content"])
            finishes.append(ch["finish_reason"])
    return texts, finishes


# ---------------------------------------------------------------------- the pure core


def test_filters_chain_in_order_and_see_what_was_sent():
    calls = []

    def a(text: str, ctx: FilterContext) -> str:
        calls.append(("a", text, ctx.text_so_far))
        return text + "!"

    def b(text: str, ctx: FilterContext) -> str | None:
        calls.append(("b", text, ctx.text_so_far))
        return None if "stop" in text else text.upper()

    from gateway.core.filters import NamedFilter

    f = ResponseFilter([NamedFilter("a", a), NamedFilter("b", b)], "sess_1", "resp_1")
    assert f.check("hi") == "HI!"
    assert f.check("stop") is None and f.reason == "content_filter"
    assert f.check("more") is None  # stopped for good
    assert calls == [("a", "hi", ""), ("b", "hi!", ""), ("a", "stop", "HI!"), ("b", "stop!", "HI!")]
    assert "".join(f.sent) == "HI!"


def test_a_raising_or_wrongly_typed_filter_stops_with_filter_failed():
    from gateway.core.filters import NamedFilter

    f = ResponseFilter([NamedFilter("m:boom", boom)], None, "r")
    assert f.check("x") is None and f.reason == "filter_failed"
    assert f.error == "chunk filter m:boom failed: ValueError"  # names the filter, not its insides
    g = ResponseFilter([NamedFilter("m:num", lambda t, c: 3)], None, "r")  # type: ignore[arg-type,return-value]
    assert g.check("x") is None and g.error == "chunk filter m:num failed: TypeError"


def test_load_filters_imports_and_refuses_bad_specs():
    (f,) = load_filters(["tests.http.test_filters:upper"])
    assert f.fn is upper and f.name == "tests.http.test_filters:upper"
    for bad, why in [("no_colon", "must look like"), ("nope.nope:x", "cannot be loaded"), ("json:nope", "cannot")]:
        with pytest.raises(ValueError, match=why):
            load_filters([bad])
    with pytest.raises(ValueError, match="not callable"):
        load_filters(["tests.http.test_filters:SEEN"])


# ---------------------------------------------------------------------- Chat Completions


def test_chat_text_is_rewritten_by_a_filter(server_factory):
    with server_factory(FakeBackend(), **NO_AUDIO) as plain:
        ref = chat(plain).json()["choices"][0]["message"]["content"]
    with server_factory(FakeBackend(), **UPPER) as addr:
        r = chat(addr).json()
        streamed, _ = deltas(chat(addr, stream=True).text)
    assert r["choices"][0]["message"]["content"] == ref.upper() != ref
    assert "".join(streamed) == ref.upper()


def slow() -> FakeBackend:
    """A long answer at a few ms a token: a job a filter stops is still far from its end."""
    return FakeBackend(answer_tokens=1000, step_s=0.003)


def test_chat_stopped_by_a_filter_ends_with_content_filter(server_factory):
    SEEN.clear()
    with server_factory(slow(), **STOP, **{"speculative.drafter": "none"}) as addr:
        r = chat(addr, max_tokens=500).json()
        streamed, finishes = deltas(chat(addr, stream=True, stream_options={"include_usage": True}).text)
        usage = json.loads(sse_events(chat(addr, stream=True, stream_options={"include_usage": True}).text)[-2][1])
    first = r["choices"][0]["message"]["content"]
    assert r["choices"][0]["finish_reason"] == "content_filter" and first
    assert r["usage"]["completion_tokens"] < 500  # the job was stopped, not run to its end
    assert streamed == [first] and finishes[-1] == "content_filter"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] >= 1
    assert SEEN[0].session_id is None and SEEN[0].response_id.startswith("chatcmpl-")
    assert SEEN[0].text_so_far == "" and SEEN[1].text_so_far == first


def test_chat_filter_that_raises_fails_the_response_not_the_server(server_factory):
    with server_factory(FakeBackend(), **BOOM) as addr:
        err = assert_error(chat(addr), 500, "filter_failed")
        raw = chat(addr, stream=True).text
        alive = httpx.get(f"http://{addr}/health", timeout=10)
    assert err["message"] == "chunk filter tests.http.test_filters:boom failed: ValueError"
    frames = [d for _, d in sse_events(raw)]
    assert frames[-1] == "[DONE]" and json.loads(frames[-2])["error"]["code"] == "filter_failed"
    assert deltas(raw)[0] == []  # nothing unfiltered leaked
    assert alive.status_code == 200


# ---------------------------------------------------------------------- Realtime


async def test_realtime_stopped_by_a_filter_is_incomplete_and_history_holds_what_was_sent(server_factory):
    SEEN.clear()
    with server_factory(FakeBackend(), **STOP) as addr:
        c = await RealtimeClient.connect(addr, "model=fake")
        created = await c.until("session.created")
        done = (await c.ask("tell me", max_output_tokens=30))["response"]
        sent = c.text_of(done["id"])
        token = addr.call(lambda: next(iter(addr.services.registry.sessions)))
        items = addr.call(lambda: list(addr.services.registry.sessions[token].session.conversation.items))
        await c.close()
    assert done["status"] == "incomplete"
    assert done["status_details"] == {"type": "incomplete", "reason": "content_filter"}
    assert sent and done["output"][0]["content"][0]["text"] == sent
    assert items[-1]["content"][0]["text"] == sent  # the conversation keeps only the sent text
    assert SEEN[0].session_id == created["session"]["id"] and SEEN[0].response_id == done["id"]


async def test_realtime_filter_that_raises_fails_the_response_and_keeps_the_socket(server_factory):
    with server_factory(FakeBackend(), **BOOM) as addr:
        c = await RealtimeClient.connect(addr, "model=fake")
        await c.until("session.created")
        done = (await c.ask("tell me", max_output_tokens=30))["response"]
        err = next(e for e in c.events if e["type"] == "error")
        again = (await c.ask("and again", max_output_tokens=5))["response"]  # the session goes on
        await c.close()
    assert done["status"] == "failed" and done["status_details"]["error"]["code"] == "filter_failed"
    assert err["error"]["code"] == "filter_failed" and "ValueError" in err["error"]["message"]
    assert not any(e["type"] == "response.output_text.delta" for e in c.events)
    assert again["status"] == "failed"


# ---------------------------------------------------------------------- in-process


async def test_in_process_stream_is_filtered_too():
    async with StreamOmni(backend=FakeBackend(), **STOP) as so:
        chunks = [c async for c in so.stream(MESSAGES, temperature=0, max_output_tokens=30)]
    assert chunks[-1].is_final and chunks[-1].finish_reason == "content_filter"
    assert len([c for c in chunks if c.text]) == 1
