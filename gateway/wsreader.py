"""websockets' frame reader, minus two copies of every big frame; big text frames left undecoded.

``websockets.streams.StreamReader`` appends each socket read to one ``bytearray`` (re-allocated and
copied as it grows) and then slices the frame out of it (one more copy of the whole frame, in a
single C call on the event loop). For a 15 MB frame that is tens of ms of the loop's time
(``bench/bigframes.py``). Here a read of at least ``BIG`` bytes collects the socket's chunks as
they come, and joins them once, into exactly the frame's bytes. Everything else is websockets'
own code: this class only replaces the reader's two buffer methods.

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

    parts: list[bytes] | None = None  # while a big read is collecting: the chunks so far …
    wanted = 0  # … and how many bytes it still needs

    def feed_data(self, data: bytes | bytearray) -> None:
        if self.parts is None:
            super().feed_data(data)
            return
        if self.eof:
            raise EOFError("stream ended")
        take = min(self.wanted, len(data))
        self.parts.append(bytes(data[:take]) if take < len(data) else data)  # type: ignore[arg-type]
        self.wanted -= take
        if take < len(data):  # the next frame starts in this chunk: it waits in the buffer, as before
            self.buffer += data[take:]

    def read_exact(self, n: int) -> Generator[None, None, bytearray]:
        if n < BIG or len(self.buffer) >= n:
            return (yield from super().read_exact(n))
        self.parts, self.wanted = [bytes(self.buffer)], n - len(self.buffer)
        del self.buffer[:]
        try:
            while self.wanted > 0:
                if self.eof:
                    have = n - self.wanted
                    raise EOFError(f"stream ends after {have} bytes, expected {n} bytes")
                yield
            parts = self.parts
        finally:
            self.parts = None
        return b"".join(parts)  # type: ignore[return-value]  # bytes: every caller only reads it
