"""docs/REPLICAS.md's recipe, as documented: two ``stream-omni serve --config configs/replicas.yaml``
processes on the embedded model, Redis, and the nginx block of that page (round robin, no sticky
sessions) in front. The client only ever talks to nginx."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets
import yaml

from testkit.live_server import free_port
from testkit.remote_engines import EngineProcess
from testkit.replicas import RedisServer
from tests.cluster.replica_client import Run, turn, user
from tests.resume_client import WS_OPTS, recv

ROOT = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(NGINX is None and not os.environ.get("CI"), reason="nginx is not installed (apt nginx-light)"),
]


def documented_nginx_block() -> str:
    text = (ROOT / "docs" / "REPLICAS.md").read_text()
    blocks = re.findall(r"```nginx\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/REPLICAS.md must hold exactly one nginx block"
    return blocks[0]


def start_nginx(tmp: Path, port: int, upstreams: list[int]) -> subprocess.Popen[bytes]:
    block = documented_nginx_block()
    for documented, real in zip(("127.0.0.1:8001", "127.0.0.1:8002"), upstreams, strict=True):
        assert documented in block
        block = block.replace(documented, f"127.0.0.1:{real}")
    block = block.replace("listen 8000;", f"listen 127.0.0.1:{port};")
    temp = "".join(f"{k}_temp_path {tmp}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"{user}worker_processes 1;\nerror_log {tmp}/error.log;\npid {tmp}/nginx.pid;\n"
        f"events {{ worker_connections 512; }}\nhttp {{\naccess_log off;\n{temp}{block}\n}}\n"
    )
    proc = subprocess.Popen([str(NGINX), "-p", str(tmp), "-c", str(conf), "-g", "daemon off;"])
    deadline = time.monotonic() + 20
    while True:  # up when it proxies /health to a replica
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (tmp / "error.log").read_text()
        time.sleep(0.1)


@pytest.fixture
def cluster(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[str, list[EngineProcess]]]:
    conf = yaml.safe_load((ROOT / "configs" / "replicas.yaml").read_text())
    conf["replicas"]["store"] = redis_server.url  # the test's own Redis; everything else as documented,
    conf.setdefault("session", {})["temperature"] = 0.0  # but greedy: two runs are compared token for token
    cfg = tmp_path / "replicas.yaml"
    cfg.write_text(yaml.safe_dump(conf))
    procs = []
    for _ in range(2):
        port = free_port()
        argv = [sys.executable, "-m", "gateway.wiring.cli", "serve", "--config", str(cfg), "--port", str(port)]
        procs.append(EngineProcess(argv, port, tmp_path / f"serve_{port}.log"))
    nginx = None
    try:
        for p in procs:
            p.start(timeout=300)
        lb = free_port()
        nginx = start_nginx(tmp_path, lb, [p.port for p in procs])
        yield f"127.0.0.1:{lb}", procs
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        for p in procs:
            p.stop()


def metric(port: int, name: str) -> float:
    """One unlabelled sample of a replica's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.timeout(900)  # two model processes and four real-model turns: minutes on a loaded 2-core box
def test_the_documented_recipe_resumes_across_replicas_and_survives_a_kill(cluster):
    lb, procs = cluster
    rng = random.Random(7)
    ref = Run()
    asyncio.run(turn(ref, [lb], "Write a short paragraph about the sea.", [], rng, recv_timeout_s=60))
    run = Run()
    cuts = [(rng.randint(1, 3), rng.choice(["abort", "close"])) for _ in range(12)]
    asyncio.run(turn(run, [lb], "Write a short paragraph about the sea.", cuts, rng, recv_timeout_s=60))
    assert run.text(0) == ref.text(0) and run.text(0)
    assert run.resumes >= 4 and run.duplicates == 0 and run.gaps == 0 and run.resume_failed == 0
    assert all(
        metric(p.port, "stream_omni:resumes_total") > 0 for p in procs
    )  # round robin: both replicas served resumes

    async def killed_mid_response() -> dict:
        ws = await websockets.connect(
            f"ws://{lb}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}", **WS_OPTS
        )
        assert (await recv(ws, 30))["type"] == "session.resumed"
        await ws.send(user("Tell me a long story about the sea."))
        await ws.send(json.dumps({"type": "response.create"}))
        while run.count("response.created") < 2:
            run.accept(await recv(ws, 60))
        while not run.text(1):
            run.accept(await recv(ws, 60))
        owners = [p for p in procs if metric(p.port, "stream_omni:num_requests_running") > 0]
        assert len(owners) == 1, "the second reply should still be running on exactly one replica"
        owners[0].kill()
        try:
            while True:  # this socket may run through the owner itself, or be proxied by the survivor
                run.accept(await recv(ws, 60))
                if run.count("response.done") == 2:
                    break
        except websockets.ConnectionClosed:
            ws = await websockets.connect(
                f"ws://{lb}/v1/realtime?resume_token={run.token}&last_seq={run.last_seq}", **WS_OPTS
            )
            assert (await recv(ws, 30))["type"] == "session.resumed"
            while run.count("response.done") < 2:
                run.accept(await recv(ws, 60))
        await ws.close()
        return [e for e in run.events if e["type"] == "response.done"][1]["response"]

    done = asyncio.run(killed_mid_response())
    assert done["status"] == "incomplete" and done["status_details"]["reason"] == "server_error"
    assert done["output"][0]["content"][0]["text"] == run.text(1)
    asyncio.run(turn(run, [lb], "Thanks!", [], rng, recv_timeout_s=60))  # the survivor goes on
    assert run.count("response.done") == 3
    assert run.duplicates == 0 and run.gaps == 0 and run.resume_failed == 0
    assert [e["seq"] for e in run.events] == list(range(len(run.events)))
