"""The SSRF guard of client-supplied MCP servers: an HTTP transport that checks every request it sends
(redirects included) against the allow-list, resolves the host itself, checks each address, and connects
to the address it checked (so a second DNS answer cannot differ). It also caps every answer's size, a
``tools/list`` answer's to ``max_list_bytes`` and to ``max_list_values`` JSON values (counted on the bytes as
they arrive, before anything parses them: each ``{``, ``[``, ``,`` and ``:``). The MCP SDK parses each answer whole
in one pydantic-core call that holds the GIL, off the gateway's loop (``gateway.tools.loop_thread``) but
not off its GIL: that call's cost goes with the values it builds (up to 2.5 µs each here), not the bytes (a
1 MB page of empty arrays is 1 s of it), so the value cap is what bounds it; a listing within the schema
budget is far smaller.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx2

from . import policy


class AddressRefused(httpx2.TransportError):
    """A request the policy refused (never sent) or an answer over its size."""


class Guard:
    """What one server's connection may reach; remembers why it refused, for the client's error."""

    def __init__(
        self,
        allowed: tuple[str, ...] | None,
        max_response_bytes: int,
        max_list_bytes: int | None = None,
        max_list_values: int | None = None,
    ):
        self.allowed = allowed  # None: a configured server (trusted), only the size caps apply
        self.max_response_bytes = max_response_bytes
        self.max_list_bytes = max_list_bytes if max_list_bytes is not None else max_response_bytes
        self.max_list_values = max_list_values  # None: uncounted
        self.refusal: str | None = None
        self.refused = asyncio.Event()  # set with refusal: a pending operation stops waiting

    def refuse(self, message: str) -> AddressRefused:
        if self.refusal is None:
            self.refusal = message
        self.refused.set()
        return AddressRefused(message)

    async def admit(self, url: str) -> tuple[str, str]:
        """``url``'s host and the checked address to connect to; ``AddressRefused`` (nothing sent) if not allowed."""
        if self.allowed is None:
            t = policy.split(url)
            return t.host, t.host
        try:
            rule = policy.check_url(url, self.allowed)
            host, port = policy.split(url).host, policy.split(url).port
            if policy.is_address(host):  # nothing to resolve (a resolver thread costs ms on a busy box)
                addresses = [host]
            else:
                infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
                addresses = [str(info[4][0]) for info in infos]
            if not addresses:
                raise policy.PolicyError("the server's name has no address")
            for address in addresses:
                policy.check_address(address, rule.host)
        except policy.PolicyError as exc:
            raise self.refuse(exc.message) from None
        except OSError:
            raise self.refuse("the server's name could not be resolved") from None
        return host, addresses[0]


def json_values(chunk: bytes) -> int:
    """An upper bound of the JSON values ``chunk`` opens or separates (inside strings too: never under)."""
    return chunk.count(b"{") + chunk.count(b"[") + chunk.count(b",") + chunk.count(b":")


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, guard: Guard, cap: int, key: str, values: int | None = None):
        self.inner, self.guard, self.cap, self.key, self.values = inner, guard, cap, key, values

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = counted = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.cap:
                raise self.guard.refuse(f"the server's answer is over {self.cap} bytes ({self.key})")
            if self.values is not None:
                counted += json_values(chunk)
                if counted > self.values:
                    raise self.guard.refuse(
                        f"the server's answer holds over {self.values} JSON values (tools.mcp_max_list_values)"
                    )
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class GuardedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, guard: Guard):
        self.guard = guard
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)  # no proxy from the environment

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        host, address = await self.guard.admit(str(request.url))
        if address != host:  # connect to the checked address; the name stays in Host and in TLS
            request.url = request.url.copy_with(host=address)
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
        cap, key, values = self.guard.max_response_bytes, "tools.mcp_max_response_bytes", None
        if _is_listing(request):
            cap, key, values = self.guard.max_list_bytes, "tools.mcp_max_list_bytes", self.guard.max_list_values
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _Capped(response.stream, self.guard, cap, key, values)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _is_listing(request: httpx2.Request) -> bool:
    """A JSON-RPC ``tools/list`` request (the SDK posts each message as one JSON body)."""
    try:
        body = request.content
    except httpx2.RequestNotRead:
        return False
    return b'"tools/list"' in body[:4096]


def client(guard: Guard, headers: dict[str, str], timeout_s: float) -> httpx2.AsyncClient:
    """The HTTP client one MCP connection uses: guarded, redirects followed (each hop checked), no env proxy."""
    return httpx2.AsyncClient(
        transport=GuardedTransport(guard),
        headers=headers,
        timeout=httpx2.Timeout(timeout_s, read=None),  # reads are bounded per call (gateway.tools.client)
        follow_redirects=True,
        max_redirects=5,
        trust_env=False,
    )
