"""Build the configured backend, speculator and processors (each on the thread that will use it)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from models.backend import Backend
from models.engine import Engine
from models.engine_client import EngineClient
from models.llm import ModelLoadError
from models.remote import RemoteConfig, RemoteModel
from models.remote_engine import RemoteEngine
from processors.asr import Transcriber
from processors.image import ImageLimits

from ..core.config import Config
from ..core.config_model import (
    AutoLocalModel,
    LlamaCppKeys,
    LlamaCppModel,
    RemoteModelConfig,
    TransformersKeys,
    TransformersModel,
)
from ..core.services import ImageDescriber

if TYPE_CHECKING:
    from models.llama_cpp import LlamaCppConfig
    from models.llm import LLMConfig


def load_audio(config: Config) -> Transcriber:
    """Whisper (and a warm VAD session) for voice input; loaded once per process."""
    from processors.asr import AsrConfig, load_asr
    from processors.vad import SileroVad

    from ..voice.asr_worker import whisper_threads_named

    a = config.audio
    with whisper_threads_named():
        asr = load_asr(
            AsrConfig(
                a.engine,
                a.model,
                a.language,
                cpu_threads=a.threads,
                beam_size=a.beam_size,
                encoder_headroom_s=a.encoder_headroom_s,
            )
        )
    SileroVad()  # load the ONNX model now, not on the first frame
    return asr


def load_speculator(config: Config, backend: Backend | RemoteModel, engine: EngineClient) -> Any:
    """Speculative decoding for every response (None when drafter is 'none', or when the engine drafts
    (or not) itself); measures the verify cost once."""
    s = config.speculative
    if s.drafter == "none" or engine.drafts_itself:
        return None
    from models.speculative import SpecConfig, Speculator

    # an engine that does not draft itself decodes here, on a step Backend
    # the section's keys are SpecConfig fields; a draft model keeps every batched response's cache resident
    spec = SpecConfig(**s.model_dump(), draft_slots=config.engine.max_running)
    return Speculator(cast(Backend, backend), spec)


def image_limits(config: Config) -> ImageLimits:
    """The size limits every image input is decoded under (inline, uploaded, or fetched)."""
    v = config.vision
    return ImageLimits(max_bytes=v.max_image_bytes, max_pixels=v.max_image_pixels, max_side=v.max_side)


@functools.cache
def local_vision(top_k: int, ocr: bool, nice: int = 10) -> Any:
    """The offline classifier + OCR (``models.local_vision``), loaded once per process: read-only
    weights every app in it shares (each pass holds its lock and one core)."""
    from models.local_vision import LocalVision

    return LocalVision(top_k=top_k, ocr=ocr, nice=nice)


def load_vision(config: Config) -> tuple[ImageDescriber | None, Any]:
    """The configured image understanding (local labels + OCR, CLIP labels or a VLM caption) and image generator."""
    from processors.image import DecodeGate, RemoteImagePolicy, load_image_url

    v = config.vision
    gate = DecodeGate(v.decode_budget_bytes, v.max_concurrent_decodes)  # one per app: every decode shares it
    limits = image_limits(config)
    remote = (
        RemoteImagePolicy(allowed_hosts=frozenset(v.remote_image_hosts), timeout_s=v.remote_image_timeout_s)
        if v.remote_image_hosts
        else None
    )
    describer: ImageDescriber | None = None
    if v.mode == "local":
        from processors.vision_text import describe

        local = local_vision(v.local_labels, v.local_ocr, v.local_nice)

        def describer(url: str) -> str:
            reading = local.read(load_image_url(url, limits, remote, gate=gate).image)
            return describe(reading, top_k=v.local_labels)

    elif v.mode == "clip":
        from models.clip import ClipConfig, ClipLabeler

        kw: dict[str, Any] = {"labels": tuple(v.clip_labels)} if v.clip_labels else {}
        labeler = ClipLabeler(ClipConfig(model=v.clip_model, pretrained=v.clip_pretrained, **kw))

        def describer(url: str) -> str:
            return str(labeler.rank(load_image_url(url, limits, remote, gate=gate).image).description)

    elif v.mode == "vlm":
        from models.vlm import VisionLanguageModel, VLMConfig

        vlm = VisionLanguageModel(VLMConfig(model=v.vlm_model))

        def describer(url: str) -> str:
            img = load_image_url(url, limits, remote, gate=gate).image
            content = [{"type": "image", "image": img}, {"type": "text", "text": v.vlm_prompt}]
            msg = [{"role": "user", "content": content}]
            return f"[image: {vlm.generate(msg, max_new_tokens=64).strip()}]"

    gen = None
    g = config.image_gen
    if g.model:
        from models.image_gen import ImageGenConfig, ImageGenerator

        gen = ImageGenerator(
            ImageGenConfig(
                model=g.model,
                steps=g.steps,
                dtype=g.dtype,
                device=g.device,
                preview_every=g.preview_every,
                guidance_scale=g.guidance_scale,
            )
        )
    return describer, gen


def make_engine(config: Config) -> EngineClient:
    """The thread that decodes locally, or the workers that stream from a remote engine."""
    e = config.engine
    if isinstance(config.model, RemoteModelConfig):
        return RemoteEngine(e.max_running, e.max_waiting)
    return Engine(e.max_running, e.max_waiting, prefill_chunk=e.prefill_chunk, draft_max_batch=e.draft_max_batch)


def remote_config(config: Config) -> RemoteConfig:
    """``model`` (backend: openai) → the remote engine's settings; the key is read from its env var."""
    m = config.model
    if not isinstance(m, RemoteModelConfig):
        raise ModelLoadError(f"model.backend is {m.backend}, not openai: there is no remote engine to reach")
    key = os.environ.get(m.api_key_env) if m.api_key_env else None
    if m.api_key_env and not key:
        raise ModelLoadError(f"model.api_key_env names {m.api_key_env}, which is not set")
    return RemoteConfig(
        base_url=m.base_url,
        model="auto" if m.model in ("auto", "embedded") else m.model,
        api_key=key,
        served_name=m.served_name,
        connect_timeout_s=m.connect_timeout_s,
        read_timeout_s=m.read_timeout_s,
        retries=m.retries,
        pool_size=m.pool_size,
        startup_wait_s=m.startup_wait_s,
        extra_body=dict(m.extra_body),
    )


