"""Shared benchmark helpers: medians, JSON + Markdown output under bench/results/."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

RESULTS = Path(__file__).resolve().parent / "results"


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def median_ci(xs: list[float], reps: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """The median of ``xs`` and a 95 % bootstrap interval for it (seeded: a rerun prints the same)."""
    import random

    if not xs:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(reps))
    return float(statistics.median(xs)), float(meds[int(0.025 * reps)]), float(meds[int(0.975 * reps) - 1])


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0, 0, 0)
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_1m": round(load[0], 2),
    }


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.2f}" if abs(v) < 1000 else f"{v:.0f}"
        return "" if v is None else str(v)

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |\n" for r in rows)


def write(name: str, data: dict[str, Any], markdown: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2))
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)
    print(f"wrote {RESULTS / name}.json and .md")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server_process(overrides: dict[str, Any], timeout_s: float = 180.0) -> Iterator[str]:
    """``stream-omni serve`` in its own process (as users run it) with dotted config overrides;
    yields ``host:port`` once /ready answers.

    Benchmarks keep the server out of their own process: both llama.cpp and torch run their
    kernels on a libgomp team per calling thread, and two teams in one process outnumber the 2
    cores, which makes libgomp throttle its spin-waits and slows every system (≈ 2× here).
    """
    from gateway.core.config import nest_overrides

    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(nest_overrides(overrides), f)
    cmd = [sys.executable, "-m", "gateway.wiring.cli", "serve", "--config", f.name, "--port", str(port)]
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": root}
    log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server never blocks on it
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=root)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"server exited: {log.read().decode(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        os.unlink(f.name)


def server_pid(port: str) -> int:
    """The pid of the `stream-omni serve` started by ``server_process`` on ``port``."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "gateway.wiring.cli" in cmd and port in cmd:
            return int(proc.pid)
    raise RuntimeError("server process not found")
