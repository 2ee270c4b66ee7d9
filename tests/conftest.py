"""Shared fixtures: a tiny random-init Llama saved to disk, the embedded model, a real uvicorn server."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import testkit.live_server
import tests.fuzzing
from testkit.espeak import ESPEAK
from testkit.live_server import run_server
from testkit.loopwatch import SERVER_STALLS, report
from testkit.tiny_models import build_tiny_llama, build_tiny_open_clip, build_tiny_sd, build_tiny_vlm

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# in CI a missing espeak-ng must fail the speech tests, not skip them
requires_espeak = pytest.mark.skipif(
    bool(ESPEAK is None and not os.environ.get("CI")),
    reason="espeak-ng is not installed (apt-get install espeak-ng) — no speech to test on",
)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# CI draws the same hypothesis examples every run (a red build must be reproducible, never a seed's
# luck); locally examples stay random, so new cases keep being found. No example database either way.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("dev", database=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# fixtures that start a real server (uvicorn, Redis, an engine process, an MCP server) or a browser:
# a test that uses one, directly or through another fixture, is marked `server`, so
# `pytest -m "not server and not real_model"` is the fast inner loop (README, "Tests")
SERVER_FIXTURES = frozenset(
    {"server_factory", "redis_server", "browser", "open_page", "tcp_proxy", "mcp_http", "mcp_evil"}
)


def pytest_configure(config: pytest.Config) -> None:
    """The inner loop draws a tenth of each fuzz test's examples (``tests.fuzzing``); test modules are
    imported after this, so their ``@settings`` see it."""
    if "not server" in (config.option.markexpr or ""):
        tests.fuzzing.SCALE = 0.1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


_SERVERS_BEFORE = pytest.StashKey[int]()
_STALLS_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_SERVERS_BEFORE] = testkit.live_server.servers_started
    item.stash[_STALLS_BEFORE] = len(SERVER_STALLS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that starts a server without a server fixture must say so, or the inner loop slows;
    and no test server's event loop may stall while a test runs (``testkit.loopwatch``: a callback
    computing over 100 ms, or blocking over 2 s). Checked after the fixtures' own teardown has run,
    so a failure here never leaks a server."""
    result = yield
    stalls = SERVER_STALLS[item.stash.get(_STALLS_BEFORE, len(SERVER_STALLS)) :]
    if stalls:
        pytest.fail(f"{item.nodeid}: a test server's {report(stalls)}", pytrace=False)
    started = testkit.live_server.servers_started - item.stash.get(_SERVERS_BEFORE, testkit.live_server.servers_started)
    if started and item.get_closest_marker("server") is None:
        pytest.fail(
            f"{item.nodeid} started {started} server(s) but is not marked `server`: use a server fixture "
            f"({', '.join(sorted(SERVER_FIXTURES))}) or add @pytest.mark.server (or a module `pytestmark`)",
            pytrace=False,
        )
    return result


@pytest.fixture(scope="session")
def tokenizer_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2 tokenizer (with its chat template) saved as a normal HF folder.

    Reading it out of the GGUF takes transformers 5-10 s, so the folder is kept in pytest's cache
    (``.pytest_cache``), keyed by the GGUF and transformers versions; without a cache, a temp dir."""
    import transformers

    from models.llm import embedded_gguf

    gguf = embedded_gguf()
    key = f"{gguf.name}-{gguf.stat().st_size}-{transformers.__version__}"
    cache = getattr(request.config, "cache", None)
    out = cache.mkdir(f"tokenizer-{key}") if cache is not None else tmp_path_factory.mktemp("tokenizer")
    if not (out / "tokenizer.json").is_file():
        tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        staging = out.with_name(f"{out.name}.{os.getpid()}")  # beside it: a rename, not a copy
        tok.save_pretrained(staging)
        for f in staging.iterdir():  # tokenizer.json last: its presence says the folder is whole
            if f.name != "tokenizer.json":
                os.replace(f, out / f.name)
        os.replace(staging / "tokenizer.json", out / "tokenizer.json")
        staging.rmdir()
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), tokenizer_dir)


@pytest.fixture(scope="session")
def tiny_backend(tiny_llama_dir: Path) -> Any:
    from models.llm import LLMConfig, load_backend

    return load_backend(LLMConfig(model=str(tiny_llama_dir), dtype="float32", served_name="tiny-llama"))


@pytest.fixture(scope="session")
def real_backend() -> Any:
    """The embedded default model (SmolLM2-135M-Instruct, bf16) — loaded once per test run."""
    from models.llm import LLMConfig, load_backend

    return load_backend(LLMConfig())


@pytest.fixture
def server_factory() -> Callable[..., Any]:
    """server_factory(backend, **config_overrides) → context manager yielding 'host:port'."""
    from gateway.core.config import load_config

    def make(backend: Any, **overrides: Any) -> Any:
        return run_server(load_config(None, **overrides), backend)

    return make


def checking_private_candidates(server_factory: Callable[..., Any]) -> Callable[..., Any]:
    """``server_factory`` with ``webrtc.allow_private_candidates`` on (a test's own overrides win): WebRTC
    callers on this machine (aiortc, Chromium, the Node clients) offer its LAN address or mDNS .local
    names, which a server with API keys refuses by default."""

    def make(backend: Any, **overrides: Any) -> Any:
        return server_factory(backend, **{"webrtc.allow_private_candidates": True, **overrides})

    return make


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_open_clip(tmp_path_factory.mktemp("tiny_open_clip"))


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"), tokenizer_dir)


@pytest.fixture(scope="session")
def tiny_sd_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_sd(tmp_path_factory.mktemp("tiny_sd"))
