"""MCP tools over the Realtime WebSocket, driven by the openai SDK against real MCP servers (Streamable
HTTP on a loopback port, and stdio): listing, a forced call whose result the answer uses, approvals, a
failing and a hanging tool, refused URLs and redirects. Every event is validated by the SDK's own types
(the SDK parses each one into ``openai.types.realtime``) and every wait is bounded."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from openai import AsyncOpenAI

from tests.tools.conftest import McpHttp, ToolScript, call, start_server, stdio_server, stop

NO_AUDIO = {"audio.enabled": False, "session.instructions": None}
WAIT_S = 60  # one event, on a loaded box


async def recv(conn: Any) -> Any:
    return await asyncio.wait_for(conn.recv(), WAIT_S)


async def until(conn: Any, type_: str, seen: list[Any]) -> Any:
    """Events up to and including the first of ``type_`` (all kept in ``seen``)."""
    while True:
        ev = await recv(conn)
        seen.append(ev)
        if ev.type == type_:
            return ev


def tool(server: McpHttp | None, label: str = "calc", **extra: Any) -> dict[str, Any]:
    entry = {"type": "mcp", "server_label": label, "require_approval": "never", **extra}
    if server is not None:
        entry["server_url"] = server.url
    return entry


async def open_session(addr: str, tools: list[dict[str, Any]]) -> tuple[Any, Any, list[Any]]:
    client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally")
    manager = client.realtime.connect(model="tiny-llama")
    conn = await manager.enter()
    seen: list[Any] = []
    await until(conn, "session.created", seen)
    await conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "tools": tools})
    return manager, conn, seen


async def ask(conn: Any, text: str, seen: list[Any], **response: Any) -> Any:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await conn.response.create(response={"max_output_tokens": 120, **response})
    return (await until(conn, "response.done", seen)).response


def text_of(done: Any) -> str:
    return "".join(c.text or "" for o in done.output if o.type == "message" for c in o.content)


def forced(name: str, label: str = "calc") -> dict[str, Any]:
    return {"tool_choice": {"type": "mcp", "server_label": label, "name": name}}


async def test_list_then_forced_call_then_the_answer_uses_the_result(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, call("add", a=2, b=3))
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, seen = await open_session(addr, [tool(mcp_http, headers={"X-Secret": "s3cret-header"})])
        try:
            updated = await until(conn, "session.updated", seen)
            assert "s3cret" not in updated.model_dump_json()
            await until(conn, "mcp_list_tools.completed", seen)
            (listing,) = [e.item for e in seen if e.type == "conversation.item.added"]
            assert listing.type == "mcp_list_tools" and {t.name for t in listing.tools} == {"add", "capital", "sleep"}
            done = await ask(conn, "What is 2+3?", seen, **forced("add"))
        finally:
            await manager.__aexit__(None, None, None)
    assert done.status == "completed", done
    types = [e.type for e in seen]
    (args,) = [e for e in seen if e.type == "response.mcp_call_arguments.done"]
    assert json.loads(args.arguments) == {"a": 2, "b": 3}
    assert "".join(e.delta for e in seen if e.type == "response.mcp_call_arguments.delta") == args.arguments
    order = ["response.mcp_call_arguments.done", "response.mcp_call.in_progress", "response.mcp_call.completed"]
    assert [types.index(t) for t in order] == sorted(types.index(t) for t in order)
    assert types.index("response.mcp_call.completed") < types.index("response.output_text.delta")
    assert types.count("response.done") == 1 and types.count("response.created") == 1  # one response throughout
    (item,) = [o for o in done.output if o.type == "mcp_call"]
    assert (item.name, item.server_label, item.output, item.error) == ("add", "calc", "5", None)
    assert text_of(done) == "The answer is 5."
    assert any("POST /mcp" in line for line in mcp_http.requests())
    assert "s3cret" not in "".join(e.model_dump_json() for e in seen)


async def test_a_configured_stdio_server_with_only_its_environment(tiny_backend, server_factory):
    model = ToolScript(tiny_backend, call("capital", country="Japan"))
    servers = {"local": stdio_server(), "bare": stdio_server("evil")}
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_servers": servers}) as addr:
        manager, conn, seen = await open_session(addr, [tool(None, "local"), tool(None, "bare")])
        try:
            await until(conn, "session.updated", seen)
            done = await ask(conn, "Capital of Japan?", seen, **forced("capital", "local"))
            assert done.status == "completed" and text_of(done) == "The answer is Tokyo."
            model.first = call("env")
            done = await ask(conn, "Your environment?", seen, **forced("env", "bare"))
        finally:
            await manager.__aexit__(None, None, None)
    (item,) = [o for o in done.output if o.type == "mcp_call"]
    names = set(item.output.split(","))
    assert "PYTHONPATH" in names and names <= {"PYTHONPATH", "LC_CTYPE"}, names  # no PATH, HOME, …
    listed = [e for e in seen if e.type == "mcp_list_tools.completed"]
    assert len(listed) == 2


async def test_approval_denied_then_granted(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, call("add", a=20, b=22))
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, seen = await open_session(addr, [tool(mcp_http, require_approval="always")])
        try:
            await until(conn, "mcp_list_tools.completed", seen)
            before = len(mcp_http.requests())
            done = await ask(conn, "20+22?", seen, **forced("add"))
            (request,) = [o for o in done.output if o.type == "mcp_approval_request"]
            assert request.name == "add" and json.loads(request.arguments) == {"a": 20, "b": 22}
            assert not [o for o in done.output if o.type == "mcp_call"]
            assert len(mcp_http.requests()) == before  # nothing ran
            await conn.conversation.item.create(
                item={"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False}
            )
            await conn.response.create(response={"tool_choice": "none", "max_output_tokens": 60})
            denied = (await until(conn, "response.done", seen)).response
            assert "denied" in text_of(denied) and len(mcp_http.requests()) == before

            done = await ask(conn, "20+22 again?", seen, **forced("add"))
            (request,) = [o for o in done.output if o.type == "mcp_approval_request"]
            await conn.conversation.item.create(
                item={"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
            )
            await conn.response.create(response={"max_output_tokens": 60})
            granted = (await until(conn, "response.done", seen)).response
        finally:
            await manager.__aexit__(None, None, None)
    (item,) = [o for o in granted.output if o.type == "mcp_call"]
    assert item.approval_request_id == request.id and item.output == "42"
    assert text_of(granted) == "The answer is 42."


async def test_a_failing_and_a_hanging_tool_fail_their_call_and_the_model_is_told(
    tiny_backend, server_factory, mcp_http
):
    model = ToolScript(tiny_backend, call("capital", country="Atlantis"))
    cfg = {"tools.mcp_allowed_urls": [mcp_http.url], "tools.mcp_call_timeout_s": 1.0}
    with server_factory(model, **NO_AUDIO, **cfg) as addr:
        manager, conn, seen = await open_session(addr, [tool(mcp_http)])
        try:
            await until(conn, "mcp_list_tools.completed", seen)
            failed = await ask(conn, "Capital of Atlantis?", seen, **forced("capital"))
            model.first = call("sleep", seconds=30)
            hung = await ask(conn, "Wait a while", seen, **forced("sleep"))
            model.first = call("add", a=1, b=1)
            after = await ask(conn, "1+1?", seen, **forced("add"))  # the session goes on, a new connection
        finally:
            await manager.__aexit__(None, None, None)
    for done, says in ((failed, "no capital known for Atlantis"), (hung, "timed out")):
        assert done.status == "completed"
        (item,) = [o for o in done.output if o.type == "mcp_call"]
        assert item.output is None and item.error is not None and says in item.error.message
        assert says in text_of(done)  # the answer was written from the error the model read
    assert sum(1 for e in seen if e.type == "response.mcp_call.failed") == 2
    assert text_of(after) == "The answer is 2."


async def test_urls_off_the_allow_list_are_refused_before_any_connection(tiny_backend, server_factory, mcp_http):
    port = mcp_http.url.split(":")[2].split("/")[0]
    by_name = f"http://localhost:{port}/mcp"  # allowed as a URL, but the name resolves to loopback
    with server_factory(tiny_backend, **NO_AUDIO, **{"tools.mcp_allowed_urls": [by_name]}) as addr:
        before = len(mcp_http.requests())
        manager, conn, seen = await open_session(addr, [tool(mcp_http)])
        try:
            err = await until(conn, "error", seen)
            assert err.error.param == "session.tools[0].server_url" and "mcp_allowed_urls" in err.error.message
            await conn.session.update(session={"type": "realtime", "tools": [tool(None, server_url=by_name)]})
            failed = await until(conn, "mcp_list_tools.failed", seen)
            err = await until(conn, "error", seen)
            assert "internal address" in err.error.message
        finally:
            await manager.__aexit__(None, None, None)
    assert failed.item_id and len(mcp_http.requests()) == before  # the server saw nothing


async def test_a_redirect_to_a_disallowed_address_is_refused(tiny_backend, server_factory, mcp_http, tmp_path):
    hop = start_server(tmp_path, f"redirect:{mcp_http.url}")  # allowed; it sends every request to mcp_http
    try:
        with server_factory(tiny_backend, **NO_AUDIO, **{"tools.mcp_allowed_urls": [hop.url]}) as addr:
            before = len(mcp_http.requests())
            manager, conn, seen = await open_session(addr, [tool(hop)])
            try:
                await until(conn, "mcp_list_tools.failed", seen)
                err = await until(conn, "error", seen)
            finally:
                await manager.__aexit__(None, None, None)
        assert "redirect" in err.error.message.lower()
        assert hop.requests() and len(mcp_http.requests()) == before  # the hop was asked; the target never
    finally:
        stop(hop)


async def test_a_forced_call_from_a_model_that_knows_nothing_of_tools_still_parses(
    tiny_backend, server_factory, mcp_http
):
    """The random-init tiny model writes whatever the grammar lets through: the arguments of the forced call
    decode under the tool's JSON schema, so the call always happens and the server accepts it."""
    with server_factory(tiny_backend, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        manager, conn, seen = await open_session(addr, [tool(mcp_http)])
        try:
            await until(conn, "mcp_list_tools.completed", seen)
            done = await ask(conn, "Add two numbers", seen, **forced("add"), max_output_tokens=200)
        finally:
            await manager.__aexit__(None, None, None)
    (item,) = [o for o in done.output if o.type == "mcp_call"]
    args = json.loads(item.arguments)
    assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    assert item.error is None and item.output == str(args["a"] + args["b"])  # the server computed it
