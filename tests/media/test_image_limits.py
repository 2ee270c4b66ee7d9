"""Image limits that answer before any model work: images per message and per key a minute, on both APIs."""

from __future__ import annotations

import pytest

from testkit.vision_images import data_url, render_lines
from tests.wsclient import RealtimeClient

pytestmark = pytest.mark.real_model  # the server reads the images it admits with the offline models

TINY = data_url(render_lines(["hi"], size=(64, 48), font_size=12))


def chat(client, parts: int):
    content = [{"type": "image_url", "image_url": {"url": TINY}}] * parts + [{"type": "text", "text": "?"}]
    return client.post(
        "/v1/chat/completions",
        json={"model": "tiny-llama", "max_tokens": 1, "messages": [{"role": "user", "content": content}]},
    )


def image_item(parts: int) -> dict:
    content = [{"type": "input_image", "image_url": TINY}] * parts
    return {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": content}}


async def test_a_key_s_images_a_minute_are_counted_across_both_apis_and_refused_when_spent(
    tiny_backend, server_factory
):
    import httpx

    conf = {"audio.enabled": False, "vision.images_per_key_per_minute": 3}
    with server_factory(tiny_backend, **conf) as addr:
        with httpx.Client(base_url=f"http://{addr}", timeout=60) as http:
            assert chat(http, 2).status_code == 200  # 2 of 3
            c = await RealtimeClient.connect(addr)
            await c.until("session.created")
            await c.send(image_item(1))  # 3 of 3
            added = await c.until("conversation.item.added")
            assert added["item"]["content"][0]["text"].startswith("[image: ")
            await c.send(image_item(1))  # over
            err = await c.until("error")
            assert (
                err["error"]["code"] == "rate_limit_exceeded" and "images_per_key_per_minute" in err["error"]["message"]
            )
            await c.close()
            r = chat(http, 1)
            assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
            assert r.json()["error"]["param"] == "messages[0].content"


async def test_too_many_images_in_one_realtime_message_is_an_error_and_the_session_goes_on(
    tiny_backend, server_factory
):
    with server_factory(tiny_backend, **{"audio.enabled": False, "vision.max_images_per_message": 2}) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.send(image_item(3))
        err = await c.until("error")
        assert err["error"]["code"] == "too_many_images" and err["error"]["param"] == "item.content"
        await c.send(image_item(2))
        added = await c.until("conversation.item.added")
        assert [part["type"] for part in added["item"]["content"]] == ["input_text", "input_text"]
        await c.close()
