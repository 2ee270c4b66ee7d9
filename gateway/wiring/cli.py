"""`stream-omni serve|bench` — the command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def uvicorn_config_kwargs(config: object) -> dict[str, object]:
    """uvicorn settings every entry point shares (tests use them too)."""
    from ..core.socket_guard import guarded_protocols

    limits = config.limits  # type: ignore[attr-defined]
    http, ws = guarded_protocols(config.server, limits.parse_off_loop_bytes)  # type: ignore[attr-defined]
    tls = config.server.tls  # type: ignore[attr-defined]
    # (the files were loaded once when the config was checked: gateway.core.config.TlsConfig)
    certs = {"ssl_certfile": tls.certfile, "ssl_keyfile": tls.keyfile} if tls is not None else {}
    return {
        **certs,
        "http": http,  # header deadline, 431, connection caps (gateway/core/socket_guard.py)
        "ws": ws,  # dead sockets aborted after server.close_timeout_s
        # h11's own limit sits past ours, so an over-size head gets our 431 rather than its 400
        "h11_max_incomplete_event_size": config.server.max_header_bytes + 4096,  # type: ignore[attr-defined]
        "ws_max_size": limits.max_text_frame_bytes,  # bigger frames close with 1009
        "ws_per_message_deflate": False,  # audio/images do not compress; deflate costs CPU and memory
        "ws_ping_interval": 20.0,
        "ws_ping_timeout": 20.0,
        "log_level": "info",
        "access_log": False,  # never log request lines with query strings (resume tokens)
    }


def serve(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the embedded default never needs a hub
    import uvicorn

    from models.llm import ModelLoadError

    from ..core.config import ConfigError, load_config
    from .app import create_app
    from .loading import default_loader, make_engine
    from .server import DrainingServer

    try:
        # a non-loopback host with no api_keys is refused here too (gateway.core.config.ServerConfig)
        config = load_config(args.config, **{"server.host": args.host, "server.port": args.port})
    except ConfigError as exc:
        print(f"stream-omni: {exc}", file=sys.stderr)
        return 2
    s = config.server
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"stream-omni: loading model {config.model.model!r} ({config.model.backend}) …", file=sys.stderr)
    # loaded on the engine's worker thread, the one that will decode (see models/engine.py)
    engine = make_engine(config)  # (backend: openai: the workers that stream from the remote engine)
    try:
        backend = engine.call(default_loader, config).result()
    except ModelLoadError as exc:
        engine.close()
        print(f"stream-omni: {exc}", file=sys.stderr)
        return 1
    auth = "API keys required" if s.api_keys else "no API keys: loopback only"
    scheme = "https" if s.tls is not None else "http"
    print(f"stream-omni: serving {backend.name} on {scheme}://{s.host}:{s.port} ({auth})", file=sys.stderr)
    app = create_app(config, backend_loader=lambda _cfg: backend, engine=engine)
    uv = uvicorn.Config(app, host=s.host, port=s.port, **uvicorn_config_kwargs(config))  # type: ignore[arg-type]
    DrainingServer(uv, app, s.shutdown_timeout_s).run()
    return 0


def bench_module(what: str) -> str:
    """``stream-omni bench decode`` runs ``bench.decode_bench`` where a module of the project is called
    ``decode`` already (module names are unique in the tree), else ``bench.<what>``."""
    import importlib.util

    for name in (f"bench.{what}_bench", f"bench.{what}"):
        if importlib.util.find_spec(name) is not None:
            return name
    return f"bench.{what}"


def bench(args: argparse.Namespace) -> int:
    import runpy

    # bench/ and the fakes it shares with the tests (testkit/) are packages of this project
    module = bench_module(args.what)
    sys.argv = [module, *args.rest]
    runpy.run_module(module, run_name="__main__")
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line's grammar (tests/test_docs.py checks the docs' commands against it)."""
    parser = argparse.ArgumentParser(prog="stream-omni", description="Real-time multimodal chat gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="run the gateway")
    p_serve.add_argument("--config", default=None, help="YAML config (default: the embedded default)")
    p_serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p_serve.add_argument("--port", type=int, default=None, help="TCP port (default 8000)")
    p_serve.set_defaults(func=serve)
    p_bench = sub.add_parser("bench", help="run a benchmark (decode, …); writes bench/results/")
    p_bench.add_argument("what", help="decode | scheduler | voice | batch | remote | soak | bigframes | asr | …")
    p_bench.add_argument("rest", nargs=argparse.REMAINDER)
    p_bench.set_defaults(func=bench)
    return parser


def commands() -> list[str]:
    """The subcommands: ``stream-omni <command> …``."""
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
