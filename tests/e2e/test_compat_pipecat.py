"""Pipecat 1.14 (``OpenAIRealtimeLLMService``), unmodified, in a real Pipecat pipeline against a real server.

The pipeline is what a Pipecat app builds, less the transport: user aggregator → the realtime service →
assistant aggregator, run by Pipecat's own ``PipelineWorker``. Frames go in with ``queue_frame`` (what a
transport does), and an observer sees every frame the service pushes. Voice goes in as
``InputAudioRawFrame``s of espeak-ng speech, which is all an input transport hands the service.
Pipecat asks for its default model id, which the server serves as an alias (model.aliases).
Skipped only where the library is not installed locally; in CI (CI set) a missing library fails.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest

from processors.asr import word_error_rate
from processors.audio import float32_to_pcm16
from testkit.espeak import silence, speak
from testkit.fake_backend import WORDS, FakeBackend
from tests.conftest import requires_espeak

HAVE_PIPECAT = importlib.util.find_spec("pipecat") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_PIPECAT and not os.environ.get("CI"),
    reason="pipecat-ai not installed (pip install -e '.[test]')",
)

MODEL_ID = "gpt-realtime-2.1"  # Pipecat 1.14's default
CONF = {"audio.enabled": False, "model.aliases": [MODEL_ID]}
SENTENCE = "Please open the kitchen window."


def _pipecat() -> Any:
    """Pipecat's modules; its audio utils import ``audioop``, deprecated in 3.11 (pytest makes warnings errors)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
        import pipecat.frames.frames as frames
        from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
        from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
        from pipecat.observers.base_observer import BaseObserver
        from pipecat.pipeline.pipeline import Pipeline
        from pipecat.pipeline.worker import PipelineWorker
        from pipecat.processors.aggregators.llm_context import LLMContext
        from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
        from pipecat.services.openai.realtime import events
        from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
        from pipecat.workers.runner import WorkerRunner
    return type(
        "pipecat",
        (),
        dict(
            frames=frames,
            FunctionSchema=FunctionSchema,
            ToolsSchema=ToolsSchema,
            BaseObserver=BaseObserver,
            Pipeline=Pipeline,
            PipelineWorker=PipelineWorker,
            LLMContext=LLMContext,
            LLMContextAggregatorPair=LLMContextAggregatorPair,
            events=events,
            Service=OpenAIRealtimeLLMService,
            WorkerRunner=WorkerRunner,
        ),
    )


class App:
    """A running Pipecat pipeline around the realtime service; ``pushed`` gets each frame the service pushes."""

    def __init__(self, pc: Any, worker: Any, llm: Any, context: Any, pushed: asyncio.Queue[Any]):
        self.pc, self.worker, self.llm, self.context, self.pushed = pc, worker, llm, context, pushed

    async def queue(self, frame: Any) -> None:
        await self.worker.queue_frame(frame)

    async def until(self, kind: type, within: float = 20) -> Any:
        """The next frame of type ``kind`` the service pushes; fails on an ErrorFrame or after ``within`` s."""
        async with asyncio.timeout(within):
            while True:
                frame = await self.pushed.get()
                if isinstance(frame, self.pc.frames.ErrorFrame):
                    raise AssertionError(f"Pipecat reported an error: {frame.error}")
                if isinstance(frame, kind):
                    return frame

    async def reply(self, within: float = 20) -> str:
        """The text of the next reply: LLMTextFrames up to the LLMFullResponseEndFrame that closes them."""
        text = ""
        async with asyncio.timeout(within):
            while True:
                frame = await self.until(self.pc.frames.Frame)
                if isinstance(frame, self.pc.frames.LLMTextFrame):
                    text += frame.text
                elif isinstance(frame, self.pc.frames.LLMFullResponseEndFrame) and text:
                    return text


@asynccontextmanager
async def pipecat_app(
    addr: str, *, messages: list[dict[str, Any]] | None = None, tools: Any = None, **session: Any
) -> AsyncIterator[App]:
    pc = _pipecat()
    llm = pc.Service(
        api_key="unused",
        base_url=f"ws://{addr}/v1/realtime",
        settings=pc.Service.Settings(
            session_properties=pc.events.SessionProperties(output_modalities=["text"], **session)
        ),
    )
    context = pc.LLMContext(messages or [], tools) if tools is not None else pc.LLMContext(messages or [])
    async with running(pc, llm, context) as app:
        yield app


@asynccontextmanager
async def running(pc: Any, llm: Any, context: Any) -> AsyncIterator[App]:
    """``llm`` in the usual aggregator pipeline over ``context``, running, with the frames it pushes observed."""
    pushed: asyncio.Queue[Any] = asyncio.Queue()

    class Pushed(pc.BaseObserver):  # type: ignore[misc, name-defined]
        async def on_push_frame(self, data: Any) -> None:
            if data.source is llm:
                pushed.put_nowait(data.frame)

    pair = pc.LLMContextAggregatorPair(context)
    worker = pc.PipelineWorker(
        pc.Pipeline([pair.user(), llm, pair.assistant()]), cancel_on_idle_timeout=False, observers=[Pushed()]
    )
    runner = pc.WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        yield App(pc, worker, llm, context, pushed)
        await worker.queue_frame(pc.frames.EndFrame())
        await asyncio.wait_for(asyncio.shield(run), 15)
    finally:
        if not run.done():
            await worker.cancel()
            await asyncio.wait_for(run, 15)


