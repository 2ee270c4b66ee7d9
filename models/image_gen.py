"""Text-to-image with a diffusers pipeline: one worker thread, per-step previews, cancel within one step.

Shapes: latents ``[B, C, h, w]`` with ``h = H / vae_scale_factor`` (SD: C = 4, factor 8, so a
512² image has 64² latents). A ``latent_rgb`` preview is ``latents[0] (C=4) @ LATENT_RGB [4, 3]``
→ ``[h, w, 3]``, upscaled to ``preview_max_side``; a ``vae`` preview decodes latents shrunk so the
image side is at most ``preview_max_side``.

Events (``ImageEvent`` records, called on the worker thread; bridge them into asyncio with
``call_soon_threadsafe``): ``InProgress`` when queued · ``Generating`` when denoising starts ·
``PartialImage`` every ``preview_every`` steps · then exactly one terminal event: ``ImageCompleted`` |
``Cancelled`` | ``Failed``. These map 1:1 onto PROTOCOL.md's ``response.image_generation_call.*`` events.

Cancel: ``cancel.set()`` from any thread. The step callback sees it at the end of the running step,
sets ``pipe._interrupt`` (diffusers then skips every remaining step) and sends ``cancelled`` at
once; the pipeline's own final VAE decode still runs on the worker before it takes the next job,
and its image is discarded.
"""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from .image_events import Cancelled, Failed, Generating, ImageCompleted, ImageEvent, InProgress, PartialImage

OnEvent = Callable[[ImageEvent], None]

# Linear latent → RGB approximation for 4-channel SD-family latents (rows: latent channels; as
# used by ComfyUI's SD1.5 previewer); applied to the scaled latents the callback receives.
LATENT_RGB = (
    (0.3512, 0.2297, 0.3227),
    (0.3250, 0.4974, 0.2350),
    (-0.2829, 0.1762, 0.2721),
    (-0.2120, -0.2616, -0.7177),
)


class ImageGenLoadError(Exception):
    """The configured diffusion pipeline cannot be loaded; one line for the operator."""


@dataclass(frozen=True)
class ImageGenConfig:
    model: str = "stabilityai/sd-turbo"  # HF hub id or local folder holding a diffusers model_index.json
    dtype: str = "float32"  # float32 | bfloat16 | float16 (float16 wants a GPU)
    device: str = "cpu"  # cpu | cuda | cuda:N
    variant: str | None = None  # weight file variant, e.g. "fp16"
    steps: int = 4  # default denoising steps (sd-turbo: 1–4; SD 1.x: 20–50)
    guidance_scale: float | None = None  # None: the pipeline's default (sd-turbo wants 0.0)
    width: int | None = None  # None: the pipeline's default (unet.sample_size × vae_scale_factor)
    height: int | None = None
    preview_every: int = 1  # a partial_image every N steps; 0 disables previews
    preview: str = "auto"  # auto (latent_rgb for 4-channel latents, else vae) | latent_rgb | vae
    preview_max_side: int = 256  # longer side of preview PNGs, in pixels
    threads: int | None = None  # torch intra-op threads to set at load (None: leave as is)


@dataclass
class GenerationResult:
    status: str  # completed | cancelled | failed
    png: bytes | None = None  # final image (completed only)
    steps_run: int = 0  # denoising steps whose callback ran
    previews: int = 0
    step_seconds: list[float] = field(default_factory=list)  # wall time of each step (incl. previews)
    first_preview_s: float | None = None  # from denoise start to the first partial_image sent
    message: str = ""  # failure reason


def png_bytes(image: Image.Image, compress_level: int = 6) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def latent_rgb_preview(latents: Any, max_side: int, upscale: int = 1) -> Image.Image:
    """``latents [B, 4, h, w]`` → an RGB PIL image of the first sample, enlarged ``upscale`` times
    (the VAE factor gives the final image's size) but never past ``max_side`` on its longer side."""
    import torch

    factors = torch.tensor(LATENT_RGB, dtype=torch.float32)  # [4, 3]
    rgb = torch.einsum("chw,cr->hwr", latents[0].detach().float().cpu(), factors)  # [h, w, 3]
    arr = ((rgb + 1.0) / 2.0).clamp(0, 1).mul(255).round().to(torch.uint8).numpy()
    img = Image.fromarray(arr, "RGB")
    scale = min(max_side / max(img.size), float(upscale))
    if scale == 1.0:
        return img
    return img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.BILINEAR)


