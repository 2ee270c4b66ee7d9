"""No client input blocks the event loop: the attacks that once froze the server (special-token
floods in /v1/completions, huge or deeply nested tool schemas over HTTP and Realtime) each run
while another client measures /health and every loop callback is timed (tests/security/attack.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from models.chat_template import split_specials
from testkit.fake_backend import FakeBackend

from .attack import under_attack

NO_AUDIO = {"audio.enabled": False}
MARK = "<|im_start|>"


def nested_tools(n: int = 100, depth: int = 8) -> list[dict[str, Any]]:
    """The 31-second schema: each tool's one parameter nested ``depth`` deep in anyOf [s, array of s]."""
    s: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        s = {"anyOf": [s, {"type": "array", "items": s}]}
    params = {"type": "object", "properties": {"x": s}, "required": ["x"]}
    return [{"type": "function", "function": {"name": f"t{i}", "parameters": params}} for i in range(n)]


def wide_tool(props: int = 20_000) -> list[dict[str, Any]]:
    params = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(props)}}
    return [{"type": "function", "function": {"name": "wide", "parameters": params}}]


# ---------------------------------------------------------------------- special tokens, linear


def test_split_specials_cuts_leftmost_longest_in_one_pass():
    specials = frozenset({"<|a|>", "<|ab|>", "<|b|>", "x"})
    assert split_specials("hi<|ab|>yo<|a|><|b|>", specials) == [
        ("hi", False),
        ("<|ab|>", True),
        ("yo", False),
        ("<|a|>", True),
        ("<|b|>", True),
    ]
    assert split_specials("<|a", specials) == [("<|a", False)]
    assert split_specials("", specials) == [] and split_specials("plain", frozenset()) == [("plain", False)]
    many = frozenset(f"<|reserved_special_token_{i}|>" for i in range(256))
    text = "<|reserved_special_token_" * 20_000 + "<|reserved_special_token_255|>"
    t0 = time.perf_counter()
    parts = split_specials(text, many)
    assert time.perf_counter() - t0 < 2.0  # a trie, not 256 comparisons per character
    assert parts[-1] == ("<|reserved_special_token_255|>", True) and len(parts) == 2


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

    b = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=1024, n_batch=64, n_seq=2))
    yield b
    b.close()


@pytest.mark.real_model
def test_llama_encode_parses_special_tokens_as_llama_cpp_does_in_linear_time(llama):
    for text in (
        "The capital of France is",
        f"{MARK}user\nhi<|im_end|>\n{MARK}assistant\n",
        f"a{MARK}{MARK}b <|im_end|>c<|im_",
        f"{MARK}",
        "<|endoftext|>x",
    ):
        assert llama.encode(text) == llama.tokenize(text, special=True, add_bos=True), text
    t0 = time.perf_counter()
    ids = llama.encode(MARK * 60_000)
    took = time.perf_counter() - t0
    assert len(ids) >= 60_000 and set(ids[-60_000:]) == {llama.tokenize(MARK, special=True)[0]}
    assert took < 5.0, f"{took:.2f} s for 60,000 markers"  # llama.cpp's own split: 89 s for 16 of these


@pytest.mark.real_model
def test_completions_special_token_flood_leaves_the_loop_free(llama, server_factory):
    conf = {**NO_AUDIO, "speculative.drafter": "none", "limits.max_prompt_chars": 2_000_000}
    with server_factory(llama, **conf) as addr:
        model = httpx.get(f"http://{addr}/v1/models", timeout=10).json()["data"][0]["id"]
        with under_attack(addr) as (probe, _):
            over = httpx.post(
                f"http://{addr}/v1/completions",
                json={"model": model, "prompt": [MARK * 60_000] * 16, "max_tokens": 1},
                timeout=60,
            )
            # under the cap: tokenized (off the loop), then too long for the context
            at_cap = httpx.post(
                f"http://{addr}/v1/completions",
                json={"model": model, "prompt": [MARK * 40_000] * 4, "max_tokens": 1},
                timeout=60,
            )
            plain = httpx.post(
                f"http://{addr}/v1/completions",
                json={"model": model, "prompt": "word " * 300_000, "max_tokens": 1},
                timeout=60,
            )
        assert len(probe.latencies) > 3
    assert over.status_code == 400 and over.json()["error"]["code"] == "input_too_large"
    assert over.json()["error"]["param"] == "prompt"
    assert at_cap.status_code == 400 and at_cap.json()["error"]["code"] == "context_length_exceeded"
    assert plain.status_code == 400 and plain.json()["error"]["code"] == "context_length_exceeded"


