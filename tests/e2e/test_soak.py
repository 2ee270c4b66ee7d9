"""The CI soak: two minutes of mixed traffic (Realtime text, cancels, resume cuts, HTTP chat) against
a real gateway process on the fake model; nothing may grow — asyncio tasks, open fds and live
sessions are back to their baseline once the load stops and detached sessions expired — and no
request fails. The long version on the embedded model is `stream-omni bench soak --minutes 30`."""

from __future__ import annotations

import asyncio
import signal

import pytest

from bench.common import free_port
from bench.soak import soak, start_server

pytestmark = pytest.mark.server  # a gateway process (bench.soak.start_server)


def test_two_minutes_of_mixed_traffic_leave_nothing_behind():
    port = free_port()
    proc = start_server(port, fake=True, voice=False)
    try:
        res = asyncio.run(soak(f"127.0.0.1:{port}", proc.pid, port, 2.0, 30.0, 4, None))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    print(res)
    windows, base, after = res["windows"], res["baseline"], res["after"]
    assert len(windows) >= 3 and all(w["turns"] > 0 for w in windows)
    assert sum(w["errors"] for w in windows) == 0, [w["error kinds"] for w in windows]
    assert after["sessions"] == base["sessions"] == 0
    assert after["tasks"] <= base["tasks"], (base, after)
    assert after["fds"] <= base["fds"], (base, after)
