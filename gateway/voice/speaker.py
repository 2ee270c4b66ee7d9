"""A session's synthesis queue: its ``Speak`` actions, in order, off the event loop. Thin I/O.

One task per session takes chunks in order and synthesizes each on the server's TTS pool; so
chunk n+1 is synthesized while the client plays chunk n. A cancelled response's chunks are
dropped from the queue at once and a synthesis already running for it is discarded when it
returns (one clause, tens of ms). A reply's later chunks wait while its audio is more than a lead
ahead of real-time playback (``gateway.voice.pacing``) and the engine is decoding, so a long
reply's synthesis does not take the cores from decoding in one burst; once the engine is idle the
wait ends (the cores are free then), and a cancel ends it at once.
``prefetch`` synthesizes a text before any response asks for it (the first chunk of a reply
prepared during the user's pause); a ``Speak`` of the same text and settings then takes that result
instead of starting again. On a WebRTC call the session's released audio comes back here as
``PlayAudio`` and goes to the call's track (``sink``), in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from processors.audio_formats import bytes_to_ms

from .pacing import PlaybackClock
from .speech_actions import PlayAudio, Speak, SpeechResult, SpeechSettings
from .synthesis import SpeechService, Synthesis

log = logging.getLogger("stream_omni.speaker")

_Key = tuple[str, SpeechSettings]
IDLE_POLL_S = 0.05  # how often a paced chunk looks whether the engine went idle (a chunk's synthesis is ~50 ms)


class Speaker:
    def __init__(
        self,
        service: SpeechService | None,
        deliver: Callable[[SpeechResult], None],
        lead_s: float = 0.0,
        decoding: Callable[[], bool] = lambda: True,
        owner: str = "",
    ):
        """``service`` None: no voice is loaded (nothing is ever submitted then); ``lead_s``: how far a
        reply's synthesis may run ahead of real-time playback while ``decoding()`` (0: as fast as the
        voice goes); ``owner``: the session's key digest, whose turn its later chunks take."""
        self.service = service
        self.owner = owner
        self.decoding = decoding
        self.deliver = deliver  # the session's on_speech, from the event loop
        self.sink: Callable[[PlayAudio], None] | None = None  # a WebRTC call's outbound track, while it has one
        self._queue: asyncio.Queue[Speak] = asyncio.Queue()
        self._cancelled: set[str] = set()  # responses whose chunks are dropped
        self._ready: dict[_Key, asyncio.Future[Synthesis]] = {}  # prefetched syntheses
        self._clock = PlaybackClock(lead_s)
        self._wake = asyncio.Event()  # a cancel: a paced wait ends now
        # (response, index, synthesis start, end, characters) of each chunk made: the session's traces
        self.on_chunk: Callable[[str, int, float, float, int], None] | None = None
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
        self._wake.set()
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
            await self._paced(action.response_id)
            if action.response_id in self._cancelled:
                continue
            started = time.perf_counter()
            try:
                ready = self._ready.pop((action.text, action.settings), None)  # taken: forget() spares it
                synth = await (
                    ready
                    if ready is not None
                    else self.service.run(action.text, action.settings, action.index, owner=self.owner)
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed synthesis costs this chunk's audio, not the session
                log.error("speech synthesis failed: %s", type(exc).__name__)
                synth = Synthesis(b"", ())
            if action.response_id in self._cancelled:
                continue
            if self.on_chunk is not None:
                self.on_chunk(action.response_id, action.index, started, time.perf_counter(), len(action.text))
            self._clock.sent(
                action.response_id, bytes_to_ms(action.settings.format, len(synth.audio)) / 1000, time.monotonic()
            )
            self.deliver(SpeechResult(action.response_id, action.index, synth.audio, synth.word_ends_ms))

    async def _paced(self, response_id: str) -> None:
        """Wait while ``response_id``'s audio is more than the lead ahead of playback and the engine
        decodes (or until a cancel); looks at the engine every ``IDLE_POLL_S``."""
        while (
            response_id not in self._cancelled
            and (wait := self._clock.wait_s(response_id, time.monotonic())) > 0
            and self.decoding()
        ):
            wait = min(wait, IDLE_POLL_S)
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel of this task (close())
            # that lands as the event is set (a cancel of the reply), leaving the task running after close
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def close(self) -> None:
        self.forget()
        self._task.cancel()
        with contextlib.suppress(Exception):
            self._drain()
