"""The outbound audio of a telephony media stream: µ-law 20 ms frames, marks, and the playhead they report. Pure.

The shell takes one frame per 20 ms of wall clock (``take``) and sends it with the marks that
follow it. The provider plays the frames from its own buffer and echoes each mark once the audio
before it has played, so the playhead (``heard_ms``) is what the caller heard, not what was sent.
A cut (barge-in) drops the queue, and the provider is told to ``clear`` its buffer: each item
cut keeps what its last acknowledged mark says was heard. Marks echoed after a clear were flushed,
not played, and are ignored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

FRAME_BYTES = 160  # 20 ms of µ-law at 8 kHz
FRAME_MS = 20
ULAW_SILENCE = b"\xff"  # µ-law zero


@dataclass(frozen=True)
class Frame:
    ulaw: bytes  # FRAME_BYTES of audio (the tail of a reply padded with silence)


@dataclass(frozen=True)
class MarkOut:
    name: str  # send a mark named this now, after the frames before it


@dataclass(frozen=True)
class PlayoutStarted:
    response_id: str  # its first frame went out


@dataclass(frozen=True)
class PlayoutStopped:
    response_id: str  # all its audio has played (its last mark came back) and no more is coming


@dataclass(frozen=True)
class Cut:
    response_id: str | None  # what was playing
    items: tuple[tuple[str, int], ...]  # every item cut: (item id, ms of it heard by the last acknowledged mark)


@dataclass
class _PlayoutChunk:
    ulaw: bytes
    response_id: str
    item_id: str
    offset: int = 0


@dataclass(frozen=True)
class _Pending:
    response_id: str
    item_id: str
    item_ms: int  # of the item, sent before this mark
    last: bool  # the end of a chunk


Out = Frame | MarkOut | PlayoutStarted


class Playout:
    def __init__(self, mark_ms: int = 100, max_queued_s: float = 120.0):
        self.mark_frames = max(1, mark_ms // FRAME_MS)
        self.max_queued = int(max_queued_s * 8000)
        self._queue: deque[_PlayoutChunk] = deque()
        self._queued = 0
        self._pending: dict[str, _Pending] = {}  # mark name → where it stands; insertion order = send order
        self._sent: dict[str, int] = {}  # item id → ms of it sent
        self._heard: dict[str, int] = {}  # item id → ms of it the caller heard (acknowledged marks)
        self._since_mark = 0  # frames sent since the last mark
        self._current: str | None = None  # response whose frames are going out
        self._marks = 0
        self.frames = 0  # frames sent

    @property
    def playing(self) -> bool:
        """Audio is queued here or sent and not yet played at the provider."""
        return bool(self._queue or self._pending)

    def heard_ms(self, item_id: str) -> int:
        return self._heard.get(item_id, 0)

    def push(self, ulaw: bytes, response_id: str, item_id: str) -> bool:
        """Queue a chunk of a reply; False (nothing queued) when the queue is full."""
        if self._queued + len(ulaw) > self.max_queued:
            return False
        if ulaw:
            self._queue.append(_PlayoutChunk(ulaw, response_id, item_id))
            self._queued += len(ulaw)
        return True

    def take(self) -> list[Out]:
        """The next 20 ms: one frame and the mark after it, or nothing when the queue is empty."""
        if not self._queue:
            return []
        head = self._queue[0]
        out: list[Out] = []
        if self._current != head.response_id:
            self._current = head.response_id
            out.append(PlayoutStarted(head.response_id))
        piece = head.ulaw[head.offset : head.offset + FRAME_BYTES]
        head.offset += len(piece)
        self._queued -= len(piece)
        self._sent[head.item_id] = self._sent.get(head.item_id, 0) + len(piece) // 8
        out.append(Frame(piece + ULAW_SILENCE * (FRAME_BYTES - len(piece))))
        self.frames += 1
        self._since_mark += 1
        ended = head.offset >= len(head.ulaw)
        if ended:
            self._queue.popleft()
        if ended or self._since_mark >= self.mark_frames:
            self._since_mark = 0
            self._marks += 1
            name = f"m{self._marks}"
            self._pending[name] = _Pending(head.response_id, head.item_id, self._sent[head.item_id], ended)
            out.append(MarkOut(name))
        return out

    def ack(self, name: str, open_response: str | None = None) -> list[PlayoutStopped]:
        """The provider echoed mark ``name``: what was sent before it has played. ``open_response``: the
        response that may still add audio (it has not stopped while it runs)."""
        mark = self._pending.get(name)
        if mark is None:
            return []  # flushed by a clear, or not ours
        for key in list(self._pending):  # marks come back in order: the ones before it have played too
            done = self._pending.pop(key)
            self._heard[done.item_id] = max(self._heard.get(done.item_id, 0), done.item_ms)
            if key == name:
                break
        rid = mark.response_id
        more = any(p.response_id == rid for p in self._pending.values()) or any(
            c.response_id == rid for c in self._queue
        )
        if not more and rid != open_response:
            if self._current == rid:
                self._current = None
            return [PlayoutStopped(rid)]
        return []

    def finished(self, response_id: str) -> list[PlayoutStopped]:
        """``response_id`` can add no more audio: stopped now if all of it has played already."""
        more = any(p.response_id == response_id for p in self._pending.values()) or any(
            c.response_id == response_id for c in self._queue
        )
        if more or self._current != response_id:
            return []
        self._current = None
        return [PlayoutStopped(response_id)]

    def clear(self) -> Cut:
        """Drop the queue and forget the marks in flight (their echoes mean nothing now)."""
        items: dict[str, int] = {}
        for p in self._pending.values():
            items.setdefault(p.item_id, self.heard_ms(p.item_id))
        for c in self._queue:
            items.setdefault(c.item_id, self.heard_ms(c.item_id))
        playing = next(iter(self._pending.values())).response_id if self._pending else None
        if playing is None and self._queue:
            playing = self._queue[0].response_id
        self._queue.clear()
        self._pending.clear()
        self._queued = self._since_mark = 0
        self._current = None
        return Cut(playing, tuple(items.items()))