def vae_preview(pipe: Any, latents: Any, max_side: int) -> Image.Image:
    """Decode ``latents [B, C, h, w]`` through the pipeline's VAE at reduced size (≤ ``max_side``)."""
    import torch
    import torch.nn.functional as F

    vae = pipe.vae
    factor = int(getattr(pipe, "vae_scale_factor", 8))
    lat = latents[:1].detach()
    target = max(1, max_side // factor)
    if max(lat.shape[-2:]) > target:
        scale = target / max(lat.shape[-2:])
        size = (max(1, round(lat.shape[-2] * scale)), max(1, round(lat.shape[-1] * scale)))
        lat = F.interpolate(lat.float(), size=size, mode="bilinear", align_corners=False)
    lat = lat.to(vae.dtype) / float(vae.config.scaling_factor)
    if getattr(vae.config, "shift_factor", None):
        lat = lat + float(vae.config.shift_factor)
    with torch.inference_mode():
        img = vae.decode(lat, return_dict=False)[0][0]  # [3, H', W'] in [-1, 1]
    arr = (img.float() / 2 + 0.5).clamp(0, 1).permute(1, 2, 0).mul(255).round().to(torch.uint8).cpu().numpy()
    return Image.fromarray(arr, "RGB")


class ImageGenerator:
    """Owns one diffusers pipeline and the single worker thread that runs it (pipelines aren't
    re-entrant: ``_interrupt`` and the scheduler state are per instance)."""

    def __init__(self, cfg: ImageGenConfig, pipe: Any | None = None):
        import torch

        self.cfg = cfg
        self._torch = torch
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.pipe = pipe if pipe is not None else self._load(cfg)
        self.pipe.set_progress_bar_config(disable=True)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-gen")

    @staticmethod
    def _load(cfg: ImageGenConfig) -> Any:
        import torch
        from diffusers import AutoPipelineForText2Image

        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[cfg.dtype]
        kw: dict[str, Any] = {"variant": cfg.variant} if cfg.variant else {}
        try:
            pipe = AutoPipelineForText2Image.from_pretrained(cfg.model, dtype=dtype, **kw)
        except Exception as exc:  # one clear line for the operator
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ImageGenLoadError(f"cannot load diffusion model {cfg.model!r}: {first[:300]}") from None
        return pipe.to(cfg.device)

    # ----------------------------------------------------------------------------------- public

    def submit(
        self,
        prompt: str,
        steps: int | None = None,
        on_event: OnEvent | None = None,
        cancel: threading.Event | None = None,
        *,
        seed: int | None = None,
        negative_prompt: str | None = None,
    ) -> Future[GenerationResult]:
        """Queue a generation on the worker thread; sends ``in_progress`` now, the rest from the worker."""
        emit = on_event or (lambda _e: None)
        cancel = cancel or threading.Event()
        emit(InProgress())
        return self._worker.submit(self._run, prompt, steps or self.cfg.steps, emit, cancel, seed, negative_prompt)

    def generate(
        self,
        prompt: str,
        steps: int | None = None,
        on_event: OnEvent | None = None,
        cancel: threading.Event | None = None,
        *,
        seed: int | None = None,
        negative_prompt: str | None = None,
    ) -> GenerationResult:
        """``submit(...)`` and wait for it."""
        return self.submit(prompt, steps, on_event, cancel, seed=seed, negative_prompt=negative_prompt).result()

    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)

    # ----------------------------------------------------------------------------------- worker

    def _preview(self, latents: Any) -> Image.Image:
        mode = self.cfg.preview
        if mode == "auto":
            mode = "latent_rgb" if latents.ndim == 4 and latents.shape[1] == len(LATENT_RGB) else "vae"
        if mode == "latent_rgb":
            factor = int(getattr(self.pipe, "vae_scale_factor", 8))
            return latent_rgb_preview(latents, self.cfg.preview_max_side, upscale=factor)
        if mode == "vae":
            return vae_preview(self.pipe, latents, self.cfg.preview_max_side)
        raise ValueError(f"unknown preview mode {self.cfg.preview!r} (auto | latent_rgb | vae)")

    def _run(
        self,
        prompt: str,
        steps: int,
        emit: OnEvent,
        cancel: threading.Event,
        seed: int | None,
        negative_prompt: str | None,
    ) -> GenerationResult:
        torch = self._torch
        result = GenerationResult(status="completed")
        if cancel.is_set():  # cancelled while queued
            result.status = "cancelled"
            emit(Cancelled(step=0))
            return result
        cfg = self.cfg
        t_start = time.perf_counter()
        t_step = [t_start]

        def on_step_end(pipe: Any, i: int, _t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            result.steps_run = i + 1
            if cancel.is_set():
                if result.status != "cancelled":
                    pipe._interrupt = True  # diffusers skips every remaining step
                    result.status = "cancelled"
                    emit(Cancelled(step=i + 1))
                return kwargs
            done = i + 1
            if cfg.preview_every > 0 and done % cfg.preview_every == 0 and done < steps:
                png = png_bytes(self._preview(kwargs["latents"]), compress_level=1)  # speed over size
                emit(PartialImage(index=result.previews, step=done, total_steps=steps, png_b64=_b64(png)))
                if result.first_preview_s is None:
                    result.first_preview_s = time.perf_counter() - t_start
                result.previews += 1
            now = time.perf_counter()
            result.step_seconds.append(now - t_step[0])
            t_step[0] = now
            return kwargs

        call: dict[str, Any] = {
            "prompt": prompt,
            "num_inference_steps": steps,
            "callback_on_step_end": on_step_end,
        }
        if negative_prompt is not None:
            call["negative_prompt"] = negative_prompt
        if cfg.guidance_scale is not None:
            call["guidance_scale"] = cfg.guidance_scale
        if cfg.width:
            call["width"] = cfg.width
        if cfg.height:
            call["height"] = cfg.height
        if seed is not None:
            call["generator"] = torch.Generator(device="cpu").manual_seed(seed)
        emit(Generating(total_steps=steps))
        try:
            image = self.pipe(**call).images[0]
            if result.status == "cancelled":  # interrupted: whatever was decoded is discarded
                return result
            if not isinstance(image, Image.Image):
                raise TypeError(f"pipeline returned {type(image).__name__}, expected a PIL image")
            result.png = png_bytes(image.convert("RGB"))
        except Exception as exc:
            if result.status == "cancelled":  # already reported; a late failure changes nothing
                return result
            result.status, result.message = "failed", f"{type(exc).__name__}: {exc}"[:500]
            emit(Failed(result.message))
            return result
        emit(ImageCompleted(png_b64=_b64(result.png), width=image.width, height=image.height))
        return result
