"""Open MCP connections counted per API key over every session of the process, pure (the event loop's only).

Each session keeps a connection per server label it uses; a client that keeps naming new labels would
otherwise open connections without end. A session closes the ones its tools no longer name
(``gateway.tools.runner``) and holds at most ``tools.mcp_max_connections_per_session``; these seats bound
all sessions of one key together (``tools.mcp_max_connections_per_key``), and their total is the
``stream_omni:mcp_connections`` gauge.
"""

from __future__ import annotations


class KeySeats:
    def __init__(self) -> None:
        self.held: dict[str, int] = {}  # key digest → connections open

    def take(self, key: str, limit: int) -> bool:
        """One more connection for ``key``, unless it holds ``limit`` already."""
        n = self.held.get(key, 0)
        if n >= limit:
            return False
        self.held[key] = n + 1
        return True

    def give(self, key: str) -> None:
        n = self.held.get(key, 0) - 1
        if n > 0:
            self.held[key] = n
        else:
            self.held.pop(key, None)

    @property
    def total(self) -> int:
        return sum(self.held.values())
