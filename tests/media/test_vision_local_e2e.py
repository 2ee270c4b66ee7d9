"""Images end to end on the embedded default: the offline classifier + OCR describe them to SmolLM2-135M.

A real server loaded as ``stream-omni serve`` loads it (llama.cpp, ``vision.mode: local`` by
default): a photo of a cat asked "what is this?" is answered with "cat", a rendered notice asked
"what does it say?" with its words, over Realtime (data URL and uploaded ``file_id``) and Chat
Completions (data URL and uploaded file); limits answer before any model work.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.live_server import ServerAddr, run_server
from testkit.vision_images import data_url, photo, render_lines
from tests.wsclient import RealtimeClient

pytestmark = [pytest.mark.real_model, pytest.mark.server]

NOTICE = ["Library closed on Monday", "Open again Tuesday at 9am"]


@pytest.fixture(scope="module")
def addr() -> Iterator[ServerAddr]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    from gateway.core.config import load_config
    from gateway.wiring.loading import default_loader

    cfg = load_config(None, **{"audio.enabled": False, "speculative.drafter": "none"})
    assert cfg.vision.mode == "local"  # the default, not set here
    with run_server(cfg, None, loader=default_loader) as a:
        yield a


def post(addr: str, path: str, body: dict[str, Any] | bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{addr}{path}", data, {"Content-Type": "application/json", **(headers or {})}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def upload(addr: str, png: bytes) -> str:
    boundary = "vision-test-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nvision\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + png
        + f"\r\n--{boundary}--\r\n".encode()
    )
    status, out = post(addr, "/v1/files", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 200, out
    return str(out["id"])


def chat(addr: str, content: list[dict[str, Any]]) -> tuple[int, Any]:
    body = {
        "model": "SmolLM2-135M-Instruct",
        "temperature": 0,
        "max_tokens": 48,
        "messages": [{"role": "user", "content": content}],
    }
    return post(addr, "/v1/chat/completions", body)


def png_bytes(url: str) -> bytes:
    return base64.b64decode(url.split(",", 1)[1])


async def realtime_answer(addr: str, image: dict[str, Any], question: str, image_first: bool = False) -> str:
    c = await RealtimeClient.connect(addr, query="model=SmolLM2-135M-Instruct")
    try:
        await c.until("session.created")
        content = [{"type": "input_text", "text": question}, {"type": "input_image", **image}]
        if image_first:  # as the web client sends them
            content.reverse()
        await c.send(
            {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": content}}
        )
        await c.send({"type": "response.create", "response": {"temperature": 0, "max_output_tokens": 48}})
        done = await c.until("response.done", timeout=120)
        return "".join(part.get("text", "") for item in done["response"]["output"] for part in item.get("content", []))
    finally:
        await c.close()


def test_realtime_a_photo_of_a_cat_asked_what_is_this_is_answered_cat(addr):
    answer = asyncio.run(realtime_answer(addr, {"image_url": data_url(photo("chelsea"), "JPEG")}, "what is this?"))
    assert "cat" in answer.lower(), answer


def test_realtime_an_uploaded_notice_asked_what_does_it_say_is_read_out(addr):
    file_id = upload(addr, png_bytes(data_url(render_lines(NOTICE))))
    answer = asyncio.run(realtime_answer(addr, {"file_id": file_id}, "what does it say?", image_first=True))
    assert "Library closed on Monday" in answer, answer


def test_chat_a_photo_of_a_cat_is_answered_cat(addr):
    status, out = chat(
        addr,
        [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": data_url(photo("chelsea"))}},
        ],
    )
    assert status == 200, out
    assert "cat" in out["choices"][0]["message"]["content"].lower(), out


def test_chat_an_uploaded_notice_is_read_out(addr):
    file_id = upload(addr, png_bytes(data_url(render_lines(NOTICE))))
    status, out = chat(
        addr, [{"type": "file", "file": {"file_id": file_id}}, {"type": "text", "text": "what does it say?"}]
    )
    assert status == 200, out
    assert "Library closed on Monday" in out["choices"][0]["message"]["content"], out


def test_chat_too_many_images_in_one_message_is_a_400_naming_the_field(addr):
    part = {"type": "image_url", "image_url": {"url": data_url(render_lines(["x"], size=(32, 32)))}}
    status, out = chat(addr, [part] * 5)
    assert status == 400 and out["error"]["code"] == "too_many_images", out
    assert out["error"]["param"] == "messages[0].content"


def test_chat_a_non_image_and_a_decode_bomb_are_clear_400s(addr):
    not_image = "data:image/png;base64," + base64.b64encode(b"%PDF-1.4 not a picture").decode()
    status, out = chat(addr, [{"type": "image_url", "image_url": {"url": not_image}}])
    assert status == 400 and out["error"]["code"] == "invalid_image", out
    buf = io.BytesIO()
    from PIL import Image

    Image.new("1", (9000, 9000)).save(buf, "PNG")  # 81 MP in a few KB: over the 40 MP limit
    bomb = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    status, out = chat(addr, [{"type": "image_url", "image_url": {"url": bomb}}])
    assert status == 400 and out["error"]["code"] == "image_too_large", out
