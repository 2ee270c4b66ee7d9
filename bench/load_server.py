"""A gateway process for load tests: the real app on the embedded model or on a fast fake model.

`python -m bench.load_server --backend fake --port 8100` (loopback only).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["fake", "real"], default="fake")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-running", type=int, default=64)
    ap.add_argument("--max-waiting", type=int, default=64)
    ap.add_argument("--step-ms", type=float, default=2.0, help="fake model: compute per step")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="config override, e.g. limits.x=1")
    args = ap.parse_args()

    import uvicorn

    from gateway.core.config import load_config
    from gateway.wiring.app import create_app
    from gateway.wiring.cli import uvicorn_config_kwargs
    from gateway.wiring.loading import default_loader
    from gateway.wiring.server import DrainingServer

    cfg = load_config(
        None,
        **{
            "audio.enabled": False,
            "engine.max_running": args.max_running,
            "engine.max_waiting": args.max_waiting,
            "limits.max_sessions": 1000,
            "session.max_output_tokens": 64,
            **{k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.set)},
        },
    )
    if args.backend == "fake":
        from testkit.fake_backend import FakeBackend

        backend = FakeBackend(answer_tokens=60, step_s=args.step_ms / 1000)
        app = create_app(cfg, backend_loader=lambda _c: backend)
    else:  # loaded by the app, on its engine thread
        app = create_app(cfg, backend_loader=default_loader)
    kw = uvicorn_config_kwargs(cfg)
    kw["log_level"] = "warning"
    DrainingServer(uvicorn.Config(app, host="127.0.0.1", port=args.port, **kw), app, 5).run()


if __name__ == "__main__":
    main()
