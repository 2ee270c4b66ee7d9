"""gateway.cluster.snapshot, pure: a session written at seq S and continued elsewhere from S + later deltas."""

from __future__ import annotations

import itertools
import json

from gateway.cluster.snapshot import event_type, needs_snapshot, restored, snapshot, take_over
from gateway.realtime import protocol as p
from gateway.realtime import server_events as se
from gateway.realtime.replay import ReplayBuffer
from gateway.realtime.response_ending import ResponseEnding
from gateway.realtime.session import Session, SessionDefaults

USER = (
    '{"type":"conversation.item.create",'
    '"item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}'
)


def make(start: int = 0) -> tuple[Session, list[dict]]:
    counter = itertools.count(start)
    sent: list[dict] = []

    def stamp(ev):
        ev["seq"] = next(counter)
        sent.append(json.loads(json.dumps(ev)))  # as a client (and Redis) holds it
        return ev

    return Session(SessionDefaults(model="m", max_output_tokens=64), stamp), sent


def test_event_type_reads_the_first_key_of_the_wire_text():
    buf = ReplayBuffer()
    buf.stamp(se.output_text_delta(se.PartAt("resp_1", "item_1", 0), "x"))
    buf.stamp(se.error_event("bad", "no"))
    assert [event_type(t) for _, t in buf.since(-1)] == ["response.output_text.delta", "error"]
    assert event_type('{"seq":1}') == ""


def test_only_structural_events_need_a_snapshot():
    assert not needs_snapshot(["response.output_text.delta", "error"])
    assert needs_snapshot(["response.output_text.delta", "response.done"])
    assert needs_snapshot(["conversation.item.added"])


def test_snapshot_round_trips_options_items_and_a_running_response():
    s, _ = make()
    s.handle(p.parse('{"type":"session.update","session":{"type":"realtime","instructions":"be brief"}}'))
    s.handle(p.parse(USER))
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    s.on_chunk(rid, "Hel")
    snap = json.loads(json.dumps(snapshot(s, 9, 3)))  # as Redis stores it
    t, _ = make(100)
    t.handle(restored(snap))
    assert t.id == s.id and t.options.instructions == "be brief"
    assert t.conversation.items == s.conversation.items
    assert t.response is not None and t.response.id == rid and t.response.text == "Hel"
    assert snap["seq"] == 9 and snap["received"] == 3


def test_a_response_waiting_on_its_images_keeps_its_ending_through_the_snapshot():
    s, _ = make()
    s.handle(p.parse(USER))
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    s.on_chunk(rid, "Here")
    assert s.response is not None
    s.response.images["ig_1"] = {"id": "ig_1", "type": "image_generation_call", "status": "in_progress"}
    s.on_done(rid, "length", {}, {"total_tokens": 7})  # text done: response.done waits for the image
    assert s.response is not None and s.response.ending == ResponseEnding.incomplete(
        "max_output_tokens", {"total_tokens": 7}, {}
    )
    t, _ = make(100)
    t.handle(restored(json.loads(json.dumps(snapshot(s, 9, 1)))))
    assert t.response is not None and t.response.ending == s.response.ending
    old = json.loads(json.dumps(snapshot(s, 9, 1)))
    old["response"]["ending"] = ["incomplete", {"type": "incomplete", "reason": "max_output_tokens"}, {}, {}]
    t.handle(restored(old))  # written as a tuple by an older gateway: dropped (a takeover ends the response anew)
    assert t.response is not None and t.response.ending is None


def test_take_over_ends_the_running_response_incomplete_keeping_every_delivered_delta():
    s, sent = make()
    s.handle(p.parse(USER))
    rid = s.handle(p.parse('{"type":"response.create"}')).actions[0].response_id
    s.on_chunk(rid, "Hel")  # structural events went out with it: the owner wrote a snapshot here
    snap = json.loads(json.dumps(snapshot(s, sent[-1]["seq"], 2)))
    s.on_chunk(rid, "lo")  # deltas after the snapshot: only in the stream
    s.on_chunk(rid, " there")
    later = [e for e in sent if e["seq"] > snap["seq"]]
    top = sent[-1]["seq"]
    t, t_sent = make(top + 1)
    ending = take_over(t, snap, later)
    assert [e["seq"] for e in ending] == list(range(top + 1, top + 1 + len(ending)))  # contiguous after the stream
    done = ending[-1]
    assert done["type"] == "response.done" and done["response"]["id"] == rid
    assert done["response"]["status"] == "incomplete"
    assert done["response"]["status_details"] == {"type": "incomplete", "reason": "server_error"}
    assert done["response"]["output"][0]["content"][0]["text"] == "Hello there"
    assert t.conversation.items[-1]["role"] == "assistant"
    assert t.conversation.items[-1]["content"][0]["text"] == "Hello there"
    assert t.response is None  # the session goes on: a new response may start
    assert t.handle(p.parse('{"type":"response.create"}')).actions


def test_take_over_of_an_idle_session_sends_nothing():
    s, sent = make()
    s.handle(p.parse(USER))
    snap = snapshot(s, sent[-1]["seq"], 1)
    t, _ = make(50)
    assert take_over(t, snap, []) == []
    assert t.conversation.items == s.conversation.items
