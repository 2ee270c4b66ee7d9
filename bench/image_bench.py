"""Image path latencies: ``python -m bench.image_bench`` (from the repo root) → bench/results/image.{json,md}.

Measures (medians over ``--repeats``; torch on one thread, as the server runs it here):
- data-URL → validated, decoded, normalised RGB for a 1024×768 PNG and JPEG (and JPEG with
  ``max_side=512``, which decodes at reduced DCT scale);
- CLIP image encode + label ranking on the tiny random open_clip model the tests build;
- per-step denoise time and time-to-first-preview for the tiny random StableDiffusionPipeline.
The tiny models measure our overhead and plumbing, not what real weights cost.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from processors.image import ImageLimits, load_image_url, to_data_url


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 3)


def _photo_like(width: int = 1024, height: int = 768) -> Image.Image:
    """A smooth gradient with mild noise: compresses like a photo, not like pure noise."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], axis=-1)
    arr = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB")


def bench_decode(repeats: int) -> dict[str, Any]:
    img = _photo_like()
    out: dict[str, Any] = {}
    for fmt, mime, kw in (("PNG", "image/png", {}), ("JPEG", "image/jpeg", {"quality": 90})):
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        url = to_data_url(buf.getvalue(), mime)
        out[f"{fmt.lower()}_bytes"] = len(buf.getvalue())
        out[f"{fmt.lower()}_1024x768_ms"] = _median_ms(lambda url=url: load_image_url(url), repeats)
        if fmt == "JPEG":
            small = ImageLimits(max_side=512)
            out["jpeg_1024x768_max_side_512_ms"] = _median_ms(
                lambda url=url, lim=small: load_image_url(url, lim), repeats
            )
    return out


def bench_clip(workdir: Path, repeats: int) -> dict[str, Any]:
    from models.clip import ClipConfig, ClipLabeler
    from testkit.tiny_models import build_tiny_open_clip

    folder = build_tiny_open_clip(workdir / "clip")
    t0 = time.perf_counter()
    labeler = ClipLabeler(ClipConfig(model=f"local-dir:{folder}", pretrained=None))
    load_s = time.perf_counter() - t0
    img = _photo_like(640, 480)
    return {
        "load_s": round(load_s, 3),
        "labels": len(labeler.labels),
        "encode_image_ms": _median_ms(lambda: labeler.encode_image(img), repeats),
        "rank_ms": _median_ms(lambda: labeler.rank(img), repeats),
    }


def bench_image_gen(workdir: Path, repeats: int, steps: int) -> dict[str, Any]:
    from models.image_gen import ImageGenConfig, ImageGenerator
    from testkit.tiny_models import build_tiny_sd

    folder = build_tiny_sd(workdir / "sd")
    out: dict[str, Any] = {"steps": steps}
    for mode in ("latent_rgb", "vae"):
        gen = ImageGenerator(ImageGenConfig(model=str(folder), preview=mode, preview_every=1))
        try:
            gen.generate("warm-up", steps=2)
            step_ms, first_preview_ms, total_ms = [], [], []
            for i in range(max(1, repeats // 4)):
                t0 = time.perf_counter()
                res = gen.generate("a lighthouse at dusk", steps=steps, seed=i)
                total_ms.append((time.perf_counter() - t0) * 1000)
                step_ms.extend(s * 1000 for s in res.step_seconds)
                if res.first_preview_s is not None:
                    first_preview_ms.append(res.first_preview_s * 1000)
        finally:
            gen.close()
        out[mode] = {
            "step_ms_median": round(statistics.median(step_ms), 3),
            "first_preview_ms_median": round(statistics.median(first_preview_ms), 3),
            "total_ms_median": round(statistics.median(total_ms), 3),
        }
    return out


def to_markdown(res: dict[str, Any]) -> str:
    d, c, g = res["decode"], res["clip"], res["image_gen"]
    lines = [
        "# Image path latencies",
        "",
        f"{res['machine']}; torch threads = 1; medians of {res['repeats']} runs. Tiny random models:",
        "they time our plumbing, not real model cost.",
        "",
        "| what | median |",
        "|---|---|",
        f"| data URL → RGB, 1024×768 PNG ({d['png_bytes']} B) | {d['png_1024x768_ms']} ms |",
        f"| data URL → RGB, 1024×768 JPEG q90 ({d['jpeg_bytes']} B) | {d['jpeg_1024x768_ms']} ms |",
        f"| same JPEG with max_side=512 (DCT-scaled decode) | {d['jpeg_1024x768_max_side_512_ms']} ms |",
        f"| tiny CLIP: encode one image | {c['encode_image_ms']} ms |",
        f"| tiny CLIP: encode + rank {c['labels']} labels | {c['rank_ms']} ms |",
    ]
    for mode in ("latent_rgb", "vae"):
        m = g[mode]
        lines += [
            f"| tiny SD, {mode} previews: one denoise step (incl. preview) | {m['step_ms_median']} ms |",
            f"| tiny SD, {mode} previews: time to first preview | {m['first_preview_ms_median']} ms |",
            f"| tiny SD, {mode} previews: {g['steps']} steps end to end | {m['total_ms_median']} ms |",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="__array__ implementation doesn't accept a copy keyword")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "clip").mkdir()
        (work / "sd").mkdir()
        res = {
            "machine": f"{platform.machine()}, Python {platform.python_version()}",
            "repeats": args.repeats,
            "decode": bench_decode(args.repeats),
            "clip": bench_clip(work, args.repeats),
            "image_gen": bench_image_gen(work, args.repeats, args.steps),
        }
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "image.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "image.md").write_text(to_markdown(res))
    print(to_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
