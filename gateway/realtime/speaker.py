"""A session's synthesis queue: its ``Speak`` actions, in order, off the event loop. Thin I/O.

One task per session takes chunks in order and synthesizes each on the server's TTS pool; so
chunk n+1 is synthesized while the client plays chunk n. A cancelled response's chunks are
dropped from the queue at once and a synthesis already running for it is discarded when it
returns (one clause, tens of ms). ``prefetch`` synthesizes a text before any response asks for
it (the first chunk of a reply prepared during the user's pause); a ``Speak`` of the same text and
settings then takes that result instead of starting again. On a WebRTC call the session's released
audio comes back here as ``PlayAudio`` and goes to the call's track (``sink``), in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ..speech import SpeechService, Synthesis
from .speech_out import PlayAudio, Speak, SpeechResult, SpeechSettings

log = logging.getLogger("stream_omni.speaker")

_Key = tuple[str, SpeechSettings]


class Speaker:
    def __init__(self, service: SpeechService | None, deliver: Callable[[SpeechResult], None]):
        """``service`` None: no voice is loaded (nothing is ever submitted then)."""
        self.service = service
        self.deliver = deliver  # the session's on_speech, from the event loop
        self.sink: Callable[[PlayAudio], None] | None = None  # a WebRTC call's outbound track, while it has one
        self._queue: asyncio.Queue[Speak] = asyncio.Queue()
        self._cancelled: set[str] = set()  # responses whose chunks are dropped
        self._ready: dict[_Key, asyncio.Future[Synthesis]] = {}  # prefetched syntheses
        self._task = asyncio.create_task(self._run(), name="speaker")

    def submit(self, action: Speak | PlayAudio) -> None:
        """A chunk to synthesize, or (on a call) a released chunk to play."""
        if isinstance(action, PlayAudio):
            if self.sink is not None:
                self.sink(action)
            return
        self._queue.put_nowait(action)

    def cancel(self, response_id: str) -> None:
        """Stop speaking ``response_id`` now: nothing more of it is synthesized or delivered."""
        self._cancelled.add(response_id)
        kept = [a for a in self._drain() if a.response_id != response_id]
        for a in kept:
            self._queue.put_nowait(a)

    def _drain(self) -> list[Speak]:
        items = []
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items

    def prefetch(self, said: tuple[str, SpeechSettings] | None) -> None:
        """Synthesize these words now, unseen; a later identical ``Speak`` takes the result."""
        if said is not None and self.service is not None and said[0].strip() and said not in self._ready:
            self._ready[said] = asyncio.ensure_future(self.service.run(*said))

    def forget(self) -> None:
        """The prepared reply went: its prefetched audio is never heard."""
        for fut in self._ready.values():
            fut.cancel()
        self._ready.clear()

    async def _run(self) -> None:
        while True:
            action = await self._queue.get()
            if action.response_id in self._cancelled or self.service is None:
                continue
            try:
                ready = self._ready.pop((action.text, action.settings), None)  # taken: forget() spares it
                synth = await (
                    ready if ready is not None else self.service.run(action.text, action.settings, action.index)
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed synthesis costs this chunk's audio, not the session
                log.error("speech synthesis failed: %s", type(exc).__name__)
                synth = Synthesis(b"", ())
            if action.response_id in self._cancelled:
                continue
            self.deliver(SpeechResult(action.response_id, action.index, synth.audio, synth.word_ends_ms))

    def close(self) -> None:
        self.forget()
        self._task.cancel()
        with contextlib.suppress(Exception):
            self._drain()
