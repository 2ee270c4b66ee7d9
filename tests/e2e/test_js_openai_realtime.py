"""The ``openai`` npm package's ``OpenAIRealtimeWS`` (pinned in tests/e2e/js) under Node, unmodified. It
dials only ``wss:`` (the URL comes from the client's https baseURL), so the gateway serves TLS itself
(``server.tls``) with a self-signed certificate made for the test, which Node trusts through
``NODE_EXTRA_CA_CERTS``. Each scenario is one ``node js/openai_realtime_ws.mjs`` run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testkit.tls import self_signed
from tests.e2e.node_clients import run_scenario
from tests.e2e.test_agents_sdk_realtime import DialogueBackend, weather_dialogue

MODEL = "gpt-realtime-2.1"  # a name an openai app would pass, served as a model.aliases entry
SCRIPT = "openai_realtime_ws.mjs"


@contextmanager
def _tls_server(server_factory: Any, backend: Any, folder: Path, **extra: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """(the client's https baseURL, the env that makes Node trust the server's certificate)."""
    certfile, keyfile = self_signed(folder)
    tls = {"certfile": str(certfile), "keyfile": str(keyfile)}
    config = {"server.tls": tls, "audio.enabled": False, "audio.output.enabled": False, "model.aliases": [MODEL]}
    with server_factory(backend, **config, **extra) as addr:
        port = addr.split(":")[1]
        yield f"https://localhost:{port}/v1", {"NODE_EXTRA_CA_CERTS": str(certfile)}


def test_a_text_turn_over_wss(js_clients, tiny_backend, server_factory, tmp_path):
    with _tls_server(server_factory, tiny_backend, tmp_path) as (base_url, env):
        untrusted = run_scenario(SCRIPT, "text", base_url, MODEL, ok=False)  # Node's own CAs only
        report = run_scenario(SCRIPT, "text", base_url, MODEL, env=env)
    # real TLS: without the certificate Node refuses the server, with it the session runs
    assert untrusted["serverEvents"] == [] and "self-signed certificate" in str(untrusted["errors"])
    assert report["url"].startswith(base_url.replace("https://", "wss://") + "/realtime?model=")
    assert report["errors"] == [], report["errors"]
    assert report["serverEvents"][0] == "session.created" and "session.updated" in report["serverEvents"]
    # (the tiny random model rambles until the server's reply cap)
    assert report["statuses"] in (["completed"], ["incomplete/max_output_tokens"]) and report["texts"][0]


def test_a_tool_call_over_wss(js_clients, tiny_backend, server_factory, tmp_path):
    model = DialogueBackend(tiny_backend, weather_dialogue, step_s=0.03)
    with _tls_server(server_factory, model, tmp_path, **{"speculative.drafter": "none"}) as (base_url, env):
        report = run_scenario(SCRIPT, "tool", base_url, MODEL, env=env)
    assert report["errors"] == [], report["errors"]
    assert report["toolCalls"] == [{"name": "get_weather", "city": "Paris"}]
    events = report["serverEvents"]
    # the output, sent the moment the call was done, is accepted before that response ends
    assert events.index("conversation.item.added/function_call_output") < events.index("response.done")
    assert report["statuses"] == ["completed", "completed"]
    assert "sunny and 21" in report["texts"][1]
    assert any("sunny, 21 degrees in Paris" in p for p in model.prompts)  # the model saw the output
