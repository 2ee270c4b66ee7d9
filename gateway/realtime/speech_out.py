"""Spoken replies (output modality "audio"): the events, the transcript and truncation to what was heard. Pure.

A mixin of ``Session``. Each scheduler chunk of an audio response becomes one ``Speak`` action
(the I/O layer synthesizes it off the event loop, in order); its audio comes back through
``on_speech`` and goes out as ``response.output_audio.delta`` with the chunk's text as
``response.output_audio_transcript.delta``. The transcript therefore holds only text whose audio
was sent, and each piece of it keeps the millisecond its words end at, so that
``conversation.item.truncate`` can cut the item to exactly what the listener heard.

On a WebRTC call (``audio_track``) the audio goes to the call's outbound track as ``PlayAudio``
actions instead of ``output_audio.delta`` events, as OpenAI sends none there; the call knows what
was played and cuts the item itself (``truncate_heard``).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any

from processors.audio_formats import bytes_to_ms
from processors.speech_text import Piece, SpeechText, spoken_text

from ..voice.speech_actions import PlayAudio, Played, Speak, SpeechResult, SpeechSettings
from . import protocol as p
from . import server_events as se
from .conversation import Conversation, Item
from .response_ending import ResponseEnding

AUDIO_DELTA_BYTES = 24_000  # audio per output_audio.delta (0.5 s of audio/pcm): small events, early playback
MS_PER_AUDIO_TOKEN = 50  # usage: output audio counted as one token per 50 ms (OpenAI bills about 20/s)
TRUNCATE_SLACK_MS = 5  # a client's played position may round a few ms past the end
# the names OpenAI's voices go by: clients send them by default (the Agents SDK "ash", LiveKit "marin" …);
# they mean "the default voice" here, never an error
OPENAI_VOICES = frozenset("alloy ash ballad cedar coral echo fable marin nova onyx sage shimmer verse".split())


@dataclass
class AudioState:
    """The spoken part of one response."""

    settings: SpeechSettings
    text: SpeechText = field(default_factory=SpeechText)
    sent: int = 0  # chunks handed to synthesis
    heard: int = 0  # chunks whose audio went out (in order)
    chunks: dict[int, list[Piece]] = field(default_factory=dict)  # text of chunks still being synthesized
    early: dict[int, SpeechResult] = field(default_factory=dict)  # results ahead of their turn
    transcript: str = ""  # the text whose audio went out
    audio_bytes: int = 0
    marks: list[tuple[float, int]] = field(default_factory=list)  # (ms a piece ends, transcript length after it)

    @property
    def pending(self) -> bool:
        return self.heard < self.sent

    @property
    def audio_ms(self) -> float:
        return bytes_to_ms(self.settings.format, self.audio_bytes)


@dataclass
class SpokenItem:
    """What truncation needs of an assistant item that was spoken."""

    audio_ms: float
    marks: list[tuple[float, int]]


def audio_part(transcript: str) -> dict[str, Any]:
    return {"type": "output_audio", "transcript": transcript}


def heard_length(marks: list[tuple[float, int]], audio_end_ms: float) -> int:
    """How much of the transcript was heard at ``audio_end_ms``: a piece counts once past its middle."""
    length, start = 0, 0.0
    for end_ms, text_end in marks:
        if (start + end_ms) / 2 > audio_end_ms:
            break
        length, start = text_end, end_ms
    return length


def usage_with_audio(usage: dict[str, Any], audio_ms: float) -> dict[str, Any]:
    """``usage`` with output split into text and audio tokens."""
    if not usage:
        return usage
    audio = math.ceil(audio_ms / MS_PER_AUDIO_TOKEN)
    text = usage.get("output_tokens", 0)
    return {
        **usage,
        "output_tokens": text + audio,
        "total_tokens": usage.get("total_tokens", 0) + audio,
        "output_token_details": {"text_tokens": text, "audio_tokens": audio},
    }


def voice_name(voice: Any) -> str | None:
    """``audio.output.voice``: a name or ``{id}``."""
    return voice if isinstance(voice, str) or voice is None else str(voice.id)


def check_output(out: p.AudioOutput | None, voices: tuple[str, ...], where: str) -> tuple[str, str] | None:
    """(message, param) refusing an ``audio.output`` block, or None when it is fine."""
    if out is None:
        return None
    fmt = out.format
    if fmt is not None and fmt.type == "audio/pcm" and "rate" in fmt.model_fields_set and fmt.rate != 24_000:
        return f"audio/pcm output is 24000 Hz, not {fmt.rate}", f"{where}.audio.output.format.rate"
    name = voice_name(out.voice)
    if name is not None and name not in voices and name not in OPENAI_VOICES:
        known = ", ".join(sorted(voices)) or "none (speech output is off)"
        return f"voice {name!r} is not installed here (voices: {known})", f"{where}.audio.output.voice"
    return None


def settings_for(default: SpeechSettings, session: p.SessionOptions, response: p.ResponseOptions) -> SpeechSettings:
    """The ``audio.output`` in force: the response's over the session's over the server's."""
    fmt, voice, speed = default.format, default.voice, default.speed
    outs = [session.audio.output if session.audio else None, response.audio.output if response.audio else None]
    for out in outs:
        if out is None:
            continue
        fmt = out.format.type if out.format is not None else fmt
        name = voice_name(out.voice)
        voice = voice if name is None or name in OPENAI_VOICES else name
        speed = out.speed if out.speed is not None else speed
    return SpeechSettings(fmt, voice, speed)


