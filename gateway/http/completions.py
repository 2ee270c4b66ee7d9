"""``POST /v1/completions``: raw text completion (OpenAI's legacy Completions API).

No chat template: the prompt is the model's input as given (``models.backend.PromptEncoder``:
the model's BOS, special tokens parsed in linear time), tokenized off the event loop. ``prompt``
is a string, a list of strings, token ids or a list of token-id lists; each prompt is one choice
(``index`` in prompt order), each its own job on the same engine and scheduler as chat, under the
same limits (body size, ``limits.max_prompt_chars``, ``max_output_tokens``, context, engine
capacity). Streamed with ``"stream": true`` as numbered SSE frames of ``text_completion`` objects
ending in ``[DONE]``, resumable like chat at ``GET /v1/completions/<id>/stream``.

``logprobs: n`` (0..5) gives each generated token's logprob and its ``n`` most likely
alternatives (plus the chosen token), OpenAI's ``{tokens, token_logprobs, top_logprobs,
text_offset}``; offsets count from the start of the choice's text. ``echo`` puts the prompt in
front of the text; echo with logprobs (the prompt's own logprobs) is refused. ``suffix`` and
``best_of`` > 1 are refused: nothing here can honour them.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

from pydantic import Field, StrictBool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from models.backend import Backend, PromptEncoder
from models.decode import ContextOverflow, DecodeJob, Done, JobEvents, TokenLogprob
from models.engine_client import EngineBusy, Handle

from ..core.engine_events import AsyncSink
from ..core.services import Services
from ..core.tokenize import TooManyTokens, text_tokens
from . import bodies, jobs
from .error_bodies import ApiError, busy, check_model, error_body
from .schemas import SamplingRequest, parse, read_body
from .sse import CompletionStore, CompletionStream, SseResponse, dumps

MAX_PROMPTS = 16  # prompts (choices) in one request; each is a job on the engine
MAX_LOGPROBS = 5  # as OpenAI

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(SamplingRequest):
    prompt: (
        str
        | Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS)]
        | TokenIds
        | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)]
    )
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for completions
    echo: StrictBool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    best_of: int | None = Field(None, ge=1, le=1)
    suffix: None = None  # insertion is not supported: refused when set


@dataclass
class Choice:
    """One prompt's job and what it produced so far."""

    index: int
    echo: str  # the prompt's text when echoed, else ""
    job: DecodeJob
    handle: Handle | None = None
    text: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    done: Done | None = None


async def create(svc: Services, store: CompletionStore, request: Request, owner: str) -> Response:
    jobs.traced(svc, request)
    req = parse(await read_body(request, svc.config.limits.max_http_body_bytes), CompletionRequest)
    check_model(svc, req.model)
    if req.echo and req.logprobs is not None:
        raise ApiError(400, "invalid_value", "echo with logprobs (the prompt's logprobs) is not supported", "echo")
    if not svc.engine_has_room():
        raise busy()
    choices = [
        Choice(i, await _echo(svc, req, p) if req.echo else "", _job(svc, req, ids))
        for i, (p, ids) in enumerate(await _prompts(svc, req))
    ]
    header = bodies.Header(f"cmpl-{secrets.token_hex(16)}", int(time.time()), svc.backend.name)
    queue: asyncio.Queue[tuple[int, JobEvents]] = asyncio.Queue()
    _submit(svc, choices, queue)
    if req.stream:
        return _start_stream(svc, store, owner, req, choices, queue, header)
    return await _complete(svc, request, req, choices, queue, header)


