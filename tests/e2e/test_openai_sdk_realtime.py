"""The official openai SDK (>= 3) drives /v1/realtime unmodified."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
from openai import AsyncOpenAI

from testkit.recording import Recording


async def test_openai_sdk_realtime_text_roundtrip(tiny_backend, server_factory):
    with server_factory(tiny_backend) as addr:
        client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally")
        async with client.realtime.connect(model="tiny-llama") as conn:
            first = await conn.recv()
            assert first.type == "session.created"
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi"}]}
            )
            await conn.response.create(response={"max_output_tokens": 12})
            deltas: list[str] = []
            seen: list[str] = []
            async for event in conn:
                seen.append(event.type)
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
                if event.type == "response.done":
                    status = event.response.status
                    break
        assert "session.updated" in seen
        assert deltas, f"no deltas among {seen}"
        assert status in ("completed", "incomplete")
        assert seen.index("response.created") < seen.index("response.output_text.delta")


ADD = {
    "type": "function",
    "name": "add",
    "description": "Add two integers",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}


async def test_openai_sdk_realtime_forced_function_call_round_trip(tiny_backend, server_factory):
    """session tools, a forced call per response, its events as the SDK types them, function_call_output back,
    and the follow-up reply. The tiny random-init model knows nothing of tools: the call's shape is the grammar's."""
    model = Recording(tiny_backend)
    with server_factory(model, **{"audio.enabled": False}) as addr:
        client = AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="unused-locally")
        async with client.realtime.connect(model="tiny-llama") as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "tools": [ADD]})
            await conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add 2 and 3"}]}
            )
            await conn.response.create(
                response={"tool_choice": {"type": "function", "name": "add"}, "max_output_tokens": 200}
            )
            events = await _until_done(conn)
            done = events[-1].response
            assert done.status == "completed", done
            added = [e.item for e in events if e.type == "response.output_item.added"]
            deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
            (final,) = [e for e in events if e.type == "response.function_call_arguments.done"]
            (item_done,) = [e.item for e in events if e.type == "response.output_item.done"]
            assert [i.type for i in added] == ["function_call"]
            assert final.name == "add" and final.call_id == added[0].call_id
            assert "".join(deltas) == final.arguments  # the fragments add up to the arguments
            jsonschema.validate(json.loads(final.arguments), ADD["parameters"])
            assert item_done.type == "function_call" and item_done.arguments == final.arguments
            assert [(o.type, o.call_id) for o in done.output] == [("function_call", final.call_id)]
            assert not [e for e in events if e.type == "response.output_text.delta"]  # a call, no text

            args = json.loads(final.arguments)
            result = json.dumps({"sum": args["a"] + args["b"]})
            await conn.conversation.item.create(
                item={"type": "function_call_output", "call_id": final.call_id, "output": result}
            )
            await conn.response.create(response={"max_output_tokens": 8})  # the session's tool_choice: auto
            events = await _until_done(conn)
            created = [e for e in events if e.type == "conversation.item.done"]
            follow = events[-1].response
    assert created and created[0].item.type == "function_call_output"
    assert follow.status in ("completed", "incomplete") and follow.output[0].type == "message"
    assert any(result in m["content"] for m in model.prompts[-1]), model.prompts[-1]  # the output reached the model


async def _until_done(conn: Any) -> list[Any]:
    """Every event up to and including the next response.done (an error event fails)."""
    events: list[Any] = []
    async with asyncio.timeout(60):
        async for event in conn:
            assert event.type != "error", event
            events.append(event)
            if event.type == "response.done":
                return events
    raise AssertionError(f"the connection closed before response.done: {[e.type for e in events]}")
