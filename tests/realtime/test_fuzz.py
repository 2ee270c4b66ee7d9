"""Fuzzing with hypothesis: ≥ 10,000 generated inputs over the protocol parser, the session state
machine and every processor. Each input yields a valid result or the module's own error — never
another exception."""

from __future__ import annotations

import base64
import itertools
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.realtime import protocol as p
from gateway.realtime.session import Session, SessionDefaults
from models.scheduler import ChunkScheduler, SchedulerConfig
from processors.audio import AudioError, decode_base64_pcm16, decode_wav
from processors.image import ImageError, load_image_url
from tests.fuzzing import examples


def fuzz(n: int) -> settings:
    return settings(max_examples=examples(n), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4), max_leaves=12
)
field_names = st.sampled_from(
    [
        "session",
        "item",
        "response",
        "audio",
        "response_id",
        "item_id",
        "content_index",
        "audio_end_ms",
        "event_id",
        "previous_item_id",
        "instructions",
        "scheduler",
        "temperature",
        "content",
        "role",
        "type",
    ]
)
events = st.builds(
    lambda t, extra: {"type": t, **extra},
    st.sampled_from(sorted(p.CLIENT_EVENT_TYPES) + ["", "nope", "response.created"]),
    st.dictionaries(field_names, json_values, max_size=5),
)


def _session() -> Session:
    counter = itertools.count()

    def stamp(ev):
        ev["seq"] = next(counter)
        return ev

    return Session(SessionDefaults(model="m"), stamp)


@fuzz(4000)
@given(events)
def test_parser_and_session_never_crash_on_event_shaped_input(ev):
    raw = json.dumps(ev)
    try:
        parsed = p.parse(raw)
    except p.ProtocolError as exc:
        assert exc.code in {"invalid_json", "invalid_event_type", "invalid_value", "unknown_parameter"}
        return
    out = _session().handle(parsed)
    for e in out.events:
        json.dumps(e)  # every answer is serializable
        assert e["type"] and "seq" in e


@fuzz(1500)
@given(st.binary(max_size=300))
def test_parser_on_raw_bytes(raw):
    # parse promises ProtocolError and nothing else: bytes that are not UTF-8 included
    try:
        p.parse(raw)
    except p.ProtocolError as exc:
        assert exc.code


@fuzz(1500)
@given(st.text(max_size=200), st.sampled_from([16000, 24000, 44100, 0, -1]))
def test_base64_pcm_decoder(data, rate):
    try:
        out = decode_base64_pcm16(data, rate)
    except AudioError as exc:
        assert exc.code
    else:
        assert out.dtype == np.float32 and np.isfinite(out).all()


@fuzz(1500)
@given(st.binary(max_size=400))
def test_wav_decoder(data):
    wav_head = b"RIFF" + len(data).to_bytes(4, "little") + b"WAVEfmt " + data
    for blob in (data, wav_head):
        try:
            out = decode_wav(blob)
        except AudioError as exc:
            assert exc.code and "0x" not in exc.message
        else:
            assert np.isfinite(out).all()


@fuzz(1000)
@given(st.sampled_from(["image/png", "image/jpeg", "image/webp", "image/gif", "text/plain"]), st.binary(max_size=300))
def test_image_loader(mime, data):
    head = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff", "image/webp": b"RIFF"}.get(mime, b"")
    url = f"data:{mime};base64," + base64.b64encode(head + data).decode()
    try:
        img = load_image_url(url)
    except ImageError as exc:
        assert exc.code
    else:
        assert img.image.mode == "RGB"


@fuzz(1000)
@given(
    st.lists(st.integers(0, 255), max_size=60),
    st.sampled_from(["fast", "balanced", "quality"]),
    st.lists(st.text(min_size=1, max_size=4), max_size=2),
)
def test_scheduler_on_random_bytes_and_stops(ids, strategy, stops):
    s = ChunkScheduler(
        SchedulerConfig.for_strategy(strategy, stop=tuple(stops), intercept=("<i>", "</i>")),
        lambda xs: bytes(xs).decode("utf-8", "replace"),
    )
    out = []
    for i, t in enumerate(ids):
        out += s.feed([t], i * 0.01)
    out += s.finish()
    text = "".join(c.text for c in out)
    # invalid bytes inside the text decode to U+FFFD; an incomplete sequence at the end is never shown
    assert text.count("\ufffd") <= bytes(ids).decode("utf-8", "replace").rstrip("\ufffd").count("\ufffd")
    for stop in stops:
        assert stop not in text
