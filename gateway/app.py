"""create_app(config): routes, lifespan that loads the model, /health /ready /metrics /v1/models."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from models.backend import Backend
from models.engine import Engine
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig

from . import http_api
from . import protocol as p
from .config import Config
from .connection import CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TRY_AGAIN, Connection
from .metrics import Metrics
from .registry import SessionRegistry, TooManySessions
from .security import bearer, check_origin, subprotocol_key, ws_api_key_ok
from .session import SessionDefaults

log = logging.getLogger("stream_omni.app")

WEB_DIR = Path(__file__).resolve().parent.parent / "web"  # the browser client, served at GET /


@dataclass
class Services:
    """Everything a connection needs, built once per app."""

    config: Config
    backend: Backend
    engine: Engine
    metrics: Metrics = field(default_factory=Metrics)
    drafter_factory: Callable[[], tuple[Any, Any]] | None = None  # → (drafter, verifier) per response
    asr: Any = None  # processors.asr Transcriber, or None when audio is disabled
    image_describer: Callable[[str], str] | None = None  # data URL → text for the LLM (CLIP/VLM)
    image_gen: Any = None  # models.image_gen.ImageGenerator, or None when image output is off
    registry: SessionRegistry = field(default_factory=lambda: SessionRegistry(30.0, 64))
    started: float = field(default_factory=time.time)

    @property
    def session_defaults(self) -> SessionDefaults:
        c = self.config
        return SessionDefaults(
            model=self.backend.name,
            instructions=c.session.instructions,
            temperature=c.session.temperature,
            top_p=c.session.top_p,
            max_output_tokens=c.session.max_output_tokens,
            scheduler={},
        )

    def sampling(self, opts: dict[str, Any]) -> SamplingParams:
        return SamplingParams(
            temperature=float(opts.get("temperature") or 0.0),
            top_p=float(opts.get("top_p") or 1.0),
            seed=opts.get("seed"),
            max_tokens=int(opts.get("max_tokens") or self.config.session.max_output_tokens),
        )

    def scheduler_config(self, opts: dict[str, Any]) -> SchedulerConfig:
        d = self.config.scheduler.model_dump(exclude_none=True)
        d.update({k: v for k, v in opts.items() if v is not None})
        strategy = d.pop("strategy", "balanced")
        if self.image_gen is not None:
            d.setdefault("intercept", ("<image>", "</image>"))
        if self.drafter_factory is None:
            d["lookahead_tokens"] = 0  # nothing drafts
        else:
            d.setdefault("lookahead_tokens", self.config.speculative.k_max)
        return SchedulerConfig.for_strategy(strategy, **d)

    def drafting(self) -> tuple[Any, Any]:
        return self.drafter_factory() if self.drafter_factory else (None, None)

    @property
    def audio_limits(self) -> Any:
        from processors.audio import AudioLimits

        return AudioLimits(
            max_buffer_s=self.config.audio.max_buffer_s, max_frame_bytes=self.config.limits.max_text_frame_bytes
        )

    @property
    def default_turn_detection(self) -> dict[str, Any] | None:
        return {"type": "server_vad"} if self.config.audio.turn_detection == "server_vad" else None

    def engine_has_room(self) -> bool:
        running, waiting = self.engine.depth
        return running < self.engine.max_running or waiting < self.engine.max_waiting


def create_app(
    config: Config, backend_loader: Callable[[Config], Backend] | None = None, engine: Engine | None = None
) -> Starlette:
    """The ASGI app. ``backend_loader`` defaults to the configured backend (see models/); it runs on
    the engine's thread. Pass ``engine`` when the model was already loaded on that engine's thread."""
    state: dict[str, Services] = {}
    given_engine = engine

    def svc() -> Services:
        return state["svc"]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # the event loop and the decode thread hand text to each other many times a second: a 1 ms
        # GIL switch interval (default 5 ms) keeps those hand-offs from adding milliseconds of TTFT
        sys.setswitchinterval(0.001)
        loader = backend_loader or default_loader
        # the engine's thread is the only one that ever runs the model (see models/engine.py)
        engine = given_engine or Engine(config.engine.max_running, config.engine.max_waiting)
        try:
            backend = await asyncio.wrap_future(engine.call(loader, config))
            spec = await asyncio.wrap_future(engine.call(load_speculator, config, backend))
        except BaseException:
            engine.close()
            raise
        engine.on_idle(getattr(backend, "warm", None))  # e.g. the next new conversation's cache
        asr = await asyncio.to_thread(load_audio, config) if config.audio.enabled else None
        describer, image_gen = await asyncio.to_thread(load_vision, config)
        registry = SessionRegistry(config.server.grace_period_s, config.limits.max_sessions)
        state["svc"] = Services(
            config=config,
            backend=backend,
            engine=engine,
            asr=asr,
            registry=registry,
            image_describer=describer,
            image_gen=image_gen,
            drafter_factory=None if spec is None else (lambda: (lambda s: (s, s))(spec.for_job())),
        )
        app.state.services = state["svc"]
        # what is loaded now (weights' wrappers, tokenizer, schemas: ≈ 0.5 M objects) lives as long
        # as the server: freeze it out of the cyclic GC's reach, or each full collection walks it
        # all (≈ 100–250 ms measured here) in the middle of some response's first token
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()  # an app that stops (tests start many) gives its objects back to the GC
            await registry.drain(0)
            engine.close()
            if image_gen is not None:
                image_gen.close()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        if "svc" not in state:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ready", "model": svc().backend.name})

    async def models(request: Request) -> Response:
        s = svc()
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": s.backend.name, "object": "model", "created": int(s.started), "owned_by": "stream-omni"}
                ],
            }
        )

    async def metrics(request: Request) -> Response:
        s = svc()
        running, waiting = s.engine.depth
        s.metrics.sessions.set(len(s.registry))
        return Response(s.metrics.render(running, waiting), media_type="text/plain; version=0.0.4")

    async def realtime(ws: WebSocket) -> None:
        s = svc()
        if not check_origin(ws, config.server):
            await ws.close(CLOSE_POLICY)  # before accept: the client sees HTTP 403
            return
        subprotocol = ws_api_key_ok(ws, config.server.api_keys)
        if subprotocol is False:
            await ws.accept()
            await ws.close(CLOSE_POLICY, "invalid or missing API key")
            return
        api_key = bearer(ws) or subprotocol_key(ws)
        token = ws.query_params.get("resume_token")
        model = ws.query_params.get("model")
        await ws.accept(subprotocol=subprotocol or None)
        if model and model not in (s.backend.name, "embedded"):
            err = p.error_event("model_not_found", f"model {model!r} is not served here; use {s.backend.name!r}")
            await ws.send_json(err)
            await ws.close(CLOSE_POLICY, "model not found")
            return
        if token is not None:
            await resume(ws, s, token, api_key)
            return
        try:
            live = s.registry.create(s, api_key)
        except TooManySessions as exc:
            await ws.close(CLOSE_TRY_AGAIN, str(exc))
            return
        await Connection(ws, live).run()

    async def resume(ws: WebSocket, s: Services, token: str, api_key: str | None) -> None:
        try:
            last_seq = int(ws.query_params.get("last_seq", "-1"))
        except ValueError:
            last_seq = -2  # not a number: fails below
        live = s.registry.find(token, api_key)
        if live is None or live.outbox.since(last_seq) is None:
            why = "unknown or expired resume token" if live is None else f"events after seq {last_seq} are gone"
            s.metrics.errors.labels(code="resume_failed").inc()
            await ws.send_json(p.error_event("resume_failed", f"cannot resume: {why}"))
            await ws.close(CLOSE_NORMAL, "resume failed")
            if live is not None and live.attached is None:
                s.registry.detached(live)  # restart its grace timer
            return
        s.metrics.resumes.inc()
        await Connection(ws, live, last_seq).run(resumed=True)

    routes = [
        Route("/health", health),
        Route("/ready", ready),
        Route("/v1/models", models),
        Route("/metrics", metrics),
        WebSocketRoute("/v1/realtime", realtime),
        *http_api.routes(svc),
        Mount("/", app=StaticFiles(directory=str(WEB_DIR), html=True, check_dir=False), name="web"),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def load_audio(config: Config) -> Any:
    """Whisper (and a warm VAD session) for voice input; loaded once per process."""
    from processors.asr import AsrConfig, load_asr
    from processors.vad import SileroVad

    a = config.audio
    asr = load_asr(AsrConfig(engine=a.engine, model=a.model, language=a.language))
    SileroVad()  # load the ONNX model now, not on the first frame
    return asr


def load_speculator(config: Config, backend: Backend) -> Any:
    """Speculative decoding for every response (None when drafter is 'none'); measures the verify cost once."""
    s = config.speculative
    if s.drafter == "none":
        return None
    from models.speculative import SpecConfig, Speculator

    return Speculator(backend, SpecConfig(**s.model_dump()))  # the section's keys are SpecConfig fields


def load_vision(config: Config) -> tuple[Callable[[str], str] | None, Any]:
    """The configured image understanding (CLIP labels or a VLM caption) and image generator."""
    from processors.image import ImageLimits, RemoteImagePolicy, load_image_url

    v = config.vision
    limits = ImageLimits(max_bytes=v.max_image_bytes, max_pixels=v.max_image_pixels, max_side=v.max_side)
    remote = (
        RemoteImagePolicy(allowed_hosts=frozenset(v.remote_image_hosts), timeout_s=v.remote_image_timeout_s)
        if v.remote_image_hosts
        else None
    )
    describer: Callable[[str], str] | None = None
    if v.mode == "clip":
        from models.clip import ClipConfig, ClipLabeler

        kw: dict[str, Any] = {"labels": tuple(v.clip_labels)} if v.clip_labels else {}
        labeler = ClipLabeler(ClipConfig(model=v.clip_model, pretrained=v.clip_pretrained, **kw))

        def describer(url: str) -> str:
            return str(labeler.rank(load_image_url(url, limits, remote).image).description)

    elif v.mode == "vlm":
        from models.vlm import VisionLanguageModel, VLMConfig

        vlm = VisionLanguageModel(VLMConfig(model=v.vlm_model))

        def describer(url: str) -> str:
            img = load_image_url(url, limits, remote).image
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


def backend_kind(config: Config) -> str:
    """``auto``: GGUF models (the embedded default included) run on llama.cpp, others on transformers."""
    m = config.model
    if m.backend != "auto":
        return m.backend
    is_gguf = m.model == "embedded" or m.model.endswith(".gguf") or bool(m.gguf_file)
    return "llama_cpp" if is_gguf and m.device == "cpu" else "transformers"


def default_loader(config: Config) -> Backend:
    from models.llm import LLMConfig, load_backend

    m = config.model
    if backend_kind(config) == "llama_cpp":
        from models.llama_cpp import LlamaCppConfig, load_llama_backend

        path = m.model if m.gguf_file is None else str(Path(m.model) / m.gguf_file)
        return load_llama_backend(  # raises ModelLoadError with the pip command if llama_cpp is missing
            LlamaCppConfig(
                model=path,
                threads=m.threads or 2,
                n_ctx=m.max_context,
                n_batch=m.n_batch,
                n_seq=m.n_seq,
                flash_attn=m.flash_attn,
                served_name=m.served_name,
            )
        )
    return load_backend(
        LLMConfig(
            model=m.model,
            gguf_file=m.gguf_file,
            dtype=m.dtype,
            device=m.device,
            threads=m.threads or 1,
            max_context=m.max_context,
            served_name=m.served_name,
        )
    )
