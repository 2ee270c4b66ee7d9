"""Fixtures of the MCP tests: real MCP servers (tests/tools/servers.py) as subprocesses on free loopback
ports, and a scripted model that calls a tool, then answers with the tool's result."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.live_server import free_port
from tests.http.test_tools import ScriptedBackend

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class McpHttp:
    url: str  # http://127.0.0.1:PORT/mcp
    log: Path  # a line per HTTP request the server received
    proc: subprocess.Popen[bytes]

    def requests(self) -> list[str]:
        return self.log.read_text().splitlines()


def start_server(tmp: Path, mode: str = "good") -> McpHttp:
    port = free_port()
    log = tmp / f"mcp-{port}.log"
    log.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tools.servers", "http", str(port), str(log), mode],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the MCP test server did not start") from None
            time.sleep(0.05)
    log.write_text("")  # the readiness probe is not a request
    return McpHttp(f"http://127.0.0.1:{port}/mcp", log, proc)


def stop(server: McpHttp) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(10)


@pytest.fixture(scope="module")
def mcp_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpHttp]:
    server = start_server(tmp_path_factory.mktemp("mcp"))
    yield server
    stop(server)


@pytest.fixture(scope="module")
def mcp_evil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpHttp]:
    server = start_server(tmp_path_factory.mktemp("mcp-evil"), "evil")
    yield server
    stop(server)


def stdio_server(mode: str = "good") -> dict[str, Any]:
    """A tools.mcp_servers entry running tests/tools/servers.py over stdio."""
    return {
        "command": sys.executable,
        "args": ["-m", "tests.tools.servers", "stdio", mode],
        "env": {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))},
        "cwd": str(ROOT),
    }


class ToolScript(ScriptedBackend):
    """Writes ``first`` (a call in the model's markup) after a user turn; after a tool's result, answers
    ``The answer is <result>.``: an answer that uses the result only if the gateway put it in the prompt."""

    def __init__(self, tiny: Any, first: str):
        super().__init__(tiny, first)
        self.first = first

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        last = messages[-1]
        if last["role"] == "tool":
            result = last["content"].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
            answer = f"The answer is {result}."
        else:
            answer = self.first
        self.script = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [min(self.eos_ids)]
        return super().chat_tokens(messages, add_generation_prompt)


def call(name: str, **arguments: Any) -> str:
    """A call in the model's markup, written as the forced-call grammar writes JSON (no spaces)."""
    body = json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))
    return f"<tool_call>{body}</tool_call>"
