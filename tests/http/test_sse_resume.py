"""Streamed chat completions outlive their client: disconnects cancel or park the job; Last-Event-ID resume."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.http.helpers import LONG, NO_AUDIO, assert_error, body, content_of, post, sse_events, user

# ---------------------------------------------------------------------- disconnects and resume


def metric(addr: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://{addr}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    return 0.0


def wait_for(pred: Any, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_non_stream_client_disconnect_cancels_the_job(tiny_backend, server_factory):
    with server_factory(tiny_backend, **LONG) as addr:
        with pytest.raises(httpx.ReadTimeout):
            post(addr, body(max_tokens=4000), timeout=0.5)
        assert wait_for(lambda: metric(addr, "stream_omni:cancels_total") == 1)
        assert wait_for(lambda: metric(addr, "stream_omni:num_requests_running") == 0)


def read_events(resp: httpx.Response, n: int) -> list[tuple[str, str]]:
    """The first ``n`` SSE events of a streaming response."""
    events: list[tuple[str, str]] = []
    fields: dict[str, str] = {}
    for line in resp.iter_lines():
        if line:
            key, _, value = line.partition(": ")
            fields[key] = value
        elif "data" in fields:
            events.append((fields.get("id", ""), fields["data"]))
            fields = {}
            if len(events) == n:
                break
    return events


def test_sse_ids_are_numbered_and_resume_returns_exactly_the_missing_events(tiny_backend, server_factory):
    req = body(user("tell me a story"), max_tokens=600, stream=True, scheduler={"strategy": "fast"})
    with server_factory(tiny_backend, **LONG) as addr:
        whole = sse_events(post(addr, req).text)
        cid = json.loads(whole[0][1])["id"]
        assert [i for i, _ in whole] == [f"{cid}:{n}" for n in range(len(whole))]
        assert whole[-1][1] == "[DONE]" and len(whole) > 6
        with httpx.stream("POST", f"http://{addr}/v1/chat/completions", json=req, timeout=60) as r:
            head = read_events(r, 3)  # then drop the connection mid-stream
        rid = json.loads(head[0][1])["id"]
        assert rid != cid and head[-1][0] == f"{rid}:2"
        assert metric(addr, "stream_omni:num_requests_running") == 1  # still decoding: the resume goes live
        resumed = httpx.get(
            f"http://{addr}/v1/chat/completions/{rid}/stream", headers={"Last-Event-ID": head[-1][0]}, timeout=60
        )
        assert resumed.status_code == 200 and resumed.headers["content-type"].startswith("text/event-stream")
        tail = sse_events(resumed.text)
        assert [i for i, _ in tail] == [f"{rid}:{n}" for n in range(3, 3 + len(tail))]
        assert tail[-1][1] == "[DONE]"
        assert content_of(head + tail) == content_of(whole)  # nothing lost, nothing twice
        assert len(head + tail) == len(whole)
        # delivered to the end: the completion is gone
        gone = httpx.get(f"http://{addr}/v1/chat/completions/{rid}/stream", timeout=30)
        assert_error(gone, 404, "completion_not_found")
        assert metric(addr, "stream_omni:resumes_total") == 1


def test_resume_after_the_job_finished_replays_from_the_buffer(tiny_backend, server_factory):
    req = body(user("hi"), max_tokens=20, stream=True, stream_options={"include_usage": True})
    with server_factory(tiny_backend, **NO_AUDIO) as addr:
        sdk_like = {"Authorization": "Bearer anything"}  # the server has no keys: any (or no) key may resume
        with httpx.stream("POST", f"http://{addr}/v1/chat/completions", json=req, headers=sdk_like, timeout=60) as r:
            (first,) = read_events(r, 1)
        rid = first[0].split(":")[0]
        assert wait_for(lambda: metric(addr, "stream_omni:num_requests_running") == 0)
        url = f"http://{addr}/v1/chat/completions/{rid}/stream"
        replay = sse_events(httpx.get(url, timeout=60).text)  # no Last-Event-ID: from the start
        assert replay[0] == first
        assert json.loads(replay[-2][1])["usage"]["completion_tokens"] == 20
        assert_error(httpx.get(url, headers={"Last-Event-ID": "chatcmpl-other:1"}, timeout=30), 400, "invalid_value")


def test_resume_refuses_unknown_ids_other_keys_and_expired_streams(tiny_backend, server_factory):
    cfg = {**LONG, "server.grace_period_s": 1.0, "server.api_keys": ["k1", "k2"]}
    with server_factory(tiny_backend, **cfg) as addr:
        k1 = {"Authorization": "Bearer k1"}
        k2 = {"Authorization": "Bearer k2"}
        missing = httpx.get(f"http://{addr}/v1/chat/completions/chatcmpl-nope/stream", headers=k1, timeout=30)
        assert_error(missing, 404, "completion_not_found")
        with httpx.stream(
            "POST",
            f"http://{addr}/v1/chat/completions",
            json=body(max_tokens=4000, stream=True),
            headers=k1,
            timeout=60,
        ) as r:
            (first,) = read_events(r, 1)
        # the client is gone but the completion keeps decoding (a ~6 s job) for its grace period
        assert metric(addr, "stream_omni:num_requests_running") == 1
        url = f"http://{addr}/v1/chat/completions/{first[0].split(':')[0]}/stream"
        assert_error(httpx.get(url, headers={**k2, "Last-Event-ID": first[0]}, timeout=30), 404, "completion_not_found")
        # past the grace period nobody came back: the job is cancelled and the stream forgotten
        assert wait_for(lambda: metric(addr, "stream_omni:cancels_total") == 1)
        assert_error(httpx.get(url, headers={**k1, "Last-Event-ID": first[0]}, timeout=30), 404, "completion_not_found")
        assert metric(addr, "stream_omni:num_requests_running") == 0


def test_shutdown_drains_a_streamed_completion_and_its_reader_gets_the_end(tiny_backend, server_factory):
    """A stream still decoding when the server stops is cancelled once the drain time is up, and
    its reader gets an error event and ``[DONE]`` instead of a cut-off body."""
    cfg = {**LONG, "server.shutdown_timeout_s": 0.5}
    with server_factory(tiny_backend, **cfg) as addr:
        url = f"http://{addr}/v1/chat/completions"
        frames: list[str] = []
        with httpx.stream("POST", url, json=body(stream=True, max_tokens=4000), timeout=30) as r:
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: "):
                    frames.append(line[6:])
                if len(frames) >= 3:
                    break
            addr.server.should_exit = True  # what uvicorn's SIGTERM handler does
            for line in lines:  # every read is bounded by the client's 30 s timeout
                if line.startswith("data: "):
                    frames.append(line[6:])
        assert frames[-1] == "[DONE]"
        last = json.loads(frames[-2])
        assert last["error"]["code"] == "cancelled"  # cut by the drain, said so
        assert len(frames) < 400  # well before the 4000 tokens it asked for
