"""``python -m testkit.serve_fake --config C --port P``: the real gateway (uvicorn, the app, its
lifespan) in its own process, on the deterministic fake model — a replica the cluster tests can
start several of and kill -9, without loading a real model in each."""

from __future__ import annotations

import argparse

import uvicorn

from gateway.core.config import load_config
from gateway.wiring.app import create_app
from gateway.wiring.cli import uvicorn_config_kwargs
from gateway.wiring.server import DrainingServer
from testkit.fake_backend import FakeBackend


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--answer-tokens", type=int, default=240)
    ap.add_argument("--step-s", type=float, default=0.002, help="seconds per decode step")
    args = ap.parse_args()
    config = load_config(args.config, **{"server.port": args.port})
    backend = FakeBackend(answer_tokens=args.answer_tokens, step_s=args.step_s)
    app = create_app(config, backend_loader=lambda _cfg: backend)
    kwargs = {**uvicorn_config_kwargs(config), "log_level": "warning"}
    uv = uvicorn.Config(app, host="127.0.0.1", port=args.port, **kwargs)  # type: ignore[arg-type]
    DrainingServer(uv, app, config.server.shutdown_timeout_s).run()


if __name__ == "__main__":
    main()
