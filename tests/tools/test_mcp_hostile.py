"""Malicious MCP servers cannot crash or stall a session: a tool that hangs, one that streams forever,
a huge result, a malformed one, a server that dies mid-call. Each costs its call an error the model reads;
the response completes, and the session answers afterwards. A resume in the middle of a call loses nothing."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import websockets

from tests.tools.conftest import ToolScript, call, start_server, stop
from tests.tools.test_mcp_realtime import NO_AUDIO, WAIT_S, ask, forced, open_session, text_of, tool, until

TIMEOUT_S = 2.0


async def test_hostile_tools_fail_their_calls_and_the_session_goes_on(tiny_backend, server_factory, tmp_path):
    evil = start_server(tmp_path, "evil")
    model = ToolScript(tiny_backend, call("hang"))
    cfg = {
        "tools.mcp_allowed_urls": [evil.url],
        "tools.mcp_call_timeout_s": TIMEOUT_S,
        "tools.mcp_max_response_bytes": 1 << 20,
    }
    results: dict[str, tuple[Any, float]] = {}
    try:
        with server_factory(model, **NO_AUDIO, **cfg) as addr:
            manager, conn, seen = await open_session(addr, [tool(evil, label="evil")])
            try:
                await until(conn, "mcp_list_tools.completed", seen)
                for name in ("hang", "flood", "huge", "malformed", "die"):
                    model.first = call(name)
                    t0 = time.monotonic()
                    done = await ask(conn, f"run {name}", seen, **forced(name, "evil"))
                    results[name] = (done, time.monotonic() - t0)
                await conn.response.create(response={"tool_choice": "none", "max_output_tokens": 8})
                last = (await until(conn, "response.done", seen)).response
            finally:
                await manager.__aexit__(None, None, None)
    finally:
        stop(evil)
    for name, (done, took) in results.items():
        assert done.status == "completed", (name, done)
        (item,) = [o for o in done.output if o.type == "mcp_call"]
        assert item.output is None and item.error is not None, (name, item)
        assert item.error.message in text_of(done)  # the model read the error
        assert took < TIMEOUT_S + 20, (name, took)  # bounded: the call's timeout, plus the model's own time
    errors = {
        name: next(o for o in done.output if o.type == "mcp_call").error.message for name, (done, _) in results.items()
    }
    print({name: (errors[name], round(took, 2)) for name, (_, took) in results.items()})
    assert "timed out" in errors["hang"] and "timed out" not in errors["huge"]
    assert last.status in ("completed", "incomplete")  # the session still answers


async def test_a_resume_in_the_middle_of_a_call_loses_nothing(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, call("sleep", seconds=2))
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        ws = await websockets.connect(f"ws://{addr}/v1/realtime?model=tiny-llama", open_timeout=WAIT_S)
        events: list[dict[str, Any]] = []

        async def read(sock: Any, type_: str) -> dict[str, Any]:
            while True:
                ev = json.loads(await asyncio.wait_for(sock.recv(), WAIT_S))
                if "seq" in ev:
                    assert not events or ev["seq"] == events[-1]["seq"] + 1, "a gap in the stream"
                    events.append(ev)
                if ev["type"] == type_:
                    return ev

        token = (await read(ws, "session.created"))["resume"]["token"]
        await ws.send(json.dumps({"type": "session.update", "session": {"tools": [tool(mcp_http)]}}))
        await read(ws, "mcp_list_tools.completed")
        await ws.send(
            json.dumps(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "wait 2 s"}],
                    },
                }
            )
        )
        await ws.send(json.dumps({"type": "response.create", "response": forced("sleep")}))
        await read(ws, "response.mcp_call.in_progress")
        await ws.close()  # the call runs on, the socket is gone
        resumed = await websockets.connect(
            f"ws://{addr}/v1/realtime?resume_token={token}&last_seq={events[-1]['seq']}", open_timeout=WAIT_S
        )
        try:
            await read(resumed, "session.resumed")
            done = (await read(resumed, "response.done"))["response"]
        finally:
            await resumed.close()
    types = [e["type"] for e in events]
    assert types.count("response.mcp_call.completed") == 1 and types.count("response.created") == 1
    (item,) = [o for o in done["output"] if o["type"] == "mcp_call"]
    assert item["output"] == "slept 2.0"
    assert done["status"] == "completed" and "The answer is slept 2.0." in json.dumps(done)
