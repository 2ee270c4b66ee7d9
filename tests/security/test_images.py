"""Image decode memory is estimated from the header and bounded before any pixel is decoded."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading

import pytest
import websockets
from PIL import Image

from processors import image as image_mod
from processors.image import DecodeGate, ImageError, decode_image, decode_memory

from .conftest import health_latency


def _png(mode: str, side: int, **kw) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (side, side), 0).save(buf, "PNG", **kw)
    return buf.getvalue()


def _webp_lossless(side: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), (10, 20, 30)).save(buf, "WEBP", lossless=True)
    return buf.getvalue()


def test_estimate_grows_with_mode_alpha_and_format():
    assert decode_memory("RGBA", 1000, 1000) > decode_memory("RGB", 1000, 1000)
    assert decode_memory("P", 1000, 1000, "PNG", transparency=True) > decode_memory("P", 1000, 1000)
    assert decode_memory("RGB", 1000, 1000, "WEBP") > decode_memory("RGB", 1000, 1000, "PNG")


def test_an_image_over_the_budget_is_refused_before_decoding():
    gate = DecodeGate(budget_bytes=32 << 20, max_concurrent=2)
    raw = _png("I;16", 2000)  # a few KB of zeros that decode to 2000² 16-bit pixels
    with pytest.raises(ImageError) as info:
        decode_image(raw, "image/png", gate=gate)
    assert info.value.code == "image_too_large" and "MiB" in info.value.message
    assert gate.in_flight == (0, 0)
    small = decode_image(_png("RGB", 64), "image/png", gate=gate)  # the gate still serves
    assert small.image.size == (64, 64) and gate.in_flight == (0, 0)


def test_concurrent_decodes_are_bounded_and_a_long_wait_is_refused_busy(monkeypatch):
    monkeypatch.setattr(image_mod, "_DECODE_WAIT_S", 0.2)
    gate = DecodeGate(budget_bytes=100 << 20, max_concurrent=1)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with gate.reserve(10 << 20, "first"):
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(10)
    with pytest.raises(ImageError) as info:  # one at a time: the second waits, then is refused
        with gate.reserve(1, "second"):
            pass
    assert info.value.code == "server_busy"
    release.set()
    t.join(10)
    with gate.reserve(50 << 20, "third"):  # room again
        assert gate.in_flight == (1, 50 << 20)


def test_the_budget_is_shared_by_decodes_in_flight(monkeypatch):
    monkeypatch.setattr(image_mod, "_DECODE_WAIT_S", 0.2)
    gate = DecodeGate(budget_bytes=100 << 20, max_concurrent=4)
    with gate.reserve(60 << 20, "a"), pytest.raises(ImageError) as info:
        with gate.reserve(60 << 20, "b"):  # fits alone, not beside the first
            pass
    assert info.value.code == "server_busy" and gate.in_flight == (0, 0)


@pytest.fixture
def vision_conf(tiny_clip_dir) -> dict:
    return {
        "audio.enabled": False,
        "vision.mode": "clip",
        "vision.clip_model": f"local-dir:{tiny_clip_dir}",
        "vision.clip_pretrained": None,
        "vision.clip_labels": ["a dog", "a cat"],
    }


async def test_image_bombs_over_the_realtime_api_are_refused(tiny_backend, server_factory, vision_conf):
    bombs = [
        ("image/webp", _webp_lossless(6000)),  # ≈ 1.4 KB → 36 MP; measured +600 MB to decode
        ("image/png", _png("I;16", 6000)),  # ≈ 70 KB of 16-bit grey
    ]
    conf = {**vision_conf, "vision.decode_budget_bytes": 256 << 20}
    with server_factory(tiny_backend, **conf) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5)
        await asyncio.wait_for(ws.recv(), 5)
        for mime, raw in bombs:
            url = f"data:{mime};base64,{base64.b64encode(raw).decode()}"
            item = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": url}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            while (ev := json.loads(await asyncio.wait_for(ws.recv(), 10)))["type"] != "error":
                pass
            assert ev["error"]["code"] == "image_too_large", ev
            await asyncio.to_thread(health_latency, addr, 5)
        ok = f"data:image/png;base64,{base64.b64encode(_png('RGB', 64)).decode()}"
        item = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": ok}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        while (ev := json.loads(await asyncio.wait_for(ws.recv(), 30)))["type"] != "conversation.item.done":
            assert ev["type"] != "error", ev
        await ws.close()
