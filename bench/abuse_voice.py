"""/health and a bystander's voice under the speech and MCP attacks: ``python -m bench.abuse_voice``.

Against ``stream-omni serve`` (embedded model, Piper voice, two API keys) in its own process, with two
real MCP servers (``tests.tools.servers``: a good one, and one listing 64 tools of nested ``anyOf``) on
loopback ports. For each attack, repeated while it is measured: GET /health on a fresh connection every
50 ms (p50 / p99 / max), the bystander key's ``/v1/audio/speech`` of "Hi." (time to its first audio
byte), and the bystander's Realtime voice reply (``response.create`` to its first
``response.output_audio.delta``, a fresh session each), whose medians are compared with the same
requests alone just before (the ratios; target ≤ 1.5). ``--attacks speech`` runs the speech flood only.
Attacks: the other key's 4,096-character unpunctuated speech inputs, two at a time; a Realtime session
sending ``session.update``s of 64 new MCP server labels each; sessions listing the hostile server.
Writes bench/results/abuse_voice.{json,md} (``--attacks X``: abuse_voice_X.{json,md}).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from bench.abuse import ATTACKER_NICE, pct
from bench.common import machine, markdown_table, server_process, write
from bench.security_bench import probe
from tests.tools.conftest import start_server, stop

ALICE, BOB = {"Authorization": "Bearer key-alice"}, {"Authorization": "Bearer key-bob"}
LONG = "word " * 819  # 4,095 characters, no punctuation
PROBES = 8  # bystander requests alone, then as many under each attack


def hi_ms(addr: str, out: list[float]) -> None:
    """The bystander's "Hi.": ms to its first audio byte."""
    body = {"model": "tts-1", "input": "Hi.", "voice": "alloy", "response_format": "pcm"}
    t0 = time.perf_counter()
    with httpx.stream("POST", f"http://{addr}/v1/audio/speech", json=body, headers=BOB, timeout=120) as r:
        for _ in r.iter_raw():
            out.append((time.perf_counter() - t0) * 1000)
            return


def reply_ms(addr: str, out: list[float]) -> None:
    """The bystander's Realtime voice reply: ms from ``response.create`` to its first audio delta."""
    with connect(f"ws://{addr}/v1/realtime", additional_headers=BOB, open_timeout=60) as ws:
        session = {"type": "realtime", "output_modalities": ["audio"], "instructions": "Answer in a few words."}
        ws.send(json.dumps({"type": "session.update", "session": session}))
        ask = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}
        ws.send(json.dumps({"type": "conversation.item.create", "item": ask}))
        t0 = time.perf_counter()
        ws.send(json.dumps({"type": "response.create"}))
        end = time.monotonic() + 120
        while time.monotonic() < end:
            ev = json.loads(ws.recv(timeout=max(0.01, end - time.monotonic())))
            if ev["type"] == "response.output_audio.delta":
                out.append((time.perf_counter() - t0) * 1000)
                return
            if ev["type"] == "response.done":
                raise RuntimeError(f"the reply ended without audio: {ev['response'].get('status')}")