def describe_output(view: dict[str, Any], default: SpeechSettings | None, options: p.SessionOptions) -> None:
    """Fill the session view's ``audio.output`` and the modalities actually served."""
    if default is None:
        view["output_modalities"] = ["text"]  # no voice loaded: audio is answered as text
        return
    s = settings_for(default, options, p.ResponseOptions())
    fmt: dict[str, Any] = {"type": s.format, "rate": 24_000} if s.format == "audio/pcm" else {"type": s.format}
    view.setdefault("audio", {})["output"] = {"format": fmt, "voice": s.voice, "speed": s.speed}
    mods = view.get("output_modalities") or ["text"]
    view["output_modalities"] = ["audio"] if "audio" in mods else ["text"]


def prefetch_text(session: Any, action: Any, events: list[Any]) -> tuple[str, SpeechSettings] | None:
    """The words and settings of the first audio chunk of a prepared reply (``action``, with the engine
    ``events`` it made so far) — exactly what its ``Speak`` will ask for if it is adopted."""
    default = session.defaults.speech
    if default is None or "audio" not in action.output_modalities:
        return None
    first = next((c.text for e in events for c in e.chunks if c.text), None)
    if first is None:
        return None
    return spoken_text(SpeechText().feed(first)), settings_for(default, session.options, p.ResponseOptions())


