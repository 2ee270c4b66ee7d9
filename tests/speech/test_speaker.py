"""The session's synthesis queue (gateway.voice.speaker) with a fake voice service: order, cancel,
and the prepared reply's first chunk synthesized before the turn commits."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

from gateway.realtime import protocol as p
from gateway.realtime.session import Session, SessionDefaults
from gateway.realtime.speech_out import prefetch_text
from gateway.voice.speaker import Speaker
from gateway.voice.speech_actions import Speak, SpeechResult, SpeechSettings
from gateway.voice.synthesis import Synthesis

S = SpeechSettings()


class FakeService:
    """Counts syntheses; each takes ``delay`` seconds (in the event loop: no threads needed here)."""

    def __init__(self, delay: float = 0.01):
        self.delay = delay
        self.calls: list[str] = []

    async def run(
        self, text: str, settings: SpeechSettings, rank: int = 0, owner: str = "", bulk: bool = False
    ) -> Synthesis:
        self.calls.append(text)
        await asyncio.sleep(self.delay)
        return Synthesis(text.encode(), (1.0,) * len(text.split()))


class Inbox:
    """Deliveries of the speaker, awaited with a timeout (never a sleep)."""

    def __init__(self) -> None:
        self.q: asyncio.Queue[SpeechResult] = asyncio.Queue()

    def __call__(self, r: SpeechResult) -> None:
        self.q.put_nowait(r)

    async def next(self) -> SpeechResult:
        return await asyncio.wait_for(self.q.get(), 5)


async def test_chunks_come_back_in_order_and_a_cancel_drops_the_rest() -> None:
    svc, inbox = FakeService(), Inbox()
    sp = Speaker(svc, inbox)  # type: ignore[arg-type]
    for i, t in enumerate(["one", "two", "three"]):
        sp.submit(Speak("r1", i, t, S))
    sp.submit(Speak("r2", 0, "other", S))
    first = await inbox.next()
    sp.cancel("r1")  # "two" may be synthesizing: its result is dropped; "three" never starts
    second = await inbox.next()
    assert (first.response_id, first.index) == ("r1", 0)
    assert second.response_id == "r2"
    assert "three" not in svc.calls and inbox.q.empty()
    sp.close()


async def test_a_prefetched_chunk_is_not_synthesized_twice_and_a_dropped_one_never_goes_out() -> None:
    svc, inbox = FakeService(delay=0.05), Inbox()
    sp = Speaker(svc, inbox)  # type: ignore[arg-type]
    sp.prefetch(("hello there", S))
    sp.submit(Speak("r1", 0, "hello there", S))
    got = await inbox.next()
    assert svc.calls == ["hello there"] and got.audio == b"hello there"
    sp.prefetch(("dropped", S))
    pending = list(sp._ready.values())
    sp.forget()  # the prepared reply was discarded
    assert pending and all(f.cancelling() for f in pending) and not sp._ready  # type: ignore[attr-defined]
    assert inbox.q.empty()
    sp.close()


def test_prefetch_text_is_what_the_adopted_response_will_speak() -> None:
    counter = itertools.count()
    s = Session(
        SessionDefaults(model="m", speech=S, voices=("joe",), output_modalities=("audio",)),
        lambda e: {**e, "seq": next(counter)},
    )
    first = "It costs $5, **really**. "
    action = SimpleNamespace(output_modalities=["audio"])
    events = [SimpleNamespace(chunks=[SimpleNamespace(text=first)])]
    said = prefetch_text(s, action, events)
    s.handle(
        p.parse(
            '{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}}'
        ),
    )
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    speak: Any = next(a for a in s.on_chunk(rid, first).actions if isinstance(a, Speak))
    assert said == (speak.text, speak.settings) == ("It costs five dollars, really.", S)
    assert prefetch_text(s, SimpleNamespace(output_modalities=["text"]), events) is None