# ---------------------------------------------------------------------- tool schemas


@pytest.mark.parametrize(
    ("tools", "code", "param"),
    [
        (nested_tools(), "request_too_complex", None),  # 100 such tools: 100,000 JSON containers, not even parsed
        (nested_tools(70, 3), "schema_too_complex", "tools"),  # more tools than max_tools
        (nested_tools(20), "schema_too_complex", "tools[0].function.parameters"),  # nested too deep
        (wide_tool(), "schema_too_complex", "tools[0].function.parameters"),  # 20,000 properties
    ],
)
def test_http_schema_past_the_budget_is_refused_naming_the_field(server_factory, tools, code, param):
    with server_factory(FakeBackend(answer_tokens=3), **NO_AUDIO) as addr:
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
        with under_attack(addr):
            r = httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=30)
            fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": tools[0]["function"]["parameters"]}}
            r2 = httpx.post(
                f"http://{addr}/v1/chat/completions",
                json={"model": "fake", "messages": body["messages"], "response_format": fmt},
                timeout=30,
            )
    err = r.json()["error"]
    assert r.status_code == 400 and err["type"] == "invalid_request_error" and err["code"] == code
    assert err["param"] == param, err
    if param not in ("tools", None):
        assert r2.status_code == 400 and r2.json()["error"]["param"] == "response_format.json_schema.schema"


def test_http_tools_in_budget_compile_off_the_loop_and_repeat_from_the_cache(tiny_backend, server_factory):
    params = {
        "type": "object",
        "properties": {f"p{i}": {"anyOf": [{"type": "string"}, {"type": "integer"}]} for i in range(25)},
    }
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": params}} for i in range(2)]
    body = {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": tools,
        "tool_choice": "required",
        "max_tokens": 4,
    }
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=120)  # builds the vocabulary once
        with under_attack(addr):
            t0 = time.perf_counter()
            first = httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=120)
            t1 = time.perf_counter()
            again = httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=120)
            t2 = time.perf_counter()
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["choices"][0]["finish_reason"] in ("tool_calls", "length")
    assert t2 - t1 <= max(1.0, 2 * (t1 - t0))  # not slower the second time (nothing recompiles)


async def _recv(ws: Any, type_: str, timeout: float = 10) -> dict:  # noqa: ASYNC109
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = max(0.01, deadline - asyncio.get_running_loop().time())
        ev = json.loads(await asyncio.wait_for(ws.recv(), left))
        if ev["type"] == type_:
            return ev


@pytest.mark.parametrize(
    ("tools", "param"),
    [(nested_tools(20), "session.tools[0].parameters"), (wide_tool(), "session.tools[0].parameters")],
)
async def test_realtime_schema_past_the_budget_is_an_error_event_and_the_session_goes_on(server_factory, tools, param):
    rt = [{"type": "function", **t["function"]} for t in tools]
    with server_factory(FakeBackend(answer_tokens=3), **NO_AUDIO) as addr:
        with under_attack(addr):
            ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5, max_size=None)
            await _recv(ws, "session.created")
            await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": rt}}))
            err = (await _recv(ws, "error", 20))["error"]
            await ws.send('{"type": "session.update", "session": {"type": "realtime", "temperature": 0.5}}')
            await _recv(ws, "session.updated")
            await ws.close()
    assert err["type"] == "invalid_request_error" and err["param"] == param, err


# ---------------------------------------------------------------------- a burst of audio frames


async def test_audio_sent_faster_than_real_time_is_read_in_slices(server_factory):
    """Frames that queue up faster than the loop reads them are still handled a few at a time: 15 s of
    audio sent at once (within the socket's message burst) runs 475 VAD windows, which read frame after frame
    would take 50 ms or more per TCP read (30 frames); read in 5 ms slices, no step takes 30 ms."""
    frame = bytes(24_000 * 2 * 40 // 1000)  # 40 ms of pcm16 silence at 24 kHz, as a binary frame
    with server_factory(FakeBackend(answer_tokens=3)) as addr:
        with under_attack(addr, cpu_s=0.03):
            ws = await websockets.connect(f"ws://{addr}/v1/realtime", open_timeout=5, max_size=None)
            await _recv(ws, "session.created")
            for _ in range(380):
                await ws.send(frame)
            await ws.send('{"type": "input_audio_buffer.clear"}')
            await _recv(ws, "input_audio_buffer.cleared", 60)
            await ws.close()