def speech_flood(addr: str, _: dict[str, str]) -> str:
    def one(codes: list[int]) -> None:
        body = {"model": "tts-1", "input": LONG, "voice": "alloy", "response_format": "pcm"}
        with httpx.stream("POST", f"http://{addr}/v1/audio/speech", json=body, headers=ALICE, timeout=120) as r:
            codes.append(r.status_code)
            end = time.monotonic() + 8  # listens a while, then hangs up (its queued pieces are dropped)
            for _ in r.iter_raw():
                if time.monotonic() > end:
                    break

    codes: list[int] = []
    threads = [threading.Thread(target=one, args=(codes,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return f"three 4,095-character inputs at once: statuses {sorted(codes)}"


def _session(addr: str, updates: list[list[dict[str, Any]]], wait_s: float) -> str:
    seen: dict[str, int] = {}
    with connect(f"ws://{addr}/v1/realtime", additional_headers=ALICE, open_timeout=30) as ws:
        for tools in updates:
            ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": tools}}))
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            try:
                ev = json.loads(ws.recv(timeout=max(0.01, end - time.monotonic())))
            except TimeoutError:
                break
            if ev["type"] in ("mcp_list_tools.completed", "mcp_list_tools.failed", "error"):
                seen[ev["type"]] = seen.get(ev["type"], 0) + 1
    return ", ".join(f"{k} ×{v}" for k, v in sorted(seen.items()))


def mcp_labels(addr: str, urls: dict[str, str]) -> str:
    updates = [
        [
            {"type": "mcp", "server_label": f"l{i}_{j}", "server_url": urls["good"], "require_approval": "never"}
            for j in range(64)
        ]
        for i in range(12)
    ]
    return "12 updates of 64 new labels: " + _session(addr, updates, 8)


def mcp_wide(addr: str, urls: dict[str, str]) -> str:
    tools = [{"type": "mcp", "server_label": "wide", "server_url": urls["wide"], "require_approval": "never"}]
    return "a listing of 64 nested-anyOf tools: " + _session(addr, [tools], 5)


ATTACKS: list[tuple[str, Callable[[str, dict[str, str]], str]]] = [
    ("no attack", lambda addr, urls: (time.sleep(2), "idle")[1]),
    ("/v1/audio/speech: 4,095 unpunctuated characters, 3 at once", speech_flood),
    ("MCP: session.updates of 64 new labels", mcp_labels),
    ("MCP: a listing of 64 nested-anyOf tools", mcp_wide),
]


def repeat(
    attack: Callable[[str, dict[str, str]], str],
    addr: str,
    urls: dict[str, str],
    halt: threading.Event,
    notes: list[str],
) -> None:
    import os

    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ATTACKER_NICE)
    while not halt.is_set():
        try:
            notes.append(attack(addr, urls))
        except Exception as exc:  # recorded, not hidden
            notes.append(f"{type(exc).__name__}: {exc}")


def run(only: str | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        good, wide = start_server(Path(tmp)), start_server(Path(tmp), "rogue:wide")
        urls = {"good": good.url, "wide": wide.url}
        conf = {
            "audio.enabled": False,  # input (Whisper) off; the voice stays
            "speculative.drafter": "none",
            "server.api_keys": ["key-alice", "key-bob"],
            "server.max_pending_per_ip": 1000,
            "server.grace_period_s": 0,  # each bystander probe is a fresh session: a closed one frees its seat at once
            "tools.mcp_allowed_urls": [good.url, wide.url],
        }
        try:
            with server_process(conf) as addr:
                hi_ms(addr, [])  # warm
                reply_ms(addr, [])
                attacks = [(w, a) for w, a in ATTACKS if only is None or w == "no attack" or w.startswith(only)]
                for what, attack in attacks:
                    alone: list[float] = []
                    replies_alone: list[float] = []
                    for _ in range(PROBES):
                        hi_ms(addr, alone)
                        reply_ms(addr, replies_alone)
                    halt, done, lat, attacked, notes = threading.Event(), threading.Event(), [], [], []
                    t = threading.Thread(target=probe, args=(addr, done, lat))
                    a = threading.Thread(target=repeat, args=(attack, addr, urls, halt, notes))
                    t.start()
                    a.start()
                    time.sleep(1.0)  # the attack under way before the bystander asks
                    replies: list[float] = []
                    for _ in range(PROBES):
                        hi_ms(addr, attacked)
                        reply_ms(addr, replies)
                    halt.set()
                    a.join(300)
                    done.set()
                    t.join(15)
                    rows.append(
                        {
                            "attack": what,
                            "probes": len(lat),
                            "health p50 ms": round(pct(lat, 0.5) * 1000, 1),
                            "health p99 ms": round(pct(lat, 0.99) * 1000, 1),
                            "health max ms": round(max(lat) * 1000, 1),
                            "Hi. first audio alone ms": round(statistics.median(alone)),
                            "Hi. first audio attacked ms": round(statistics.median(attacked)),
                            "ratio": round(statistics.median(attacked) / statistics.median(alone), 2),
                            "reply first audio alone ms": round(statistics.median(replies_alone)),
                            "reply first audio attacked ms": round(statistics.median(replies)),
                            "reply ratio": round(statistics.median(replies) / statistics.median(replies_alone), 2),
                            "what happened": notes[0] if notes else "",
                        }
                    )
                    print(rows[-1], flush=True)
        finally:
            stop(good)
            stop(wide)
    return rows


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attacks", choices=["speech", "MCP"], help="only these attacks (and the idle row)")
    only = ap.parse_args().attacks
    rows = run({"speech": "/v1/audio/speech", "MCP": "MCP"}.get(only or ""))
    cols = list(rows[0])
    info = machine()
    busy = info["loadavg_1m"] > info["cpus"]
    note = (
        f"**Measured under load (load average {info['loadavg_1m']} on {info['cpus']} cores), not a quiet box.** "
        if busy
        else ""
    )
    md = (
        "# Abuse: the voice and MCP attacks\n\n" + note + ""
        f"{machine()}. `stream-omni serve` (embedded model, Piper) in its own process, two keys; the bystander "
        'key\'s `/v1/audio/speech` "Hi." and its Realtime voice reply (median ms to first audio) alone, then under '
        "each attack, side by side. "
        "Targets: /health p99 ≤ 100 ms, ratio ≤ 1.5.\n\n" + markdown_table(rows, cols)
    )
    write(f"abuse_voice_{only.lower()}" if only else "abuse_voice", {"machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