async def _prompts(svc: Services, req: CompletionRequest) -> list[tuple[str | list[int], list[int]]]:
    """(the prompt as given, its ids) for each prompt. Text is tokenized on the tokenizer thread
    (``gateway.core.tokenize``), after its size was checked here: never on the event loop."""
    given = req.prompt
    items: list[str | list[int]] = []
    if isinstance(given, str):
        items.append(given)
    elif all(isinstance(t, int) for t in given):  # one prompt of token ids
        items.append([t for t in given if isinstance(t, int)])
    else:
        items.extend(p for p in given if not isinstance(p, int))
    backend = svc.local_backend
    if backend is None:  # a remote engine is driven by messages, not by token ids
        raise ApiError(400, "unsupported_content", "raw completions need a local model (not backend: openai)", "prompt")
    texts = [p for p in items if isinstance(p, str)]
    cap = svc.config.limits.max_prompt_chars
    if sum(map(len, texts)) > cap:
        raise ApiError(
            400,
            "input_too_large",
            f"the text prompts exceed the limit of {cap} characters (limits.max_prompt_chars)",
            "prompt",
        )
    encoder = backend if isinstance(backend, PromptEncoder) else None
    if texts and encoder is None:
        raise ApiError(400, "unsupported_content", "this model cannot read a raw text prompt", "prompt")
    try:
        encoded = iter(await text_tokens(encoder.encode, texts, svc, backend.max_context) if encoder and texts else [])
    except TooManyTokens as exc:
        raise ApiError(400, "context_length_exceeded", str(exc), "prompt") from None
    out: list[tuple[str | list[int], list[int]]] = []
    for i, p in enumerate(items):
        where = "prompt" if len(items) == 1 else f"prompt[{i}]"
        if isinstance(p, str):
            ids = next(encoded)
        else:
            ids = list(p)
            bad = next((t for t in ids if t >= backend.vocab_size), None)
            if bad is not None:
                raise ApiError(
                    400,
                    "invalid_value",
                    f"token id {bad} is outside the vocabulary (0..{backend.vocab_size - 1})",
                    where,
                )
        if not ids:
            raise ApiError(400, "invalid_value", "the prompt is empty", where)
        out.append((p, ids))
    return out


async def _echo(svc: Services, req: CompletionRequest, prompt: str | list[int]) -> str:
    if isinstance(prompt, str):
        return prompt
    backend = cast(Backend, svc.backend)  # _prompts refused every engine that does not tokenize here
    # token ids are decoded on the engine's thread: a backend's decode buffer is not shared between threads
    return str(await asyncio.wrap_future(svc.engine.call(backend.decode, prompt)))


def _job(svc: Services, req: CompletionRequest, ids: list[int]) -> DecodeJob:
    backend = cast(Backend, svc.backend)  # _prompts refused every engine that does not tokenize here
    try:
        return DecodeJob(
            backend,
            backend.new_state(),
            ids,
            svc.sampling(req, req.max_tokens, top_logprobs=req.logprobs),
            svc.scheduler_config(req.scheduler, stop=req.stop_sequences()),
            *svc.drafting(),
        )
    except ContextOverflow as exc:
        raise ApiError(400, "context_length_exceeded", str(exc), "prompt") from None
    except ValueError as exc:
        raise ApiError(400, "invalid_value", str(exc)) from None


def _submit(svc: Services, choices: list[Choice], queue: asyncio.Queue[tuple[int, JobEvents]]) -> None:
    loop = asyncio.get_running_loop()
    try:
        for c in choices:
            c.handle = svc.engine.submit(c.job, AsyncSink(loop, queue, c.index))
    except EngineBusy:
        _cancel_all(svc, choices)
        raise busy() from None


def _cancel_all(svc: Services, choices: list[Choice]) -> None:
    for c in choices:
        if c.handle is not None and c.done is None:
            jobs.canceller(svc, c.handle)()


def _take(c: Choice, events: JobEvents) -> None:
    c.text.extend(ch.text for ch in events.chunks)
    c.logprobs.extend(events.logprobs)
    c.done = events.done or c.done


def _usage(choices: list[Choice]) -> dict[str, Any]:
    total: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "cached": 0}
    for c in choices:
        u = bodies.usage(c.done.metrics if c.done else {})
        for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
            total[k] += u[k]
        total["cached"] += u["prompt_tokens_details"]["cached_tokens"]
    cached = total.pop("cached")
    return {**total, "prompt_tokens_details": {"cached_tokens": cached}}


def logprobs_body(items: list[TokenLogprob], offset: int = 0, limit: int | None = None) -> dict[str, Any]:
    """OpenAI's legacy ``logprobs``; tokens whose text starts at or past ``limit`` (a stop sequence's) are left out."""
    body: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    pos = offset
    for t in items:
        if limit is not None and pos >= limit:
            break
        body["tokens"].append(t.text)
        body["token_logprobs"].append(t.logprob)
        body["top_logprobs"].append({t.text: t.logprob, **{s: v for s, v in t.top if s != t.text}})
        body["text_offset"].append(pos)
        pos += len(t.text)
    return body


