"""Tool calling in the model's own format (Hermes-style, what SmolLM2 and Qwen-family models emit):
pure text in, text out — no I/O, no model.

* ``render(messages, tools)`` turns OpenAI-shaped messages (assistant ``tool_calls``, ``tool``
  results) into the plain ``[{role, content}]`` a chat template without tool support takes: the
  tools go into the system prompt inside ``<tools>…</tools>``; a call the assistant made becomes
  ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``; a tool result becomes a ``tool`` turn
  wrapped in ``<tool_response>…</tool_response>``.
* ``parse_call(body)`` reads what the chunk scheduler cut out between the tags.

Forced calls are produced under ``models.constrain.tool_call_grammar``, so they always parse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .constrain import TOOL_CLOSE, TOOL_OPEN, ToolSpec

TOOL_TAGS = (TOOL_OPEN, TOOL_CLOSE)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.parameters)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, serialised


def system_block(tools: list[Tool]) -> str:
    """The tool instructions appended to the system prompt (Hermes wording, shortened)."""
    lines = "\n".join(
        json.dumps(
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        )
        for t in tools
    )
    return (
        "You may call one or more functions to assist with the user query. The functions are:\n"
        f"<tools>\n{lines}\n</tools>\n"
        "To call a function, answer with a JSON object holding its name and arguments inside tags:\n"
        f'{TOOL_OPEN}{{"name": <function-name>, "arguments": <args-json-object>}}{TOOL_CLOSE}'
    )


def call_text(name: str, arguments: str | dict[str, Any]) -> str:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    return f"{TOOL_OPEN}{json.dumps({'name': name, 'arguments': args}, separators=(',', ':'))}{TOOL_CLOSE}"


def render(messages: list[dict[str, Any]], tools: list[Tool]) -> list[dict[str, str]]:
    """OpenAI-shaped messages → plain ``{role, content}`` turns with the tool markup in the text.

    Each message: ``{role, content}`` plus, for an assistant, ``tool_calls: [{name, arguments}]``
    (arguments a JSON string), and for a ``tool`` turn ``name`` when known.
    """
    out: list[dict[str, str]] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(call_text(c["name"], c["arguments"]) for c in m["tool_calls"])
            content = f"{content}\n{calls}" if content else calls
        elif role == "tool":
            content = f"<tool_response>\n{content}\n</tool_response>"
        out.append({"role": role, "content": content})
    if tools:
        block = system_block(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def parse_call(body: str, known: set[str]) -> ParsedCall | None:
    """The JSON between the tags → a call, or None when it is not one (bad JSON, an unknown tool)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, list) and len(value) == 1:  # some models wrap one call in a list
        value = value[0]
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or value["name"] not in known:
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(args, dict):
        return None
    return ParsedCall(value["name"], json.dumps(args, ensure_ascii=False))
