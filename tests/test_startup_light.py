"""A gateway in front of a remote engine stays light: ``stream-omni serve`` with ``model.backend: openai``
reaches /ready without mapping libtorch or llama.cpp, however imports move."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from testkit.live_server import count_server, free_port
from testkit.remote_engines import ROOT, BadEngine

pytestmark = pytest.mark.server

# the native libraries a local model needs and a remote one must never load
HEAVY = ("libtorch", "libc10", "libllama", "libggml")
READY_WITHIN_S = 180  # a loaded CI box has taken 23 s (2 cores, load 15); a quiet one 1.4 s


def mapped_libraries(pid: int) -> set[str]:
    """File names of the shared objects a process has mapped (from /proc/<pid>/maps)."""
    names = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if ".so" in path:
            names.add(path.rsplit("/", 1)[-1])
    return names


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(row.split()[1] for row in status.splitlines() if row.startswith("VmRSS"))) / 1024


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_a_remote_backend_gateway_reaches_ready_without_libtorch(tmp_path):
    engine = BadEngine("json")  # answers GET /models like any OpenAI server: all /ready needs
    port = free_port()
    cfg = tmp_path / "remote.yaml"
    # configs/remote.yaml as shipped (audio on: Whisper through CTranslate2 and the VAD through ONNX)
    cfg.write_text((ROOT / "configs" / "remote.yaml").read_text().replace("http://127.0.0.1:8222/v1", engine.base_url))
    log = (tmp_path / "serve.log").open("wb")
    argv = [sys.executable, "-m", "gateway.wiring.cli", "serve", "--config", str(cfg), "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    count_server()
    try:
        t0 = time.monotonic()
        while True:
            assert proc.poll() is None, f"serve exited: {(tmp_path / 'serve.log').read_text()[-2000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:
                    break
            assert time.monotonic() - t0 < READY_WITHIN_S, "not ready: " + (tmp_path / "serve.log").read_text()[-2000:]
            time.sleep(0.1)
        ready_s = time.monotonic() - t0
        libs = mapped_libraries(proc.pid)
        heavy = sorted(lib for lib in libs if lib.startswith(HEAVY))
        seen = f"ready in {ready_s:.1f} s, {rss_mb(proc.pid):.0f} MB resident"
        assert not heavy, f"a remote-backend gateway mapped {heavy} ({seen}): an import pulled a local model in"
        assert any(".cpython-" in lib for lib in libs)  # the reader sees the extension modules it loaded
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
        engine.close()
