"""MCP tools inside a Realtime session, pure: a mixin of ``gateway.realtime.session.Session``.

The session lists each server's tools (``mcp_list_tools`` items), offers them to the model like
function tools, and when the model calls one, runs it itself: the call is an ``mcp_call`` output item,
``CallTool`` actions run the calls in order once the model's turn ends, each result joins the conversation,
and the same response then continues (``StartResponse`` with the same id) to its answer. A call that needs
approval ends the response with an ``mcp_approval_request`` item instead; the client's
``mcp_approval_response`` item decides, and an approved call runs first in the next response.
"""

from __future__ import annotations

from typing import Any

from models.toolcalls import ParsedCall

from ..realtime import protocol as p
from ..realtime.actions import Output, StartResponse
from ..realtime.conversation import Conversation, Item
from ..realtime.response_ending import ResponseEnding
from ..realtime.responses import ResponseState
from . import events, policy
from .state import McpState, Run, ToolError
from .tool_actions import CallTool, ListTools, Server
from .wire import McpApprovalResponseItem

CANCELLED = "the response ended before the call finished"


class McpOutput:
    response: ResponseState | None
    conversation: Conversation
    options: p.SessionOptions
    mcp: McpState

    def _out(self, *events: dict[str, Any], actions: list[Any] | None = None) -> Output:
        raise NotImplementedError  # Session's

    def _plan(self, ev: p.ResponseCreate, rid: str, extra: list[dict[str, str]]) -> tuple[StartResponse, Any] | Output:
        raise NotImplementedError  # Session's

    def error(self, code: str, message: str, event_id: str | None = None, param: str | None = None) -> Output:
        raise NotImplementedError  # Session's

    def item_pending(self, key: str) -> None:
        raise NotImplementedError  # Session's

    def want_response(self, ev: p.ResponseCreate) -> p.ResponseCreate | None:
        raise NotImplementedError  # Session's

    def _finish(self, r: ResponseState, ending: ResponseEnding) -> Output:
        raise NotImplementedError  # Session's

    # ------------------------------------------------------------ listing

    def mcp_strip(self, ev: Any) -> Any:
        """A ``session.update`` / ``response.create`` with its MCP secrets taken out (kept in ``self.mcp``)."""
        opts = ev.session if isinstance(ev, p.SessionUpdate) else ev.response
        if opts is None or "tools" not in opts.model_fields_set or not opts.tools:
            return ev
        stripped = opts.model_copy(update={"tools": self.mcp.take_secrets(opts.tools)})
        return ev.model_copy(update={"session" if isinstance(ev, p.SessionUpdate) else "response": stripped})

    def mcp_list(self, tools: list[Any] | None) -> Output:
        """Start listing the servers of ``tools`` whose listing is missing or stale; a response waits for
        them (``item_pending``: released by ``mcp_listed``)."""
        try:
            servers = self.mcp.servers(tools, "session")
        except ToolError:
            return Output()  # checked (and reported) where the tools came in
        out = Output()
        for server in self.mcp.stale(servers):
            item_id = events.new_id()
            self.mcp.listing[server.label] = item_id
            self.item_pending(f"mcp-list-{server.label}")
            allowed = servers[server.label][1].allowed_tools
            out.extend(self._out(*events.list_started(item_id), actions=[ListTools(server, item_id, allowed)]))
        return out

    def mcp_listed(
        self, label: str, item_id: str, tools: list[dict[str, Any]] | None, error: str | None, allowed: Any = None
    ) -> Output:
        """A listing finished (``tools``, as ``gateway.tools.listing.admit`` let them through, for the
        entry's ``allowed`` tools) or failed (``error``, fit for the client). The caller then settles
        ``mcp-list-<label>`` to release a response that waited for it."""
        if self.mcp.listing.get(label) != item_id:
            return Output()  # superseded
        self.mcp.listed(label, tools, allowed)
        item = events.list_item(item_id, label, list(self.mcp.listings[label].tools))
        prev = self.conversation.last_id
        self.conversation.append(item)
        out = self._out(*events.list_finished(item, prev, tools is not None))
        if error is not None:
            out.extend(self.error("mcp_list_tools_failed", f"listing the tools of {label!r} failed: {error}"))
        return out

    def mcp_hold(self, ev: p.ResponseCreate) -> Output | None:
        """Before a response starts: the listings it needs that are missing start now and it waits for
        them (None: it may start)."""
        opts = ev.response or p.ResponseOptions()
        tools = opts.tools if opts.tools is not None else self.options.tools
        out = self.mcp_list(tools)
        if not out.actions and not self.mcp.listing:
            return None
        self.want_response(ev)  # held: released when the listings settle
        return out

    # ------------------------------------------------------------ a response's calls

    def mcp_begin(self, ev: p.ResponseCreate, action: StartResponse, routes: dict[str, Any]) -> Output | None:
        """A response starts: its calls go through ``routes``. Calls approved since the last response run
        first (their output then reaches the model); None: nothing to run, generation starts as planned."""
        rid = action.response_id
        run = Run(ev, routes)
        self.mcp.runs[rid] = run
        r = self.response
        assert r is not None
        out = Output()
        for req in self._approved():
            try:
                servers = self.mcp.servers(self.options.tools, "session")
            except ToolError:
                servers = {}
            item = events.call_item(req["server_label"], req["name"], req["arguments"], req["id"])
            self._announce(r, item, stream=False, out=out)
            if req["server_label"] not in servers:
                item["error"] = events.tool_error("http_error", f"server {req['server_label']!r} is not in the session")
                out.extend(self._out(*events.call_finished(rid, item, self._index(r, item))))
                continue
            run.queue.append(item["id"])
        if not run.queue and not out.events:
            return None
        return out.extend(self._next(r, run))

    def _approved(self) -> list[Item]:
        """Approval requests answered ``approve: true`` whose call has not run yet, in order."""
        requests = {i["id"]: i for i in self.conversation.items if i.get("type") == "mcp_approval_request"}
        ran = {i.get("approval_request_id") for i in self.conversation.items if i.get("type") == "mcp_call"}
        return [
            requests[i["approval_request_id"]]
            for i in self.conversation.items
            if i.get("type") == "mcp_approval_response"
            and i.get("approve")
            and i["approval_request_id"] in requests
            and i["approval_request_id"] not in ran
        ]

    def _index(self, r: ResponseState, item: Item) -> int:
        """The item's output_index: its place among the response's items in the order produced."""
        return r.indexes[item["id"]] if item["id"] in r.indexes else r.take_index(item["id"])

    def _announce(self, r: ResponseState, item: Item, stream: bool, out: Output) -> None:
        r.mcp.append(item)
        prev = self.conversation.last_id
        self.conversation.append(item)  # in the conversation from its announcement; filled in when it ends
        out.extend(self._out(*events.call_announced(r.id, item, self._index(r, item), prev, stream)))

    def mcp_on_call(self, response_id: str, call: ParsedCall) -> Output | None:
        """A call the model made: None unless it names an MCP tool of the response's."""
        r = self.response
        run = self.mcp.runs.get(response_id)
        if r is None or r.id != response_id or run is None or call.name not in run.routes:
            return None
        server, entry = run.routes[call.name]
        out = Output()
        if policy.needs_approval(entry.require_approval, call.name):
            prev = self.conversation.last_id
            index = len(r.indexes)  # the next output_index: the request takes it just below
            item, evs = events.approval_request(r.id, server.label, call.name, call.arguments, index, prev)
            r.take_index(item["id"])
            r.mcp.append(item)
            self.conversation.append(item)
            return out.extend(self._out(*evs))
        item = events.call_item(server.label, call.name, call.arguments)
        self._announce(r, item, stream=True, out=out)
        if run.made + len(run.queue) >= self.mcp.policy.max_calls_per_response:
            item["error"] = events.tool_error("tool_execution_error", "too many tool calls in one response")
            return out.extend(self._out(*events.call_finished(r.id, item, self._index(r, item))))
        run.queue.append(item["id"])
        return out

    def mcp_on_done(self, response_id: str, reason: str) -> Output | None:
        """The model's turn ended: with calls waiting, they run (the response goes on); else None."""
        r = self.response
        run = self.mcp.runs.get(response_id)
        if r is None or r.id != response_id or run is None or reason != "stop" or not run.queue:
            return None
        return self._next(r, run)

    def _next(self, r: ResponseState, run: Run) -> Output:
        """The next waiting call starts; with none left, the model continues with the results."""
        if run.queue:
            item = next(i for i in r.mcp if i["id"] == run.queue[0])
            server = run.routes[item["name"]][0] if item["name"] in run.routes else self._server(item["server_label"])
            if server is None:
                return self.mcp_result(r.id, item["id"], None, events.tool_error("http_error", "server not in session"))
            run.made += 1
            action = CallTool(r.id, item["id"], server, item["name"], item["arguments"])
            return self._out(*events.call_started(item, self._index(r, item)), actions=[action])
        limit = run.made >= self.mcp.policy.max_calls_per_response
        opts = run.origin.response or p.ResponseOptions()
        # forced only once: the continuation answers with the results, or calls again in "auto"
        again = run.origin.model_copy(
            update={"response": opts.model_copy(update={"tool_choice": "none" if limit else "auto"})}
        )
        planned = self._plan(again, r.id, [])
        if isinstance(planned, Output):  # cannot happen for options that planned once; the response ends failed
            return planned.extend(self._finish(r, ResponseEnding.failed(None)))
        return self._out(actions=[planned[0]])

    def _server(self, label: str) -> Server | None:
        try:
            entry = self.mcp.servers(self.options.tools, "session").get(label)
        except ToolError:
            return None
        return entry[0] if entry else None

    def mcp_result(self, response_id: str, item_id: str, output: str | None, error: dict[str, Any] | None) -> Output:
        """A call ended: its item is filled in, then the next call runs or the model goes on."""
        r = self.response
        run = self.mcp.runs.get(response_id)
        if r is None or r.id != response_id or run is None or not run.queue or run.queue[0] != item_id:
            return Output()  # the response ended meanwhile (cancelled): the result is dropped
        run.queue.pop(0)
        item = next(i for i in r.mcp if i["id"] == item_id)
        item["output"], item["error"] = (None, error) if error is not None else (output, None)
        out = self._out(*events.call_finished(r.id, item, self._index(r, item)))
        return out.extend(self._next(r, run))

    def mcp_end(self, r: ResponseState) -> None:
        """The response ends: calls that did not run say so (the model reads that, not silence)."""
        run = self.mcp.runs.pop(r.id, None)
        for item in r.mcp:
            if run is not None and item["id"] in run.queue:
                item["error"] = events.tool_error("tool_execution_error", CANCELLED)

    # ------------------------------------------------------------ approvals

    def mcp_approval(self, ev: p.ItemCreate, add: Any) -> Output:
        """An ``mcp_approval_response`` item: it must answer a request of this conversation, once."""
        item = ev.item
        assert isinstance(item, McpApprovalResponseItem)
        rid = item.approval_request_id
        request = self.conversation.get(rid)
        if request is None or request.get("type") != "mcp_approval_request":
            return self.error(
                "invalid_value", f"no mcp_approval_request {rid!r}", ev.event_id, "item.approval_request_id"
            )
        if any(i.get("approval_request_id") == rid for i in self.conversation.items if i is not request):
            return self.error("invalid_value", f"{rid!r} is already answered", ev.event_id, "item.approval_request_id")
        out: Output = add(
            events.approval_response(item.id, rid, item.approve, item.reason), ev.previous_item_id, ev.event_id
        )
        return out
