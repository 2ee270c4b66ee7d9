"""The OpenAI Agents SDK (openai-agents) against our Realtime endpoint with a hosted MCP tool in its
session config. Its RealtimeAgent accepts function tools only, so the MCP entry (and a forced choice of it)
goes in a raw ``session.update`` it sends through its own model: the same forced call and answer."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.tools.conftest import ToolScript, call
from tests.tools.test_mcp_realtime import NO_AUDIO, WAIT_S, tool


async def test_agents_sdk_session_with_a_hosted_mcp_tool(tiny_backend, server_factory, mcp_http):
    from agents.realtime import RealtimeAgent, RealtimeRunner  # here: seconds to import, for this test only
    from agents.realtime.model_inputs import RealtimeModelSendRawMessage

    model = ToolScript(tiny_backend, call("capital", country="Kenya"))
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_allowed_urls": [mcp_http.url]}) as addr:
        runner = RealtimeRunner(RealtimeAgent(name="assistant", instructions="Answer briefly."))
        config: Any = {
            "url": f"ws://{addr}/v1/realtime?model=tiny-llama",
            "api_key": "unused-locally",
            "initial_model_settings": {"model_name": "tiny-llama", "modalities": ["text"], "turn_detection": None},
        }
        raw: list[dict[str, Any]] = []
        session = await runner.run(model_config=config)
        async with session:
            update = {
                "session": {
                    "type": "realtime",
                    "tools": [tool(mcp_http, label="geo")],
                    "tool_choice": {"type": "mcp", "server_label": "geo", "name": "capital"},
                }
            }
            await session.model.send_event(
                RealtimeModelSendRawMessage(message={"type": "session.update", "other_data": update})
            )

            async def until(type_: str) -> dict[str, Any]:
                async for ev in session:
                    if ev.type == "raw_model_event" and ev.data.type == "raw_server_event":
                        raw.append(ev.data.data)
                        if ev.data.data.get("type") == type_:
                            return ev.data.data
                raise AssertionError("the session ended")

            await asyncio.wait_for(until("mcp_list_tools.completed"), WAIT_S)
            await session.send_message("Capital of Kenya?")
            done = (await asyncio.wait_for(until("response.done"), WAIT_S))["response"]
    types = [e.get("type") for e in raw]
    assert "response.mcp_call.completed" in types
    (item,) = [o for o in done["output"] if o["type"] == "mcp_call"]
    assert item["output"] == "Nairobi"
    text = "".join(c.get("text", "") for o in done["output"] if o["type"] == "message" for c in o["content"])
    assert text == "The answer is Nairobi."
