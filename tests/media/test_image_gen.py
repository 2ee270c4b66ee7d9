"""models/image_gen.py on a tiny random StableDiffusionPipeline saved and reloaded with from_pretrained.

Random weights: the images are noise; these tests check events, previews, cancel and PNG output.
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from models.image_events import Cancelled, Failed, ImageCompleted, ImageEvent, PartialImage
from models.image_gen import (
    LATENT_RGB,
    ImageGenConfig,
    ImageGenerator,
    ImageGenLoadError,
    latent_rgb_preview,
)

# diffusers 0.42's EulerDiscreteScheduler.set_timesteps calls np.array() on a torch tensor, which
# numpy 2 flags (torch's __array__ lacks the copy keyword). Third-party, harmless, and the Euler
# scheduler is the one sd-turbo ships with, so keep it and silence exactly this message.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)


def _png(b64: str) -> Image.Image:
    raw = base64.b64decode(b64, validate=True)
    assert raw.startswith(b"\x89PNG\r\n\x1a\n")
    img = Image.open(io.BytesIO(raw))
    img.load()
    return img


class Recorder:
    """Collects events; optionally sets ``cancel`` when the partial image ``cancel_on_preview`` arrives."""

    def __init__(self, cancel: threading.Event | None = None, cancel_on_preview: int | None = None):
        self.events: list[ImageEvent] = []
        self.cancel = cancel
        self.cancel_on_preview = cancel_on_preview

    def __call__(self, event: ImageEvent) -> None:
        self.events.append(event)
        if self.cancel is not None and isinstance(event, PartialImage) and event.index == self.cancel_on_preview:
            self.cancel.set()

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture(scope="module")
def generator(tiny_sd_dir: Path) -> Iterator[ImageGenerator]:  # noqa: F811
    gen = ImageGenerator(ImageGenConfig(model=str(tiny_sd_dir), steps=4, threads=1))
    yield gen
    gen.close()


@pytest.fixture
def unet_calls(generator: ImageGenerator) -> Iterator[list[int]]:
    calls: list[int] = []
    handle = generator.pipe.unet.register_forward_hook(lambda *_: calls.append(1))
    yield calls
    handle.remove()


def test_loads_the_saved_pipeline(generator: ImageGenerator) -> None:
    assert type(generator.pipe).__name__ == "StableDiffusionPipeline"


def test_completed_generation_emits_events_in_order_and_a_png(generator: ImageGenerator, unet_calls: list[int]) -> None:
    rec = Recorder()
    result = generator.generate("a red square", steps=4, on_event=rec, seed=0)
    assert rec.kinds() == [
        "in_progress",
        "generating",
        "partial_image",
        "partial_image",
        "partial_image",
        "completed",
    ]
    assert result.status == "completed" and result.steps_run == 4 and len(unet_calls) == 4
    final = rec.events[-1]
    assert isinstance(final, ImageCompleted)
    assert base64.b64decode(final.png_b64) == result.png
    img = _png(final.png_b64)
    assert img.mode == "RGB" and img.size == (16, 16) == (final.width, final.height)


def test_events_arrive_on_the_worker_thread(generator: ImageGenerator) -> None:
    seen: list[tuple[str, str]] = []
    generator.generate("x", steps=2, on_event=lambda e: seen.append((e.kind, threading.current_thread().name)))
    assert seen[0] == ("in_progress", threading.current_thread().name)  # sent by submit() itself
    assert len(seen) == 4 and all(name.startswith("image-gen") for _, name in seen[1:])


def test_partial_images_are_indexed_pngs_at_preview_size(generator: ImageGenerator) -> None:
    rec = Recorder()
    generator.generate("x", steps=4, on_event=rec, seed=1)
    partials = [e for e in rec.events if isinstance(e, PartialImage)]
    assert [p.index for p in partials] == [0, 1, 2] and [p.step for p in partials] == [1, 2, 3]
    assert all(p.total_steps == 4 for p in partials)
    for p in partials:  # latents 8×8, VAE factor 2: previews at the final 16×16 size (< preview_max_side)
        assert _png(p.png_b64).size == (16, 16)


def test_previews_every_n_steps(tiny_sd_dir: Path) -> None:  # noqa: F811
    gen = ImageGenerator(ImageGenConfig(model=str(tiny_sd_dir), preview_every=2, threads=1))
    try:
        rec = Recorder()
        result = gen.generate("x", steps=6, on_event=rec)
    finally:
        gen.close()
    assert [e.step for e in rec.events if isinstance(e, PartialImage)] == [2, 4]
    assert result.previews == 2 and result.first_preview_s is not None and len(result.step_seconds) == 6


def test_vae_preview_mode_decodes_at_reduced_size(tiny_sd_dir: Path) -> None:  # noqa: F811
    gen = ImageGenerator(ImageGenConfig(model=str(tiny_sd_dir), preview="vae", preview_max_side=8, threads=1))
    try:
        rec = Recorder()
        gen.generate("x", steps=2, on_event=rec)
    finally:
        gen.close()
    (partial,) = [e for e in rec.events if isinstance(e, PartialImage)]
    assert _png(partial.png_b64).size == (8, 8)  # 8×8 latents shrunk to 4×4, VAE ×2


def test_previews_can_be_disabled(tiny_sd_dir: Path) -> None:  # noqa: F811
    gen = ImageGenerator(ImageGenConfig(model=str(tiny_sd_dir), preview_every=0, threads=1))
    try:
        rec = Recorder()
        gen.generate("x", steps=3, on_event=rec)
    finally:
        gen.close()
    assert rec.kinds() == ["in_progress", "generating", "completed"]


def test_seeded_generation_is_deterministic(generator: ImageGenerator) -> None:
    a = generator.generate("a cat", steps=2, seed=7).png
    assert a is not None and a == generator.generate("a cat", steps=2, seed=7).png
    assert a != generator.generate("a cat", steps=2, seed=8).png


def test_cancel_mid_denoise_stops_within_one_step(generator: ImageGenerator, unet_calls: list[int]) -> None:
    cancel = threading.Event()
    rec = Recorder(cancel, cancel_on_preview=1)  # cancel right after step 2's preview
    result = generator.generate("x", steps=20, on_event=rec, cancel=cancel)
    assert result.status == "cancelled" and result.png is None
    assert len(unet_calls) <= 3  # step 2 done when cancel was set, then at most the running step
    assert rec.kinds()[-1] == "cancelled" and "completed" not in rec.kinds()
    last = rec.events[-1]
    assert isinstance(last, Cancelled) and last.step == len(unet_calls)


def test_cancel_before_start_runs_nothing(generator: ImageGenerator, unet_calls: list[int]) -> None:
    cancel = threading.Event()
    cancel.set()
    rec = Recorder()
    result = generator.generate("x", steps=4, on_event=rec, cancel=cancel)
    assert result.status == "cancelled" and rec.kinds() == ["in_progress", "cancelled"] and unet_calls == []


def test_cancel_from_another_thread(generator: ImageGenerator) -> None:
    cancel = threading.Event()
    rec = Recorder()
    future = generator.submit("x", steps=10_000, on_event=rec, cancel=cancel)
    threading.Timer(0.3, cancel.set).start()
    result = future.result(timeout=60)
    assert result.status == "cancelled" and 0 < result.steps_run < 10_000


def test_generator_is_reusable_after_cancel(generator: ImageGenerator) -> None:
    cancel = threading.Event()
    generator.generate("x", steps=6, on_event=Recorder(cancel, cancel_on_preview=0), cancel=cancel)
    assert generator.generate("x", steps=2).status == "completed"


class _BrokenPipe:
    """A stand-in pipeline whose call fails, as a real one does on e.g. out-of-memory."""

    def set_progress_bar_config(self, **_: Any) -> None:
        pass

    def __call__(self, **_: Any) -> Any:
        raise RuntimeError("out of memory (simulated)")


def test_pipeline_error_is_a_failed_event() -> None:
    gen = ImageGenerator(ImageGenConfig(model="unused"), pipe=_BrokenPipe())
    try:
        rec = Recorder()
        result = gen.generate("x", steps=2, on_event=rec)
    finally:
        gen.close()
    assert result.status == "failed" and rec.kinds() == ["in_progress", "generating", "failed"]
    last = rec.events[-1]
    assert isinstance(last, Failed) and "out of memory" in last.message == result.message


def test_latent_rgb_preview_is_enlarged_up_to_max_side() -> None:
    latents = torch.randn(1, 4, 64, 48)  # SD 512×384 image
    assert latent_rgb_preview(latents, max_side=256, upscale=8).size == (192, 256)
    assert latent_rgb_preview(latents, max_side=1024, upscale=8).size == (384, 512)
    assert latent_rgb_preview(latents, max_side=32, upscale=8).size == (24, 32)


def test_latent_rgb_preview_uses_the_linear_factors() -> None:
    latents = torch.zeros(1, 4, 2, 2)
    latents[0, 0, 0, 0] = 1.0  # top-left pixel: channel 0 only → RGB = LATENT_RGB[0]
    img = latent_rgb_preview(latents, max_side=2)
    expected = tuple(round((v + 1) / 2 * 255) for v in LATENT_RGB[0])
    assert img.getpixel((0, 0)) == expected and img.getpixel((1, 1)) == (128, 128, 128)


def test_missing_model_is_a_one_line_load_error(tmp_path: Path) -> None:
    with pytest.raises(ImageGenLoadError) as info:
        ImageGenerator(ImageGenConfig(model=str(tmp_path / "nope")))
    assert "\n" not in str(info.value)
