"""Continuous batching through the real server: concurrent Realtime sessions over WebSocket share
each model step and keep their alone text; an over-long prompt is refused without disturbing the
others; past max_running + max_waiting a session gets server_busy at once."""

from __future__ import annotations

import asyncio

from models.decode import DecodeJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from testkit.fake_backend import FakeBackend
from tests.wsclient import RealtimeClient

QUESTIONS = [f"tell me about thing {i} and {i * 3}" for i in range(6)]


def alone_text(fake: FakeBackend, text: str, n: int) -> str:
    ref = FakeBackend(answer_tokens=fake.answer_tokens)
    job = DecodeJob(
        ref,
        ref.new_state(),
        ref.chat_tokens([{"role": "user", "content": text}]),
        SamplingParams(max_tokens=n),
        SchedulerConfig(lookahead_tokens=0),
    )
    out = []
    while not job.finished:
        out += [c.text for c in job.step().chunks]
    return "".join(out)


async def session(addr: str, text: str, n: int) -> tuple[RealtimeClient, dict]:
    c = await RealtimeClient.connect(addr, query="")
    await c.until("session.created", timeout=30)
    done = await c.ask(text, max_output_tokens=n, temperature=0.0)
    return c, done


async def test_concurrent_sessions_share_model_steps_and_keep_their_alone_text(server_factory):
    fake = FakeBackend(answer_tokens=80, step_s=0.004)
    with server_factory(fake, **{"audio.enabled": False, "speculative.drafter": "none"}) as addr:
        results = await asyncio.wait_for(asyncio.gather(*(session(addr, q, 60) for q in QUESTIONS)), 120)
    for q, (c, done) in zip(QUESTIONS, results, strict=True):
        assert done["response"]["status"] == "incomplete"  # max_output_tokens reached
        assert c.text_of(done["response"]["id"]) == alone_text(fake, q, 60)
        await c.close()
    assert max(len(b) for b in fake.batches) >= 4  # sessions really shared steps


async def test_an_over_long_prompt_is_refused_and_the_neighbour_streams_on(server_factory):
    fake = FakeBackend(answer_tokens=150, step_s=0.004)
    fake.max_context = 300
    with server_factory(fake, **{"audio.enabled": False}) as addr:
        good = await RealtimeClient.connect(addr, query="")
        await good.until("session.created", timeout=30)
        await good.say("keep streaming")
        await good.send({"type": "response.create", "response": {"max_output_tokens": 120}})
        await good.until("response.output_text.delta", timeout=30)
        bad = await RealtimeClient.connect(addr, query="")
        await bad.until("session.created", timeout=30)
        await bad.say("word " * 400)
        await bad.send({"type": "response.create"})
        err = await bad.until("error", timeout=30)
        assert err["error"]["code"] == "context_length_exceeded"
        done = await good.until("response.done", timeout=60)
        assert done["response"]["status"] == "incomplete"
        assert good.text_of(done["response"]["id"]) == alone_text(fake, "keep streaming", 120)
        await good.close()
        await bad.close()


async def test_past_max_running_plus_max_waiting_a_session_is_busy_at_once(server_factory):
    fake = FakeBackend(answer_tokens=400, step_s=0.01)
    conf = {"audio.enabled": False, "engine.max_running": 2, "engine.max_waiting": 1}
    with server_factory(fake, **conf) as addr:
        clients = []
        for i in range(3):  # two running, one waiting
            c = await RealtimeClient.connect(addr, query="")
            await c.until("session.created", timeout=30)
            await c.say(f"long answer {i}")
            await c.send({"type": "response.create", "response": {"max_output_tokens": 300}})
            clients.append(c)
        await clients[1].until("response.output_text.delta", timeout=30)
        late = await RealtimeClient.connect(addr, query="")
        await late.until("session.created", timeout=30)
        await late.say("me too")
        await late.send({"type": "response.create"})
        err = await late.until("error", timeout=10)
        assert err["error"]["code"] == "server_busy"
        assert not any(e["type"] == "response.created" for e in late.events)
        for c in [*clients, late]:
            await c.close()
