"""Serving one chat completion: the request → a decode job on the engine → a JSON body or numbered SSE frames."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from models.decode import ContextOverflow, Done, JobEvents, TokenLogprob
from models.engine_client import Handle
from models.toolcalls import TOOL_TAGS, ParsedCall
from models.toolplan import ToolPlan

from ..core.filters import CONTENT_FILTER, FILTER_FAILED, ResponseFilter
from ..core.grammars import CompileBusy, off_loop
from ..core.services import Services
from ..core.tokenize import prompt_tokens
from ..tools import chat as mcp_chat
from . import bodies, chat_audio, tools
from .chat_parts import chat_messages
from .error_bodies import ApiError, busy, check_model, error_body
from .jobs import (
    FAILED,
    FAILED_STATUS,
    HTTP_GRACE_S,
    Job,
    canceller,
    disconnected,
    error_code,
    finished,
    submit,
    traced,
)
from .schemas import ChatRequest, ToolDef, parse, read_body
from .sse import CompletionStore, CompletionStream, SseResponse, dumps

log = logging.getLogger("stream_omni.http")

# ---------------------------------------------------------------------- POST /v1/chat/completions


async def create(svc: Services, store: CompletionStore, request: Request, owner: str) -> Response:
    """``POST /v1/chat/completions``; ``owner``: who may resume its stream (a key digest)."""
    traced(svc, request)
    req = parse(await read_body(request, svc.config.limits.max_http_body_bytes), ChatRequest)
    check_model(svc, req.model)
    if not svc.engine_has_room():
        raise busy()
    tools.check_budget(req)  # before any compilation, and cheap
    functions = {t.function.name for t in req.tools or [] if isinstance(t, ToolDef)}
    mcp = await mcp_chat.open_for(svc, req.tools, req.stream, functions)  # configured MCP servers, listed
    try:
        try:
            extra = mcp.tools if mcp else None
            plan = await off_loop(tools.plan, req, extra) if req.tools or req.response_format else tools.plan(req)
            speech = chat_audio.plan(svc, req)  # modalities audio: the answer is spoken too
            turns = await chat_messages(svc, req.messages, owner)
            messages = tools.messages(turns, plan)
            constraint = await off_loop(tools.constraint, svc.backend, plan) if plan.grammar else None
        except CompileBusy:
            raise busy("too many schemas are being compiled; retry shortly") from None
        prompt = await prompt_tokens(svc, messages)  # off the loop
        job = chat_job(svc, req, messages, prompt, constraint)
        header = bodies.Header(f"chatcmpl-{secrets.token_hex(16)}", int(time.time()), svc.backend.name)
        if req.stream:
            return _start_stream(svc, store, owner, req, job, header, plan, speech)
        while mcp is not None:  # the gateway runs the MCP calls of each answer, then the model goes on
            response, text, calls = await _complete(svc, request, job, header, plan, speech)
            ours = [c for c in calls if c.name in mcp.routes]
            if not ours or len(ours) < len(calls):  # no MCP call, or the client's own functions to call too
                return response
            turns += await mcp.run(text, ours)
            plan = ToolPlan([] if mcp.spent else plan.tools, plan.known)  # forced once
            messages = tools.messages(turns, plan)
            prompt = await prompt_tokens(svc, messages)
            job = chat_job(svc, req, messages, prompt)
        return (await _complete(svc, request, job, header, plan, speech))[0]
    finally:
        if mcp is not None:
            await mcp.close()


def chat_job(
    svc: Services,
    req: ChatRequest,
    messages: list[dict[str, str]],
    prompt: list[int] | None = None,
    constraint: Any = None,
) -> Job:
    if req.logprobs and not svc.engine.tokenizes:
        raise ApiError(400, "unsupported_value", "logprobs need a local model (not backend: openai)", "logprobs")
    try:
        return svc.decode_job(
            svc.backend.new_state(),
            messages,
            svc.sampling(req, req.token_cap(), req.report_logprobs()),
            svc.scheduler_config(
                req.scheduler,
                spoken=bool(req.modalities and "audio" in req.modalities),
                stop=req.stop_sequences(),
                tool_intercept=TOOL_TAGS,  # the model's tool-call markup never reaches the text
            ),
            prompt,
            constraint,
        )
    except ContextOverflow as exc:
        raise ApiError(400, "context_length_exceeded", str(exc), "messages") from None
    except ValueError as exc:  # scheduler/sampling values the pydantic model could not rule out
        raise ApiError(400, "invalid_value", str(exc)) from None


# ---------------------------------------------------------------------- non-streamed


async def _complete(
    svc: Services, request: Request, job: Job, h: bodies.Header, plan: ToolPlan, speech: Any = None
) -> tuple[Response, str, list[ParsedCall]]:
    """The response, and the answer's text and calls (for the MCP rounds)."""
    handle, queue = submit(svc, job, h.id)
    flt = ResponseFilter(svc.filters, None, h.id)
    collect = asyncio.create_task(_collect(queue, flt, handle))
    gone = asyncio.create_task(disconnected(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not collect.done():  # the client left: stop decoding for nobody
            canceller(svc, handle)()
        text, call_bodies, done, lps = await collect
    finally:
        gone.cancel()
        handle.cancel()  # no-op when finished; never leaves a job running if this task is cancelled
    finished(svc, done, h.id, "chat")
    if flt.error is not None:
        return JSONResponse(error_body(500, FILTER_FAILED, flt.error), status_code=500), text, []
    if flt.stopped:
        return JSONResponse(bodies.completion(h, text, CONTENT_FILTER, done.metrics)), text, []
    if done.reason == "cancelled":
        return Response(status_code=499), text, []  # nobody is listening
    if done.reason not in bodies.FINISH:
        code = error_code(done)
        status = FAILED_STATUS.get(code, 500)
        headers = {"Retry-After": "1"} if code == "server_busy" else None
        return JSONResponse(error_body(status, code, FAILED[code]), status_code=status, headers=headers), text, []
    calls = tools.parse(call_bodies, plan)
    body = bodies.completion(h, text, "tool_calls" if calls else bodies.FINISH[done.reason], done.metrics)
    if job.params.top_logprobs is not None:
        body["choices"][0]["logprobs"] = bodies.logprobs(lps)
    if calls:
        message = body["choices"][0]["message"]
        message["tool_calls"] = tools.message_calls(calls)
        message["content"] = text.strip() or None
    elif speech is not None:
        await chat_audio.attach(svc, body, text, speech)
    return JSONResponse(body), text, calls


async def _collect(
    queue: asyncio.Queue[tuple[str, JobEvents]], flt: ResponseFilter, handle: Handle
) -> tuple[str, list[str], Done, list[TokenLogprob]]:
    """The job's text as the filters let it through (a filter's stop cancels the job), its tool-call
    bodies, its end, its tokens' logprobs (when it reports them)."""
    parts: list[str] = []
    call_bodies: list[str] = []
    lps: list[TokenLogprob] = []
    while True:
        _, events = await queue.get()
        call_bodies.extend(events.tool_calls)
        lps.extend(events.logprobs)
        for c in events.chunks:
            text = flt.check(c.text) if c.text else ""
            if text is None:
                handle.cancel()  # the done that follows ends the collection
            else:
                parts.append(text)
        if events.done is not None:
            return "".join(parts), call_bodies, events.done, lps


# ---------------------------------------------------------------------- streamed (SSE)


def _start_stream(
    svc: Services,
    store: CompletionStore,
    owner: str,
    req: ChatRequest,
    job: Job,
    h: bodies.Header,
    plan: ToolPlan,
    speech: Any = None,
) -> Response:
    stream = CompletionStream(h.id, owner, svc.config.server.grace_period_s or HTTP_GRACE_S)
    if not store.add(stream):
        raise busy("too many streamed completions in flight; retry shortly")
    try:
        handle, queue = submit(svc, job, h.id)
    except ApiError:
        store.drop(stream)
        raise
    stream.cancel = canceller(svc, handle)
    with_usage = bool(req.stream_options and req.stream_options.include_usage)
    stream.push(dumps(bodies.chunk(h, {"role": "assistant", "content": ""}, with_usage=with_usage)))
    stream.task = asyncio.create_task(_pump(svc, stream, queue, h, with_usage, plan, speech))
    return SseResponse(store, stream, -1)


async def _pump(
    svc: Services,
    stream: CompletionStream,
    queue: asyncio.Queue[tuple[str, JobEvents]],
    h: bodies.Header,
    with_usage: bool,
    plan: ToolPlan,
    speech: Any = None,
) -> None:
    """Engine events → numbered SSE frames, until the job is done."""
    flt = ResponseFilter(svc.filters, None, h.id)
    n_calls = 0
    lps: list[TokenLogprob] = []  # logprobs of tokens not yet sent: they go with the next content delta
    while True:
        _, events = await queue.get()
        lps.extend(events.logprobs)
        for c in events.chunks:
            if c.text:  # a final chunk may carry only the count of tokens that never became text
                text = flt.check(c.text)
                if text is None:
                    stream.cancel()  # a filter stopped it: the job's done (within a step) ends the stream
                elif text:
                    said = {"content": text} if speech is None else await chat_audio.delta(svc, text, speech)
                    frame = bodies.chunk(h, said, with_usage=with_usage)
                    if lps:
                        frame["choices"][0]["logprobs"], lps = bodies.logprobs(lps), []
                    stream.push(dumps(frame))
        for call in tools.parse(events.tool_calls, plan):
            for delta in tools.delta_calls(n_calls, call):
                stream.push(dumps(bodies.chunk(h, delta, with_usage=with_usage)))
            n_calls += 1
        done = events.done
        if done is None:
            continue
        finished(svc, done, h.id, "chat")
        if flt.error is not None:
            stream.push(dumps(error_body(500, FILTER_FAILED, flt.error)))
        elif flt.stopped:
            stream.push(dumps(bodies.chunk(h, {}, CONTENT_FILTER, with_usage=with_usage)))
            if with_usage:
                stream.push(dumps(bodies.usage_chunk(h, done.metrics)))
        elif done.reason in bodies.FINISH:
            finish = "tool_calls" if n_calls else bodies.FINISH[done.reason]
            frame = bodies.chunk(h, {}, finish, with_usage=with_usage)
            if lps:  # tokens that never became text (a held-back stop sequence, tool-call markup)
                frame["choices"][0]["logprobs"] = bodies.logprobs(lps)
            stream.push(dumps(frame))
            if with_usage:
                stream.push(dumps(bodies.usage_chunk(h, done.metrics)))
        elif done.reason == "cancelled":
            stream.push(dumps(error_body(500, "cancelled", "the completion was cancelled")))
        else:
            code = error_code(done)
            stream.push(dumps(error_body(FAILED_STATUS.get(code, 500), code, FAILED[code])))
        stream.push("[DONE]")
        stream.finish()
        return
