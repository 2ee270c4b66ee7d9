"""MCP connections through the official ``mcp`` SDK: Streamable HTTP (guarded, gateway.tools.ssrf) and
stdio (the configured environment only). One connection per server per session, kept open between calls
in a task of its own (the SDK's transports are context managers); every wait is bounded. That task and
every call run on the MCP loop (``gateway.tools.loop_thread``), so the SDK's parsing of what a server
sends never runs on the gateway's event loop; ``McpConnection`` is the gateway's handle on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from . import loop_thread
from .ssrf import AddressRefused, Guard, client

log = logging.getLogger("stream_omni.mcp")
ENV = "/usr/bin/env"  # runs a stdio server with ``env -i``: exactly the configured variables


class CallFailed(Exception):
    """A listing or call that produced no result; ``kind`` is the GA error type, ``message`` fits the client."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


@dataclass(frozen=True)
class Endpoint:
    """How to reach one server. Secrets live here only (never logged: repr leaves them out)."""

    label: str
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    allowed: tuple[str, ...] | None = None  # client-supplied url: the allow-list; None: configured (trusted)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None


@dataclass(frozen=True)
class Limits:
    connect_timeout_s: float = 5.0
    call_timeout_s: float = 20.0
    max_response_bytes: int = 4 * 1024 * 1024
    max_listed_tools: int = 256  # tools one listing may hold, all pages together (more: the listing fails)
    max_list_bytes: int = 256 * 1024  # one page of a listing (HTTP); the SDK parses it whole, holding the GIL
    max_list_values: int = 20000  # JSON values of one page (HTTP): what that parse's time goes with


def stdio_params(ep: Endpoint) -> StdioServerParameters:
    """``env -i K=V … command args``: the SDK adds a few of the gateway's variables (PATH, HOME, …) to a
    server's environment; ``env -i`` clears them, so the server sees exactly ``ep.env``."""
    assert ep.command is not None
    pairs = [f"{k}={v}" for k, v in ep.env.items()]
    return StdioServerParameters(command=ENV, args=["-i", *pairs, ep.command, *ep.args], env={}, cwd=ep.cwd)


def result_text(result: types.CallToolResult) -> str:
    """A tool's result as the text the model reads: its text parts, else its structured content."""
    parts: list[str] = []
    for c in result.content:
        if isinstance(c, types.TextContent):
            parts.append(c.text)
        else:
            parts.append(f"[{c.type} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpConnection:
    """One server's connection as the gateway's loops see it: each operation runs on the MCP loop, in a
    ``_Link`` made there on first use (its futures, events and streams belong to that loop)."""

    def __init__(self, ep: Endpoint, limits: Limits):
        self.ep, self.limits = ep, limits
        self._link: _Link | None = None  # touched on the MCP loop only

    @property
    def dead(self) -> bool:
        return self._link is not None and self._link.dead

    def _linked(self) -> _Link:
        if self._link is None:
            self._link = _Link(self.ep, self.limits)
        return self._link

    async def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools (all pages), as plain dicts; ``CallFailed`` when the listing failed."""
        return await loop_thread.run(self._on_loop_list())

    async def _on_loop_list(self) -> list[dict[str, Any]]:
        return await self._linked().list_tools()

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool's text; ``CallFailed`` when it failed, timed out, or the server misbehaved."""
        return await loop_thread.run(self._on_loop_call(name, arguments))

    async def _on_loop_call(self, name: str, arguments: dict[str, Any]) -> str:
        return await self._linked().call(name, arguments)

    async def close(self) -> None:
        """Closing starts on the MCP loop and ends there (within ``connect_timeout_s``); no caller waits."""
        loop_thread.spawn(self._on_loop_close())

    async def _on_loop_close(self) -> None:
        if self._link is not None:
            await self._link.close()


class _Link:
    """The SDK session of one connection, on the MCP loop."""

    def __init__(self, ep: Endpoint, limits: Limits):
        self.ep, self.limits = ep, limits
        self.guard = Guard(ep.allowed, limits.max_response_bytes, limits.max_list_bytes, limits.max_list_values)
        self._ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.dead = False

    async def _serve(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.ep.url is not None:
                    http = await stack.enter_async_context(
                        client(self.guard, self.ep.headers, self.limits.connect_timeout_s)
                    )
                    streams = await stack.enter_async_context(streamable_http_client(self.ep.url, http_client=http))
                else:
                    streams = await stack.enter_async_context(stdio_client(stdio_params(self.ep)))
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                await session.initialize()
                if not self._ready.done():
                    self._ready.set_result(session)
                await self._closing.wait()
        except BaseException as exc:  # the SDK wraps failures in exception groups; the caller gets one kind
            if not self._ready.done():
                self._ready.set_exception(CallFailed("http_error", self._why(exc)))
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
        finally:
            self.dead = True

    def _why(self, exc: BaseException) -> str:
        if self.guard.refusal is not None:
            return self.guard.refusal
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            return self._why(exc.exceptions[0])
        return f"the server could not be reached: {_message(exc)}"

    async def session(self) -> ClientSession:
        if self.ep.url is not None and self.guard.allowed is not None:
            try:
                await self.guard.admit(self.ep.url)  # refused before any connection
            except AddressRefused as exc:
                raise CallFailed("http_error", str(exc)) from None
        if self._task is None:
            self._task = asyncio.create_task(self._serve(), name=f"mcp-{self.ep.label}")
        session: ClientSession = await self._bounded(
            asyncio.shield(self._ready), self.limits.connect_timeout_s, "connecting"
        )
        return session

    async def _bounded(self, aw: Any, limit_s: float, doing: str) -> Any:
        """``aw`` within ``limit_s``, or sooner the guard's refusal; failures as ``CallFailed``."""
        work = asyncio.ensure_future(aw)
        refused = asyncio.ensure_future(self.guard.refused.wait())
        try:
            done, _ = await asyncio.wait({work, refused}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
        if work not in done:
            work.cancel()
            if self.guard.refusal is not None:
                raise CallFailed("http_error", self.guard.refusal)
            raise CallFailed("tool_execution_error", f"{doing} timed out after {limit_s:g} s")
        try:
            return work.result()
        except CallFailed:
            raise
        except Exception as exc:
            if self.guard.refusal is not None:
                raise CallFailed("http_error", self.guard.refusal) from None
            raise CallFailed("protocol_error", f"{doing} failed: {_message(exc)}") from None

    async def list_tools(self) -> list[dict[str, Any]]:
        session = await self.session()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(16):  # pages, bounded
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._bounded(session.list_tools(params=params), self.limits.call_timeout_s, "listing")
            for t in page.tools:
                tools.append(
                    {
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.input_schema,
                        "annotations": t.annotations.model_dump(exclude_none=True) if t.annotations else None,
                    }
                )
            if len(tools) > self.limits.max_listed_tools:  # no more pages of a listing past any use
                raise CallFailed(
                    "protocol_error",
                    f"the server lists over {self.limits.max_listed_tools} tools (tools.mcp_max_listed_tools)",
                )
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool's text; ``CallFailed`` when it failed, timed out, or the server misbehaved."""
        session = await self.session()
        result = await self._bounded(
            session.call_tool(name, arguments, read_timeout_seconds=self.limits.call_timeout_s),
            self.limits.call_timeout_s,
            f"calling {name}",
        )
        text = result_text(result)
        if result.is_error:
            raise CallFailed("tool_execution_error", text or "the tool failed")
        return text

    async def close(self) -> None:
        self._closing.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), self.limits.connect_timeout_s)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:  # the server went away badly: nothing left to close
                log.debug("closing the MCP connection of %s failed", self.ep.label)


def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
