"""Start and stop what a running gateway holds (``Services``): the HTTP app's lifespan and the
in-process API (``gateway.wiring.inprocess``) share this, so both serve from the same engine set-up."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from models.backend import Backend
from models.decode import dry_breakers
from models.engine_client import EngineClient
from models.remote import RemoteModel
from processors.builtin import ImageProcessor, WavProcessor

from ..core.config import Config
from ..core.file_store import FileStore
from ..core.filters import load_filters
from ..core.keylimits import KeyLimits
from ..core.services import Services
from ..core.session_registry import SessionRegistry
from ..core.telemetry import start_tracing
from ..realtime.bigframes import FrameParser, ParseLimits
from ..voice.asr_worker import AsrWorker, blocking_transcriber, measure_capacity
from ..voice.endpointing import load_runner
from ..voice.synthesis import load_speech
from .loading import default_loader, image_limits, load_audio, load_speculator, load_vision, make_engine


async def start_services(
    config: Config,
    backend_loader: Callable[[Config], Backend | RemoteModel] | None = None,
    engine: EngineClient | None = None,
) -> Services:
    """Load the model on the engine's thread, then the speculator and the media processors."""
    # the event loop and the decode thread hand text to each other many times a second: a 1 ms
    # GIL switch interval (default 5 ms) keeps those hand-offs from adding milliseconds of TTFT
    sys.setswitchinterval(0.001)
    filters = load_filters(config.filters)  # a bad spec fails here, before minutes of model loading
    loader = backend_loader or default_loader
    # the engine's thread is the only one that ever runs the model (see models/engine.py)
    engine = engine or make_engine(config)  # (backend: openai: workers streaming from the engine)
    try:
        backend = await asyncio.wrap_future(engine.call(loader, config))
        spec = await asyncio.wrap_future(engine.call(load_speculator, config, backend, engine))
    except BaseException:
        engine.close()
        raise
    engine.attach(backend)  # the model its jobs are built for, and what it asks or closes
    engine.on_idle(getattr(backend, "warm", None))  # e.g. the next new conversation's cache
    try:
        asr = await asyncio.to_thread(load_audio, config) if config.audio.enabled else None
        describer, image_gen = await asyncio.to_thread(load_vision, config)
        speech = await asyncio.to_thread(load_speech, config.audio.output)
    except BaseException:
        engine.close()
        raise
    registry = SessionRegistry(
        config.server.grace_period_s,
        config.limits.max_sessions,
        config.limits.max_sessions_per_key if config.server.api_keys else None,
    )
    svc = Services(
        config=config,
        backend=backend,
        engine=engine,
        registry=registry,
        asr=asr,
        image_describer=describer,
        image_gen=image_gen,
        speech=speech,
        filters=filters,
        files=file_store(config),
        drafter_factory=None if spec is None else (lambda: (lambda s: (s, s))(spec.for_job())),
    )
    lim = config.limits
    if lim.key_responses_per_window is not None or lim.key_tokens_per_window is not None:
        svc.key_limits = KeyLimits(lim.key_responses_per_window, lim.key_tokens_per_window, lim.key_window_s, time.time)
    if config.vision.images_per_key_per_minute is not None:
        svc.image_key_limits = KeyLimits(config.vision.images_per_key_per_minute, None, 60.0, time.time)
    # the built-in image and WAV processors first, then the installed plugins (which may replace them)
    svc.processors.register(ImageProcessor(image_limits(config), describer))
    clips = None if asr is None else blocking_transcriber(svc, asyncio.get_running_loop())
    svc.processors.register(WavProcessor(svc.audio_limits, clips))
    svc.processors.load_entry_points()
    if speech is not None:
        speech.on_first_chunk = svc.metrics.voice_stage.labels(stage="tts_first_chunk").observe
    if asr is not None:  # one Whisper worker for every session's passes, and the voice seats
        capacity = config.audio.max_concurrent_turns
        if capacity is None:
            capacity = await asyncio.to_thread(measure_capacity, asr)
        svc.asr_worker = AsrWorker(asr, capacity, metrics=svc.metrics)
        svc.metrics.voice_capacity.set(capacity)
        svc.turn_model = await asyncio.to_thread(load_runner, svc.metrics)  # None: semantic_vad uses the transcript
    svc.tracing = start_tracing(config.tracing, svc.model_ids[0])
    if engine.tokenizes and svc.sampling_defaults.dry_multiplier > 0:
        # the default repetition guard's sequence breakers: one vocabulary scan (≈ 0.1 s), not on a first reply
        await asyncio.wrap_future(engine.call(dry_breakers, backend))
    if config.limits.parse_processes > 0:  # no process starts before the first big frame
        svc.frame_parser = FrameParser(ParseLimits.of(config.limits), config.limits.parse_processes)
    return svc


def file_store(config: Config) -> FileStore | None:
    f = config.files
    if not f.enabled:
        return None
    folder = Path(f.folder) if f.folder else Path(tempfile.gettempdir()) / "stream-omni-files"
    return FileStore(folder, f.quota_bytes_per_key, f.expiry_s, max_per_key=f.max_per_key)


def stop_services(svc: Services) -> None:
    """Stop the engine (running jobs are cancelled; a remote engine's client is closed) and the image generator."""
    svc.engine.close()
    if svc.speech is not None:
        svc.speech.close()
    if svc.asr_worker is not None:
        svc.asr_worker.close()
    if svc.turn_model is not None:
        svc.turn_model.close()
    if svc.frame_parser is not None:
        svc.frame_parser.close()
    if svc.image_gen is not None:
        svc.image_gen.close()
    if svc.tracing is not None:
        svc.tracing.close()
