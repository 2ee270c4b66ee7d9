"""A property over the whole HTTP surface: random routes, methods, headers (malformed ones too) and
bodies (bytes, JSON near the real schemas, multipart) never get a 500, nor a traceback in the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from testkit.fake_backend import FakeBackend
from testkit.httpfuzz import ErrorLog, FuzzRequest, requests, send
from tests.fuzzing import examples

pytestmark = pytest.mark.server  # a real uvicorn server for the whole module


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ErrorLog]]:
    from gateway.core.config import load_config
    from testkit.live_server import run_server

    conf = load_config(
        None, **{"audio.enabled": False, "files.folder": str(tmp_path_factory.mktemp("files")), "files.max_per_key": 50}
    )
    log = ErrorLog()
    root = logging.getLogger()
    root.addHandler(log)
    try:
        with run_server(conf, FakeBackend(answer_tokens=3)) as addr:
            yield addr, log
    finally:
        root.removeHandler(log)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(req=requests())
def test_no_request_gets_a_500_or_a_traceback(fuzzed: tuple[Any, ErrorLog], req: FuzzRequest):
    addr, log = fuzzed
    with httpx.Client(timeout=10) as client:
        status = send(client, f"http://{addr}", req)
    assert status < 500 or status == 503, (status, req)  # 503: busy, a retry later
    assert not log.records, log.describe()
