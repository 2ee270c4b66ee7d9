"""A session's MCP bookkeeping, pure: its servers (checked against the policy), their cached tool
listings, the secrets kept out of its options, and each response's calls in order."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models import constrain, toolplan
from models.toolcalls import Tool
from models.toolplan import ToolPlan

from ..realtime import functions
from ..realtime import protocol as p
from . import policy
from .tool_actions import Server
from .wire import McpTool, NamedMcpTool

ToolError = functions.ToolError
RETRY_FAILED_S = 10.0  # a failed listing is tried again this soon (or at the TTL, if shorter)


@dataclass(frozen=True)
class McpPolicy:
    """What the gateway's config allows a session (``tools`` section)."""

    allowed_urls: tuple[str, ...] = ()  # client-supplied server_url must fall under one
    servers: tuple[str, ...] = ()  # labels of tools.mcp_servers
    list_ttl_s: float = 300.0  # a listing is reused this long
    max_calls_per_response: int = 8
    max_tools: int = 64  # tools taken from one listing


@dataclass
class Listing:
    tools: list[dict[str, Any]]  # {name, description, input_schema, annotations}, as in the mcp_list_tools item
    at: float  # clock reading when it arrived
    failed: bool = False  # the listing failed: nothing offered until it is tried again
    allowed: Any = None  # the entry's allowed_tools it was filtered by: another filter lists again


@dataclass
class Run:
    """One response's MCP calls: which server each offered name goes to, and what is left to run."""

    origin: p.ResponseCreate  # what the response asked for: its continuation after the calls uses it again
    routes: dict[str, tuple[Server, McpTool]]
    queue: list[str] = field(default_factory=list)  # item ids of calls still to run, in order
    made: int = 0  # calls this response made (tools.mcp_max_calls_per_response)


Entry = tuple[Server, McpTool]