def _auto_runs_on_llama_cpp(m: AutoLocalModel) -> bool:
    """``auto``: GGUF models (the embedded default included) on the cpu run on llama.cpp, others on transformers."""
    is_gguf = m.model == "embedded" or m.model.endswith(".gguf") or bool(m.gguf_file)
    return is_gguf and m.device == "cpu"


def llama_cpp_config(m: LlamaCppKeys, max_running: int) -> LlamaCppConfig:
    """The llama.cpp keys of ``model`` (backend: llama_cpp, or auto on a GGUF) → what the backend loads with."""
    from models.llama_cpp import LlamaCppConfig

    return LlamaCppConfig(
        model=m.model if m.gguf_file is None else str(Path(m.model) / m.gguf_file),
        threads=m.threads or 2,
        n_ctx=m.max_context,
        n_batch=m.n_batch,
        n_seq=m.n_seq or max_running,
        flash_attn=m.flash_attn,
        served_name=m.served_name,
    )


def transformers_config(m: TransformersKeys) -> LLMConfig:
    """The transformers keys of ``model`` (backend: transformers, or auto on anything else) → its LLMConfig."""
    from models.llm import LLMConfig

    return LLMConfig(
        model=m.model,
        gguf_file=m.gguf_file,
        dtype=m.dtype,
        device=m.device,
        threads=m.threads or 1,
        max_context=m.max_context,
        served_name=m.served_name,
        batch_generic=m.batch_generic,
    )


def default_loader(config: Config) -> Backend | RemoteModel:
    m = config.model
    match m:
        case RemoteModelConfig():
            from models.remote import load_remote

            return load_remote(remote_config(config))  # raises ModelLoadError (one line) if the engine is down
        case LlamaCppModel():
            return _load_llama_cpp(m, config.engine.max_running)
        case AutoLocalModel() if _auto_runs_on_llama_cpp(m):
            return _load_llama_cpp(m, config.engine.max_running)
        case TransformersModel() | AutoLocalModel():
            from models.llm import load_backend

            return load_backend(transformers_config(m))


def _load_llama_cpp(m: LlamaCppKeys, max_running: int) -> Backend:
    from models.llama_cpp import load_llama_backend

    return load_llama_backend(llama_cpp_config(m, max_running))  # ModelLoadError with the pip command if missing
