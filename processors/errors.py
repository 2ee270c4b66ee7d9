"""The one error type of input processing: a stable ``code`` for the wire, a message for people."""

from __future__ import annotations


class InputError(ValueError):
    """Input a processor refuses. ``code`` goes into the wire ``error.code`` (and HTTP error codes);
    ``message`` says what is wrong without internals."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"
