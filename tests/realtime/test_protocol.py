"""gateway.realtime.protocol: one parse() over a discriminated union; every failure is a ProtocolError."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.realtime import protocol as p
from tests.fuzzing import examples


def test_parses_each_client_event_type_to_its_model():
    ev = p.parse('{"type":"response.create","response":{"temperature":0,"scheduler":{"strategy":"fast"}}}')
    assert isinstance(ev, p.ResponseCreate) and ev.response.scheduler.strategy == "fast"
    item = p.parse(
        json.dumps(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            }
        )
    )
    assert isinstance(item, p.ItemCreate) and item.item.content[0].text == "hi"
    assert isinstance(p.parse('{"type":"response.cancel"}'), p.ResponseCancel)


def test_ga_session_fields_from_full_realtime_clients_are_accepted():
    ev = p.parse('{"type":"session.update","session":{"type":"realtime","tools":[],"tracing":"auto"}}')
    assert isinstance(ev, p.SessionUpdate)


def test_unknown_type_is_invalid_event_type_with_event_id():
    with pytest.raises(p.ProtocolError) as e:
        p.parse('{"type":"nope","event_id":"abc"}')
    assert e.value.code == "invalid_event_type" and e.value.event_id == "abc"


def test_bad_json_and_deep_nesting_are_clean_errors():
    with pytest.raises(p.ProtocolError) as e:
        p.parse("{")
    assert e.value.code == "invalid_json"
    deep = '{"type":"response.create","response":{"metadata":' + "[" * 100000 + "]" * 100000 + "}}"
    with pytest.raises(p.ProtocolError) as e:
        p.parse(deep)
    assert e.value.code == "invalid_json"


def test_out_of_range_values_name_the_field():
    with pytest.raises(p.ProtocolError) as e:
        p.parse('{"type":"response.create","response":{"scheduler":{"strategy":"warp"}}}')
    assert e.value.code == "invalid_value" and "strategy" in (e.value.param or "")


@settings(max_examples=examples(300), deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_any_json_value_parses_or_raises_protocol_error(value):
    raw = json.dumps(value)
    try:
        ev = p.parse(raw)
    except p.ProtocolError as exc:
        assert exc.code in {"invalid_json", "invalid_event_type", "invalid_value"}
    else:
        assert ev.type in p.CLIENT_EVENT_TYPES
