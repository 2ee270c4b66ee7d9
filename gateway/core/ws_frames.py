"""websockets' frame reader, minus two copies of every big frame; big text frames left undecoded.

``websockets.streams.StreamReader`` appends each socket read to one ``bytearray`` (re-allocated and
copied as it grows) and then slices the frame out of it (one more copy of the whole frame, in a
single C call on the event loop). For a 15 MB frame that is tens of ms of the loop's time
(``bench/bigframes_bench.py``). Here a read of at least ``BIG`` bytes copies each of the socket's chunks,
as it comes, into a buffer of exactly the frame's size: nothing is left to copy at the end but the
unmasking. Everything else is websockets' own code: this class only replaces the reader's two
buffer methods.

A text message of at least ``limits.parse_off_loop_bytes`` reaches the app undecoded, as
``message[UNDECODED_TEXT]`` (its bytes) instead of ``message["text"]``: decoding it is another pass
over the whole frame on the loop, and it is parsed in another process anyway
(``gateway.realtime.bigframes``), which checks its UTF-8 there (the socket is then closed with 1007,
as the WebSocket layer would have).
"""

from __future__ import annotations

from collections.abc import Generator

from websockets.streams import StreamReader

BIG = 1024 * 1024  # a read this long is collected in chunks; smaller ones use the bytearray as before
UNDECODED_TEXT = "stream_omni.text_utf8"  # ASGI receive-message key of a big text frame's bytes


class ChunkedReader(StreamReader):
    """Drop-in for ``StreamReader`` (its instance's class is swapped: websockets made it already)."""

    target: memoryview | None = None  # while a big read is collecting: where the frame's bytes go …
    filled = 0  # … and how many are there

    def feed_data(self, data: bytes | bytearray) -> None:
        target = self.target
        if target is None:
            super().feed_data(data)
            return
        if self.eof:
            raise EOFError("stream ended")
        take = min(len(target) - self.filled, len(data))
        target[self.filled : self.filled + take] = memoryview(data)[:take]  # a chunk's copy, in its own callback
        self.filled += take
        if take < len(data):  # the next frame starts in this chunk: it waits in the buffer, as before
            self.buffer += memoryview(data)[take:]

    def read_exact(self, n: int) -> Generator[None, None, bytearray]:
        if n < BIG or len(self.buffer) >= n:
            return (yield from super().read_exact(n))
        frame = bytearray(n)  # its pages are touched as the chunks land, not all at the end
        self.target, self.filled = memoryview(frame), len(self.buffer)
        self.target[: self.filled] = self.buffer
        del self.buffer[:]
        try:
            while self.filled < n:
                if self.eof:
                    raise EOFError(f"stream ends after {self.filled} bytes, expected {n} bytes")
                yield
        finally:
            self.target.release()  # (the frame can be resized again)
            self.target = None
        return frame
