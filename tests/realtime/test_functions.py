"""Realtime function calling (GA shapes) over a real uvicorn: session.tools, tool_choice, function_call
items, function_call_arguments events, function_call_output continuing the conversation, bad input.

``auto`` calls come from a scripted backend writing the model's own markup; forced calls from the
tiny random-init Llama under the grammar (it knows nothing of tools: the structure is the grammar's).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from tests.http.test_tools import ANSWER, SCHEMAS, ScriptedBackend
from tests.wsclient import RealtimeClient

RT_TOOLS = [
    {"type": "function", "name": name, "description": f"the {name} tool", "parameters": schema}
    for name, schema in SCHEMAS.items()
]
QUERY = "model=tiny-llama"


async def _session(addr: str, **session: Any) -> RealtimeClient:
    c = await RealtimeClient.connect(addr, QUERY)
    await c.until("session.created")
    if session:
        await c.update_session(session)
    return c


def _of(c: RealtimeClient, type_: str, rid: str) -> list[dict[str, Any]]:
    return [e for e in c.events if e["type"] == type_ and e.get("response_id") == rid]


async def test_auto_calls_stream_as_function_call_items_then_output_continues(tiny_backend, server_factory):
    scripted = ScriptedBackend(tiny_backend, ANSWER)
    with server_factory(scripted, **{"audio.enabled": False, "session.instructions": None}) as addr:
        c = await _session(addr, tools=RT_TOOLS, tool_choice="auto")
        done = (await c.ask("Weather in Paris, and 2+3?"))["response"]
        rid = done["id"]
        assert done["status"] == "completed"
        finals = _of(c, "response.function_call_arguments.done", rid)
        assert [(f["name"], json.loads(f["arguments"])) for f in finals] == [
            ("get_weather", {"city": "Paris", "unit": "c"}),
            ("add", {"a": 2, "b": 3}),
        ]
        for f in finals:  # the deltas of each call add up to its arguments
            deltas = [e for e in _of(c, "response.function_call_arguments.delta", rid) if e["call_id"] == f["call_id"]]
            assert deltas and "".join(d["delta"] for d in deltas) == f["arguments"]
        calls = [o for o in done["output"] if o["type"] == "function_call"]
        assert [(o["call_id"], o["name"]) for o in calls] == [(f["call_id"], f["name"]) for f in finals]
        assert all(o["status"] == "completed" for o in calls)
        added = [e["item"]["type"] for e in _of(c, "response.output_item.added", rid)]
        assert added.count("function_call") == 2
        assert "tool_call" not in c.text_of(rid) and c.text_of(rid).strip() == "Let me check."

        # the client answers the first call; the next response sees the call and its output
        await c.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": finals[0]["call_id"], "output": '{"temp": 21}'},
            }
        )
        ack = await c.until("conversation.item.done")
        assert ack["item"]["type"] == "function_call_output"
        await c.send({"type": "response.create"})
        await c.until("response.done")
        prompt = scripted.prompts[-1]
        assert '<tool_call>{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}</tool_call>' in prompt
        assert '<tool_response>\n{"temp": 21}\n</tool_response>' in prompt
        await c.close()


async def test_forced_call_per_response_validates(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        c = await _session(addr, tools=RT_TOOLS)
        await c.say("Add 2 and 3")
        await c.send(
            {
                "type": "response.create",
                "response": {"tool_choice": {"type": "function", "name": "add"}, "max_output_tokens": 200},
            }
        )
        done = (await c.until("response.done"))["response"]
        calls = [o for o in done["output"] if o["type"] == "function_call"]
        assert done["status"] == "completed" and len(calls) == 1 and calls[0]["name"] == "add"
        jsonschema.validate(json.loads(calls[0]["arguments"]), SCHEMAS["add"])
        assert not c.text_of(done["id"])
        await c.close()


async def test_a_call_cut_by_cancel_is_not_in_the_history(tiny_backend, server_factory):
    scripted = ScriptedBackend(tiny_backend, ANSWER, step_s=0.05)
    cfg = {"audio.enabled": False, "speculative.drafter": "none", "session.instructions": None}
    with server_factory(scripted, **cfg) as addr:
        c = await _session(addr, tools=RT_TOOLS)
        await c.say("Weather?")
        await c.send({"type": "response.create", "response": {"scheduler": {"strategy": "fast"}}})
        await c.until("response.output_text.delta")  # "Let me check." is out; the call is still being written
        await c.send({"type": "response.cancel"})
        done = (await c.until("response.done"))["response"]
        assert done["status"] == "cancelled"
        assert not [o for o in done["output"] if o["type"] == "function_call"]
        assert not [e for e in c.events if e["type"].startswith("response.function_call_arguments")]
        scripted.step_s = 0.0
        await c.say("again")
        await c.send({"type": "response.create"})
        await c.until("response.done")
        history = scripted.prompts[-1]
        assert c.text_of(done["id"]) in history  # the delivered text stays ...
        # ... the half-written call does not, neither as a call item nor as raw text
        assert '<tool_call>{"name":"get_weather"' not in history and '"get_weather", "arguments"' not in history
        await c.close()


async def test_bad_tool_input_is_an_error_naming_the_field_and_the_session_goes_on(tiny_backend, server_factory):
    with server_factory(tiny_backend, **{"audio.enabled": False}) as addr:
        c = await _session(addr)
        bad_tool = [{"type": "function", "name": "f", "parameters": {"type": "nope"}}]
        await c.send({"type": "session.update", "session": {"tools": bad_tool}})
        err = (await c.until("error"))["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == "session.tools[0].parameters"

        await c.update_session({"tools": RT_TOOLS})
        await c.send({"type": "response.create", "response": {"tool_choice": {"type": "function", "name": "nope"}}})
        err = (await c.until("error"))["error"]
        assert err["param"] == "response.tool_choice" and "nope" in err["message"]

        await c.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "x", "output": "1"},
            }
        )
        err = (await c.until("error"))["error"]
        assert err["type"] == "invalid_request_error" and err["param"] == "item.call_id"

        done = await c.ask("still there?", max_output_tokens=4)  # the session is usable
        assert done["response"]["status"] in ("completed", "incomplete")
        await c.close()
