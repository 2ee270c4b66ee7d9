"""Per-frame work stays cheap: the vectorized depth scan agrees with a character walk on every valid
JSON text, big frames parse off the event loop (in a process) in arrival order and to the same result
as on it, the inbound bytes/s bound, and the WebSocket reader that copies big frames once."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
import websockets
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.protocol import OPEN, Protocol, Side

from gateway.core.ws_frames import BIG, ChunkedReader
from gateway.realtime import protocol as p
from gateway.realtime.bigframes import FrameParser, ParseLimits, parse_checked
from gateway.realtime.ratelimit import TokenBucket
from tests.fuzzing import examples


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


@settings(max_examples=examples(400), deadline=None)
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


# ---------------------------------------------------------------- parsed in a process (gateway.realtime.bigframes)

LIMITS = ParseLimits(max_depth=32, max_item_chars=1000, max_instructions_chars=1000)
FRAMES = [
    json.dumps({"type": "session.update", "event_id": "s", "session": {"instructions": "hi", "temperature": 0.5}}),
    json.dumps({"type": "session.update", "event_id": "long", "session": {"instructions": "x" * 1001}}),
    json.dumps({"type": "session.update", "event_id": "t", "session": {"temperature": 9}}),
    json.dumps(
        {
            "type": "conversation.item.create",
            "event_id": "i",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "é😀"}, {"type": "input_image", "image_url": "data:,x"}],
            },
        }
    ),
    json.dumps(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "y" * 1001}]},
        }
    ),
    json.dumps({"type": "input_audio_buffer.append", "event_id": "a", "audio": "QUJD" * 100_000}),
    json.dumps({"type": "response.create", "response": {"metadata": {"k": [1, {"v": None}]}}}),
    json.dumps({"type": "x.unknown", "event_id": "u"}),
    '{"type": "response.create", "event_id": "bad"',
    "[" * 40 + "]" * 40,
    '{"type": "response.cancel", "event_id": "\\"[[[\\\\"}',
]


def _same(ev):
    """What ``on_parsed`` acts on: the event's type and fields, or the error's code, message, event id, param."""
    if isinstance(ev, p.ProtocolError):
        return ("error", ev.code, ev.message, ev.event_id, ev.param)
    return (type(ev).__name__, ev.model_dump())


async def test_a_parse_process_gives_what_the_loop_would():
    parser = FrameParser(LIMITS)
    try:
        for raw in FRAMES:
            assert _same(await asyncio.wait_for(parser.parse(raw), 60)) == _same(parse_checked(raw, LIMITS)), raw[:80]
        assert parser.processes == 1
    finally:
        parser.close()
    assert parser.processes == 0


def test_a_protocol_error_survives_pickling():
    fields = ("invalid_value", "temperature: too hot", "e1", "session.temperature")
    err = pickle.loads(pickle.dumps(p.ProtocolError(*fields)))
    assert (err.code, err.message, err.event_id, err.param) == fields


async def test_a_dead_parse_process_is_replaced():
    parser = FrameParser(LIMITS)
    try:
        assert isinstance(await asyncio.wait_for(parser.parse(FRAMES[0]), 60), p.SessionUpdate)
        (first,) = parser._all
        first.proc.kill()
        first.proc.wait(10)
        assert isinstance(await asyncio.wait_for(parser.parse(FRAMES[0]), 60), p.SessionUpdate)  # not server_error
        (second,) = parser._all
        assert second is not first and second.proc.poll() is None
    finally:
        parser.close()


async def test_the_server_parses_big_frames_in_a_process_and_stops_it(server_factory):
    from testkit.fake_backend import FakeBackend

    # 600,000 bytes of UTF-8, 300,000 characters: handed over undecoded, counted once decoded
    big = json.dumps({"type": "response.create", "response": {"instructions": "é" * 300_000}}, ensure_ascii=False)
    with server_factory(FakeBackend(), **{"audio.enabled": False}) as addr:
        parser = addr.app.state.services.frame_parser
        assert parser.processes == 0  # none before the first big frame
        handed: list[type] = []
        parse = parser.parse
        parser.parse = lambda raw: handed.append(type(raw)) or parse(raw)  # type: ignore[method-assign]
        async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.created"
            await ws.send(big)
            err = json.loads(await asyncio.wait_for(ws.recv(), 60))
        said = (err["type"], err["error"]["code"], err["error"]["param"])
        assert said == ("error", "input_too_large", "response.instructions")
        assert err["error"]["message"].startswith("instructions are 300000 characters")
        assert parser.processes == 1
        assert handed == [bytes]  # never decoded on the loop: the parse process did it
        (worker,) = parser._all
    assert worker.proc.poll() is not None  # the server's shutdown ended it


# ---------------------------------------------------------------- the WebSocket frame reader (gateway.core.ws_frames)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 125, 126, 70_000, BIG - 1, BIG, BIG + 3, 3 * BIG]), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(0, 4), st.integers(-16, 16)), max_size=8),
    st.lists(st.integers(0, 16 * BIG), max_size=8),
    st.integers(0, 4),
)
def test_the_chunked_reader_reads_the_same_frames_as_websockets_own(sizes, near_starts, anywhere, crumbs):
    """Frames of every length class around ``BIG``, masked, cut into socket reads at arbitrary points:
    anywhere in the stream, and within a few bytes of a frame's start (its header split byte by byte by
    ``crumbs`` one-byte reads after each cut); a frame's end and the next one's start in one read too.
    Cut points rather than cyclic read lengths: the same splits without millions of one-byte reads."""
    client = Protocol(Side.CLIENT, state=OPEN, max_size=None)
    payloads = [bytes([65 + i % 26]) * n + str(i).encode() for i, n in enumerate(sizes)]
    frames_out = []
    for data in payloads:
        client.send_binary(data)
        frames_out.append(b"".join(client.data_to_send()))
    wire = b"".join(frames_out)
    starts = [sum(len(f) for f in frames_out[:k]) for k in range(len(frames_out))]
    cuts = {starts[k % len(starts)] + d for k, d in near_starts} | {a % (len(wire) + 1) for a in anywhere}
    bounds = []
    for c in sorted(c for c in cuts if 0 < c < len(wire)):
        bounds += [c + j for j in range(crumbs + 1) if c + j < len(wire)]
    bounds = [0, *sorted(set(bounds)), len(wire)]
    got = {}
    for chunked in (False, True):
        server = Protocol(Side.SERVER, state=OPEN, max_size=None)
        if chunked:
            server.reader.__class__ = ChunkedReader
        frames = []
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            server.receive_data(wire[lo:hi])
            frames += [bytes(f.data) for f in server.events_received()]
        got[chunked] = frames
    assert got[True] == got[False] == payloads


async def test_a_big_text_frame_that_is_not_utf8_closes_the_socket_with_1007(server_factory):
    """It reaches the app undecoded; the parse process finds it is not UTF-8: closed as the WebSocket
    layer closes a small one."""
    from testkit.fake_backend import FakeBackend

    bad = b'{"type": "x.unknown", "pad": "' + b"A" * 300_000 + b'\xff"}'
    with server_factory(FakeBackend(), **{"audio.enabled": False}) as addr:
        for frame in (bad, bad[-100:]):  # big (undecoded, checked off the loop), small (uvicorn's own check)
            async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
                assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "session.created"
                await ws.send(frame, text=True)
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 60)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
