"""`stream-omni bench vision`: image in → first text delta on the embedded default (``vision.mode: local``).

One server (``stream-omni serve``, its own process, audio off). Per image — a 640×480 photograph
(scikit-image's cat, JPEG) and a 1280×720 screenshot (the web client's own, PNG) — one Realtime
session per try sends the image and "what is this?" / "what does it say?" as one message, then
``response.create``: the time from sending the message to the first ``response.output_text.delta``,
p50 / p90 over ``--tries``. The classifier's and the OCR's own time on the same image, one thread,
in this process while the server is idle (their median over ``--tries``). Then a text session
streams a long reply alone and while another session sends images one after another, in turn
``--rounds`` times: its decode rate (output tokens over the time from its first to its last delta)
with images against without, each pair side by side, the median of the pairs' ratios (the image
session asks no reply: this is what describing costs), with how many photos were described beside
it and the load average after each pair.

Writes bench/results/vision.{json,md} (``--name`` for another).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, server_process, write  # noqa: E402

LONG = "Write a long story about a lighthouse keeper and a storm, with many details."
MODEL = "SmolLM2-135M-Instruct"


def images() -> dict[str, tuple[str, str]]:
    """name → (data URL, question)."""
    from PIL import Image

    from testkit.vision_images import data_url, photo, screenshot

    shot = Image.new("RGB", (1280, 720), "white")
    shot.paste(screenshot(), (140, 0))  # the 1000×720 client centred in a 1280×720 window
    return {
        "photo 640x480": (data_url(photo("chelsea").resize((640, 480)), "JPEG"), "what is this?"),
        "screenshot 1280x720": (data_url(shot), "what does it say?"),
    }


async def first_text(addr: str, url: str, question: str, max_tokens: int = 16) -> float:
    """Seconds from sending an image message (and response.create) to the first text delta."""
    import websockets

    async with websockets.connect(f"ws://{addr}/v1/realtime?model={MODEL}", max_size=None) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "session.created":
            pass
        content = [{"type": "input_image", "image_url": url}, {"type": "input_text", "text": question}]
        item = {"type": "message", "role": "user", "content": content}
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": max_tokens}}))
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if ev["type"] == "response.output_text.delta":
                return time.perf_counter() - t0
            if ev["type"] in ("error", "response.done"):
                raise RuntimeError(f"no text: {ev}")


async def text_rate(addr: str, max_tokens: int) -> float:
    """Output tokens per second of one long text reply (first to last delta)."""
    import websockets

    async with websockets.connect(f"ws://{addr}/v1/realtime?model={MODEL}", max_size=None) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "session.created":
            pass
        content = [{"type": "input_text", "text": LONG}]
        await ws.send(
            json.dumps(
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": content}}
            )
        )
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": max_tokens}}))
        first = last = None
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 300))
            if ev["type"] == "response.output_text.delta":
                last = time.perf_counter()
                first = first or last
            elif ev["type"] == "response.done":
                tokens = ev["response"]["usage"]["output_tokens"]
                assert first is not None and last is not None and last > first
                return float(tokens - 1) / (last - first)
            elif ev["type"] == "error":
                raise RuntimeError(str(ev))


async def described(addr: str, url: str, stop: asyncio.Event) -> int:
    """Send ``url`` as a message again and again, each once the last is in the conversation
    (described), asking no reply: the images' own cost → how many were described."""
    import websockets

    n = 0
    async with websockets.connect(f"ws://{addr}/v1/realtime?model={MODEL}", max_size=None) as ws:
        while not stop.is_set():
            item = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": url}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            while (ev := json.loads(await asyncio.wait_for(ws.recv(), 120)))["type"] != "conversation.item.added":
                if ev["type"] == "error":
                    raise RuntimeError(str(ev))
            n += 1
    return n


async def rate_with_images(addr: str, url: str, max_tokens: int) -> tuple[float, int]:
    """The text rate while another session has ``url`` described again and again → (rate, images)."""
    stop = asyncio.Event()
    task = asyncio.create_task(described(addr, url, stop))

    await asyncio.sleep(0.3)  # the first image is in its pass when the text starts
    try:
        rate = await text_rate(addr, max_tokens)
    finally:
        stop.set()
    return rate, await task


