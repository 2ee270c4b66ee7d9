"""Runs a session's MCP actions (gateway.tools.tool_actions) and feeds the results back into it.

One per ``LiveSession``: a connection per server label, tasks per response (cancelled with it), every
result capped (tools.mcp_max_output_bytes / _tokens) before the model sees it. A misbehaving server
costs its call an ``mcp_call`` error, never the session: every wait is bounded and every failure caught.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from ..core.config import ToolsConfig
from ..core.grammars import CompileBusy, off_loop
from ..core.tokenize import on_tokenizer_thread
from ..realtime.actions import Output
from ..realtime.inputs import McpListed, McpResult
from . import events, listing, policy
from .client import CallFailed, Endpoint, Limits, McpConnection
from .seats import KeySeats
from .tool_actions import CallTool, ListTools, Server

log = logging.getLogger("stream_omni.mcp")


class ToolHost(Protocol):
    """What the runner needs of its ``LiveSession``."""

    def send(self, out: Output) -> None: ...


class McpRunner:
    def __init__(
        self,
        host: ToolHost,
        session: Any,
        config: ToolsConfig,
        tokenizer: Any = None,
        key: str = "",
        seats: KeySeats | None = None,
        gauge: Any = None,
    ):
        """``session``: the sans-I/O ``Session`` (its ``mcp_*`` methods and options); ``tokenizer``: the
        model's (``encode``, ``decode``), when it has one, to cap outputs in its tokens; ``key``: the
        session's key digest, whose connections ``seats`` counts over all its sessions; ``gauge``: set to
        that total (``stream_omni:mcp_connections``)."""
        self.host, self.session, self.config = host, session, config
        self.key, self.seats, self.gauge = key, seats if seats is not None else KeySeats(), gauge
        self.tokenizer = tokenizer if hasattr(tokenizer, "encode") and hasattr(tokenizer, "decode") else None
        self.limits = Limits(
            config.mcp_connect_timeout_s,
            config.mcp_call_timeout_s,
            config.mcp_max_response_bytes,
            config.mcp_max_listed_tools,
            config.mcp_max_list_bytes,
            config.mcp_max_list_values,
        )
        self.listing_limits = listing.ListingLimits(config.mcp_max_tools)
        self.connections: dict[str, McpConnection] = {}
        self.tasks: dict[str, set[asyncio.Task[None]]] = {}  # response id (or "list") → its tasks

    def act(self, action: ListTools | CallTool) -> None:
        key = action.response_id if isinstance(action, CallTool) else "list"
        coro = self._call(action) if isinstance(action, CallTool) else self._list(action)
        task = asyncio.create_task(coro, name="mcp-action")
        self.tasks.setdefault(key, set()).add(task)
        task.add_done_callback(lambda t: self.tasks.get(key, set()).discard(t))

    def cancel(self, response_id: str) -> None:
        for task in self.tasks.pop(response_id, set()):
            task.cancel()

    def endpoint(self, server: Server) -> Endpoint:
        if server.url is None:
            c = self.config.mcp_servers[server.label]
            return Endpoint(server.label, c.url, dict(c.headers), None, c.command, c.args, dict(c.env), c.cwd)
        headers = dict(self.session.mcp.secrets.get(server.label, {}))
        return Endpoint(server.label, server.url, headers, self.config.mcp_allowed_urls)

    def connection(self, server: Server) -> McpConnection:
        """The label's open connection; a new one when it died, or its server changed, within the
        session's and the key's connection caps (``CallFailed`` past them)."""
        ep = self.endpoint(server)
        conn = self.connections.get(server.label)
        if conn is not None and not conn.dead and conn.ep == ep:
            return conn
        if conn is not None:
            self._drop(server.label, conn)
        self.prune()
        c = self.config
        if len(self.connections) >= c.mcp_max_connections_per_session:
            raise CallFailed(
                "http_error",
                f"this session has {len(self.connections)} MCP connections open"
                " (tools.mcp_max_connections_per_session)",
            )
        if not self.seats.take(self.key, c.mcp_max_connections_per_key):
            raise CallFailed(
                "http_error", "this API key has too many MCP connections open (tools.mcp_max_connections_per_key)"
            )
        conn = self.connections[server.label] = McpConnection(ep, self.limits)
        self._count()
        return conn

    def in_use(self) -> set[str]:
        """Labels the session's tools name, and those a running response's calls go through."""
        tools = getattr(getattr(self.session, "options", None), "tools", None) or []
        labels = {t.server_label for t in tools if getattr(t, "type", None) == "mcp"}
        for run in self.session.mcp.runs.values():
            labels.update(server.label for server, _ in run.routes.values())
        labels.update(self.session.mcp.listing)  # a listing in flight
        return labels

    def prune(self) -> None:
        """Close the connections of labels nothing names any more (a session.update dropped them)."""
        keep = self.in_use()
        for label, conn in list(self.connections.items()):
            if label not in keep:
                self._drop(label, conn)

    def _drop(self, label: str, conn: McpConnection) -> None:
        """Closed: after a timeout or a broken answer the connection is not trusted again, and a label
        no longer named needs none."""
        if self.connections.get(label) is conn:
            del self.connections[label]
            self.seats.give(self.key)
            self._count()
        self._spawn_close(conn)

    def _count(self) -> None:
        if self.gauge is not None:
            self.gauge.set(self.seats.total)

    def _spawn_close(self, conn: McpConnection) -> None:
        task = asyncio.create_task(conn.close(), name="mcp-close")
        self.tasks.setdefault("close", set()).add(task)
        task.add_done_callback(lambda t: self.tasks.get("close", set()).discard(t))

    async def _list(self, a: ListTools) -> None:
        label = a.server.label
        tools: list[dict[str, Any]] | None = None
        error: str | None = None
        try:
            conn = self.connection(a.server)
            try:
                listed = await conn.list_tools()
            except CallFailed:
                self._drop(label, conn)
                raise
            # names, allowed_tools and the schema budget, then the schemas compiled: on the grammar thread
            tools = await off_loop(listing.admit, listed, a.allowed, self.listing_limits)
        except CallFailed as exc:
            error = exc.message
        except listing.ListingRefused as exc:
            error = exc.message
        except CompileBusy:
            error = "the server is busy checking tool schemas; the listing is tried again shortly"
        except Exception as exc:  # whatever the server did, the session goes on
            log.warning("listing the tools of %s failed: %s", label, type(exc).__name__)
            error = "the server could not be listed"
        finally:
            # the listing's items, then a response that waited for it
            self.host.send(self.session.handle(McpListed(label, a.item_id, tools, error, a.allowed)))

    async def _call(self, a: CallTool) -> None:
        output: str | None = None
        error: dict[str, Any] | None = None
        try:
            try:
                args = json.loads(a.arguments)
            except ValueError:
                raise CallFailed("protocol_error", "the arguments are not JSON") from None
            conn = self.connection(a.server)
            try:
                text = await conn.call(a.name, args)
            except CallFailed as exc:
                if exc.kind != "tool_execution_error" or "timed out" in exc.message:
                    self._drop(a.server.label, conn)
                raise
            output = await self.cap(text)
        except CallFailed as exc:
            error = events.tool_error(exc.kind, exc.message)
        except asyncio.CancelledError:
            raise  # the response ended: nothing to report
        except Exception as exc:
            log.warning("calling %s on %s failed: %s", a.name, a.server.label, type(exc).__name__)
            error = events.tool_error("protocol_error", "the call failed")
        self.host.send(self.session.handle(McpResult(a.response_id, a.item_id, output, error)))

    async def cap(self, text: str) -> str:
        return await capped(self.config, self.tokenizer, text)

    async def close(self) -> None:
        for tasks in list(self.tasks.values()):
            for task in list(tasks):
                task.cancel()
        conns, self.connections = list(self.connections.values()), {}
        for _ in conns:
            self.seats.give(self.key)
        self._count()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


async def capped(c: ToolsConfig, tokenizer: Any, text: str) -> str:
    """At most mcp_max_output_bytes, then mcp_max_output_tokens by the model's own tokenizer when it has one
    (``encode`` / ``decode``; else estimated from the bytes)."""
    text = policy.cap_output(text, c.mcp_max_output_bytes, c.mcp_max_output_bytes)  # bytes; tokens below
    if len(text.encode("utf-8")) <= c.mcp_max_output_tokens:  # a token is at least a byte: nothing to count
        return text
    if not (hasattr(tokenizer, "encode") and hasattr(tokenizer, "decode")):
        return policy.cap_output(text, c.mcp_max_output_bytes, c.mcp_max_output_tokens)
    ids = await on_tokenizer_thread(tokenizer.encode, text)
    if len(ids) <= c.mcp_max_output_tokens:
        return text
    head = await on_tokenizer_thread(tokenizer.decode, ids[: c.mcp_max_output_tokens - 8])  # room for the note
    return str(head) + policy.TRUNCATED
