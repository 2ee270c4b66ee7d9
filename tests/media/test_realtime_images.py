"""Images over /v1/realtime with tiny random-init models (no real weights exist offline).

Understanding: a tiny open_clip model ranks labels for the image and the description goes into
the prompt. Output: a tiny Stable Diffusion pipeline streams partial previews while the text
streams, and response.cancel stops denoising. Random weights: the plumbing is real, the
pictures and labels mean nothing.
"""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from tests.wsclient import RealtimeClient

# diffusers' Euler scheduler calls np.array(torch tensor, copy=False), which numpy 2 flags (torch's
# __array__ lacks the copy keyword): third-party and harmless; silence exactly that message
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)


def data_url(size=(64, 48), fmt="PNG", mime="image/png") -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buf, fmt)
    return f"data:{mime};base64," + base64.b64encode(buf.getvalue()).decode()


def image_item(url: str, text: str = "what is this?") -> dict:
    return {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}, {"type": "input_image", "image_url": url}],
        },
    }


def vision(tiny_clip_dir) -> dict:
    return {
        "audio.enabled": False,
        "vision.mode": "clip",
        "vision.clip_model": f"local-dir:{tiny_clip_dir}",
        "vision.clip_pretrained": None,
        "vision.clip_labels": ["a dog", "a cat", "a red square", "a car"],
    }


async def test_image_in_is_described_into_the_prompt_and_answered(tiny_backend, server_factory, tiny_clip_dir):
    with server_factory(tiny_backend, **vision(tiny_clip_dir)) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.send(image_item(data_url()))
        await c.send({"type": "response.create", "response": {"max_output_tokens": 8}})  # waits for the item
        added = await c.until("conversation.item.added")
        text = "".join(part.get("text", "") for part in added["item"]["content"])
        assert text.startswith("what is this?") and "[image:" in text
        assert any(label in text for label in ("a dog", "a cat", "a red square", "a car"))
        done = await c.until("response.done")
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("data:image/png;base64,@@@@", "invalid_image"),
        ("data:image/jpeg;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode(), None),
        ("https://example.com/cat.png", "image_url_not_allowed"),
        ("data:image/gif;base64,R0lGODlhAQABAAAAACw=", "unsupported_image_format"),
    ],
)
async def test_bad_images_get_clear_errors_and_the_socket_stays_open(
    tiny_backend, server_factory, tiny_clip_dir, url, code
):
    with server_factory(tiny_backend, **vision(tiny_clip_dir)) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.send({**image_item(url), "event_id": "img-1"})
        err = await c.until("error")
        assert err["error"]["event_id"] == "img-1"
        assert err["error"]["code"] in ({code} if code else {"invalid_image", "unsupported_image_format"})
        assert "Traceback" not in err["error"]["message"] and "0x" not in err["error"]["message"]
        done = await c.ask("still fine?", max_output_tokens=4)
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()


async def test_image_input_disabled_says_so(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False, "vision.mode": "none"}) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.send(image_item(data_url()))
        err = await c.until("error")
        assert err["error"]["code"] == "unsupported_content" and "vision" in err["error"]["message"]
        await c.close()


def gen_cfg(tiny_sd_dir, steps=6) -> dict:
    # no drafting: the tiny model's text must take a while so that it overlaps the denoising
    return {
        "audio.enabled": False,
        "image_gen.model": str(tiny_sd_dir),
        "image_gen.steps": steps,
        "speculative.drafter": "none",
        "session.max_output_tokens": 1000,
    }


async def test_image_output_streams_previews_interleaved_with_text(tiny_backend, server_factory, tiny_sd_dir):
    with server_factory(tiny_backend, **gen_cfg(tiny_sd_dir, steps=60)) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        done = await c.ask(
            "a red fox", max_output_tokens=600, output_modalities=["text", "image"], scheduler={"strategy": "fast"}
        )
        types = [e["type"] for e in c.events]
        assert types.count("response.image_generation_call.partial_image") >= 2
        assert "response.image_generation_call.in_progress" in types
        assert "response.image_generation_call.completed" in types
        img_done = next(
            e
            for e in c.events
            if e["type"] == "response.output_item.done" and e["item"]["type"] == "image_generation_call"
        )
        png = base64.b64decode(img_done["item"]["result"])
        assert Image.open(io.BytesIO(png)).format == "PNG"
        # interleaving: the text stream and the preview stream overlap in time
        previews = [i for i, t in enumerate(types) if t == "response.image_generation_call.partial_image"]
        deltas = [i for i, t in enumerate(types) if t == "response.output_text.delta"]
        assert deltas and previews[0] < deltas[-1] and deltas[0] < previews[-1], types
        assert types[-1] == "response.done" and done["response"]["status"] in ("completed", "incomplete")
        kinds = [o["type"] for o in done["response"]["output"]]
        assert "image_generation_call" in kinds
        await c.close()


async def test_cancel_stops_denoising(tiny_backend, server_factory, tiny_sd_dir):
    with server_factory(tiny_backend, **gen_cfg(tiny_sd_dir, steps=400)) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.say("a lighthouse")
        await c.send(
            {"type": "response.create", "response": {"output_modalities": ["image"], "max_output_tokens": 400}}
        )
        await c.until("response.image_generation_call.partial_image")
        await c.send({"type": "response.cancel"})
        done = await c.until("response.done")
        assert done["response"]["status"] == "cancelled"
        n_before = sum(1 for e in c.events if e["type"] == "response.image_generation_call.partial_image")
        try:
            while True:
                ev = await c.recv(timeout=1.0)
                assert ev["type"] != "response.image_generation_call.partial_image"
        except TimeoutError:
            pass
        assert n_before < 400
        await c.close()


async def test_remote_image_urls_only_from_configured_hosts(tiny_backend, server_factory, tiny_clip_dir):
    conf = {**vision(tiny_clip_dir), "vision.remote_image_hosts": ["images.example.com"]}
    with server_factory(tiny_backend, **conf) as addr:
        c = await RealtimeClient.connect(addr)
        await c.until("session.created")
        await c.send(image_item("https://evil.example.net/x.png"))  # not on the allowlist
        assert (await c.until("error"))["error"]["code"] == "image_url_not_allowed"
        await c.send(image_item("http://images.example.com/x.png"))  # allowed host, but plain http
        assert (await c.until("error"))["error"]["code"] == "image_url_not_allowed"
        await c.close()
