"""The typed server event builders (gateway/realtime/server_events.py) held to the ``openai`` SDK's own types.

Every builder is called with sample arguments, with its defaults and with every argument given; each GA
event must validate as the SDK's ``RealtimeServerEvent`` and carry no top-level field the SDK's model lacks,
so a field we misname, or one the SDK renames, fails here. Our extension events must stay outside the SDK.
"""

from __future__ import annotations

import ast
import inspect
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openai.types.realtime import RealtimeServerEvent

from gateway.realtime import server_events as se
from gateway.realtime.response_ending import ResponseEnding, ending_of
from gateway.realtime.session import Session, SessionDefaults
from tests.sdk_events import SERVER_EVENT

ROOT = Path(__file__).resolve().parents[2]
SDK_TYPES = {
    typing.get_args(m.model_fields["type"].annotation)[0]: m
    for m in typing.get_args(typing.get_args(RealtimeServerEvent)[0])
}
ITEM = {
    "id": "item_1",
    "object": "realtime.item",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "hi"}],
}
RESPONSE = {
    "id": "resp_1",
    "object": "realtime.response",
    "status": "completed",
    "status_details": None,
    "output": [ITEM],
    "output_modalities": ["text"],
    "conversation_id": "conv_1",
    "metadata": None,
    "usage": None,
}


def samples() -> dict[str, Any]:
    """A sample argument for each parameter name a builder has."""
    view = Session(SessionDefaults(model="m", max_output_tokens=64), lambda e: e).session_view()
    return {
        "session": view,
        "resume": {"token": "t", "expires_in_s": 30},
        "replay_from_seq": 4,
        "received_events": 2,
        "code": "invalid_value",
        "message": "bad value",
        "event_id": "evt_1",
        "param": "session.tools",
        "type_": "invalid_request_error",
        "rate_limits": [{"name": "tokens", "limit": 100, "remaining": 80, "reset_seconds": 1.5}],
        "previous_item_id": "item_0",
        "item": ITEM,
        "item_id": "item_1",
        "content_index": 0,
        "audio_start_ms": 100,
        "audio_end_ms": 900,
        "delta": "hel",
        "transcript": "hello",
        "seconds": 1.25,
        "event": "5",
        "received_at": 1_700_000_000,
        "response_id": "resp_1",
        "response": RESPONSE,
        "output_index": 0,
        "at": se.PartAt("resp_1", "item_1", 0),
        "part": {"type": "text", "text": "hi"},
        "text": "hello",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
        "partial_image_index": 0,
        "partial_image_b64": "iVBORw0KGgo=",
    }


def builders() -> list[Callable[..., se.ServerEvent]]:
    """Every public function of the module: each builds one event type."""
    return [
        f
        for name, f in vars(se).items()
        if inspect.isfunction(f) and f.__module__ == se.__name__ and not name.startswith("_")
    ]


def built(f: Callable[..., se.ServerEvent], everything: bool) -> se.ServerEvent:
    """``f`` called with its required arguments (``everything``: with its optional ones too)."""
    given = samples()
    params = inspect.signature(f).parameters.values()
    return f(**{p.name: given[p.name] for p in params if everything or p.default is inspect.Parameter.empty})


@pytest.mark.parametrize("everything", [False, True], ids=["defaults", "all"])
@pytest.mark.parametrize("f", builders(), ids=lambda f: f.__name__)
def test_each_builder_makes_an_event_the_sdk_accepts_or_one_of_ours(f, everything):
    ev = built(f, everything)
    assert list(ev)[:2] == ["type", "event_id"]  # the cluster's snapshot reads the type as the first key
    json.dumps(ev)  # sent as JSON as it is
    if ev["type"] in se.EXTENSION_TYPES:
        assert ev["type"] not in SDK_TYPES, f"{ev['type']} is OpenAI's now: build it as theirs"
        return
    model = SERVER_EVENT.validate_python(ev)
    assert model.type == ev["type"]
    # the envelope's event_id is on every event we send, even where the SDK's model has none (DTMF's)
    unknown = set(ev) - set(type(model).model_fields) - {"event_id"}
    if f is se.session_created and everything:
        unknown -= {"resume"}  # ours, beside the session (docs/PROTOCOL.md, "Extensions")
    assert not unknown, f"{ev['type']}: the SDK has no field {sorted(unknown)}"


