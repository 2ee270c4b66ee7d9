"""Per-frame work stays cheap: the vectorized depth scan agrees with a character walk on every valid
JSON text, big frames parse off the event loop in arrival order, and the inbound bytes/s bound."""

from __future__ import annotations

import asyncio
import json

import websockets
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.realtime import protocol as p
from gateway.realtime.ratelimit import TokenBucket


def walk_depth(raw: str) -> int:
    """The reference: the per-character walk the scan replaced."""
    depth = best = 0
    in_str = esc = False
    for ch in raw:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


TRICKY = st.text(alphabet='[]{}"\\aé\U0001f600,:', max_size=12)  # brackets, quotes and escapes inside strings
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(TRICKY, kids, max_size=4),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(JSON, st.booleans())
def test_the_depth_scan_agrees_with_a_character_walk_on_valid_json(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only)
    assert p._depth(raw) == walk_depth(raw)


def test_depth_of_big_and_hostile_frames():
    assert p._depth('{"a":"' + "A" * 5_000_000 + '"}') == 1  # a big string is one pass, no brackets counted
    assert p._depth('{"a":"' + '\\"[' * 100_000 + '"}') == 1  # escaped quotes keep the string open
    assert p._depth("[" * 1_000_000 + "]" * 1_000_000) == 1_000_000
    assert p._depth('"\\\\"[[') == 2  # an even run of backslashes escapes nothing


async def test_big_frames_parse_off_the_loop_and_keep_their_order(server_factory):
    """A frame ≥ parse_off_loop_bytes is parsed on a worker thread; the small frame sent right behind
    it must still be answered after it."""
    from testkit.fake_backend import FakeBackend

    big = json.dumps({"type": "x.unknown", "event_id": "big", "pad": "A" * 3_000_000})
    small = json.dumps({"type": "x.unknown", "event_id": "small"})
    with server_factory(FakeBackend(), **{"audio.enabled": False}) as addr:
        async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.created"
            await ws.send(big)
            await ws.send(small)
            errs = [json.loads(await asyncio.wait_for(ws.recv(), 30)) for _ in range(2)]
    assert [(e["error"]["code"], e["error"]["event_id"]) for e in errs] == [
        ("invalid_event_type", "big"),
        ("invalid_event_type", "small"),
    ]


def test_the_bytes_bucket_lets_one_big_frame_through_then_makes_the_socket_wait():
    b = TokenBucket(rate_per_s=1000, burst=4000)
    assert b.owe(0.0, 4000) == 0.0  # a burst of one max-size frame passes at once
    assert b.owe(0.0, 2000) == 2.0  # then 2000 bytes over: two seconds before the next read
    assert b.owe(3.0, 0) == 0.0  # three seconds later the debt is paid
    assert abs(b.tokens - 1000) < 1e-9
