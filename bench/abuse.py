"""/health and an attacker-free session under the attacks that once froze the loop, and 500s over fuzzed requests.

Against ``stream-omni serve`` (embedded model, llama.cpp, two API keys) in its own process. For
each attack, repeated without pause while it is measured: GET /health on a fresh raw connection
every 50 ms (p50 / p99 / max), and streamed chat completions of another key, whose median and p95
gap between chunks is compared with the same completions alone just before (the ratio; target
≤ 1.5). One attack has a key upload tiny files for a while; another key's upload time is compared
with before. Two reference rows run ordinary work of another key instead, for scale. Last, N fuzzed HTTP
requests (testkit.httpfuzz: random routes, headers, bodies, multipart) against a no-key server
count the 500s (target 0). Run: ``python -m bench.abuse`` (the attacks; bench/results/abuse.{json,md})
and ``python -m bench.abuse fuzz [N]`` (bench/results/abuse_fuzz.{json,md}).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.common import machine, markdown_table, server_pid, server_process, write
from bench.security_bench import frame, probe, ws_open

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


# The attacker's requests, built once, and one client kept open: its own CPU stays out of the figures
# (a new httpx client loads the CA bundle, ~30 ms; masking a big WebSocket frame byte by byte, ~100 ms)
_BODIES: dict[str, bytes] = {}
_ATTACKER = threading.local()


def _client() -> httpx.Client:
    if getattr(_ATTACKER, "client", None) is None:
        _ATTACKER.client = httpx.Client(headers=ALICE, timeout=120)
    return _ATTACKER.client  # type: ignore[no-any-return]


def _post(addr: str, path: str, body: dict[str, Any], key: str | None = None) -> int:
    data = _BODIES.get(key) if key else None
    if data is None:
        data = json.dumps(body).encode()
        if key:
            _BODIES[key] = data
    headers = {"Content-Type": "application/json"}
    return _paced(_client().post(f"http://{addr}{path}", content=data, headers=headers)).status_code


def _paced(r: httpx.Response) -> httpx.Response:
    """The attacker waits out a 429's Retry-After: it sends as fast as its key's budget admits (one that
    ignored it would only collect more 429s, each refused before its body is read)."""
    if r.status_code == 429:
        time.sleep(min(5.0, float(r.headers.get("retry-after", "1"))))
    return r


# ---------------------------------------------------------------- attacks (each returns when done)


def idle(addr: str, model: str) -> str:
    time.sleep(4)
    return ""


def marker_flood(addr: str, model: str) -> str:
    over = _post(addr, "/v1/completions", {"model": model, "prompt": [MARK * 60_000] * 16, "max_tokens": 1}, "m16")
    at_cap = [
        _post(addr, "/v1/completions", {"model": model, "prompt": MARK * 87_000, "max_tokens": 1}, "m1")
        for _ in range(3)
    ]
    return f"16×60k markers → {over}; 1 MiB of markers ×3 → {at_cap}"


def plain_text(addr: str, model: str) -> str:
    over = _post(addr, "/v1/completions", {"model": model, "prompt": "word " * 3_000_000, "max_tokens": 1}, "w15")
    at_cap = [
        _post(addr, "/v1/completions", {"model": model, "prompt": "word " * 200_000, "max_tokens": 1}, "w1")
        for _ in range(3)
    ]
    return f"15 MB → {over}; 1 MB ×3 → {at_cap}"


def tool_schemas(addr: str, model: str) -> str:
    msgs = [{"role": "user", "content": "hi"}]
    a = _post(addr, "/v1/chat/completions", {"model": model, "messages": msgs, "tools": nested_tools()}, "nested")
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20_000)}}
    b = _post(
        addr,
        "/v1/chat/completions",
        {
            "model": model,
            "messages": msgs,
            "tools": [{"type": "function", "function": {"name": "w", "parameters": wide}}],
        },
        "wide",
    )
    return f"100 nested → {a}; 20k props → {b}"


def big_tool_prompts(addr: str, model: str) -> str:
    """Not an attack: three in-budget tools render a ~3,000-token prompt, whose prefill takes its
    share of the engine (chunked, like any long prompt): what fair sharing costs a bystander."""
    in_budget = {
        "type": "object",
        "properties": {f"p{i}": {"anyOf": [{"type": "string"}, {"type": "integer"}]} for i in range(40)},
    }
    tools = [{"type": "function", "function": {"name": f"f{j}", "parameters": in_budget}} for j in range(3)]
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    status = _post(addr, "/v1/chat/completions", {**body, "tools": tools, "tool_choice": "required"})
    return f"3 in-budget tools, forced → {status}"


def four_chats(addr: str, model: str) -> str:
    """Not an attack: four ordinary short chats of the attacker's key, one after another (fair share)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
    return f"4 chats → {[_post(addr, '/v1/chat/completions', body) for _ in range(4)]}"


