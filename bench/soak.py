"""`stream-omni bench soak --minutes N`: hours-shaped load against a real gateway process.

Mixed traffic from a few workers: Realtime text turns, voice turns (when the server has audio),
cancels, resume cuts (drop the socket mid-reply, resume with resume_token + last_seq) and HTTP chat
completions. Per window: server RSS, open fds, asyncio tasks and live sessions (from /metrics),
TTFT p99 and errors. After the load: the same figures once detached sessions expired, against the
baseline before it. ``--fake`` serves the deterministic fake model (the CI version); otherwise
``stream-omni serve`` on the embedded model. Writes bench/results/soak*.json + .md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import websockets

from bench.common import free_port, machine, markdown_table, write

USER = {
    "type": "conversation.item.create",
    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "tell me a story"}]},
}
GRACE_S = 2.0  # detached sessions end this soon, so "back to baseline" is checkable right after the load


@dataclass
class Window:
    ttft: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    turns: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def start_server(port: int, fake: bool, voice: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    sets = {"server.grace_period_s": GRACE_S, "limits.max_sessions": 256, "session.max_output_tokens": 48}
    if fake:
        cmd = [sys.executable, "-m", "bench.load_server", "--backend", "fake", "--port", str(port)]
        cmd += [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    else:
        conf = {}
        for k, v in {**sets, "audio.enabled": voice}.items():
            section, key = k.split(".")
            conf.setdefault(section, {})[key] = v
        path = os.path.join(tempfile.mkdtemp(), "soak.yaml")
        with open(path, "w") as f:
            json.dump(conf, f)  # JSON is YAML
        cmd = [sys.executable, "-m", "gateway.wiring.cli", "serve", "--port", str(port), "--config", path]
    proc = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("server exited") from None
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not start")


def probe(pid: int, port: int) -> dict[str, float]:
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))
    # Counted before this probe's own /metrics connection is opened, so it never counts itself.
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    gauges = {}
    for line in text.splitlines():
        for name in ("stream_omni:event_loop_tasks", "stream_omni:active_sessions"):
            if line.startswith(name + " "):
                gauges[name] = float(line.split()[1])
    return {
        "rss_mb": rss,
        "fds": fds,
        "tasks": gauges.get("stream_omni:event_loop_tasks", float("nan")),
        "sessions": gauges.get("stream_omni:active_sessions", float("nan")),
    }


def models(addr: str) -> list[str]:
    return [m["id"] for m in json.loads(urllib.request.urlopen(f"http://{addr}/v1/models", timeout=10).read())["data"]]


async def recv(ws: Any) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), 120))


async def realtime_turn(addr: str, w: Window, kind: str, pcm: bytes | None) -> None:
    """One turn: text, voice, cancel (after the first delta) or cut (drop after a few events, resume)."""
    t0 = time.monotonic()
    ws = await websockets.connect(f"ws://{addr}/v1/realtime", max_size=None, max_queue=None, open_timeout=30)
    try:
        created = await recv(ws)
        token, last = created["resume"]["token"], created["seq"]
        if kind == "voice" and pcm is not None:
            fmt = {"type": "audio/pcm", "rate": 16000}
            await ws.send(
                json.dumps(
                    {"type": "session.update", "session": {"audio": {"input": {"format": fmt, "turn_detection": None}}}}
                )
            )
            for i in range(0, len(pcm), 6400):
                await ws.send(
                    json.dumps(
                        {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i : i + 6400]).decode()}
                    )
                )
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        else:
            await ws.send(json.dumps(USER))
        await ws.send(json.dumps({"type": "response.create"}))
        seen, first = 0, True
        while True:
            ev = await recv(ws)
            last = ev.get("seq", last)
            seen += 1
            if ev["type"] == "error":
                w.error(ev["error"]["code"])
            if ev["type"] == "response.output_text.delta" and first:
                first = False
                w.ttft.append(time.monotonic() - t0)
                if kind == "cancel":
                    await ws.send(json.dumps({"type": "response.cancel"}))
            if kind == "cut" and seen == 6:  # vanish without a close frame, come back where we were
                ws.transport.abort()
                ws = await websockets.connect(
                    f"ws://{addr}/v1/realtime?resume_token={token}&last_seq={last}", max_size=None, max_queue=None
                )
                hello = await recv(ws)
                if hello["type"] != "session.resumed":
                    w.error("resume_failed")
                    return
            if ev["type"] == "response.done":
                status = ev["response"]["status"]
                ok = {"completed", "incomplete"} | ({"cancelled"} if kind == "cancel" else set())
                if status not in ok:
                    w.error(f"status_{status}")
                w.turns[kind] = w.turns.get(kind, 0) + 1
                return
    finally:
        await ws.close()


def http_turn(addr: str, model: str, w: Window) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/chat/completions", body, {"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    w.ttft.append(time.monotonic() - t0)
    if not out.get("choices"):
        w.error("http_no_choices")
    w.turns["http"] = w.turns.get("http", 0) + 1


async def worker(addr: str, model: str, until: float, windows: list[Window], i: int, pcm: bytes | None) -> None:
    kinds = ["text", "cancel", "cut", "http"] + (["voice"] if pcm is not None else [])
    n = i
    while time.monotonic() < until:
        kind = kinds[n % len(kinds)]
        n += 1
        w = windows[-1]
        try:
            if kind == "http":
                await asyncio.to_thread(http_turn, addr, model, w)
            else:
                await realtime_turn(addr, w, kind, pcm)
        except Exception as exc:  # counted, never fatal: the soak reports it
            w.error(f"{kind}:{type(exc).__name__}")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def soak(
    addr: str, pid: int, port: int, minutes: float, window_s: float, workers: int, pcm: bytes | None
) -> dict[str, Any]:
    model = (await asyncio.to_thread(models, addr))[0]
    baseline = await asyncio.to_thread(probe, pid, port)
    windows = [Window()]
    until = time.monotonic() + minutes * 60
    tasks = [asyncio.create_task(worker(addr, model, until, windows, i, pcm)) for i in range(workers)]
    rows = []
    start = time.monotonic()
    while not all(t.done() for t in tasks):
        await asyncio.wait(tasks, timeout=window_s)
        w = windows[-1]
        windows.append(Window())
        rows.append(
            {
                "window end s": round(time.monotonic() - start),
                **(await asyncio.to_thread(probe, pid, port)),
                "turns": sum(w.turns.values()),
                "TTFT p99 ms": pct(w.ttft, 0.99) * 1000,
                "errors": sum(w.errors.values()),
                "error kinds": ",".join(f"{k}={v}" for k, v in sorted(w.errors.items())),
            }
        )
        print(rows[-1], flush=True)
    if rows and rows[-1]["turns"] == 0:  # the load ended just before this window: nothing in it
        rows.pop()
    # Detached sessions expire after GRACE_S, and the server closes a socket only after the client's
    # FIN reaches it (the previous probe's own connection included); a real leak stays past 60 s.
    deadline = time.monotonic() + 60
    after = await asyncio.to_thread(probe, pid, port)
    while time.monotonic() < deadline and any(after[k] > baseline[k] for k in ("sessions", "tasks", "fds")):
        await asyncio.sleep(0.5)
        after = await asyncio.to_thread(probe, pid, port)
    return {"baseline": baseline, "after": after, "windows": rows}


def speech_pcm() -> bytes | None:
    try:
        from testkit.espeak import ESPEAK, speak

        if ESPEAK is None:
            return None
        import numpy as np

        audio = speak("please tell me a short story about a cat")
        return (np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes()
    except Exception:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--window-s", type=float, default=300.0, help="report every this many seconds")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--fake", action="store_true", help="the fake model (the CI soak); default: the embedded model")
    ap.add_argument("--no-voice", action="store_true")
    ap.add_argument("--name", default="soak")
    args = ap.parse_args()
    voice = not args.fake and not args.no_voice
    pcm = speech_pcm() if voice else None
    port = free_port()
    proc = start_server(port, args.fake, pcm is not None)
    try:
        res = asyncio.run(soak(f"127.0.0.1:{port}", proc.pid, port, args.minutes, args.window_s, args.workers, pcm))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    res["rss_growth_after_first_window_pct"] = (
        (res["windows"][-1]["rss_mb"] / res["windows"][0]["rss_mb"] - 1) * 100 if res["windows"] else None
    )
    cols = ["window end s", "rss_mb", "fds", "tasks", "sessions", "turns", "TTFT p99 ms", "errors", "error kinds"]
    b, a = res["baseline"], res["after"]
    md = (
        f"# Soak: {args.minutes:g} min, {args.workers} workers, {'fake' if args.fake else 'embedded'} model"
        f"{', voice' if pcm is not None else ''}\n\n"
        + markdown_table(res["windows"], cols)
        + f"\nbaseline → after load: tasks {b['tasks']:.0f} → {a['tasks']:.0f}, fds {b['fds']} → {a['fds']}, "
        f"sessions {b['sessions']:.0f} → {a['sessions']:.0f}, RSS {b['rss_mb']:.0f} → {a['rss_mb']:.0f} MB; "
        f"RSS growth after the first window {res['rss_growth_after_first_window_pct']:.1f}%\n\nmachine: {machine()}\n"
    )
    write(args.name, {"machine": machine(), "args": vars(args), **res}, md)


if __name__ == "__main__":
    main()
