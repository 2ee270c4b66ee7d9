"""Shared fixtures: a tiny random-init Llama saved to disk, the embedded model, a real uvicorn server."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.image_fixtures import tiny_clip_dir, tiny_sd_dir, tiny_vlm_dir  # noqa: E402, F401  (shared fixtures)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2 tokenizer (with its chat template) saved as a normal HF folder."""
    from transformers import AutoTokenizer

    from models.llm import embedded_gguf

    gguf = embedded_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out = tmp_path_factory.mktemp("tokenizer")
    tok.save_pretrained(out)
    return out


def build_tiny_llama(
    out: Path, tokenizer_dir: Path, seed: int = 0, layers: int = 2, init: float = 0.02, noise: float = 0.0
) -> Path:
    """A random-init LlamaForCausalLM sharing SmolLM2's tokenizer, saved with save_pretrained.

    ``init`` is the weight scale (transformers' default 0.02); ``noise`` > 0 then perturbs every
    weight by that much of its own spread (a draft model close to the seed's target)."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
        initializer_range=init,
    )
    model = LlamaForCausalLM(cfg)
    if noise:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * noise * p.std())
    model.save_pretrained(out)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, out / f.name)
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerAddr(str):
    """'host:port' of a running test server, with handles for tests that poke at the server side."""

    app: Any
    server: Any

    def call(self, fn: Callable[[], Any], timeout: float = 10) -> Any:
        """Run ``fn`` on the server's event loop thread and return its result."""
        import concurrent.futures

        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return fut.result(timeout)

    loop: Any = None

    @property
    def services(self) -> Any:
        return self.app.state.services


@contextmanager
def run_server(config: Any, backend: Any, loader: Callable[[Any], Any] | None = None) -> Iterator[ServerAddr]:
    """A real uvicorn serving create_app(config) on a free loopback port; yields 'host:port'.

    The app gets ``backend`` (or whatever ``loader(config)`` returns, called on the engine thread)."""
    import uvicorn

    from gateway.app import create_app
    from gateway.cli import uvicorn_config_kwargs

    port = free_port()
    app = create_app(config, backend_loader=loader or (lambda _cfg: backend))
    kwargs = uvicorn_config_kwargs(config)
    kwargs["log_level"] = "warning"
    from gateway.server import DrainingServer

    uv = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", **kwargs)
    server = DrainingServer(uv, app, config.server.shutdown_timeout_s)
    def serve() -> None:
        import asyncio

        loop = asyncio.new_event_loop()
        server._stream_omni_loop = loop  # type: ignore[attr-defined]
        try:
            loop.run_until_complete(server.serve())
        finally:
            loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    addr = ServerAddr(f"127.0.0.1:{port}")
    addr.app, addr.server = app, server
    addr.loop = getattr(server, "_stream_omni_loop", None)
    try:
        yield addr
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture
def server_factory() -> Callable[..., Any]:
    """server_factory(backend, **config_overrides) → context manager yielding 'host:port'."""
    from gateway.config import load_config

    def make(backend: Any, **overrides: Any) -> Any:
        return run_server(load_config(None, **overrides), backend)

    return make
