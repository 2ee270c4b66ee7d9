"""create_app(config): the ASGI app — routes, and the lifespan that loads the model. Nothing imports it back."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from models.backend import Backend
from models.engine_client import EngineClient
from models.remote import RemoteModel

from ..cluster.node import ClusterNode, start_node
from ..cluster.resume import cluster_sessions
from ..core.config import Config
from ..core.security import LocalHostGuard
from ..core.services import Services
from ..http import api_routes as http_routes
from ..realtime import socket_routes as realtime_routes
from ..telephony.control import TelephonyApi
from ..webrtc.signalling import WebRtcApi
from .startup import start_services, stop_services

WEB_DIR = Path(__file__).resolve().parents[2] / "web"  # the browser client, served at GET /


def create_app(
    config: Config,
    backend_loader: Callable[[Config], Backend | RemoteModel] | None = None,
    engine: EngineClient | None = None,
) -> Starlette:
    """The ASGI app. ``backend_loader`` defaults to the configured backend (see models/); it runs on
    the engine's thread. Pass ``engine`` when the model was already loaded on that engine's thread."""
    state: dict[str, Services] = {}
    cluster: dict[str, ClusterNode] = {}  # "node": with a Redis session store (replicas.store)
    given_engine = engine

    def svc() -> Services:
        return state["svc"]

    def node() -> ClusterNode | None:
        return cluster.get("node")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        services = state["svc"] = await start_services(config, backend_loader, given_engine)
        app.state.services = services
        await telephony_api.start()
        # what is loaded now (weights' wrappers, tokenizer, schemas: ≈ 0.5 M objects) lives as long
        # as the server: freeze it out of the cyclic GC's reach, or each full collection walks it
        # all (≈ 100–250 ms measured here) in the middle of some response's first token
        gc.collect()
        gc.freeze()
        try:
            if config.replicas.store != "memory":
                cluster["node"] = app.state.node = await start_node(config, services)
            yield
        finally:
            gc.unfreeze()  # an app that stops (tests start many) gives its objects back to the GC
            n = cluster.get("node")
            await services.registry.drain(0, hand_off=n.hand_off if n else None)
            if n is not None:
                await cluster.pop("node").stop()
            await telephony_api.close()
            await webrtc_api.close()
            await app.state.completions.drain(0)
            stop_services(services)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        if "svc" not in state:
            return JSONResponse({"status": "loading"}, status_code=503)
        s = svc()
        backend = s.backend
        n = node()
        if n is not None and not n.store.available:  # new sessions are refused (store_unavailable)
            return JSONResponse({"status": "store_unavailable", "model": backend.name}, status_code=503)
        if not await asyncio.to_thread(s.engine.ready):  # (a remote engine may be asked: off the loop)
            return JSONResponse({"status": "engine_unavailable", "model": backend.name}, status_code=503)
        return JSONResponse({"status": "ready", "model": backend.name})

    async def models(request: Request) -> Response:
        s = svc()
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": int(s.started), "owned_by": "stream-omni"}
                    for m in s.model_ids
                ],
            }
        )

    async def metrics(request: Request) -> Response:
        s = svc()
        running, waiting = s.engine.depth
        s.metrics.sessions.set(len(s.registry))
        s.metrics.loop_tasks.set(len(asyncio.all_tasks()))
        return Response(s.metrics.render(running, waiting), media_type="text/plain; version=0.0.4")

    http_api = http_routes.HttpApi(svc)
    webrtc_api = WebRtcApi(svc, node)
    telephony_api = TelephonyApi(svc)

    async def sideband(ws: WebSocket) -> None:  # a phone call's, else a WebRTC call's
        await telephony_api.sideband(ws, webrtc_api.sideband)

    routes = [
        Route("/health", health),
        Route("/ready", ready),
        Route("/v1/models", models),
        Route("/metrics", metrics),
        *realtime_routes.routes(svc, lambda: cluster_sessions(node()), sideband=sideband),
        *telephony_api.routes(webrtc_api.hangup),  # first: it hands WebRTC call ids on
        *webrtc_api.routes(),
        *http_api.routes(),
        Mount("/", app=StaticFiles(directory=str(WEB_DIR), html=True, check_dir=False), name="web"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(LocalHostGuard, server=config.server)])
    app.state.completions = http_api.store
    app.state.webrtc = webrtc_api
    app.state.telephony = telephony_api
    return app