def realtime_schemas(addr: str, model: str) -> str:
    if "rt" not in _BODIES:
        tools = [{"type": "function", **t["function"]} for t in nested_tools(20)]
        _BODIES["rt"] = frame(json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": tools}}))
    s = ws_open(addr)
    for _ in range(5):
        s.sendall(_BODIES["rt"])
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
        r = bob.post(f"http://{addr}/v1/files", files={"file": ("b.txt", b"bob", "text/plain")}, data=purpose)
        assert r.status_code == 200, r.text
        return (time.perf_counter() - t0) * 1000

    purpose = {"purpose": "user_data"}
    with httpx.Client(headers=BOB, timeout=30) as bob:
        before = statistics.median(bob_upload_ms() for _ in range(10))
        n, end, c = 0, time.monotonic() + 20, _client()
        while time.monotonic() < end:
            r = _paced(c.post(f"http://{addr}/v1/files", files={"file": ("a.txt", b"a", "text/plain")}, data=purpose))
            n += r.status_code == 200
        after = statistics.median(bob_upload_ms() for _ in range(10))
    return f"alice uploaded {n} files in 20 s; bob's upload median {before:.1f} ms before, {after:.1f} ms after"


ATTACKS: list[tuple[str, Callable[[str, str], str]]] = [
    ("no attack", idle),
    ("/v1/completions special-token flood", marker_flood),
    ("/v1/completions plain text, 15 MB and at the cap", plain_text),
    ("tool schemas over HTTP (100 nested, 20k props)", tool_schemas),
    ("tool schemas in Realtime session.update ×5", realtime_schemas),
    ("one key uploads tiny files for 20 s", upload_flood),
    ("reference, not an attack: 4 short chats of another key", four_chats),
    ("reference, not an attack: a 3,000-token tool prompt of another key", big_tool_prompts),
]
STREAMS = 5  # bystander streams alone, then as many under each attack (kept up until they end)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


ATTACKER_NICE = 10  # the attacker's own CPU below the server's: a real one runs on its own machine


def repeat(
    attack: Callable[[str, str], str], addr: str, model: str, stop: threading.Event, notes: list[str], cpu: list[float]
) -> None:
    """The attack again and again until ``stop``: it lasts as long as the bystander's streams.

    An attacker runs on its own machine; here it shares the server's two cores, so its requests are
    built once (``_post``), and its thread runs at nice ``ATTACKER_NICE``: what the server spends on
    the attack competes with the bystander, the attacker's own CPU much less (both are reported)."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ATTACKER_NICE)
    t0, w0 = time.thread_time(), time.perf_counter()
    while not stop.is_set():
        try:
            notes.append(attack(addr, model))
        except Exception as exc:  # recorded, not hidden
            notes.append(f"{type(exc).__name__}: {exc}")
    cpu.append((time.thread_time() - t0) / (time.perf_counter() - w0))  # share of one core


def server_cpu_s(pid: int) -> float:
    """CPU seconds the server and its children (the big-frame parse process) have used."""
    import psutil

    proc, total = psutil.Process(pid), 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def attacks() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as files, server_process({**CONF, "files.folder": files}) as addr:
        model = model_id(addr)
        pid = server_pid(addr.split(":")[1])
        gaps(addr, model, [])  # warm
        for what, attack in ATTACKS:
            alone: list[float] = []
            c0, w0 = server_cpu_s(pid), time.perf_counter()
            for _ in range(STREAMS):  # side by side: the bystander alone right before each attack
                gaps(addr, model, alone)
            alone_cpu = (server_cpu_s(pid) - c0) / (time.perf_counter() - w0)
            stop, done, lat, gap, notes, cpu = threading.Event(), threading.Event(), [], [], [], []
            t = threading.Thread(target=probe, args=(addr, done, lat))
            a = threading.Thread(target=repeat, args=(attack, addr, model, stop, notes, cpu))
            c0, w0 = server_cpu_s(pid), time.perf_counter()
            t.start()
            a.start()
            for _ in range(STREAMS):
                gaps(addr, model, gap)
            wall = time.perf_counter() - w0
            attacked_cpu = (server_cpu_s(pid) - c0) / wall  # while the bystander streamed
            stop.set()
            a.join(300)
            done.set()
            t.join(15)
            rows.append(
                {
                    "attack": what,
                    "rounds": len(notes),
                    "probes": len(lat),
                    "health p50 ms": round(pct(lat, 0.5) * 1000, 1),
                    "health p99 ms": round(pct(lat, 0.99) * 1000, 1),
                    "health max ms": round(max(lat) * 1000, 1),
                    "gap p50 ratio": round(statistics.median(gap) / statistics.median(alone), 2),
                    "gap p95 ratio": round(pct(gap, 0.95) / pct(alone, 0.95), 2),
                    "server CPU % alone": round(alone_cpu * 100),
                    "server CPU % attacked": round(attacked_cpu * 100),
                    "attacker CPU %": round(cpu[0] * 100) if cpu else "",
                    "load 1m": round(os.getloadavg()[0], 2),
                    "what happened": notes[0] if notes else "",
                }
            )
            print(rows[-1], flush=True)
    return rows


def fuzz(n: int) -> dict[str, Any]:
    from hypothesis import HealthCheck, given, settings

    from testkit.httpfuzz import requests, send

    statuses: dict[int, int] = {}
    # no byte budget: past its burst every request would be a 429, and the fuzz would reach no handler
    conf = {"audio.enabled": False, "speculative.drafter": "none", "files.max_per_key": 100}
    with server_process({**conf, "limits.http_bytes_per_s_per_key": None}) as addr:
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
        f"/health on a fresh connection every 50 ms; another key streams a 48-token chat completion {STREAMS} times "
        f"alone, then {STREAMS} times while the attack repeats without pause (gap ratio: its gaps between chunks under "
        "attack over alone; rounds: how often the attack ran). The attacker is built to cost little (requests made "
        f"once, one connection kept), runs at nice {ATTACKER_NICE} (a real one runs on its own machine), and sends as "
        "fast as its key's byte budget admits (it waits out each 429's Retry-After). Server CPU: "
        "its process and children while the bystander streamed (200 % = both cores), alone and attacked; attacker "
        "CPU: the attacking thread's share of one core. The two reference rows are ordinary work of another key, "
        "for scale: what fair sharing of the engine costs the bystander. Targets: /health p99 ≤ 100 ms, gap ratio "
        "≤ 1.5."
        "\n\n" + markdown_table(rows, list(rows[0]))
    )
    write("abuse", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