async def poll(cond: Any, within: float = 10) -> None:
    """Until ``cond()`` holds (state of plain objects or of the server thread: no event to wait on)."""
    async with asyncio.timeout(within):
        while not cond():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def _fake_words(text: str) -> bool:
    return bool(text.strip()) and set(text.replace(".", " ").split()) <= set(WORDS)


async def test_text_turn_reply_reaches_the_pipeline(server_factory):
    """Connect (session.update with Pipecat's defaults, its model id), run the context, get the reply as text."""
    with server_factory(FakeBackend(answer_tokens=20, step_s=0.001), **CONF) as addr:
        async with pipecat_app(addr, messages=[{"role": "user", "content": "hello there"}]) as app:
            await app.queue(app.pc.frames.LLMRunFrame())
            text = await app.reply()
            # the assistant aggregator wrote the reply into Pipecat's context
            await poll(lambda: any(m.get("role") == "assistant" for m in app.context.get_messages()))
            said = [m for m in app.context.get_messages() if m.get("role") == "assistant"]
    assert _fake_words(text), text  # the fake model's words: this server's reply, not anything else
    assert said[-1]["content"].strip() == text.strip()


async def test_interruption_cancels_the_running_reply(server_factory):
    """Pipecat's interruption (locally driven turns: turn_detection=False) sends response.cancel."""
    pc = _pipecat()
    no_server_vad = pc.events.AudioConfiguration(input=pc.events.AudioInput(turn_detection=False))
    fake = FakeBackend(answer_tokens=100_000, step_s=0.002)  # would run for minutes
    with server_factory(fake, **{**CONF, "session.max_output_tokens": 100_000}) as addr:
        async with pipecat_app(addr, messages=[{"role": "user", "content": "go"}], audio=no_server_vad) as app:
            await app.queue(pc.frames.LLMRunFrame())
            await app.until(pc.frames.LLMTextFrame)  # it is generating
            await app.queue(pc.frames.InterruptionFrame())
            await app.until(pc.frames.LLMFullResponseEndFrame, within=10)
            # response.done (cancelled) came, and the engine job was cancelled, not left running
            await poll(lambda: addr.call(lambda: addr.services.registry.busy()) == 0)


@requires_espeak
async def test_voice_turn_through_input_audio_frames(tiny_backend, server_factory):
    """InputAudioRawFrames (16 kHz speech, resampled by Pipecat to 24 kHz) → server VAD, Whisper, a reply."""
    pc = _pipecat()
    with server_factory(tiny_backend, **{"model.aliases": [MODEL_ID], "session.max_output_tokens": 8}) as addr:
        async with pipecat_app(addr) as app:
            pcm = float32_to_pcm16(np.concatenate([silence(0.5), speak(SENTENCE), silence(1.2)]))
            step = 16_000 * 2 // 50  # 20 ms frames, as a transport sends them
            for i in range(0, len(pcm), step):
                frame = pc.frames.InputAudioRawFrame(audio=pcm[i : i + step], sample_rate=16_000, num_channels=1)
                await app.queue(frame)
            heard = await app.until(pc.frames.TranscriptionFrame, within=60)
            await app.until(pc.frames.LLMFullResponseEndFrame, within=60)  # the server answered the turn itself
    assert word_error_rate(SENTENCE, heard.text) <= 0.25, heard.text


CALL = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
ANSWERED = "It is sunny in Paris."


def tool_then_text(tiny: Any) -> Any:
    """A scripted model: its own tool-call markup to a user turn, a sentence once a tool response is in the prompt.

    Deterministic on purpose: in ``auto`` whether a model calls is its judgment; what this test checks is the
    protocol between Pipecat and the server (call events → Pipecat's function → function_call_output → reply).
    """
    from tests.http.test_tools import ScriptedBackend

    class ToolThenText(ScriptedBackend):  # type: ignore[misc]
        def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
            answered = any("<tool_response>" in m["content"] for m in messages)
            answer = ANSWERED if answered else CALL
            self.script = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [min(self.eos_ids)]
            return list(super().chat_tokens(messages, add_generation_prompt))

    return ToolThenText(tiny, CALL)


async def test_function_call_round_trip(tiny_backend, server_factory):
    """The model calls a tool; Pipecat runs the registered function, sends its result, and gets the reply."""
    pc = _pipecat()
    weather = pc.FunctionSchema(
        name="get_weather",
        description="Current weather of a city",
        properties={"city": {"type": "string"}},
        required=["city"],
    )
    calls: list[dict[str, Any]] = []

    async def get_weather(params: Any) -> None:
        calls.append(dict(params.arguments))
        await params.result_callback({"temp_c": 21})

    model = tool_then_text(tiny_backend)
    with server_factory(model, **{**CONF, "session.instructions": None}) as addr:
        tools = pc.ToolsSchema(standard_tools=[weather])
        async with pipecat_app(addr, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools) as app:
            app.llm.register_function("get_weather", get_weather)
            await app.queue(pc.frames.LLMRunFrame())
            first = await app.reply()  # the text around the call; the markup never reaches Pipecat
            second = await app.reply()  # the response Pipecat asked for with the function's result
    assert calls == [{"city": "Paris"}]
    assert first.strip() == "Let me check." and "tool_call" not in first
    assert second.strip() == ANSWERED
    assert '<tool_response>\n{"temp_c": 21}\n</tool_response>' in model.prompts[-1]  # the result reached the model
