"""Session.handle, the one door for client events: each type → the events and actions it asks for.

No sockets: what needs I/O (the audio buffer, media to resolve) comes back as an action for the shell, in
the order the events came in; what the shell finds out comes back as an internal input (ItemResolved).
"""

from __future__ import annotations

import itertools
import json

import pytest

from gateway.realtime import protocol as p
from gateway.realtime.actions import (
    AppendAudio,
    CancelResponse,
    ClearAudio,
    CommitAudio,
    Output,
    Refused,
    ResolveItem,
    StartResponse,
)
from gateway.realtime.inputs import ItemResolved
from gateway.realtime.session import Session, SessionDefaults

IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}


def make(room: bool = True) -> Session:
    counter = itertools.count()
    defaults = SessionDefaults(model="m", max_output_tokens=64, has_room=lambda: room)
    return Session(defaults, lambda e: {**e, "seq": next(counter)})


def message(*content: dict, item_id: str | None = None) -> p.ItemCreate:
    item = {"type": "message", "role": "user", "content": list(content), **({"id": item_id} if item_id else {})}
    return p.parse(json.dumps({"type": "conversation.item.create", "event_id": "c1", "item": item}))


def text(words: str, item_id: str | None = None) -> p.ItemCreate:
    return message({"type": "input_text", "text": words}, item_id=item_id)


def test_the_union_lists_each_client_event_type_once():
    assert p.CLIENT_EVENT_TYPES == {
        "session.update",
        "conversation.item.create",
        "conversation.item.truncate",
        "conversation.item.delete",
        "conversation.item.retrieve",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "response.create",
        "response.cancel",
    }


@pytest.mark.parametrize(
    ("raw", "action"),
    [
        ('{"type":"input_audio_buffer.append","audio":"AAAA","event_id":"a1"}', AppendAudio("AAAA", "a1")),
        ('{"type":"input_audio_buffer.commit","event_id":"a2"}', CommitAudio("a2")),
        ('{"type":"input_audio_buffer.clear"}', ClearAudio()),
    ],
)
def test_audio_buffer_events_are_the_voice_layers_actions(raw, action):
    assert make().handle(p.parse(raw)) == Output([], [action])


def test_a_session_update_is_applied_by_the_session_itself():
    s = make()
    ev = p.parse('{"type":"session.update","session":{"instructions":"be brief"}}')
    out = s.handle(ev)
    assert [e["type"] for e in out.events] == ["session.updated"] and out.actions == []
    assert s.options.instructions == "be brief"


def test_a_text_item_is_added_at_once():
    out = make().handle(text("hi"))
    assert [e["type"] for e in out.events] == ["conversation.item.added", "conversation.item.done"]
    assert out.actions == []


def test_an_item_with_media_is_resolved_and_a_response_right_behind_it_waits():
    s = make()
    ev = message({"type": "input_text", "text": "what is this"}, IMAGE, item_id="item_m")
    out = s.handle(ev)
    assert out.events == [] and len(out.actions) == 1
    resolve = out.actions[0]
    assert isinstance(resolve, ResolveItem) and resolve.event is ev
    assert s.handle(p.parse('{"type":"response.create"}')) == Output()  # held for the item
    resolved = text("what is this\na cat", item_id="item_m")
    done = s.handle(ItemResolved(resolve.key, resolved))
    types = [e["type"] for e in done.events]
    assert types == ["conversation.item.added", "conversation.item.done", "response.created"]  # the held one
    assert len(done.actions) == 1 and isinstance(done.actions[0], StartResponse)


def test_a_refused_media_item_still_releases_the_response_waiting_for_it():
    s = make()
    (resolve,) = s.handle(message(IMAGE)).actions
    assert s.handle(p.parse('{"type":"response.create"}')).actions == []
    done = s.handle(ItemResolved(resolve.key, None))
    assert [e["type"] for e in done.events] == ["response.created"] and isinstance(done.actions[0], StartResponse)


def test_items_with_media_each_get_their_own_key_in_arrival_order():
    s = make()
    first, second = s.handle(message(IMAGE)).actions, s.handle(message(IMAGE)).actions
    assert first[0].key != second[0].key
    assert s.handle(ItemResolved(first[0].key, None)) == Output()  # nothing held


def test_a_response_create_starts_when_the_engine_has_room():
    s = make()
    s.handle(text("hi"))
    out = s.handle(p.parse('{"type":"response.create","event_id":"r1"}'))
    assert out.events[0]["type"] == "response.created" and isinstance(out.actions[0], StartResponse)


def test_a_response_create_the_engine_has_no_room_for_is_refused_busy_and_counted():
    s = make(room=False)
    s.handle(text("hi"))
    out = s.handle(p.parse('{"type":"response.create","event_id":"r1"}'))
    assert [(e["type"], e["error"]["code"], e["error"]["event_id"]) for e in out.events] == [
        ("error", "server_busy", "r1")
    ]
    assert out.actions == [Refused("server_busy")] and s.response is None


def test_a_response_create_during_a_response_is_refused_as_in_progress_even_without_room():
    room = [True]
    counter = itertools.count()
    defaults = SessionDefaults(model="m", max_output_tokens=64, has_room=lambda: room[0])
    s = Session(defaults, lambda e: {**e, "seq": next(counter)})
    s.handle(text("hi"))
    s.handle(p.parse('{"type":"response.create"}'))
    room[0] = False  # the engine's room is not asked while a response runs (as before: refused as in progress)
    out = s.handle(p.parse('{"type":"response.create","event_id":"r2"}'))
    assert out.actions == []
    assert out.events[0]["error"]["code"] == "conversation_already_has_active_response"


def test_item_and_cancel_events_are_answered_by_the_session_itself():
    s = make()
    s.handle(text("hi", item_id="item_a"))
    retrieved = s.handle(p.parse('{"type":"conversation.item.retrieve","item_id":"item_a"}'))
    assert [e["type"] for e in retrieved.events] == ["conversation.item.retrieved"]
    deleted = s.handle(p.parse('{"type":"conversation.item.delete","item_id":"item_a"}'))
    assert [e["type"] for e in deleted.events] == ["conversation.item.deleted"]
    missing = s.handle(
        p.parse('{"type":"conversation.item.truncate","item_id":"nope","content_index":0,"audio_end_ms":0}')
    )
    assert missing.events[0]["type"] == "error" and missing.actions == []
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    cancelled = s.handle(p.parse('{"type":"response.cancel"}'))
    assert cancelled.actions[0] == CancelResponse(rid)
    assert cancelled.events[-1]["type"] == "response.done"


def test_every_client_event_type_is_dispatched():
    samples = {
        "session.update": {"session": {}},
        "conversation.item.create": {
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        },
        "conversation.item.truncate": {"item_id": "x", "content_index": 0, "audio_end_ms": 0},
        "conversation.item.delete": {"item_id": "x"},
        "conversation.item.retrieve": {"item_id": "x"},
        "input_audio_buffer.append": {"audio": ""},
    }
    for kind in p.CLIENT_EVENT_TYPES:
        out = make().handle(p.parse(json.dumps({"type": kind, **samples.get(kind, {})})))
        assert not any(e.get("error", {}).get("code") == "unsupported_event" for e in out.events), kind
