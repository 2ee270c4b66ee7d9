"""A long text session on the embedded model never dies of length: truncation drops the oldest turns from the
model's context, every prompt fits, and per-turn TTFT stays flat (the cache is rebuilt every few turns).

The session sets ``token_limits.post_instructions: 1000`` with ``retention_ratio: 0.5`` so that cuts start
after ~9 turns of a ~110-token paragraph each: on a busy 2-core machine a turn takes several seconds, and
filling the whole 4096-token context (~34 turns, then a cut every ~8) ran past CI's patience.
``STREAM_OMNI_LONG_TURNS`` sets the number of turns (default 24)."""

from __future__ import annotations

import os
import statistics

import pytest

from tests.wsclient import RealtimeClient

pytestmark = pytest.mark.real_model

TURNS = int(os.environ.get("STREAM_OMNI_LONG_TURNS", "24"))
LIMIT = 1000  # token_limits.post_instructions
PARAGRAPH = (
    "Here is some background about my garden, which I describe at length so that the conversation grows: "
    "there are tomatoes along the south wall, beans climbing the fence, a row of lettuce that the snails love, "
    "two apple trees that my grandfather planted, a small pond with frogs, and a shed full of old tools. "
)


async def test_a_long_text_session_truncates_and_keeps_ttft_flat(real_backend, server_factory):
    cfg = {"audio.enabled": False, "speculative.drafter": "none", "session.instructions": "Answer briefly."}
    truncation = {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": LIMIT}}
    with server_factory(real_backend, **cfg) as addr:
        c = await RealtimeClient.connect(addr, "")
        await c.until("session.created")
        await c.send({"type": "session.update", "session": {"truncation": truncation}})
        await c.until("session.updated")
        ttft, prompt = [], []
        for n in range(TURNS):
            question = f"{PARAGRAPH}Turn {n}: name a fruit and a colour."
            done = (await c.ask(question, max_output_tokens=24))["response"]
            assert done["status"] in ("completed", "incomplete"), done
            ttft.append(done["metrics"]["ttft_ms"])
            prompt.append(done["usage"]["input_tokens"])
            cached = done["usage"]["input_token_details"]["cached_tokens"]
            print(f"turn {n}: prompt {prompt[-1]} cached {cached} ttft {ttft[-1]:.0f} ms", flush=True)
            c.events.clear()  # a long session: keep the client's memory flat too
        await c.close()
    assert not [e for e in c.events if e["type"] == "error"]
    assert max(prompt) <= LIMIT + 60  # the instructions and the template's tokens on top of the limit
    cuts = sum(b < a for a, b in zip(prompt, prompt[1:], strict=False))
    assert cuts >= 2 and cuts <= TURNS // 3, prompt  # turns were dropped, but not on every turn
    early, late = statistics.median(ttft[2:8]), statistics.median(ttft[-8:])
    print(f"turns {TURNS}, cuts {cuts}, max prompt {max(prompt)}, TTFT turns 2-7 {early:.0f} ms, last 8 {late:.0f}")
    assert late <= 1.5 * early + 100, (early, late)  # flat (100 ms of slack for a busy machine's noise)