def pct(xs: list[float], q: float) -> float:
    return float(statistics.quantiles(xs, n=10, method="inclusive")[int(q * 10) - 1]) if len(xs) > 1 else xs[0]


def model_times(imgs: dict[str, tuple[str, str]], tries: int, nice: int) -> dict[str, dict[str, float]]:
    """Classifier and OCR seconds per image (median), one thread each, as a server pass runs them."""
    from models.local_vision import LocalVision
    from processors.image import ImageLimits, load_image_url

    vision = LocalVision(nice=nice)
    out = {}
    for name, (url, _) in imgs.items():
        img = load_image_url(url, ImageLimits(max_side=1024)).image  # what the server's models see
        vision.read(img)  # warm-up
        runs = []
        for _ in range(tries):
            vision.read(img)
            assert vision.last is not None
            runs.append(vision.last)
        out[name] = {
            "classify_ms": 1000 * statistics.median(r.classify_s for r in runs),
            "ocr_ms": 1000 * statistics.median(r.ocr_s for r in runs),
        }
    return out


async def measure(addr: str, imgs: dict[str, tuple[str, str]], tries: int, tokens: int, rounds: int) -> dict[str, Any]:
    latency = {}
    for name, (url, question) in imgs.items():
        await first_text(addr, url, question)  # warm-up
        xs = [await first_text(addr, url, question) for _ in range(tries)]
        latency[name] = {"p50_s": statistics.median(xs), "p90_s": pct(xs, 0.9), "runs": xs}
    photo_url = imgs["photo 640x480"][0]
    pairs = []
    for _ in range(rounds):  # alone and beside images in turn: a shared box's load drifts between them
        alone = await text_rate(addr, tokens)
        with_images, sent = await rate_with_images(addr, photo_url, tokens)
        pairs.append(
            {
                "alone": alone,
                "with_images": with_images,
                "images": sent,
                "ratio": with_images / alone,
                "load_1m": round(os.getloadavg()[0], 2),
            }
        )
    return {
        "first_text": latency,
        "text_tok_s_alone": statistics.median(p["alone"] for p in pairs),
        "text_tok_s_with_images": statistics.median(p["with_images"] for p in pairs),
        "images_during_text": statistics.median(p["images"] for p in pairs),
        "ratio": statistics.median(p["ratio"] for p in pairs),
        "pairs": pairs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=200, help="the concurrent text reply's length")
    ap.add_argument("--rounds", type=int, default=3, help="text alone / beside images pairs (the ratio's median)")
    ap.add_argument("--nice", type=int, default=10, help="vision.local_nice (0: a pass borrows a core instead)")
    ap.add_argument("--name", default="vision")
    args = ap.parse_args()
    imgs = images()
    load_before = machine()["loadavg_1m"]
    overrides = {"audio.enabled": False, "speculative.drafter": "none", "vision.local_nice": args.nice}
    with server_process(overrides) as addr:
        served = asyncio.run(measure(addr, imgs, args.tries, args.tokens, args.rounds))
    models = model_times(imgs, args.tries, args.nice)
    rows = [
        {
            "image": name,
            "first text p50 (s)": served["first_text"][name]["p50_s"],
            "p90 (s)": served["first_text"][name]["p90_s"],
            "classifier (ms)": models[name]["classify_ms"],
            "OCR (ms)": models[name]["ocr_ms"],
        }
        for name in imgs
    ]
    ratio = served["ratio"]
    pairs = ", ".join(f"{p['ratio']:.2f}x ({p['images']} photos, load {p['load_1m']})" for p in served["pairs"])
    md = (
        f"# bench vision, vision.local_nice {args.nice} ({machine()['when']}, "
        f"load {load_before} before, {machine()['loadavg_1m']} after)\n\n"
        + markdown_table(rows, list(rows[0]))
        + f"\nA text session: {served['text_tok_s_alone']:.1f} tok/s alone, "
        f"{served['text_tok_s_with_images']:.1f} tok/s while {served['images_during_text']} photos were "
        f"described beside it: {ratio:.2f}x (median of {len(served['pairs'])} pairs: {pairs})\n"
    )
    write(args.name, {"machine": machine(), "served": served, "models": models, "ratio": ratio}, md)


if __name__ == "__main__":
    main()
