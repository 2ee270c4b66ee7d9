"""Spoken replies in the sans-I/O session: events (checked against the openai SDK's own models),
ordering, cancel, truncation to what was heard, formats and voices. No sockets, no voice model."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest

from gateway.realtime import protocol as p
from gateway.realtime.actions import CancelResponse, StartResponse
from gateway.realtime.session import Session, SessionDefaults
from gateway.voice.speech_actions import Speak, SpeechResult, SpeechSettings
from tests.sdk_events import SERVER_EVENT


def make(**kw: Any) -> Session:
    counter = itertools.count()

    def stamp(ev: dict[str, Any]) -> dict[str, Any]:
        ev["seq"] = next(counter)
        return ev

    defaults = SessionDefaults(model="m", max_output_tokens=64, speech=SpeechSettings(), voices=("joe",), **kw)
    return Session(defaults, stamp)


def ev(raw: str) -> Any:
    return p.parse(raw)


USER = (
    '{"type":"conversation.item.create",'
    '"item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}'
)
AUDIO_RESPONSE = '{"type":"response.create","response":{"output_modalities":["audio"]}}'


def fake_result(a: Speak, ms_per_word: float = 100.0) -> SpeechResult:
    """What the voice would return: 24 kHz pcm16 silence, ms_per_word per word."""
    n = len(a.text.split())
    return SpeechResult(
        a.response_id, a.index, b"\0\0" * int(24 * ms_per_word * n), tuple(ms_per_word * (i + 1) for i in range(n))
    )


def checked(events: list[dict[str, Any]]) -> list[str]:
    for e in events:
        SERVER_EVENT.validate_python(e)
    return [e["type"] for e in events]


def spoken_reply(s: Session, chunks: list[str]) -> tuple[str, list[dict[str, Any]], list[Speak]]:
    events = s.handle(ev(USER)).events
    out = s.handle(ev(AUDIO_RESPONSE))
    events += out.events
    start = out.actions[0]
    assert isinstance(start, StartResponse) and start.output_modalities == ["audio"]
    speaks: list[Speak] = []
    for c in chunks:
        o = s.on_chunk(start.response_id, c)
        events += o.events
        speaks += [a for a in o.actions if isinstance(a, Speak)]
    return start.response_id, events, speaks


def test_a_spoken_reply_never_starts_with_half_a_word() -> None:
    # each chunk is said as it is: an eager first chunk ("B" of "Boil") would be read as a letter
    s = make()
    s.handle(ev('{"type":"session.update","session":{"type":"realtime","scheduler":{"eager_first":true}}}'))
    s.handle(ev(USER))
    spoken = s.handle(ev(AUDIO_RESPONSE)).actions[0]
    assert isinstance(spoken, StartResponse) and spoken.scheduler.eager_first is False
    s.on_done(spoken.response_id, "stop", {"tokens": 0}, {"output_tokens": 0, "total_tokens": 0})
    text = s.handle(ev('{"type":"response.create","response":{"output_modalities":["text"]}}')).actions[0]
    assert isinstance(text, StartResponse) and text.scheduler.eager_first is True  # the session's choice


def test_an_audio_response_speaks_each_chunk_and_closes_after_the_last_audio() -> None:
    s = make()
    rid, events, speaks = spoken_reply(s, ["Hello there, ", "it is 5 km."])
    assert [a.text for a in speaks] == ["Hello there,", "it is five kilometers."]
    assert "response.output_text.delta" not in [e["type"] for e in events]
    # the model finishes before the second chunk's audio is back: response.done waits for it
    assert s.on_done(rid, "stop", {"tokens": 7}, {"output_tokens": 7, "total_tokens": 9}).events == []
    events += s.on_speech(fake_result(speaks[1])).events  # out of order: held
    assert "response.output_audio.delta" not in [e["type"] for e in events]
    events += s.on_speech(fake_result(speaks[0])).events
    types = checked(events)
    assert types.count("response.output_audio.delta") == 2
    assert [e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"] == [
        "Hello there, ",
        "it is 5 km.",
    ]
    assert types[-6:] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    done = events[-1]["response"]
    assert done["output"][0]["content"] == [{"type": "output_audio", "transcript": "Hello there, it is 5 km."}]
    assert done["usage"]["output_token_details"]["audio_tokens"] > 0
    assert done["usage"]["output_token_details"]["text_tokens"] == 7
    assert s.messages()[-1] == {"role": "assistant", "content": "Hello there, it is 5 km."}


def test_text_modality_is_unchanged() -> None:
    s = make()
    s.handle(ev(USER))
    out = s.handle(ev('{"type":"response.create"}'))
    rid = out.actions[0].response_id
    o = s.on_chunk(rid, "Hi")
    assert not any(isinstance(a, Speak) for a in o.actions)
    assert "response.output_text.delta" in [e["type"] for e in o.events]


def test_cancel_stops_the_audio_and_keeps_only_what_was_sent() -> None:
    s = make()
    rid, _, speaks = spoken_reply(s, ["One two. ", "Three four."])
    s.on_speech(fake_result(speaks[0]))
    out = s.handle(ev('{"type":"response.cancel"}'))
    assert isinstance(out.actions[0], CancelResponse)
    assert s.on_speech(fake_result(speaks[1])).events == []  # late audio is dropped
    assert s.items[-1]["content"][0]["transcript"] == "One two. "


def test_truncate_cuts_the_transcript_to_the_heard_words() -> None:
    s = make()
    rid, _, speaks = spoken_reply(s, ["One two three. ", "Four five six."])
    for a in speaks:
        s.on_speech(fake_result(a))
    s.on_done(rid, "stop", {}, {})
    item_id = s.items[-1]["id"]
    # six words of 100 ms: at 420 ms the fourth word (300–400) was heard, the fifth (400–500) not past its middle
    out = s.handle(
        ev(f'{{"type":"conversation.item.truncate","item_id":"{item_id}","content_index":0,"audio_end_ms":420}}')
    )
    assert checked(out.events) == ["conversation.item.truncated"]
    assert s.items[-1]["content"][0]["transcript"] == "One two three. Four"
    assert s.messages()[-1]["content"] == "One two three. Four"


@pytest.mark.parametrize(
    ("end_ms", "content_index", "param"),
    [(5000, 0, "audio_end_ms"), (100, 3, "content_index")],
)
def test_truncate_refuses_bad_positions(end_ms: int, content_index: int, param: str) -> None:
    s = make()
    rid, _, speaks = spoken_reply(s, ["One two."])
    s.on_speech(fake_result(speaks[0]))
    s.on_done(rid, "stop", {}, {})
    item_id = s.items[-1]["id"]
    raw = (
        f'{{"type":"conversation.item.truncate","item_id":"{item_id}",'
        f'"content_index":{content_index},"audio_end_ms":{end_ms}}}'
    )
    out = s.handle(ev(raw))
    assert out.events[0]["type"] == "error" and out.events[0]["error"]["param"] == param
    assert s.items[-1]["content"][0]["transcript"] == "One two."


def test_negative_audio_end_ms_is_refused_by_the_parser() -> None:
    with pytest.raises(p.ProtocolError) as exc:
        ev('{"type":"conversation.item.truncate","item_id":"x","content_index":0,"audio_end_ms":-5}')
    assert exc.value.param == "audio_end_ms"


def test_session_reports_voice_format_speed_and_openai_voice_names_mean_the_default() -> None:
    s = make(output_modalities=("text",))
    view = checked(s.created().events) and s.created().events[0]["session"]
    assert view["audio"]["output"] == {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "joe", "speed": 1.0}
    assert view["output_modalities"] == ["text"]
    upd = ev(
        '{"type":"session.update","session":{"type":"realtime","output_modalities":["audio"],'
        '"audio":{"output":{"voice":"ash","speed":1.25,"format":{"type":"audio/pcmu"}}}}}'
    )
    out = s.handle(upd)
    checked(out.events)
    view = out.events[0]["session"]
    assert view["output_modalities"] == ["audio"]
    assert view["audio"]["output"] == {"format": {"type": "audio/pcmu"}, "voice": "joe", "speed": 1.25}
    s.handle(ev(USER))
    out = s.handle(ev('{"type":"response.create"}'))
    rid = out.actions[0].response_id
    speak = next(a for a in s.on_chunk(rid, "Hi.").actions if isinstance(a, Speak))
    assert speak.settings == SpeechSettings("audio/pcmu", "joe", 1.25)


def test_unknown_voice_and_formats_are_refused_naming_the_field() -> None:
    s = make()
    out = s.handle(ev('{"type":"session.update","session":{"audio":{"output":{"voice":"nobody"}}}}'))
    assert out.events[0]["type"] == "error" and out.events[0]["error"]["param"] == "session.audio.output.voice"
    with pytest.raises(p.ProtocolError) as exc:
        ev('{"type":"session.update","session":{"audio":{"output":{"format":{"type":"audio/opus"}}}}}')
    assert exc.value.param == "session.audio.output.format.type"
    with pytest.raises(p.ProtocolError) as exc:
        ev('{"type":"session.update","session":{"audio":{"input":{"format":{"type":"audio/g729"}}}}}')
    assert exc.value.param == "session.audio.input.format.type"
    with pytest.raises(p.ProtocolError) as exc:
        ev('{"type":"session.update","session":{"audio":{"output":{"speed":2.0}}}}')
    assert exc.value.param == "session.audio.output.speed"


def test_without_a_voice_audio_is_served_as_text_and_reported_so() -> None:
    counter = itertools.count()
    s = Session(SessionDefaults(model="m"), lambda e: {**e, "seq": next(counter)})
    out = s.handle(ev('{"type":"session.update","session":{"output_modalities":["audio"]}}'))
    assert out.events[0]["session"]["output_modalities"] == ["text"]
    s.handle(ev(USER))
    start = s.handle(ev(AUDIO_RESPONSE)).actions[0]
    assert start.output_modalities == ["text"]
    assert "response.output_text.delta" in [e["type"] for e in s.on_chunk(start.response_id, "Hi").events]


def test_audio_deltas_are_base64_of_the_wire_bytes() -> None:
    s = make()
    rid, _, speaks = spoken_reply(s, ["Hi."])
    res = fake_result(speaks[0])
    out = s.on_speech(res)
    audio = b"".join(base64.b64decode(e["delta"]) for e in out.events if e["type"] == "response.output_audio.delta")
    assert audio == res.audio


def test_a_later_truncate_never_grows_the_transcript_back() -> None:
    s = make()
    rid, _, speaks = spoken_reply(s, ["One two three four."])
    s.on_speech(fake_result(speaks[0]))
    s.on_done(rid, "stop", {}, {})
    item_id = s.items[-1]["id"]
    for ms in (180, 390):  # the Agents SDK truncates on interrupt, then again when the cancel lands
        raw = f'{{"type":"conversation.item.truncate","item_id":"{item_id}","content_index":0,"audio_end_ms":{ms}}}'
        assert s.handle(ev(raw)).events[0]["type"] == "conversation.item.truncated"
    assert s.items[-1]["content"][0]["transcript"] == "One two"


def test_a_spoken_response_snapshots_as_json_and_a_takeover_ends_it() -> None:
    import json

    from gateway.cluster.snapshot import snapshot, take_over

    s = make()
    rid, _, speaks = spoken_reply(s, ["One two. ", "Three."])
    s.on_speech(fake_result(speaks[0]))
    snap = json.loads(json.dumps(snapshot(s, 10, 3)))  # what goes to Redis
    fresh = make()
    ended = take_over(fresh, snap, [])
    assert ended[-1]["type"] == "response.done" and ended[-1]["response"]["status"] == "incomplete"