class SpeechOutput:
    """Mixin: needs the session's ``response``, ``conversation``, ``_out``, ``error`` and ``_finish``."""

    response: Any
    conversation: Conversation
    spoken: dict[str, SpokenItem]
    audio_track = False  # a WebRTC call plays the audio (PlayAudio actions, no output_audio.delta)

    def _out(self, *events: dict[str, Any], actions: list[Any] | None = None) -> Any:
        raise NotImplementedError  # Session's

    def _finish(self, r: Any, ending: ResponseEnding) -> Any:
        raise NotImplementedError  # Session's

    def error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Any:
        raise NotImplementedError  # Session's

    def speak_chunk(self, r: Any, text: str, events: list[dict[str, Any]]) -> Any:
        """A scheduler chunk of audio response ``r``: it goes to synthesis (``events``: what opens the item)."""
        a: AudioState = r.audio
        pieces = a.text.feed(text)
        index = a.sent
        a.sent += 1
        a.chunks[index] = pieces
        return self._out(*events, actions=[Speak(r.id, index, spoken_text(pieces), a.settings)])

    def on_speech(self, result: SpeechResult) -> Any:
        """A chunk's audio is ready: it (and any later ones already waiting) goes out, in order."""
        r = self.response
        if r is None or r.id != result.response_id or r.audio is None:
            return self._out()  # late audio of a cancelled or finished response
        a: AudioState = r.audio
        a.early[result.index] = result
        events: list[dict[str, Any]] = []
        plays: list[Any] = []
        while a.heard in a.early:
            res = a.early.pop(a.heard)
            events.extend(self._release(r, a, res))
            if self.audio_track and res.audio:
                plays.append(PlayAudio(r.id, r.item_id, res.audio, a.settings.format))
            elif res.audio:
                plays.append(Played(res.audio, a.settings.format))
            a.heard += 1
        out = self._out(*events, actions=plays)
        if r.ending is not None and not r.waiting:
            out.extend(self._finish(r, r.ending))
        return out

    def _release(self, r: Any, a: AudioState, res: SpeechResult) -> list[dict[str, Any]]:
        at = se.PartAt(r.id, r.item_id, r.text_index)
        pieces = a.chunks.pop(res.index, [])
        start_ms = a.audio_ms
        sent = 0 if self.audio_track else len(res.audio)  # a call's track plays it instead
        events = [
            se.output_audio_delta(at, base64.b64encode(res.audio[i : i + AUDIO_DELTA_BYTES]).decode("ascii"))
            for i in range(0, sent, AUDIO_DELTA_BYTES)
        ]
        a.audio_bytes += len(res.audio)
        source = "".join(pc.source for pc in pieces)
        if source:
            events.append(se.audio_transcript_delta(at, source))
        word, end_ms = 0, start_ms
        for pc in pieces:
            n = len(pc.spoken.split())
            if n and res.word_ends_ms:
                word += n
                end_ms = start_ms + res.word_ends_ms[min(word, len(res.word_ends_ms)) - 1]
            a.transcript += pc.source
            a.marks.append((end_ms, len(a.transcript)))
        return events

    def spoken_closed(self, r: Any, item: Item | None) -> None:
        """``r`` ended: keep what truncating its item needs (the item holds the transcript sent)."""
        if r.audio is not None and item is not None and r.store:
            self.spoken[r.item_id] = SpokenItem(r.audio.audio_ms, r.audio.marks)

    def truncate(self, ev: p.ItemTruncate) -> Any:
        """``conversation.item.truncate``: cut a spoken item's transcript to ``audio_end_ms``."""
        item = self.conversation.get(ev.item_id)
        if item is None:
            return self.error("item_not_found", f"item {ev.item_id} not found", ev.event_id, "item_id")
        if item.get("role") != "assistant" or item.get("type") != "message":
            return self.error("invalid_value", "only assistant message items can be truncated", ev.event_id, "item_id")
        if ev.content_index >= len(item["content"]):
            return self.error(
                "invalid_value", f"item has no content part {ev.content_index}", ev.event_id, "content_index"
            )
        part = item["content"][ev.content_index]
        spoken = self.spoken.get(ev.item_id)
        if part.get("type") != "output_audio" or spoken is None:
            return self.error("invalid_value", "this content part has no audio to truncate", ev.event_id, "item_id")
        if ev.audio_end_ms > spoken.audio_ms + TRUNCATE_SLACK_MS:
            return self.error(
                "invalid_value",
                f"audio_end_ms {ev.audio_end_ms} is past the end of the item's audio ({spoken.audio_ms:.0f} ms)",
                ev.event_id,
                "audio_end_ms",
            )
        # a transcript only ever shrinks: a later truncate past an earlier one (the Agents SDK sends one when it
        # interrupts and another when the cancelled response ends) leaves it as it is
        keep = min(heard_length(spoken.marks, ev.audio_end_ms), len(part["transcript"]))
        part["transcript"] = part["transcript"][:keep].rstrip()
        return self._out(se.item_truncated(ev.item_id, ev.content_index, ev.audio_end_ms))

    def truncate_heard(self, item_id: str, played_ms: int) -> Any:
        """The server cut a call's playback (barge-in, ``output_audio_buffer.clear``): the spoken item keeps
        what its track played (``conversation.item.truncated`` says so), as a client's truncate would. An
        item that is gone, was never kept or is still being spoken (its response ends first) is left alone."""
        spoken, item = self.spoken.get(item_id), self.conversation.get(item_id)
        if spoken is None or item is None or (self.response is not None and self.response.item_id == item_id):
            return self._out()
        end_ms = min(played_ms, int(spoken.audio_ms))
        cut = p.ItemTruncate(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=end_ms)
        return self.truncate(cut)


def due_truncations(
    cut: list[tuple[str, int]], running_item: str | None
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Items a barge-in cut at the playhead, as ``(item_id, heard_ms)``: (those to truncate now, those
    whose response still runs, truncated when it ends). ``running_item``: the running response's item."""
    waiting = [(item, ms) for item, ms in cut if item == running_item]
    return [c for c in cut if c not in waiting], waiting
