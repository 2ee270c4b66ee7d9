"""Chat Completions tools and structured output through the openai SDK (stream and not), on a real server.

Forced calls and ``response_format`` run on the tiny random-init Llama: it has no idea of JSON or tools,
so every valid answer is the grammar's doing. ``auto`` calls need a model that writes the markup on its
own: a scripted backend (the SmolLM2 tokenizer, a fixed answer) stands in for one.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import jsonschema
import numpy as np
import pytest
from openai import OpenAI

from models import toolcalls
from models.backend import KVState
from tests.http.helpers import MODEL, NO_AUDIO, post, user

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def client(addr: str) -> OpenAI:
    return OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0, timeout=120)


def check_call(name: str, arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


# ---------------------------------------------------------------------- forced calls (grammar)


def test_named_tool_choice_forces_a_valid_call(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        r = client(addr).chat.completions.create(
            model=MODEL,
            messages=user("What's the weather in Paris?"),
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=200,
            temperature=0,
        )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id.startswith("call_")
    assert calls[0].function.name == "get_weather"
    check_call("get_weather", calls[0].function.arguments)
    assert not choice.message.content  # the markup never shows as text


def test_required_streams_tool_call_deltas(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        stream = client(addr).chat.completions.create(
            model=MODEL,
            messages=user("Add 2 and 3"),
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=200,
            temperature=0,
            stream=True,
        )
        chunks = list(stream)
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].index == 0 and deltas[0].id.startswith("call_")
    name = deltas[0].function.name
    assert name in SCHEMAS
    assert all(d.index == 0 for d in deltas)
    assert len(deltas) >= 2  # the arguments come in fragments after the header
    check_call(name, "".join(d.function.arguments or "" for d in deltas))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""


# ---------------------------------------------------------------------- response_format


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_answers_validate(tiny_backend, server_factory, stream):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        kw: dict[str, Any] = {"model": MODEL, "messages": user("A person"), "max_tokens": 400, "temperature": 0}
        if stream:
            chunks = list(client(addr).chat.completions.create(response_format=fmt, stream=True, **kw))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = chunks[-1].choices[0].finish_reason
        else:
            r = client(addr).chat.completions.create(response_format=fmt, **kw)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    assert finish == "stop"
    jsonschema.validate(json.loads(text), schema)


def test_json_object_mode(tiny_backend, server_factory):
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        r = client(addr).chat.completions.create(
            model=MODEL,
            messages=user("JSON please"),
            response_format={"type": "json_object"},
            max_tokens=300,
            temperature=0,
        )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


# ---------------------------------------------------------------------- auto: the model's own markup


class ScriptedBackend:
    """Writes ``answer`` (tokenized with the SmolLM2 tokenizer) after any prompt, then end of turn."""

    def __init__(self, tiny: Any, answer: str, step_s: float = 0.0):
        self.step_s = step_s  # simulated compute per forward (tests that act mid-answer)
        self.tokenizer = tiny.tokenizer
        self.name, self.vocab_size, self.eos_ids, self.max_context = MODEL, tiny.vocab_size, tiny.eos_ids, 4096
        self.script = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [min(tiny.eos_ids)]
        self.prompt_len = 0
        self.prompts: list[str] = []

    def new_state(self) -> KVState:
        return KVState()

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        if self.step_s:
            time.sleep(self.step_s)
        state.tokens.extend(tokens)
        out = np.zeros((n_logits, self.vocab_size), dtype=np.float32)
        for i in range(n_logits):
            at = len(state.tokens) - n_logits + i + 1 - self.prompt_len
            out[i, self.script[min(max(at, 0), len(self.script) - 1)]] = 10.0
        return out

    def crop(self, state: KVState, length: int) -> None:
        del state.tokens[length:]

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        self.prompts.append(text)
        ids = self.tokenizer(text + "<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        self.prompt_len = len(ids)
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


ANSWER = (
    'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}</tool_call>\n'
    '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
)


def test_auto_calls_are_cut_out_of_the_text(tiny_backend, server_factory):
    scripted = ScriptedBackend(tiny_backend, ANSWER)
    with server_factory(scripted, **NO_AUDIO) as addr:
        r = client(addr).chat.completions.create(
            model=MODEL, messages=user("Weather in Paris, and 2+3?"), tools=TOOLS, max_tokens=200, temperature=0
        )
        chunks = list(
            client(addr).chat.completions.create(
                model=MODEL, messages=user("again"), tools=TOOLS, max_tokens=200, temperature=0, stream=True
            )
        )
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}),
        ("add", {"a": 2, "b": 3}),
    ]
    assert msg.content == "Let me check."
    assert "<tools>" in scripted.prompts[0] and '"get_weather"' in scripted.prompts[0]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "tool_call" not in text and text.strip() == "Let me check."
    heads = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or []) if tc.id]
    assert [(h.index, h.function.name) for h in heads] == [(0, "get_weather"), (1, "add")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_shows_no_tools_and_no_calls(tiny_backend, server_factory):
    scripted = ScriptedBackend(tiny_backend, ANSWER)
    with server_factory(scripted, **NO_AUDIO) as addr:
        r = client(addr).chat.completions.create(
            model=MODEL, messages=user("hi"), tools=TOOLS, tool_choice="none", max_tokens=200, temperature=0
        )
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert "tool_call" not in (r.choices[0].message.content or "")
    assert "<tools>" not in scripted.prompts[0]


def test_history_with_calls_and_results_reaches_the_prompt(tiny_backend, server_factory):
    scripted = ScriptedBackend(tiny_backend, "It is 21 C in Paris.")
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"c"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    with server_factory(scripted, **NO_AUDIO) as addr:
        r = client(addr).chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, max_tokens=50, temperature=0
        )
    assert r.choices[0].message.content == "It is 21 C in Paris." and r.choices[0].finish_reason == "stop"
    prompt = scripted.prompts[0]
    assert '<tool_call>{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}</tool_call>' in prompt
    assert '<|im_start|>tool\n<tool_response>\n{"temp": 21}\n</tool_response>' in prompt


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "extra, param",
    [
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]},
            "tools[0].function.parameters",
        ),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 3}}}},
            "response_format.json_schema.schema",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
                        ],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
    ],
)
def test_bad_tool_input_is_a_400_naming_the_field(tiny_backend, server_factory, extra, param):
    payload = {"model": MODEL, "messages": user("hi"), "max_tokens": 5, **extra}
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        r = post(addr, payload)
        ok = httpx.post(
            f"http://{addr}/v1/chat/completions",
            json={"model": MODEL, "messages": user("hi"), "max_tokens": 3},
            timeout=60,
        )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert ok.status_code == 200  # the server goes on


def test_render_puts_tools_in_the_system_prompt() -> None:
    tools = [toolcalls.Tool("f", "does f", {"type": "object"})]
    out = toolcalls.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], tools)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("Be brief.")
    assert "<tools>" in out[0]["content"] and '"name": "f"' in out[0]["content"]
    assert toolcalls.parse_call('{"name": "f", "arguments": {"x": 1}}', {"f"}) == toolcalls.ParsedCall("f", '{"x": 1}')
    assert toolcalls.parse_call('{"name": "g", "arguments": {}}', {"f"}) is None
    assert toolcalls.parse_call("{not json", {"f"}) is None