def _object(h: bodies.Header, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": h.id, "object": "text_completion", "created": h.created, "model": h.model, "choices": choices}


# ---------------------------------------------------------------------- non-streamed


async def _complete(
    svc: Services,
    request: Request,
    req: CompletionRequest,
    choices: list[Choice],
    queue: asyncio.Queue[tuple[int, JobEvents]],
    h: bodies.Header,
) -> Response:
    collect = asyncio.create_task(_collect(choices, queue))
    gone = asyncio.create_task(jobs.disconnected(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not collect.done():  # the client left: stop decoding for nobody
            _cancel_all(svc, choices)
        await collect
    finally:
        gone.cancel()
        for c in choices:  # no-op when finished; never leaves a job running if this task is cancelled
            if c.handle is not None:
                c.handle.cancel()
    dones = [c.done for c in choices if c.done is not None]
    for d in dones:
        jobs.finished(svc, d, h.id, "text_completion")
    if any(d.reason == "cancelled" for d in dones):
        return Response(status_code=499)
    if any(d.reason not in bodies.FINISH for d in dones):
        return JSONResponse(error_body(500, "generation_failed", "generation failed"), status_code=500)
    out = []
    for c in choices:
        assert c.done is not None
        text = "".join(c.text)
        lp = None if req.logprobs is None else logprobs_body(c.logprobs, 0, len(text))
        out.append(
            {"text": c.echo + text, "index": c.index, "logprobs": lp, "finish_reason": bodies.FINISH[c.done.reason]}
        )
    return JSONResponse({**_object(h, out), "usage": _usage(choices)})


async def _collect(choices: list[Choice], queue: asyncio.Queue[tuple[int, JobEvents]]) -> None:
    while any(c.done is None for c in choices):
        i, events = await queue.get()
        _take(choices[i], events)


# ---------------------------------------------------------------------- streamed (SSE)


def _start_stream(
    svc: Services,
    store: CompletionStore,
    owner: str,
    req: CompletionRequest,
    choices: list[Choice],
    queue: asyncio.Queue[tuple[int, JobEvents]],
    h: bodies.Header,
) -> Response:
    stream = CompletionStream(h.id, owner, svc.config.server.grace_period_s or jobs.HTTP_GRACE_S)
    if not store.add(stream):
        _cancel_all(svc, choices)
        raise busy("too many streamed completions in flight; retry shortly")
    stream.cancel = lambda: _cancel_all(svc, choices)
    with_usage = bool(req.stream_options and req.stream_options.include_usage)
    for c in choices:
        if c.echo:
            stream.push(dumps(_chunk(h, c.index, c.echo, None, None, with_usage)))
    stream.task = asyncio.create_task(_pump(svc, stream, req, choices, queue, h, with_usage))
    return SseResponse(store, stream, -1)


def _chunk(
    h: bodies.Header, index: int, text: str, lp: dict[str, Any] | None, finish: str | None, with_usage: bool
) -> dict[str, Any]:
    out = _object(h, [{"text": text, "index": index, "logprobs": lp, "finish_reason": finish}])
    if with_usage:
        out["usage"] = None  # as OpenAI: null on every chunk but the last
    return out


async def _pump(
    svc: Services,
    stream: CompletionStream,
    req: CompletionRequest,
    choices: list[Choice],
    queue: asyncio.Queue[tuple[int, JobEvents]],
    h: bodies.Header,
    with_usage: bool,
) -> None:
    """Engine events of every choice → numbered SSE frames, until all are done."""
    pending = {c.index: deque[TokenLogprob]() for c in choices}  # logprobs not yet matched to a chunk
    offsets = dict.fromkeys(pending, 0)
    failed: Done | None = None
    while any(c.done is None for c in choices):
        i, events = await queue.get()
        c = choices[i]
        c.done = events.done or c.done
        pending[i].extend(events.logprobs)
        for ch in events.chunks:
            if not ch.text:  # a final chunk may carry only the count of tokens that never became text
                continue
            lp = None
            if req.logprobs is not None:
                mine = [pending[i].popleft() for _ in range(min(ch.tokens, len(pending[i])))]
                lp = logprobs_body(mine, offsets[i])
                offsets[i] += len(ch.text)
            stream.push(dumps(_chunk(h, i, ch.text, lp, None, with_usage)))
        done = events.done
        if done is None:
            continue
        jobs.finished(svc, done, h.id, "text_completion")
        if done.reason in bodies.FINISH:
            stream.push(dumps(_chunk(h, i, "", None, bodies.FINISH[done.reason], with_usage)))
        elif failed is None:
            failed = done
            _cancel_all(svc, choices)  # one choice failed: the request has failed
    if failed is not None:
        code, message = (
            ("cancelled", "the completion was cancelled")
            if failed.reason == "cancelled"
            else ("generation_failed", "generation failed")
        )
        stream.push(dumps(error_body(500, code, message)))
    elif with_usage:
        stream.push(dumps({**_object(h, []), "usage": _usage(choices)}))
    stream.push("[DONE]")
    stream.finish()