def test_every_extension_type_has_a_builder_and_every_builder_one_type():
    types = [built(f, everything=False)["type"] for f in builders()]
    assert len(types) == len(set(types)), "two builders make the same event type"
    assert se.EXTENSION_TYPES <= set(types)


def test_the_wire_is_the_fields_in_the_order_given():
    done = se.item_done(ITEM)
    assert list(done) == ["type", "event_id", "item"]  # no previous_item_id unless one is given
    assert list(se.item_done(ITEM, None)) == ["type", "event_id", "previous_item_id", "item"]
    delta = se.output_text_delta(se.PartAt("resp_1", "item_1", 2, 1), "x")
    assert {k: v for k, v in delta.items() if k != "event_id"} == {
        "type": "response.output_text.delta",
        "response_id": "resp_1",
        "item_id": "item_1",
        "output_index": 2,
        "content_index": 1,
        "delta": "x",
    }
    assert list(delta) == ["type", "event_id", "response_id", "item_id", "output_index", "content_index", "delta"]
    err = se.error_event("bad", "at <Foo object at 0x7f00> in /srv/app/x.py", "evt_9")["error"]
    assert err == {
        "type": "invalid_request_error",
        "code": "bad",
        "message": "at the data in <path>",
        "param": None,
        "event_id": "evt_9",
    }
    assert "resume" not in se.session_created({"type": "realtime"})
    assert se.transcription_completed("item_1", "hi", -1.0)["usage"] == {"type": "duration", "seconds": 0.0}


def test_event_ids_are_unique():
    ids = {se.input_cleared()["event_id"] for _ in range(100)}
    assert len(ids) == 100


def test_no_module_but_the_builders_spells_a_server_event_as_a_dict():
    types = set(SDK_TYPES) | se.EXTENSION_TYPES
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if path.name == "server_events.py":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "type" and isinstance(v, ast.Constant):
                        if v.value in types:
                            found.append(f"{path.relative_to(ROOT)}:{n.lineno} {v.value}")
    assert not found, "build these with gateway.realtime.server_events: " + ", ".join(found)


# ---------------------------------------------------------------- a response's ending


@pytest.mark.parametrize(
    ("ending", "status", "details"),
    [
        (ResponseEnding.completed({"total_tokens": 3}, None), "completed", None),
        (ResponseEnding.cancelled("turn_detected"), "cancelled", {"type": "cancelled", "reason": "turn_detected"}),
        (
            ResponseEnding.incomplete("max_output_tokens"),
            "incomplete",
            {"type": "incomplete", "reason": "max_output_tokens"},
        ),
        (ResponseEnding.failed(None), "failed", {"type": "failed", "error": {"type": "server_error"}}),
        (ResponseEnding.failed("oom"), "failed", {"type": "failed", "error": {"type": "server_error", "code": "oom"}}),
    ],
)
def test_an_ending_says_its_status_and_details_as_the_sdk_reads_them(ending, status, details):
    assert (ending.status, ending.status_details()) == (status, details)
    done = se.response_done({**RESPONSE, "status": ending.status, "status_details": ending.status_details()})
    assert SERVER_EVENT.validate_python(done).response.status == status


@pytest.mark.parametrize(
    ("reason", "status", "why"),
    [
        ("stop", "completed", None),
        ("length", "incomplete", "max_output_tokens"),
        ("cancelled", "cancelled", "client_cancelled"),
        ("content_filter", "incomplete", "content_filter"),
        ("error", "failed", None),
    ],
)
def test_a_jobs_finish_reason_becomes_its_ending(reason, status, why):
    usage, metrics = {"total_tokens": 5}, {"tokens": 2, "error_code": "engine_died"}
    ending = ending_of(reason, metrics, usage)
    assert (ending.status, ending.reason, ending.usage, ending.metrics) == (status, why, usage, metrics)
    assert ending.error_code == ("engine_died" if status == "failed" else None)
    assert ending_of("error", {}, {}).error_code == "generation_failed"
