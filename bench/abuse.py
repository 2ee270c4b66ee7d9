"""/health and an attacker-free session under the attacks that once froze the loop, and 500s over fuzzed requests.

Against ``stream-omni serve`` (embedded model, llama.cpp, two API keys) in its own process. For
each attack: GET /health on a fresh raw connection every 50 ms (p50 / p99 / max), and a streamed
chat completion of another key running alongside, whose median and p95 gap between chunks is
compared with the same completion alone (the ratio; target ≤ 1.5). Then one key uploads tiny
files for a while and another key's upload time is compared with before. Last, N fuzzed HTTP
requests (testkit.httpfuzz: random routes, headers, bodies, multipart) against a no-key server
count the 500s (target 0). Run: ``python -m bench.abuse`` (the attacks; bench/results/abuse.{json,md})
and ``python -m bench.abuse fuzz [N]`` (bench/results/abuse_fuzz.{json,md}).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.common import machine, markdown_table, server_process, write
from bench.security import frame, probe, ws_open

CONF = {
    "audio.enabled": False,
    "speculative.drafter": "none",
    "server.api_keys": ["key-alice", "key-bob"],
    "server.max_pending_per_ip": 1000,
    "files.max_per_key": 100_000,
}
ALICE, BOB = {"Authorization": "Bearer key-alice"}, {"Authorization": "Bearer key-bob"}
MARK = "<|im_start|>"


def model_id(addr: str) -> str:
    return str(httpx.get(f"http://{addr}/v1/models", headers=BOB, timeout=10).json()["data"][0]["id"])


def gaps(addr: str, model: str, out: list[float]) -> None:
    """One streamed chat completion of the attacker-free key: the gaps between its chunks."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
        "max_tokens": 48,
        "temperature": 0,
        "stream": True,
    }
    last = None
    with httpx.stream("POST", f"http://{addr}/v1/chat/completions", json=body, headers=BOB, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                now = time.perf_counter()
                if last is not None:
                    out.append(now - last)
                last = now


def nested_tools(n: int = 100, depth: int = 8) -> list[dict[str, Any]]:
    s: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        s = {"anyOf": [s, {"type": "array", "items": s}]}
    params = {"type": "object", "properties": {"x": s}}
    return [{"type": "function", "function": {"name": f"t{i}", "parameters": params}} for i in range(n)]


def _post(addr: str, path: str, body: dict[str, Any]) -> int:
    return httpx.post(f"http://{addr}{path}", json=body, headers=ALICE, timeout=120).status_code


# ---------------------------------------------------------------- attacks (each returns when done)


def idle(addr: str, model: str) -> str:
    time.sleep(4)
    return ""


def marker_flood(addr: str, model: str) -> str:
    over = _post(addr, "/v1/completions", {"model": model, "prompt": [MARK * 60_000] * 16, "max_tokens": 1})
    at_cap = [
        _post(addr, "/v1/completions", {"model": model, "prompt": MARK * 87_000, "max_tokens": 1}) for _ in range(3)
    ]
    return f"16×60k markers → {over}; 1 MiB of markers ×3 → {at_cap}"


def plain_text(addr: str, model: str) -> str:
    over = _post(addr, "/v1/completions", {"model": model, "prompt": "word " * 3_000_000, "max_tokens": 1})
    at_cap = [
        _post(addr, "/v1/completions", {"model": model, "prompt": "word " * 200_000, "max_tokens": 1}) for _ in range(3)
    ]
    return f"15 MB → {over}; 1 MB ×3 → {at_cap}"


def tool_schemas(addr: str, model: str) -> str:
    msgs = [{"role": "user", "content": "hi"}]
    a = _post(addr, "/v1/chat/completions", {"model": model, "messages": msgs, "tools": nested_tools()})
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20_000)}}
    b = _post(
        addr,
        "/v1/chat/completions",
        {
            "model": model,
            "messages": msgs,
            "tools": [{"type": "function", "function": {"name": "w", "parameters": wide}}],
        },
    )
    in_budget = {
        "type": "object",
        "properties": {f"p{i}": {"anyOf": [{"type": "string"}, {"type": "integer"}]} for i in range(40)},
    }
    c = [
        _post(
            addr,
            "/v1/chat/completions",
            {
                "model": model,
                "messages": msgs,
                "max_tokens": 4,
                "tool_choice": "required",
                "tools": [
                    {"type": "function", "function": {"name": f"f{j}{i}", "parameters": in_budget}} for j in range(3)
                ],
            },
        )
        for i in range(4)
    ]
    return f"100 nested → {a}; 20k props → {b}; in budget ×4 → {c}"


