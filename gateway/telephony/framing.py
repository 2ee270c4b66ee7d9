"""SIP over a byte stream (TCP, TLS): messages cut out of the stream by their Content-Length (RFC 3261 §18.3)."""

from __future__ import annotations

import re

MAX_MESSAGE = 64 * 1024  # a SIP message larger than this is not a call's (an SDP offer is ~1 kB): the peer is dropped
_LENGTH = re.compile(rb"^(?:content-length|l)[ \t]*:[ \t]*(\d+)[ \t]*$", re.IGNORECASE | re.MULTILINE)


class FramingError(ValueError):
    """The stream cannot be cut into messages: the connection is closed (there is no resynchronising)."""


class StreamFramer:
    """Bytes in as they arrive, whole messages out: head up to the blank line, then Content-Length bytes."""

    def __init__(self, max_message: int = MAX_MESSAGE):
        self.max_message = max_message
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while True:
            # CRLF keep-alives between messages (RFC 5626 §3.5.1's "ping") are skipped
            while self._buf[:2] == b"\r\n":
                del self._buf[:2]
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > self.max_message:
                    raise FramingError(f"no end of headers within {self.max_message} bytes")
                return out
            head = bytes(self._buf[:end])
            found = _LENGTH.search(head)
            if found is None:
                raise FramingError("a message on a stream must carry Content-Length")  # §18.3: mandatory
            total = end + 4 + int(found.group(1))
            if total > self.max_message:
                raise FramingError(f"a message of {total} bytes (at most {self.max_message})")
            if len(self._buf) < total:
                return out
            out.append(bytes(self._buf[:total]))
            del self._buf[:total]