class McpState:
    def __init__(self, pol: McpPolicy, clock: Callable[[], float] = time.monotonic):
        self.policy = pol
        self.clock = clock
        self.secrets: dict[str, dict[str, str]] = {}  # label → headers (authorization included); memory only
        self.bad_headers: dict[str, str] = {}  # label → why its client headers were refused (policy.check_headers)
        self.listings: dict[str, Listing] = {}
        self.listing: dict[str, str] = {}  # label → the mcp_list_tools item id of a listing in flight
        self.runs: dict[str, Run] = {}  # response id → its calls
        self.last_routes: dict[str, Entry] = {}  # of the last plan: the response it planned calls through them

    # ------------------------------------------------------------ secrets

    def take_secrets(self, tools: list[Any] | None) -> list[Any] | None:
        """``tools`` with every ``mcp`` entry's headers and authorization taken out (kept here, by label)."""
        if tools is None:
            return None
        out: list[Any] = []
        for t in tools:
            if isinstance(t, McpTool):
                headers = dict(t.headers or {})
                try:
                    policy.check_headers(headers)
                    self.bad_headers.pop(t.server_label, None)
                except policy.PolicyError as exc:  # reported by servers(), naming the field
                    self.bad_headers[t.server_label] = exc.message
                    headers = {}
                if t.authorization:
                    headers["Authorization"] = f"Bearer {t.authorization}"
                self.secrets[t.server_label] = headers
                t = t.model_copy(update={"headers": None, "authorization": None})
            out.append(t)
        return out

    # ------------------------------------------------------------ servers and listings

    def servers(self, tools: list[Any] | None, where: str) -> dict[str, Entry]:
        """The ``mcp`` entries of ``tools`` by label, each checked; raises ``ToolError`` naming the field."""
        found: dict[str, Entry] = {}
        for i, t in enumerate(tools or []):
            if not isinstance(t, McpTool):
                continue
            if t.server_label in found:
                raise ToolError(f"two mcp tools are labelled {t.server_label!r}", f"{where}.tools[{i}].server_label")
            if t.server_label in self.bad_headers:
                raise ToolError(self.bad_headers[t.server_label], f"{where}.tools[{i}].headers")
            if t.connector_id is not None:
                raise ToolError("connectors are not served here; give a server_url", f"{where}.tools[{i}].connector_id")
            if t.server_url is None:
                if t.server_label not in self.policy.servers:
                    raise ToolError(
                        f"no MCP server labelled {t.server_label!r} is configured (tools.mcp_servers)",
                        f"{where}.tools[{i}].server_label",
                    )
                found[t.server_label] = (Server(t.server_label, None), t)
                continue
            try:
                rule = policy.check_url(t.server_url, self.policy.allowed_urls)
            except policy.PolicyError as exc:
                raise ToolError(exc.message, f"{where}.tools[{i}].server_url") from None
            found[t.server_label] = (Server(t.server_label, t.server_url, rule.host), t)
        return found

    def stale(self, servers: dict[str, Entry]) -> list[Server]:
        """Servers whose listing is missing or older than the TTL, and not being listed."""
        now = self.clock()
        return [
            s
            for label, (s, entry) in servers.items()
            if label not in self.listing
            and (
                label not in self.listings
                or now - self.listings[label].at > self._ttl(self.listings[label])
                or self.listings[label].allowed != entry.allowed_tools
            )
        ]

    def _ttl(self, listing: Listing) -> float:
        return min(self.policy.list_ttl_s, RETRY_FAILED_S) if listing.failed else self.policy.list_ttl_s

    def listed(self, label: str, tools: list[dict[str, Any]] | None, allowed: Any = None) -> None:
        """``tools``: the listing as ``gateway.tools.listing.admit`` let it through (None: it failed)."""
        self.listing.pop(label, None)
        if tools is None:
            self.listings[label] = Listing([], self.clock(), failed=True, allowed=allowed)
        else:
            self.listings[label] = Listing(tools[: self.policy.max_tools], self.clock(), allowed=allowed)

    # ------------------------------------------------------------ the model's view

    def offered(self, servers: dict[str, Entry], taken: set[str]) -> dict[str, tuple[Entry, Tool]]:
        """Every listed tool the model may call, by name: allowed by its entry, its name not taken by a
        function tool or an earlier server. Schemas were checked off the loop when the listing came
        (``gateway.tools.listing.admit``): nothing here compiles."""
        out: dict[str, tuple[Entry, Tool]] = {}
        for label, entry in servers.items():
            listing = self.listings.get(label)
            for t in listing.tools if listing else []:
                name = t["name"]
                if name in taken or name in out or not policy.tool_allowed(entry[1].allowed_tools, name):
                    continue
                schema = t.get("input_schema") or {"type": "object", "properties": {}}
                out[name] = (entry, Tool(name, t.get("description") or "", schema))
        return out

    def plan(
        self, tools: list[Any] | None, choice: Any, where: str, parallel: bool = True
    ) -> tuple[ToolPlan, dict[str, Entry]]:
        """Function tools as ``functions.plan`` checks them, plus the listed MCP tools, with ``choice``
        (an ``mcp`` choice forces a call of that server's tool). Raises ``ToolError``."""
        fns = [t for t in tools or [] if isinstance(t, p.FunctionTool)]
        servers = self.servers(tools, where)
        fn_choice: p.ToolChoice = choice if isinstance(choice, p.NamedTool) else "auto"
        base = functions.plan(fns, fn_choice, where, parallel)
        offered = self.offered(servers, {t.name for t in base.tools})
        routes = {name: entry for name, (entry, _) in offered.items()}
        mcp_tools = [tool for _, tool in offered.values()]
        all_tools = base.tools + mcp_tools
        known = frozenset(t.name for t in all_tools)
        if choice == "none":
            return ToolPlan(), {}
        if isinstance(choice, NamedMcpTool):
            if choice.server_label not in servers:
                raise ToolError(
                    f"tool_choice names server {choice.server_label!r}, not in tools", f"{where}.tool_choice"
                )
            chosen = [t for t in mcp_tools if routes[t.name][0].label == choice.server_label]
            if choice.name is not None:
                chosen = [t for t in chosen if t.name == choice.name]
            if not chosen:
                what = choice.name or "any tool"
                raise ToolError(
                    f"tool_choice names {what!r} of {choice.server_label!r}, which it does not offer",
                    f"{where}.tool_choice",
                )
            grammar = constrain.tool_call_grammar([t.spec() for t in chosen], parallel=False)
            return ToolPlan(all_tools, known, grammar, parallel=False), routes
        if choice == "required":
            return toolplan.choose(all_tools, "required", None, f"{where}.tool_choice", parallel, False), routes
        return ToolPlan(all_tools, known, base.grammar, base.parallel), routes
