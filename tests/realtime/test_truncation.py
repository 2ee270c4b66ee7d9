"""GA ``truncation``, pure: the oldest whole turns leave the model's context when the next prompt would not fit.

No model: tokens are counted as words. The session keeps every item in the client's view.
"""

from __future__ import annotations

import itertools
import json

from gateway.realtime import protocol as p
from gateway.realtime import truncation as t
from gateway.realtime.session import Session, SessionDefaults


def words(text: str) -> int:
    return len(text.split())


def make(max_context: int = 400, max_output_tokens: int = 40, context_tokens: int | None = None, **session) -> Session:
    counter = itertools.count()

    def stamp(ev):
        ev["seq"] = next(counter)
        return ev

    defaults = SessionDefaults(
        model="m",
        max_output_tokens=max_output_tokens,
        max_context=max_context,
        count_tokens=words,
        context_tokens=context_tokens,
    )
    s = Session(defaults, stamp)
    if session:
        s.handle(p.parse(json.dumps({"type": "session.update", "session": session})))
    return s


def turn(s: Session, n: int, reply_words: int = 20) -> tuple[list[dict], list[dict]]:
    """One user turn of 20 words and a reply; the generation's messages and every event."""
    text = " ".join(f"u{n}w{i}" for i in range(20))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    events = s.handle(p.parse(json.dumps({"type": "conversation.item.create", "item": item}))).events
    out = s.handle(p.parse('{"type":"response.create"}'))
    start = out.actions[0]
    events += out.events
    events += s.on_chunk(start.response_id, " ".join(f"a{n}w{i}" for i in range(reply_words))).events
    events += s.on_done(start.response_id, "stop", {"tokens": reply_words}, {}).events
    return start.messages, events


def test_turns_keep_a_call_with_its_output_and_skip_system_items():
    items = [
        {"id": "s", "type": "message", "role": "system", "content": []},
        {"id": "a0", "type": "message", "role": "assistant", "content": []},
        {"id": "u1", "type": "message", "role": "user", "content": []},
        {"id": "c1", "type": "function_call", "name": "f", "arguments": "{}"},
        {"id": "o1", "type": "function_call_output", "output": "1"},
        {"id": "u2", "type": "message", "role": "user", "content": []},
    ]
    assert [[i["id"] for i in g] for g in t.turns(items, set())] == [["a0"], ["u1", "c1", "o1"], ["u2"]]
    assert [[i["id"] for i in g] for g in t.turns(items, {"a0"})] == [["u1", "c1", "o1"], ["u2"]]


def test_a_long_session_never_overflows_and_the_client_keeps_every_item():
    s = make(max_context=2000)
    sizes, cuts = [], 0
    for n in range(100):
        messages, events = turn(s, n)
        assert not [e for e in events if e["type"] in ("error", "conversation.item.deleted")]
        prompt = sum(words(m["content"]) + t.MESSAGE_OVERHEAD for m in messages)
        assert prompt + 40 <= 2000  # the prompt and the reply budget fit the context
        assert messages[-1]["content"].startswith(f"u{n}w0")  # the newest turn is always there
        cuts += bool(sizes) and prompt < sizes[-1]
        sizes.append(prompt)
    assert len(s.items) == 200  # the client's view keeps all of them
    # auto cuts to half the room: with ~56-token turns in ~1960 tokens, once every ~16 turns, never every turn
    assert 3 <= cuts <= 100 / 5, cuts
    first_kept = s.messages()[0]["content"]
    assert not first_kept.startswith("u0w0")  # the oldest turns left the context ...
    assert s.conversation.items[0]["content"][0]["text"].startswith("u0w0")  # ... not the conversation


def test_disabled_keeps_everything():
    s = make(truncation="disabled")
    for n in range(20):
        messages, _ = turn(s, n)
    assert len(messages) == 39 and not s.dropped  # 19 turns and the 20th question


def test_retention_ratio_and_post_instruction_limit():
    s = make(truncation={"type": "retention_ratio", "retention_ratio": 0.3, "token_limits": {"post_instructions": 200}})
    kept = []
    for n in range(30):
        messages, _ = turn(s, n)
        kept.append(sum(words(m["content"]) + t.MESSAGE_OVERHEAD for m in messages))
    assert max(kept) <= 200 * t.TRIGGER + 60  # never much past the post-instruction limit (a turn is ~60)
    assert min(kept[5:]) <= 200 * 0.3 + 60  # a cut keeps about 30 %


def kept_sizes(s: Session, turns: int) -> list[int]:
    out = []
    for n in range(turns):
        messages, _ = turn(s, n)
        out.append(sum(words(m["content"]) + t.MESSAGE_OVERHEAD for m in messages))
    return out


def test_the_servers_context_cap_bounds_auto_and_a_clients_own_limit_replaces_it():
    capped = kept_sizes(make(max_context=4000, context_tokens=300), 40)
    assert max(capped) <= 300 * t.TRIGGER + 60  # never much past the cap (a turn is ~60), far below max_context
    assert min(capped[10:]) <= 300 * t.AUTO_RETENTION + 60  # a cut keeps about half
    assert max(kept_sizes(make(max_context=4000), 40)) > 1000  # without the cap the history grows
    ratio = {"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 900}}
    own = kept_sizes(make(max_context=4000, context_tokens=300, truncation=ratio), 40)
    assert 300 + 60 < max(own) <= 900 * t.TRIGGER + 60  # the client asked for more room than the server's default


def test_instructions_and_system_items_always_stay():
    s = make(instructions="be brief " * 10)
    s.handle(
        p.parse(
            '{"type":"conversation.item.create","item":{"type":"message","role":"system",'
            '"content":[{"type":"input_text","text":"house rules"}]}}'
        ),
    )
    for n in range(30):
        messages, _ = turn(s, n)
    assert messages[0] == {"role": "system", "content": "be brief " * 10}
    assert {"role": "system", "content": "house rules"} in messages


def test_bad_truncation_values_are_refused_naming_the_field():
    for bad in ('"sometimes"', '{"type":"retention_ratio","retention_ratio":2}'):
        try:
            p.parse('{"type":"session.update","session":{"truncation":' + bad + "}}")
        except p.ProtocolError as exc:
            assert exc.code == "invalid_value" and exc.param.startswith("session.truncation")
        else:
            raise AssertionError(f"{bad} was accepted")
