"""The Python OpenAI Agents SDK (``openai-agents``, ``agents.realtime``) drives /v1/realtime unmodified.

``RealtimeRunner`` with ``model_config={"url": …}`` and the SDK's own defaults otherwise (its session.update
asks for ``gpt-realtime-2.1``, served here as a ``model.aliases`` entry). The SDK validates every server
event against the ``openai`` types and drops one that fails, so each test also checks that no event was
dropped (the SDK reports a dropped event as an ``error`` session event).

Text turns run on the tiny random-init model; tool, guardrail and handoff turns on a scripted model that
writes the model's own markup, so they test the protocol, not a 135M model's judgment.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.conftest import requires_espeak
from tests.http.test_tools import ScriptedBackend

if TYPE_CHECKING:
    from agents.realtime import RealtimeAgent

SDK_MODEL = "gpt-realtime-2.1"  # the SDK's default model (agents.realtime.openai_realtime.DEFAULT_REALTIME_MODEL)
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


class DialogueBackend(ScriptedBackend):
    """A scripted model whose answer depends on the prompt: ``reply(prompt text) -> answer``."""

    def __init__(self, tiny: Any, reply: Any, step_s: float = 0.0):
        super().__init__(tiny, "", step_s)
        self.reply = reply

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        ids = super().chat_tokens(messages, add_generation_prompt)
        answer = self.reply(self.prompts[-1])
        self.script = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [min(self.eos_ids)]
        return ids


def weather_dialogue(prompt: str) -> str:
    if "<tool_response>" in prompt:
        return "It is sunny and 21 degrees in Paris."
    return CALL + "\n" * 12  # whitespace after the call: the response is still running when the output comes


def _config(**extra: Any) -> dict[str, Any]:
    # the text-only cases: the SDK asks for audio, and a server with no voice answers in text and says so
    # (the spoken ones are tests/e2e/test_compat_agents_audio.py)
    return {"audio.enabled": False, "audio.output.enabled": False, "model.aliases": [SDK_MODEL], **extra}


def _agent(**kw: Any) -> RealtimeAgent:
    """Imported here, not at the top: the SDK takes seconds to import, and collecting this module
    for the inner loop (which deselects it) should not pay for that."""
    from agents.realtime import RealtimeAgent

    return RealtimeAgent(**kw)


async def _run(addr: str, agent: RealtimeAgent, **run_config: Any) -> Any:
    from agents.realtime import RealtimeRunner

    runner = RealtimeRunner(agent, config=run_config or None)  # type: ignore[arg-type]
    return await runner.run(model_config={"url": f"ws://{addr}/v1/realtime?model={SDK_MODEL}", "api_key": "x"})


async def _events_until(session: Any, done: Any, limit_s: float = 60) -> list[Any]:
    """Session events until ``done(event, events)`` is true; SDK ``error`` events fail the test."""
    events: list[Any] = []
    try:
        async with asyncio.timeout(limit_s):
            async for ev in session:
                assert ev.type != "error", ev.error
                events.append(ev)
                if done(ev, events):
                    return events
    except TimeoutError:
        raise AssertionError(f"timed out; server events seen: {[e['type'] for e in _raw(events)]}") from None
    raise AssertionError(f"the session ended early: {[e.type for e in events]}")


def _raw(events: list[Any]) -> list[dict[str, Any]]:
    """The server events the SDK received, in order (raw_model_event / raw_server_event)."""
    return [
        e.data.data
        for e in events
        if e.type == "raw_model_event" and e.data.type == "raw_server_event" and isinstance(e.data.data, dict)
    ]


def _assistant_texts(session: Any) -> list[str]:
    return [
        "".join(getattr(c, "text", None) or getattr(c, "transcript", None) or "" for c in item.content)
        for item in session._history  # the SDK keeps no public accessor in 0.24
        if item.type == "message" and item.role == "assistant"
    ]


async def test_a_text_turn(tiny_backend, server_factory):
    with server_factory(tiny_backend, **_config()) as addr:
        session = await _run(addr, _agent(name="Assistant", instructions="Be brief."))
        async with session:
            await session.send_message("Hello")
            events = await _events_until(session, lambda ev, _: ev.type == "agent_end")
        raw = _raw(events)
        deltas = "".join(e["delta"] for e in raw if e["type"] == "response.output_text.delta")
        assert deltas and _assistant_texts(session) == [deltas]  # the reply is in the SDK's history, whole
        assert [e["type"] for e in raw].count("response.done") == 1


async def test_a_function_tool_gets_its_output_at_once_and_the_answer_uses_it(tiny_backend, server_factory):
    from agents import function_tool

    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        calls.append(city)
        return f"sunny, 21 degrees in {city}"

    model = DialogueBackend(tiny_backend, weather_dialogue, step_s=0.03)
    with server_factory(model, **_config(**{"speculative.drafter": "none"})) as addr:
        session = await _run(addr, _agent(name="Assistant", instructions="Help.", tools=[get_weather]))
        async with session:
            await session.send_message("What is the weather in Paris?")

            def answered(ev: Any, events: list[Any]) -> bool:
                return ev.type == "agent_end" and any("sunny and 21" in t for t in _assistant_texts(session))

            events = await _events_until(session, answered)
        assert calls == ["Paris"]  # parsed arguments, one call
        types = [e.type for e in events]
        assert types.index("tool_start") < types.index("tool_end")
        raw = _raw(events)
        order = [(e["type"], e.get("item", {}).get("type")) for e in raw]
        output_added = order.index(("conversation.item.added", "function_call_output"))
        first_done = order.index(("response.done", None))
        assert output_added < first_done  # sent when the call was done, accepted before response.done
        assert any("sunny, 21 degrees in Paris" in p for p in model.prompts)  # the model saw the output


async def test_interrupt_cancels_a_text_response(tiny_backend, server_factory):
    long = DialogueBackend(tiny_backend, lambda _: "word " * 400, step_s=0.02)
    with server_factory(long, **_config(**{"speculative.drafter": "none"})) as addr:
        session = await _run(addr, _agent(name="Assistant", instructions="Talk."))
        async with session:
            await session.send_message("Tell me everything")
            await _events_until(
                session, lambda ev, _: ev.type == "raw_model_event" and ev.data.type == "output_text_delta"
            )
            await session.interrupt()
            events = await _events_until(session, lambda ev, _: ev.type == "agent_end")
        done = next(e for e in _raw(events) if e["type"] == "response.done")["response"]
        assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"


async def test_an_output_guardrail_trips(tiny_backend, server_factory):
    from agents import GuardrailFunctionOutput, OutputGuardrail

    def no_secrets(_ctx: Any, _agent: Any, text: str) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="secret" in text)

    model = DialogueBackend(tiny_backend, lambda _: "The secret code is 1234. " * 8, step_s=0.01)
    with server_factory(model, **_config(**{"speculative.drafter": "none"})) as addr:
        agent = _agent(
            name="Assistant", instructions="Help.", output_guardrails=[OutputGuardrail(guardrail_function=no_secrets)]
        )
        session = await _run(addr, agent, guardrails_settings={"debounce_text_length": 20})
        async with session:
            await session.send_message("Tell me the code")
            events = await _events_until(session, lambda ev, _: ev.type == "guardrail_tripped")
        assert events[-1].message  # what was being said when it tripped


async def test_a_handoff_switches_agents(tiny_backend, server_factory):
    def dialogue(prompt: str) -> str:
        if "<tool_response>" in prompt:
            return "Billing here, how can I help?"
        return '<tool_call>{"name": "transfer_to_billing", "arguments": {}}</tool_call>'

    billing = _agent(name="Billing", instructions="You handle billing.")
    triage = _agent(name="Triage", instructions="Route the user.", handoffs=[billing])
    model = DialogueBackend(tiny_backend, dialogue)
    with server_factory(model, **_config()) as addr:
        session = await _run(addr, triage)
        async with session:
            await session.send_message("I have a question about my bill")

            def billed(ev: Any, events: list[Any]) -> bool:
                handed = any(e.type == "handoff" for e in events)
                return handed and ev.type == "agent_end" and ev.agent.name == "Billing"

            events = await _events_until(session, billed)
        handoff = next(e for e in events if e.type == "handoff")
        assert (handoff.from_agent.name, handoff.to_agent.name) == ("Triage", "Billing")
        assert any("You handle billing." in p for p in model.prompts)  # the session took the new instructions
        assert "Billing here" in _assistant_texts(session)[-1]


@requires_espeak
async def test_a_voice_turn_has_its_transcript_in_the_history(tiny_backend, server_factory):
    from processors.asr import word_error_rate
    from testkit.espeak import silence, speak
    from tests.media.test_realtime_voice import pcm24

    sentence = "Please open the kitchen window."
    with server_factory(tiny_backend, **{"model.aliases": [SDK_MODEL]}) as addr:
        session = await _run(addr, _agent(name="Assistant", instructions="Be brief."))
        async with session:
            pcm = pcm24(np.concatenate([silence(0.4), speak(sentence), silence(2.5)]))
            step = 24_000 * 2 // 10  # 100 ms
            for i in range(0, len(pcm), step):
                await session.send_audio(pcm[i : i + step])

            # (the SDK sends conversation.item.retrieve after a transcript only while it plays audio out)
            events = await _events_until(session, lambda ev, _: ev.type == "agent_end", limit_s=120)
        completed = next(e for e in _raw(events) if e["type"].endswith("input_audio_transcription.completed"))
        assert completed["usage"]["type"] == "duration"
        users = [i for i in session._history if i.type == "message" and i.role == "user"]
        transcript = users[0].content[0].transcript
        assert transcript == completed["transcript"] and word_error_rate(sentence, transcript) <= 0.25, transcript