def realtime_schemas(addr: str, model: str) -> str:
    s = ws_open(addr)
    tools = [{"type": "function", **t["function"]} for t in nested_tools(20)]
    for _ in range(5):
        s.sendall(frame(json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": tools}})))
    s.settimeout(0.2)
    end, got = time.monotonic() + 20, b""  # the first big frame starts the parse process: seconds on a loaded box
    while time.monotonic() < end and got.count(b'"code":"invalid_value"') < 5:
        try:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        except TimeoutError:
            pass
    s.close()
    refused = got.count(b'"code":"invalid_value"')
    return f"{refused} of 5 refused (invalid_value naming session.tools[0].parameters)"


def upload_flood(addr: str, model: str) -> str:
    def bob_upload_ms() -> float:
        t0 = time.perf_counter()
        r = httpx.post(
            f"http://{addr}/v1/files",
            files={"file": ("b.txt", b"bob", "text/plain")},
            data={"purpose": "user_data"},
            headers=BOB,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return (time.perf_counter() - t0) * 1000

    before = statistics.median(bob_upload_ms() for _ in range(10))
    n, end = 0, time.monotonic() + 20
    with httpx.Client(headers=ALICE, timeout=30) as c:
        while time.monotonic() < end:
            c.post(
                f"http://{addr}/v1/files", files={"file": ("a.txt", b"a", "text/plain")}, data={"purpose": "user_data"}
            )
            n += 1
    after = statistics.median(bob_upload_ms() for _ in range(10))
    return f"alice uploaded {n} files in 20 s; bob's upload median {before:.1f} ms before, {after:.1f} ms after"


ATTACKS: list[tuple[str, Callable[[str, str], str]]] = [
    ("no attack", idle),
    ("/v1/completions special-token flood", marker_flood),
    ("/v1/completions plain text, 15 MB and at the cap", plain_text),
    ("tool schemas over HTTP (nested, 20k props, in budget)", tool_schemas),
    ("tool schemas in Realtime session.update ×5", realtime_schemas),
    ("one key uploads tiny files for 20 s", upload_flood),
]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def attacks() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with server_process(CONF) as addr:
        model = model_id(addr)
        alone: list[float] = []
        gaps(addr, model, [])  # warm
        gaps(addr, model, alone)
        for what, attack in ATTACKS:
            stop, lat, gap = threading.Event(), [], []
            t = threading.Thread(target=probe, args=(addr, stop, lat))
            g = threading.Thread(target=gaps, args=(addr, model, gap))
            t.start()
            g.start()
            try:
                note = attack(addr, model)
            except Exception as exc:  # recorded, not hidden
                note = f"{type(exc).__name__}: {exc}"
            g.join(240)
            stop.set()
            t.join(15)
            rows.append(
                {
                    "attack": what,
                    "probes": len(lat),
                    "health p50 ms": round(pct(lat, 0.5) * 1000, 1),
                    "health p99 ms": round(pct(lat, 0.99) * 1000, 1),
                    "health max ms": round(max(lat) * 1000, 1),
                    "gap p50 ratio": round(statistics.median(gap) / statistics.median(alone), 2),
                    "gap p95 ratio": round(pct(gap, 0.95) / pct(alone, 0.95), 2),
                    "load 1m": round(os.getloadavg()[0], 2),
                    "what happened": note,
                }
            )
            print(rows[-1], flush=True)
    return rows


def fuzz(n: int) -> dict[str, Any]:
    from hypothesis import HealthCheck, given, settings

    from testkit.httpfuzz import requests, send

    statuses: dict[int, int] = {}
    with server_process({"audio.enabled": False, "speculative.drafter": "none", "files.max_per_key": 100}) as addr:
        client = httpx.Client(timeout=30)

        @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(req=requests())
        def run(req: Any) -> None:
            code = send(client, f"http://{addr}", req)
            statuses[code] = statuses.get(code, 0) + 1

        t0 = time.perf_counter()
        run()
        took = time.perf_counter() - t0
        client.close()
    return {
        "requests": sum(statuses.values()),
        "500s": statuses.get(500, 0),
        "5xx": sum(v for k, v in statuses.items() if k >= 500),
        "seconds": round(took, 1),
        "statuses": dict(sorted(statuses.items())),
    }


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "attacks"
    if what == "fuzz":
        fz = fuzz(int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
        print(fz, flush=True)
        md = (
            "# Abuse: 500s under fuzzing\n\n"
            f"{machine()}. `stream-omni serve` (embedded model, llama.cpp, no keys, files on) in its own process; "
            "random requests from testkit.httpfuzz (routes, methods, malformed headers, bytes, JSON near the "
            "schemas, multipart). Target: 0 responses 500.\n\n"
            f"{fz['requests']} requests in {fz['seconds']} s, **{fz['500s']} with status 500** ({fz['5xx']} 5xx in "
            f"all); statuses {fz['statuses']}.\n"
        )
        write("abuse_fuzz", {"machine": machine(), "fuzz": fz}, md)
        return
    rows = attacks()
    md = (
        "# Abuse: /health and a bystander's stream under attack\n\n"
        f"{machine()}. `stream-omni serve` (embedded model, llama.cpp, two API keys) in its own process; GET "
        "/health on a fresh connection every 50 ms; another key streams a 48-token chat completion during each "
        "attack (gap ratio: its gap between chunks over the same alone). Targets: /health p99 ≤ 100 ms, gap "
        "ratio ≤ 1.5.\n\n" + markdown_table(rows, list(rows[0]))
    )
    write("abuse", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
