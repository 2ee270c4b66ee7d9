"""A real ``redis-server`` per test module (Debian's; free port, temp dir, no persistence)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.replicas import RedisServer

# in CI a missing redis-server must fail these tests, not skip them (.ci/run installs it)
if not RedisServer.available() and not os.environ.get("CI"):
    pytest.skip("redis-server is not installed (apt-get install redis-server)", allow_module_level=True)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
