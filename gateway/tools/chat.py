"""Configured MCP servers in Chat Completions (an extension): ``tools: [{type: "mcp", server_label}]``.

The request's servers are listed, their tools offered with the function tools; when the answer calls one,
the gateway runs it and generates again with the result (``gateway.http.chat_completions``), up to
``tools.mcp_max_calls_per_response`` calls; the client sees only the final answer. Only servers of the
gateway's own config (``tools.mcp_servers``): a request names no URL.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from models.toolcalls import ParsedCall, Tool

from ..core.grammars import CompileBusy, off_loop
from ..core.services import Services
from ..http.error_bodies import ApiError
from . import listing
from .client import CallFailed, Endpoint, Limits, McpConnection
from .runner import capped

log = logging.getLogger("stream_omni.mcp")


class ChatMcp:
    def __init__(self, svc: Services, labels: list[str], allowed: dict[str, Any] | None = None):
        """``allowed``: each label's ``allowed_tools`` (absent: all its tools)."""
        c = svc.config.tools
        self.allowed = allowed or {}
        self.svc, self.config = svc, c
        limits = Limits(
            c.mcp_connect_timeout_s,
            c.mcp_call_timeout_s,
            c.mcp_max_response_bytes,
            c.mcp_max_listed_tools,
            c.mcp_max_list_bytes,
            c.mcp_max_list_values,
        )
        self.connections: dict[str, McpConnection] = {}
        for label in labels:
            s = c.mcp_servers[label]
            ep = Endpoint(label, s.url, dict(s.headers), None, s.command, s.args, dict(s.env), s.cwd)
            self.connections[label] = McpConnection(ep, limits)
        self.tools: list[Tool] = []
        self.routes: dict[str, str] = {}  # tool name → server label
        self.calls = 0  # calls run for this request

    async def list_all(self, taken: set[str]) -> None:
        """Every server's tools (schemas the grammar compiles, names not taken); ``ApiError`` 502 when one fails."""
        for label, conn in self.connections.items():
            try:
                listed = await conn.list_tools()
                limits = listing.ListingLimits(self.config.mcp_max_tools)
                admitted = await off_loop(listing.admit, listed, self.allowed.get(label), limits)
            except (CallFailed, listing.ListingRefused) as exc:
                raise ApiError(
                    502, "mcp_list_tools_failed", f"listing the tools of {label!r} failed: {exc.message}"
                ) from None
            except CompileBusy:
                raise ApiError(503, "server_busy", "the server is busy checking tool schemas; retry shortly") from None
            for t in admitted:
                schema = t["input_schema"] or listing.NO_PARAMETERS
                if t["name"] in taken or t["name"] in self.routes:
                    continue
                self.tools.append(Tool(t["name"], t["description"] or "", schema))
                self.routes[t["name"]] = label

    @property
    def spent(self) -> bool:
        return self.calls >= self.config.mcp_max_calls_per_response

    async def run(self, text: str, calls: list[ParsedCall]) -> list[dict[str, Any]]:
        """The assistant turn that made ``calls`` and a ``tool`` turn with each result (or its error), in order."""
        turns: list[dict[str, Any]] = [
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls],
            }
        ]
        for c in calls:
            self.calls += 1
            if self.calls > self.config.mcp_max_calls_per_response:
                result = "Error: too many tool calls in one response"
            else:
                try:
                    output = await self.connections[self.routes[c.name]].call(c.name, json.loads(c.arguments))
                    result = await capped(self.config, self.svc.backend, output)
                except CallFailed as exc:
                    result = f"Error: {exc.message}"
            turns.append({"role": "tool", "content": result})
        return turns

    async def close(self) -> None:
        for conn in self.connections.values():
            await conn.close()


def labels(tools: list[Any] | None) -> list[str]:
    return [t.server_label for t in tools or [] if getattr(t, "type", None) == "mcp"]


async def open_for(svc: Services, tools: list[Any] | None, stream: bool, taken: set[str]) -> ChatMcp | None:
    """The request's MCP servers, listed; None when it names none. ``ApiError`` 400 for a label the config
    does not have, or a streamed request (its tool rounds are not streamed)."""
    names = labels(tools)
    if not names:
        return None
    for i, t in enumerate(tools or []):
        if getattr(t, "type", None) == "mcp" and t.server_label not in svc.config.tools.mcp_servers:
            raise ApiError(
                400,
                "invalid_value",
                f"no MCP server labelled {t.server_label!r} is configured",
                f"tools[{i}].server_label",
            )
    if stream:
        raise ApiError(400, "unsupported_value", "mcp tools answer with stream: false only", "stream")
    mcps = [t for t in tools or [] if getattr(t, "type", None) == "mcp"]
    allowed = {t.server_label: getattr(t, "allowed_tools", None) for t in mcps}
    mcp = ChatMcp(svc, list(dict.fromkeys(names)), allowed)
    try:
        await mcp.list_all(taken)
    except BaseException:
        await mcp.close()
        raise
    return mcp
