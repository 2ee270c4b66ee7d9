"""What the running app holds: config, engine, processors, session registry, and the builders every route shares.

Built once by ``gateway.wiring.app``'s lifespan (from ``gateway.wiring.loading``) and handed to every route.
Besides the parts, it builds what each request derives from config (sampling params, scheduler
config, decode jobs, audio limits); nothing here does I/O or imports the app, so every module can
depend on it without a cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from models.backend import Backend, KVState
from models.decode import DecodeJob
from models.decode_ports import TokenConstraint
from models.engine_client import EngineClient
from models.remote import RemoteJob, RemoteModel
from models.sampling import REPETITION_GUARD_KEYS, SamplingParams
from models.scheduler import SchedulerConfig
from processors.asr import Transcriber
from processors.audio import AudioLimits
from processors.registry import ProcessorRegistry

from ..tools.seats import KeySeats
from .config import Config
from .ephemeral_keys import MemoryVault, SecretVault
from .file_store import FileStore
from .filters import NamedFilter
from .keylimits import KeyLimits
from .metrics import Metrics
from .request_options import SchedulerOptions, ServerChunking, model_refusal, sampling_params, scheduler_config
from .session_registry import SessionRegistry
from .telemetry import Tracing

# (drafter, verifier) for one response, or (None, None): see models.speculative
Drafting = tuple[Any, Any]
IMAGE_TAGS = ("<image>", "</image>")  # what the model writes around an image request (image output on)
# an image data URL → text the LLM reads (CLIP labels or a VLM caption)
ImageDescriber = Callable[[str], str]


class KeyRate(Protocol):
    """Client frames counted per API key over all replicas (``gateway.cluster.node.ClusterNode``)."""

    def over_rate(self, digest: str) -> bool:
        """Count one frame of key ``digest``: True if that key is over its rate."""
        ...


class FrameParsing(Protocol):
    """Client text frames too big to parse on the loop, parsed in worker processes
    (``gateway.realtime.bigframes.FrameParser``): a client event, or the ``ProtocolError`` it raised."""

    async def parse(self, text: str | bytes) -> Any: ...

    def close(self) -> None: ...


@dataclass
class Services:
    """Everything a connection needs, built once per app."""

    config: Config
    backend: Backend | RemoteModel  # a local step backend, or a remote engine (backend: openai)
    engine: EngineClient  # decodes here, or streams from the remote engine: ask it, never its type
    registry: SessionRegistry
    metrics: Metrics = field(default_factory=Metrics)
    drafter_factory: Callable[[], Drafting] | None = None  # → (drafter, verifier) per response
    asr: Transcriber | None = None  # None when audio input is disabled
    speech: Any = None  # gateway.voice.synthesis.SpeechService: the voices; None when speech output is off
    asr_worker: Any = None  # gateway.voice.asr_worker.AsrWorker: the Whisper passes of every session, seats
    turn_model: Any = None  # gateway.voice.endpointing.TurnModelRunner: the end-of-turn model (None: not installed)
    image_describer: ImageDescriber | None = None  # None when image input is disabled
    image_gen: Any = None  # models.image_gen.ImageGenerator, or None when image output is off
    filters: tuple[NamedFilter, ...] = ()  # chunk filters (gateway.core.filters), in order
    files: FileStore | None = None  # uploaded files (/v1/files); None when disabled
    processors: ProcessorRegistry = field(default_factory=ProcessorRegistry)  # content type → text (files)
    frame_parser: FrameParsing | None = None  # big text frames parsed in processes; None: on a thread
    started: float = field(default_factory=time.time)
    key_rate: KeyRate | None = None  # with a Redis session store and api_keys
    key_limits: KeyLimits | None = None  # responses and tokens per key and window (limits.key_*_per_window)
    image_key_limits: KeyLimits | None = None  # images read per key per minute (vision.images_per_key_per_minute)
    # unredeemed ek_ keys (POST /v1/realtime/client_secrets): here, or in Redis with replicas (gateway.cluster)
    client_secrets: SecretVault = field(default_factory=lambda: MemoryVault(time.time))
    tracing: Tracing | None = None  # the app's span exporter; None: traces are off
    mcp_seats: KeySeats = field(default_factory=KeySeats)  # open MCP connections per key (gateway.tools.runner)
    tokenizing: int = 0  # responses admitted whose prompt is being tokenized (gateway.core.tokenize): not yet submitted

    @property
    def model_ids(self) -> list[str]:
        """Every id this server answers to: the served name, then ``model.aliases``."""
        return [self.backend.name, *(a for a in self.config.model.aliases if a != self.backend.name)]

    def model_refusal(self, model: str, also: tuple[str, ...] = ()) -> str | None:
        """None when this server answers to ``model`` (its name, ``model.aliases``, or ``also``); else why
        not, for every API's ``model_not_found``."""
        return model_refusal(self.model_ids, model, also)

    @property
    def sampling_defaults(self) -> SamplingParams:
        """What a response that sets no sampling gets: the model's own recommended settings
        (``sampling_defaults`` of the backend: the embedded model's card, a GGUF's or an HF
        ``generation_config``'s), under the ``session`` config's ``temperature`` / ``top_p`` where
        set, and without the model's repetition guard when ``session.repetition_guard`` is off."""
        s = self.config.session
        model: dict[str, Any] = dict(getattr(self.backend, "sampling_defaults", None) or {})
        if s.repetition_guard == "off":
            for key in REPETITION_GUARD_KEYS:
                model.pop(key, None)
        server = {"temperature": s.temperature, "top_p": s.top_p}
        return sampling_params(SamplingParams(), model, server, max_tokens=s.max_output_tokens)

    def sampling(self, req: object, max_tokens: int | None = None, top_logprobs: int | None = None) -> SamplingParams:
        """An HTTP (or in-process) request's sampling: what ``req`` leaves unset comes from
        ``sampling_defaults``, and its token cap never exceeds the server's (``session.max_output_tokens``).
        A Realtime response's comes through the same builder from its session's options."""
        cap = self.config.session.max_output_tokens
        return sampling_params(
            self.sampling_defaults,
            req,
            max_tokens=cap if max_tokens is None else min(max_tokens, cap),
            top_logprobs=top_logprobs,
        )

    @property
    def chunking(self) -> ServerChunking:
        """The server's side of every response's chunk scheduler (``request_options.scheduler_config``):
        the ``scheduler`` config, the image model's request tags, and the drafter's lookahead."""
        return ServerChunking(
            base=SchedulerOptions(**self.config.scheduler.model_dump()),
            intercept=IMAGE_TAGS if self.image_gen is not None else None,
            lookahead=None if self.drafter_factory is None else self.config.speculative.k_max,
        )

    def scheduler_config(
        self,
        *layers: SchedulerOptions | None,
        spoken: bool = False,
        stop: tuple[str, ...] = (),
        tool_intercept: tuple[str, str] | None = None,
    ) -> SchedulerConfig:
        """An HTTP (or in-process) request's chunk scheduler: ``request_options.scheduler_config`` over
        this server's ``chunking``. A Realtime response's comes through the same builder in its session."""
        return scheduler_config(self.chunking, *layers, spoken=spoken, stop=stop, tool_intercept=tool_intercept)

    def drafting(self) -> Drafting:
        return self.drafter_factory() if self.drafter_factory else (None, None)

    @property
    def tokenizes(self) -> bool:
        """Whether responses need a prompt tokenized here (not with a remote engine)."""
        return self.engine.tokenizes

    @property
    def local_backend(self) -> Backend | None:
        """The step backend that decodes, and so tokenizes, here; None where the engine takes messages
        (a remote one). Asked of the engine, never of the backend's type."""
        return cast(Backend, self.backend) if self.engine.tokenizes else None

    def decode_job(
        self,
        state: KVState,
        messages: list[dict[str, str]],
        sampling: SamplingParams,
        scheduler: SchedulerConfig,
        prompt: list[int] | None = None,
        constraint: TokenConstraint | None = None,
    ) -> DecodeJob | RemoteJob:
        """One response: ``messages`` through the chat template, decoded on ``state`` with these options;
        or, with a remote engine (backend: openai), streamed from it. Either way ``engine.submit`` takes
        it and the same JobEvents come back.

        ``prompt``: ``messages`` already tokenized off the event loop (gateway.core.tokenize); None: here.
        ``constraint``: a grammar every token follows (models.constrain; local decoding only).
        Raises ``ContextOverflow`` (prompt too long) or ``ValueError`` (bad sampling/scheduler values,
        or a ``constraint`` with a remote engine)."""
        job: DecodeJob | RemoteJob = self.engine.job(
            state, messages, sampling, scheduler, prompt, self.drafting(), constraint
        )
        return job

    @property
    def audio_limits(self) -> AudioLimits:
        return AudioLimits(
            max_buffer_s=self.config.audio.max_buffer_s, max_frame_bytes=self.config.limits.max_text_frame_bytes
        )

    @property
    def default_turn_detection(self) -> dict[str, Any] | None:
        return {"type": "server_vad"} if self.config.audio.turn_detection == "server_vad" else None

    def engine_has_room(self) -> bool:
        running, waiting = self.engine.depth
        # prompts being tokenized hold a place (they are submitted once tokenized), and so does a job
        # the engine's thread has not admitted yet: a sum, not "a free running slot or a free queue slot"
        return running + waiting + self.tokenizing < self.engine.max_running + self.engine.max_waiting
