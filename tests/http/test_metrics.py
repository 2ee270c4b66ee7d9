"""GET /metrics after WebSocket and HTTP traffic: the values moved, by the right amounts."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.wsclient import RealtimeClient


async def scrape(h: httpx.AsyncClient, addr: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = await h.get(f"http://{addr}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_move_with_ws_and_http_traffic(tiny_backend, server_factory):
    # grace 0: a closed WebSocket ends its session at once (no resume window keeping it active)
    with server_factory(tiny_backend, **{"audio.enabled": False, "server.grace_period_s": 0}) as addr:
        async with httpx.AsyncClient(timeout=120) as h:
            before = await scrape(h, addr)
            assert value(before, "stream_omni:time_to_first_token_seconds_count") == 0
            assert value(before, "stream_omni:generation_tokens_total") == 0

            c = await RealtimeClient.connect(addr)
            await c.until("session.created")
            during = await scrape(h, addr)
            ws_done = await c.ask("hello", max_output_tokens=6)
            await c.close()

            ok = await h.post(
                f"http://{addr}/v1/chat/completions",
                json={"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
            )
            assert ok.status_code == 200
            nope = await h.post(
                f"http://{addr}/v1/chat/completions",
                json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert nope.status_code == 404
            bad = await h.post(
                f"http://{addr}/v1/chat/completions", content=b"{", headers={"Content-Type": "application/json"}
            )
            assert bad.status_code == 400

            for _ in range(100):  # the WS close is processed by the server, and a finished job
                after = await scrape(h, addr)  # retired by the engine's thread, asynchronously
                if (
                    value(after, "stream_omni:active_sessions") == 0
                    and value(after, "stream_omni:num_requests_running") == 0
                ):
                    break
                await asyncio.sleep(0.05)

    assert value(during, "stream_omni:active_sessions") == 1
    assert value(after, "stream_omni:active_sessions") == 0
    ws_tokens = ws_done["response"]["usage"]["output_tokens"]
    http_usage = ok.json()["usage"]
    assert value(after, "stream_omni:time_to_first_token_seconds_count") == 2  # one WS + one HTTP response
    assert value(after, "stream_omni:e2e_request_latency_seconds_count") == 2
    assert value(after, "stream_omni:generation_tokens_total") == ws_tokens + http_usage["completion_tokens"]
    ws_prompt = ws_done["response"]["usage"]["input_tokens"]
    assert value(after, "stream_omni:prompt_tokens_total") == ws_prompt + http_usage["prompt_tokens"]
    assert value(after, "stream_omni:errors_total", code="model_not_found") == 1
    assert value(after, "stream_omni:errors_total", code="invalid_json") == 1
    http_status = {"stop": "completed", "length": "incomplete"}[ok.json()["choices"][0]["finish_reason"]]
    assert value(after, "stream_omni:responses_total", status=http_status) >= 1
    assert value(after, "stream_omni:num_requests_running") == 0
    assert value(after, "stream_omni:num_requests_waiting") == 0
