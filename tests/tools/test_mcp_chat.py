"""Configured MCP servers in Chat Completions (the ``tools: [{type: "mcp", server_label}]`` extension),
through the openai SDK: the gateway runs the call and the answer uses its result."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI

from tests.tools.conftest import ToolScript, call

NO_AUDIO = {"audio.enabled": False, "session.instructions": None}


def client(addr: str) -> OpenAI:
    """Closed by its ``with``: an error kept by ``pytest.raises`` holds the client in a reference cycle, and a
    socket freed by the cycle collector unclosed warns in whichever later test collects it."""
    return OpenAI(base_url=f"http://{addr}/v1", api_key="x", timeout=60, max_retries=0)


def test_chat_runs_a_configured_mcp_tool_and_answers_with_it(tiny_backend, server_factory, mcp_http):
    model = ToolScript(tiny_backend, call("add", a=40, b=2))
    servers = {"calc": {"url": mcp_http.url, "headers": {"X-Key": "k"}}}
    with server_factory(model, **NO_AUDIO, **{"tools.mcp_servers": servers}) as addr, client(addr) as c:
        before = len(mcp_http.requests())
        r = c.chat.completions.create(
            model="tiny-llama",
            messages=[{"role": "user", "content": "40+2?"}],
            tools=[{"type": "mcp", "server_label": "calc"}],  # type: ignore[list-item]
            tool_choice="required",
            max_tokens=80,
        )
        with pytest.raises(openai.BadRequestError) as unknown:
            c.chat.completions.create(
                model="tiny-llama",
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "mcp", "server_label": "nope"}],  # type: ignore[list-item]
            )
        with pytest.raises(openai.BadRequestError) as streamed:
            c.chat.completions.create(
                model="tiny-llama",
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "mcp", "server_label": "calc"}],  # type: ignore[list-item]
                stream=True,
            )
    assert r.choices[0].message.content == "The answer is 42."
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert len(mcp_http.requests()) > before  # the gateway called the server
    assert unknown.value.body["param"] == "tools[0].server_label"
    assert streamed.value.body["param"] == "stream"
    assert model.prompts[-1].count("<tool_response>") == 1  # the result reached the model
