"""A remote OpenAI-compatible engine as the model (vLLM, SGLang, TGI, llama-server, Ollama, Stream-Omni).

The local backends are a step Protocol (tokens in, logits out) that one engine thread drives. A
remote engine streams *text* instead, so it gets its own seam:

* ``RemoteModel`` is what the gateway serves (a name, ``/v1/models``, ``/ready``): a pooled
  HTTP client for ``base_url`` and the engine's model id (``auto``: the first id of its
  ``GET /models``).
* ``RemoteJob`` is one response, sans I/O: the engine's text deltas go in, the same
  ``JobEvents`` as a local ``DecodeJob`` come out. The deltas are fed through the same
  ``ChunkScheduler`` (semantic cuts, stop sequences held back, ``<image>`` requests cut out), so
  the gateway above has one path for local and remote output.
* ``stream_job`` is the I/O: it POSTs the conversation to ``/chat/completions`` with
  ``stream: true`` (and ``stream_options.include_usage``: usage comes from the engine) and
  feeds the job. ``models.remote_engine`` runs it on a thread per running response.

httpx, not the ``openai`` SDK: cancel must close the upstream socket *now*, from another thread,
while the worker is blocked reading it. httpx exposes the connection's socket
(``network_stream``), so ``shutdown()`` wakes that read at once and the engine sees the client
gone; the SDK adds its own retries and error types on top of the same httpx and hides the socket.

Each turn sends the whole conversation: the engine's prefix cache (vLLM
``--enable-prefix-caching``, llama-server's ``cache_prompt``) makes that cheap.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .backend import KVState
from .lifecycle import Done, JobEvents, JobLifecycle, JobPhase
from .llm import ModelLoadError
from .sampling import SamplingParams
from .scheduler import Chunk, ChunkScheduler, SchedulerConfig

log = logging.getLogger("stream_omni.remote")

BUSY_STATUS = frozenset({429, 503})  # the engine says: too much load now → our server_busy


@dataclass(frozen=True)
class RemoteConfig:
    base_url: str  # e.g. http://127.0.0.1:8222/v1 (the OpenAI API root of the engine)
    model: str = "auto"  # the engine's model id; auto = first id of its GET /models
    api_key: str | None = None  # sent as Authorization: Bearer (read from model.api_key_env)
    served_name: str | None = None  # id shown in our /v1/models (None: the engine's id)
    connect_timeout_s: float = 5.0  # TCP connect (and waiting for a pooled connection)
    read_timeout_s: float = 30.0  # longest silence from the engine: before its first byte and between chunks
    retries: int = 2  # reconnects when a request could not be delivered (nothing was generated yet)
    pool_size: int = 16  # connections kept to the engine
    startup_wait_s: float = 30.0  # keep asking GET /models this long at start-up (an engine still loading)
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into each request (engine-specific fields)


class EngineError(Exception):
    """A response the engine could not give. ``code`` is what the client sees; the message is for the
    log only (it may name the engine's address)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code  # engine_unavailable | server_busy | engine_timeout | engine_error


# ---------------------------------------------------------------------- the served model


class RemoteModel:
    """The engine as the gateway sees it. Thread-safe: httpx's client pools across threads."""

    def __init__(self, config: RemoteConfig, engine_id: str, client: httpx.Client | None = None):
        self.config = config
        self.engine_id = engine_id  # sent as "model" in each request
        self.name = config.served_name or engine_id  # shown in /v1/models, accepted as ?model=
        self.client = client or make_client(config)
        self._ready_at = 0.0  # monotonic time of the last successful probe
        self._ready_lock = threading.Lock()

    def new_state(self) -> KVState:
        """Conversations are resent each turn; the engine's prefix cache holds the state."""
        return KVState()

    def ready(self, max_age_s: float = 2.0) -> bool:
        """Is the engine up? True when it answered (a probe or a streamed line) in the last
        ``max_age_s``; else asks GET /models. A streaming response keeps this fresh, so /ready never
        probes a busy engine (llama_cpp.server cuts a running stream short for any other request)."""
        with self._ready_lock:
            if time.monotonic() - self._ready_at < max_age_s:
                return True
        try:
            list_models(self.client)
        except EngineError:
            return False
        self.alive()
        return True

    def alive(self, up: bool = True) -> None:
        """The engine just answered (``up``), or just failed a response (not up: the next /ready asks)."""
        with self._ready_lock:
            self._ready_at = time.monotonic() if up else 0.0

    def close(self) -> None:
        self.client.close()


def make_client(config: RemoteConfig) -> httpx.Client:
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    return httpx.Client(
        base_url=config.base_url.rstrip("/") + "/",
        headers=headers,
        timeout=httpx.Timeout(
            connect=config.connect_timeout_s,
            read=config.read_timeout_s,
            write=config.read_timeout_s,
            pool=config.connect_timeout_s,
        ),
        limits=httpx.Limits(max_connections=config.pool_size, max_keepalive_connections=config.pool_size),
        trust_env=False,  # an HTTP(S)_PROXY meant for the outside world must not sit in front of the engine
    )


def list_models(client: httpx.Client) -> list[str]:
    """The engine's model ids (GET /models)."""
    try:
        r = client.get("models")
    except httpx.TimeoutException as exc:
        raise EngineError("engine_timeout", f"GET /models timed out ({type(exc).__name__})") from None
    except httpx.HTTPError as exc:
        raise EngineError("engine_unavailable", f"GET /models failed ({_why(exc)})") from None
    if r.status_code != 200:
        raise EngineError("engine_unavailable", f"GET /models answered HTTP {r.status_code}")
    try:
        return [str(m["id"]) for m in r.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise EngineError("engine_error", "GET /models did not answer an OpenAI model list") from None


def load_remote(config: RemoteConfig, sleep: Callable[[float], None] = time.sleep) -> RemoteModel:
    """Connect to the engine and resolve its model id; ``ModelLoadError`` (one line) if it does not
    answer within ``startup_wait_s``."""
    client = make_client(config)
    deadline = time.monotonic() + config.startup_wait_s
    while True:
        try:
            ids = list_models(client)
            break
        except EngineError as exc:
            if time.monotonic() >= deadline:
                client.close()
                raise ModelLoadError(
                    f"the engine at model.base_url ({config.base_url}) did not answer GET /models "
                    f"within {config.startup_wait_s:g} s: {exc}"
                ) from None
            sleep(0.5)
    if config.model != "auto":
        engine_id = config.model  # not checked against the list: some engines serve aliases they do not list
    elif ids:
        engine_id = ids[0]
    else:
        client.close()
        raise ModelLoadError(f"the engine at model.base_url ({config.base_url}) lists no models (model: auto)")
    return RemoteModel(config, engine_id, client)


def _why(exc: BaseException) -> str:
    """A short cause for the log, without httpx's message (which names the address)."""
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the engine closed the connection"
    return type(exc).__name__


# ---------------------------------------------------------------------- one response (sans I/O)


_PIECES = re.compile(r"\s*\S+|\s+")


_OFF = SamplingParams()


def forwarded_knobs(params: SamplingParams) -> dict[str, Any]:
    """The sampling knobs beyond temperature / top-p that ``params`` sets, under the names llama.cpp's
    server and vLLM take (both honour all of them but DRY, which vLLM ignores): only those set, so an
    engine that knows none of them sees the plain OpenAI body."""
    out: dict[str, Any] = {}
    for key in (
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
    ):
        value = getattr(params, key)
        if value != getattr(_OFF, key) and (not key.startswith("dry_") or params.dry_multiplier > 0):
            out[key] = value
    if params.logit_bias:
        out["logit_bias"] = {str(t): b for t, b in params.logit_bias}
    return out


class RemoteJob(JobLifecycle):
    """One response from the engine: text deltas in, ``JobEvents`` out. No I/O, no threads.

    The chunk scheduler counts tokens; an engine sends one token per delta (llama.cpp, vLLM) or a
    chunk of several (another Stream-Omni), so each delta is split at word starts and each word
    counts as one unit: chunk sizes stay in words either way. The start and end are
    ``JobLifecycle``'s, as a ``DecodeJob``'s; a cancel from another thread takes ``lock`` first.
    """

    state = None  # no cache of ours: the engine keeps it
    hands_tool_calls = False  # tool calls are the remote engine's own business

    def __init__(
        self,
        model: RemoteModel,
        messages: list[dict[str, str]],
        params: SamplingParams,
        sched: SchedulerConfig,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.model = model
        self.messages = messages
        self.params = params
        self._pieces: list[str] = []
        self._start(ChunkScheduler(sched, self._decode), clock)
        self.lock = threading.Lock()  # the worker's deliveries vs a cancel from another thread
        self.sock: socket.socket | None = None  # the upstream connection while streaming
        self.t_first_delta: float | None = None
        self.deltas = 0
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def _decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[i] for i in ids)

    def body(self) -> dict[str, Any]:
        """The Chat Completions request: the whole conversation; sampling passes through."""
        body: dict[str, Any] = {
            "model": self.model.engine_id,
            "messages": self.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": self.params.temperature,
            "top_p": self.params.top_p,
            "max_tokens": self.params.max_tokens,
        }
        if self.params.seed is not None:
            body["seed"] = self.params.seed
        body.update(forwarded_knobs(self.params))
        if self.scheduler.config.stop:  # the engine stops there too (our scheduler still holds them back)
            body["stop"] = list(self.scheduler.config.stop)
        return {**self.model.config.extra_body, **body}  # ours win: the stream shape is not negotiable

    def feed(self, data: dict[str, Any]) -> JobEvents:
        """One parsed ``chat.completion.chunk`` from the engine."""
        if self.finished:
            return JobEvents()
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        out = JobEvents()
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            text = (choice.get("delta") or {}).get("content")
            if isinstance(text, str) and text:
                out = self._text(text)
                if self.finished:
                    return out
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return out

    def _text(self, text: str) -> JobEvents:
        now = self.clock()
        if self.t_first_delta is None:
            self.t_first_delta = now
            self.phase = JobPhase.DECODE
        self.deltas += 1
        chunks: list[Chunk] = []
        for piece in _PIECES.findall(text):  # one at a time: the scheduler places cuts between its tokens
            self._pieces.append(piece)
            chunks += self.scheduler.feed([len(self._pieces) - 1], now)
        out = JobEvents(chunks=chunks)
        self._note_chunks(chunks)
        out.requests, self.scheduler.requests = self.scheduler.requests, []
        if self.scheduler.stopped:  # a stop sequence matched here: the response is over
            fin = self._end(Done("stop", {}))
            out.chunks.extend(fin.chunks)
            out.done = fin.done
        return out

    def end(self) -> JobEvents:
        """The engine's stream ended cleanly (``[DONE]``)."""
        reason = {"length": "length"}.get(self.finish_reason or "", "stop")
        return self._end(Done(reason, {}))

    def fail(self, code: str) -> JobEvents:
        """The engine failed this response; the text shown so far stays shown."""
        return self._end(Done("error", {"error_code": code}))

    def cancel(self) -> JobEvents:
        return self._end(Done("cancelled", {}))

    def metrics(self) -> dict[str, Any]:
        """Our DecodeJob's metrics; token counts from the engine's usage when it sent one."""
        now = self.clock()
        u = self.usage or {}
        tokens = int(u.get("completion_tokens") or self.deltas)
        details = u.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        decode_s = max(now - (self.t_first_delta or now), 1e-9)
        return {
            "ttft_ms": None if self.t_first is None else round((self.t_first - self.t_start) * 1000, 2),
            "engine_ttft_ms": None
            if self.t_first_delta is None
            else round((self.t_first_delta - self.t_start) * 1000, 2),
            "tokens": tokens,
            "chunks": self.n_chunks,
            "prompt_tokens": max(int(u.get("prompt_tokens") or 0) - cached, 0),
            "cached_tokens": cached,
            "draft_tokens": 0,
            "draft_acceptance": None,
            "tokens_per_s": round(max(tokens - 1, 0) / decode_s, 2) if tokens > 1 else 0.0,
            "e2e_s": round(now - self.t_start, 4),
            "mean_logprob": None,
        }


def parse_sse_line(line: str) -> dict[str, Any] | str | None:
    """One line of the engine's SSE stream → a parsed ``data:`` JSON object, ``"[DONE]"``, or None
    (comments, ``event:``/``id:`` fields, blank lines, keep-alives)."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return "[DONE]"
    if not payload:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        raise EngineError("engine_error", "the engine sent a data line that is not JSON") from None
    if not isinstance(data, dict):
        raise EngineError("engine_error", "the engine sent a data line that is not a JSON object")
    if "error" in data and "choices" not in data:
        err = data["error"] if isinstance(data["error"], dict) else {"message": str(data["error"])}
        code = "server_busy" if err.get("code") in (429, 503, "server_busy") else "engine_error"
        raise EngineError(code, f"the engine sent an error: {str(err.get('message'))[:200]}")
    return data


# ---------------------------------------------------------------------- the I/O


def stream_job(job: RemoteJob, emit: Callable[[JobEvents], None], cancelled: threading.Event) -> None:
    """Run one response against the engine, calling ``emit`` with each batch of events.

    Ends with exactly one ``done`` unless ``cancelled`` was set (the canceller emitted it). Raises
    nothing: every failure becomes ``Done("error", {"error_code": …})``.
    """
    cfg = job.model.config
    try:
        resp = _open(job, cancelled, cfg.retries)
        if resp is None:
            return
        try:
            if resp.status_code != 200:
                resp.read()
                raise EngineError(
                    _status_code(resp), f"the engine answered HTTP {resp.status_code}: {resp.text[:200]!r}"
                )
            if not resp.headers.get("content-type", "").startswith("text/event-stream"):
                raise EngineError("engine_error", "the engine did not stream (stream: true ignored?)")
            if not _attach(job, resp):
                return  # cancelled while the request was being sent
            for line in resp.iter_lines():
                job.model.alive()
                item = parse_sse_line(line)
                if item is None:
                    continue
                if item == "[DONE]":
                    break
                assert isinstance(item, dict)
                if _step(job, emit, lambda: job.feed(item)):  # noqa: B023 (called at once)
                    return  # over (a stop sequence, or cancelled): closing the stream (finally) stops the engine
            else:
                if not cancelled.is_set() and job.finish_reason is None:
                    raise EngineError("engine_unavailable", "the engine's stream ended without [DONE]")
            _step(job, emit, job.end)
        finally:
            with job.lock:
                job.sock = None
            resp.close()
    except EngineError as exc:
        _failed(job, emit, cancelled, exc)
    except httpx.TimeoutException as exc:
        _failed(job, emit, cancelled, EngineError("engine_timeout", f"the engine went silent ({type(exc).__name__})"))
    except httpx.HTTPError as exc:  # the engine went away mid-response
        _failed(job, emit, cancelled, EngineError("engine_unavailable", f"the stream broke ({_why(exc)})"))
    except Exception as exc:  # a bug of ours ends this response only
        log.exception("remote response failed")
        _failed(job, emit, cancelled, EngineError("engine_error", type(exc).__name__))


def _status_code(resp: httpx.Response) -> str:
    """Our error code for an engine's refusal. Only the code leaves: the engine's words are logged."""
    if resp.status_code in BUSY_STATUS:
        return "server_busy"
    if resp.status_code == 400 and "context" in resp.text.lower():  # vLLM, llama-server, TGI say "context length"
        return "context_length_exceeded"
    return "engine_error"


def _open(job: RemoteJob, cancelled: threading.Event, retries: int) -> httpx.Response | None:
    """POST the request; reconnect (with a short backoff) when it could not be delivered."""
    client = job.model.client
    for attempt in range(retries + 1):
        if cancelled.is_set():
            return None
        try:
            return client.send(client.build_request("POST", "chat/completions", json=job.body()), stream=True)
        except httpx.PoolTimeout:
            raise EngineError("server_busy", "every connection to the engine is busy") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
            # refused, or a kept-alive connection the engine had closed: nothing was generated, so
            # sending again is safe
            if attempt == retries:
                raise EngineError("engine_unavailable", f"cannot reach the engine ({_why(exc)})") from None
            cancelled.wait(0.05 * 2**attempt)
    return None


def _attach(job: RemoteJob, resp: httpx.Response) -> bool:
    """Remember the socket, so that a cancel can shut it; False when already cancelled."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    with job.lock:
        if job.finished:
            return False
        job.sock = sock
    return True


def shut(sock: socket.socket | None) -> None:
    """Close the engine's stream now: wakes the worker's blocked read, and the engine sees the FIN."""
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _step(job: RemoteJob, emit: Callable[[JobEvents], None], fn: Callable[[], JobEvents]) -> bool:
    """Advance the job and hand out what it produced, under its lock: a cancel from another thread
    lands entirely before or after, so nothing of a response follows its ``done``. True: finished."""
    with job.lock:
        events = fn()
        if events.chunks or events.done is not None or events.requests:
            emit(events)
        return job.finished


def _failed(job: RemoteJob, emit: Callable[[JobEvents], None], cancelled: threading.Event, exc: EngineError) -> None:
    if cancelled.is_set():
        return  # our own shutdown broke the read: the canceller already ended the response
    log.warning("remote response failed: %s (%s)", exc.code, exc)
    if exc.code in ("engine_unavailable", "engine_timeout"):
        job.model.alive(False)
    _step(job, emit, lambda: job.fail(exc.code))
