"""What the MCP part of a session asks the I/O layer to do (``gateway.tools.runner`` does it). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Server:
    """Where a server is: a client-supplied URL (checked against the allow-list) or a configured label."""

    label: str
    url: str | None  # None: tools.mcp_servers[label]
    rule_host: str = ""  # the allow-list entry's host that admitted url (gateway.tools.policy.check_address)


@dataclass(frozen=True)
class ListTools:
    """Action: list ``server``'s tools; the result is the ``mcp_list_tools`` item ``item_id``."""

    server: Server
    item_id: str
    allowed: Any = None  # the entry's allowed_tools: only those are listed (and checked)


@dataclass(frozen=True)
class CallTool:
    """Action: call ``name`` on ``server`` for response ``response_id``; the result fills item ``item_id``."""

    response_id: str
    item_id: str
    server: Server
    name: str
    arguments: str  # a JSON object, serialised
