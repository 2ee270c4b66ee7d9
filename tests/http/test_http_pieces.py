"""The HTTP layer's pieces without a server: content parts, default instructions, the SSE buffer and store."""

from __future__ import annotations

import json
from typing import Any

import pytest

# ---------------------------------------------------------------------- the pieces, without a server


def fake_services(**kw: Any) -> Any:
    from types import SimpleNamespace

    from gateway.core.config import VisionConfig

    session = SimpleNamespace(instructions=kw.pop("instructions", None))
    config = SimpleNamespace(session=session, vision=VisionConfig())
    return SimpleNamespace(config=config, asr=None, image_key_limits=None, **kw)


def messages(*raw: dict[str, Any]) -> list[Any]:
    from gateway.http.schemas import Message

    return [Message.model_validate(m) for m in raw]


async def test_image_parts_go_through_the_describer_when_there_is_one():
    from gateway.http.chat_parts import chat_messages
    from gateway.http.error_bodies import ApiError
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
    assert out == [{"role": "user", "content": "What?\na red square"}]
    assert seen == ["data:image/png;base64,AAAA"]
    bad = {"type": "image_url", "image_url": {"url": "data:bad"}}
    with pytest.raises(ApiError) as info:
        await chat_messages(svc, messages({"role": "user", "content": [bad]}))
    err = info.value
    assert (err.status, err.code, err.param) == (400, "invalid_image", "messages[0].content[0].image_url")


async def test_an_image_part_reads_as_the_same_text_on_both_apis():
    from gateway.http.chat_parts import chat_messages
    from gateway.realtime import protocol as p
    from gateway.realtime.item_parts import resolve_parts
    from models.clip import describe as clip_words

    url = "data:image/png;base64,AAAA"
    svc = fake_services(image_describer=lambda _url: clip_words([("a red square", 0.9)]))
    http = await chat_messages(
        svc, messages({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
    )
    part = p.InputImage(type="input_image", image_url=url)
    (realtime,) = await resolve_parts(svc, "", [part], transcribe=None)  # type: ignore[arg-type]
    assert http[0]["content"] == realtime.text == "[image: likely a photo of a red square]"


async def test_default_instructions_apply_only_without_a_system_message():
    from gateway.http.chat_parts import chat_messages

    svc = fake_services(instructions="Be brief.")
    out = await chat_messages(svc, messages({"role": "user", "content": "hi"}))
    assert out == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    own = await chat_messages(svc, messages({"role": "developer", "content": "Be long."}, {"role": "user"}))
    assert own == [{"role": "system", "content": "Be long."}, {"role": "user", "content": ""}]


async def test_stream_buffer_is_bounded_and_never_skips_silently():
    from gateway.http.sse import CompletionStream, ReplayGap

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
    from gateway.http.sse import CompletionStore, CompletionStream

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
