"""GA WebRTC signalling: ``POST /v1/realtime/calls`` (SDP offer → answer), hangup, and the sideband socket.

Everything that can refuse an offer cheaply runs before any media work: origin, API key, the
per-key offer rate, the body's size and type, the SDP checks (``gateway.webrtc.webrtc_sdp``), the
``session`` JSON, and the session limits. Only then is a peer connection made.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.websockets import WebSocket

from ..cluster.node import ClusterNode
from ..cluster.store import StoreUnavailable
from ..core.config import Config, is_loopback
from ..core.ephemeral_keys import Grant, VaultUnavailable
from ..core.security import AuthRefused, accept_authorized, check_origin, ws_auth
from ..core.services import Services
from ..core.session_registry import TooManySessions
from ..http.error_bodies import error_body
from ..realtime import protocol as p
from ..realtime import server_events as se
from ..realtime.connection import Connection
from ..realtime.key_binding import PresetRefused, authenticate
from ..realtime.live_session import LiveSession
from ..realtime.protocol import CLOSE_POLICY
from ..realtime.ratelimit import TokenBucket
from .peer import Call
from .track_pacing import OutboundAudio
from .webrtc_sdp import MAX_SDP_BYTES, CandidatePolicy, OfferError, check_offer

log = logging.getLogger("stream_omni.webrtc")

MAX_KEYS_TRACKED = 10_000  # offer buckets kept (one per API key digest); the oldest go first


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)


def private_candidates_checked(config: Config) -> bool:
    """``webrtc.allow_private_candidates``, with null resolved: a server bound to loopback with no API
    keys can only be called from its own machine, whose browser offers only private and .local
    candidates; any other server needs the operator's yes."""
    if config.webrtc.allow_private_candidates is not None:
        return config.webrtc.allow_private_candidates
    server = config.server
    return not server.api_keys and server.api_keys_env is None and is_loopback(server.host)


class _Refused(Exception):
    def __init__(self, response: Response):
        self.response = response


class WebRtcApi:
    def __init__(self, services: Callable[[], Services], node: Callable[[], ClusterNode | None]):
        self.services = services
        self.node = node
        self.calls: dict[str, Call] = {}  # call id → its call, while its session lives
        self._offers: dict[str, TokenBucket] = {}
        self._closing: set[asyncio.Future[None]] = set()  # peer connections still closing

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/realtime/calls", self.create, methods=["POST"]),
            Route("/v1/realtime/calls", self.offered, methods=["GET"]),
            Route("/v1/realtime/calls/{call_id}/hangup", self.hangup, methods=["POST"]),
        ]

    # ------------------------------------------------------------------ GET /v1/realtime/calls

    async def offered(self, request: Request) -> Response:
        """Whether this server takes calls, and the ICE servers a caller should use: how the browser
        client chooses WebRTC or the WebSocket. The same origin and key rules as an offer (a TURN
        credential is not for everyone)."""
        s = self.services()
        if not s.config.webrtc.enabled:
            return _error(404, "not_found", "WebRTC calls are not enabled on this server (config: webrtc.enabled)")
        if not check_origin(request, s.config.server):
            return _error(403, "forbidden_origin", "this Origin may not use the server")
        try:
            ws_auth(request, s.config.server.api_keys)
        except AuthRefused as exc:
            return _error(401, "invalid_api_key", str(exc))
        servers = [srv.model_dump(exclude_none=True) for srv in s.config.webrtc.ice_servers]
        return JSONResponse({"object": "realtime.calls", "webrtc": True, "ice_servers": servers})

    # ------------------------------------------------------------------ POST /v1/realtime/calls

    async def create(self, request: Request) -> Response:
        s = self.services()
        cfg = s.config.webrtc
        if not cfg.enabled:
            return _error(404, "not_found", "WebRTC calls are not enabled on this server (config: webrtc.enabled)")
        token = request.query_params.get("resume_token")
        try:
            key, grant = await self._admit_offer(s, request, resuming=token is not None)
            sdp, session = await self._read_offer(s, request)
            offer = check_offer(sdp, CandidatePolicy(cfg.max_candidates, private_candidates_checked(s.config)))
        except _Refused as refused:
            return refused.response
        except OfferError as exc:
            s.metrics.errors.labels(code="invalid_offer").inc()
            return _error(400, "invalid_offer", str(exc))
        if token is not None:
            return await self._resume(s, request, key, token, offer)
        try:
            s.registry.admit(key)
            token = secrets.token_urlsafe(32)
            node = self.node()
            if node is not None:
                await node.admit(key, token)
            # an ek_ key's config fixed (realtime.fixed_fields); a traceparent on the offer parents its trace
            live = LiveSession(s, key, token=token, grant=grant, headers=request.headers)
        except TooManySessions as exc:
            return _error(429, "session_limit", str(exc), {"Retry-After": "1"})
        except StoreUnavailable:
            return _error(503, "store_unavailable", "the session store is unavailable; retry shortly")
        except PresetRefused as exc:
            return _error(400, "invalid_client_secret", str(exc))
        s.registry.add(live)
        if self.node() is not None:
            self.node().own(live)  # type: ignore[union-attr]
        if session is not None:
            live.on_text(json.dumps({"type": "session.update", "session": session}))
        return await self._answer(s, live, offer, -1, resumed=False)

    async def _admit_offer(self, s: Services, request: Request, resuming: bool) -> tuple[str, Grant | None]:
        if not check_origin(request, s.config.server):
            raise _Refused(_error(403, "forbidden_origin", "this Origin may not use the server"))
        try:  # the WebSocket's rules: one bearer key, or an ek_ key taken once
            key, _, grant = await authenticate(s, request, resuming)
        except AuthRefused as exc:
            raise _Refused(_error(401, "invalid_api_key", str(exc))) from None
        except VaultUnavailable:
            raise _Refused(
                _error(503, "store_unavailable", "the session store is unavailable; retry shortly")
            ) from None
        cfg = s.config.webrtc
        bucket = self._offers.pop(key, None) or TokenBucket(cfg.offers_per_s, cfg.offers_burst)
        self._offers[key] = bucket  # most recent last: the oldest are dropped first
        while len(self._offers) > MAX_KEYS_TRACKED:
            self._offers.pop(next(iter(self._offers)))
        if not bucket.take(time.monotonic()):
            s.metrics.errors.labels(code="rate_limited").inc()
            raise _Refused(_error(429, "rate_limited", "too many call offers; slow down", {"Retry-After": "1"}))
        return key, grant

    async def _read_offer(self, s: Services, request: Request) -> tuple[str, dict[str, object] | None]:
        """The SDP and the optional ``session`` object, from ``application/sdp`` or multipart."""
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        limit = MAX_SDP_BYTES + 256 * 1024  # an offer plus a session with long instructions
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise _Refused(_error(413, "request_too_large", f"the request body is larger than {limit} bytes"))
        if media == "application/sdp":
            body = bytearray()
            async for piece in request.stream():
                body += piece
                if len(body) > limit:
                    raise _Refused(_error(413, "request_too_large", f"the request body is larger than {limit} bytes"))
            try:
                return body.decode("utf-8"), None
            except UnicodeDecodeError:
                raise OfferError("the SDP offer is not UTF-8") from None
        if media == "multipart/form-data":
            try:
                async with request.form(max_files=2, max_fields=4, max_part_size=limit) as form:
                    sdp, session = form.get("sdp"), form.get("session")
                    sdp_text = (await sdp.read()).decode("utf-8") if isinstance(sdp, UploadFile) else sdp
                    sess_text = (await session.read()).decode("utf-8") if isinstance(session, UploadFile) else session
            except UnicodeDecodeError:
                raise OfferError("a multipart field is not UTF-8") from None
            except Exception as exc:  # starlette's MultiPartException and friends: a malformed body
                raise _Refused(_error(400, "invalid_request", f"malformed multipart body: {exc}")) from None
            if not sdp_text:
                raise OfferError("the multipart body has no 'sdp' field")
            return sdp_text, self._session_json(s, sess_text)
        raise _Refused(
            _error(415, "unsupported_media_type", "Content-Type must be application/sdp or multipart/form-data")
        )

    @staticmethod
    def _session_json(s: Services, text: str | None) -> dict[str, object] | None:
        """The ``session`` field, checked as a ``session.update`` would be (same limits, same messages)."""
        if text is None or text == "":
            return None
        try:
            session = json.loads(text)
        except (ValueError, RecursionError):
            raise _Refused(_error(400, "invalid_json", "the 'session' field is not valid JSON")) from None
        if not isinstance(session, dict):
            raise _Refused(_error(400, "invalid_json", "the 'session' field must be a JSON object"))
        from ..realtime.bigframes import ParseLimits, parse_checked

        ev = parse_checked(json.dumps({"type": "session.update", "session": session}), ParseLimits.of(s.config.limits))
        if isinstance(ev, p.ProtocolError):
            raise _Refused(_error(400, ev.code, f"session: {ev.message}"))
        return session

    async def _resume(self, s: Services, request: Request, key: str, token: str, offer: object) -> Response:
        try:
            last_seq = int(request.query_params.get("last_seq", "-1"))
        except ValueError:
            return _error(400, "invalid_value", "last_seq must be an integer")
        live = s.registry.find(token, key)
        if not isinstance(live, LiveSession) or live.outbox.since(last_seq) is None:
            why = "unknown or expired resume token" if live is None else f"events after seq {last_seq} are gone"
            s.metrics.errors.labels(code="resume_failed").inc()
            if live is not None and live.attached is None:
                s.registry.detached(live)  # restart its grace timer
            return _error(410 if live is None else 409, "resume_failed", f"cannot resume: {why}")
        s.metrics.resumes.inc()
        return await self._answer(s, live, offer, last_seq, resumed=True)  # type: ignore[arg-type]

    async def _answer(self, s: Services, live: LiveSession, offer: object, last_seq: int, resumed: bool) -> Response:
        call_id = f"rtc_{secrets.token_hex(12)}"
        call = Call(live, call_id, s.config.webrtc, self._ended, self._replaced(live) if resumed else None)
        self.calls[call_id] = call
        s.metrics.webrtc_calls.inc()
        s.metrics.webrtc_active.inc()
        try:
            answer = await call.answer(offer, last_seq, resumed)  # type: ignore[arg-type]
        except Exception as exc:  # aiortc refused what our checks let through (a rarer SDP flaw)
            log.info("offer refused by the WebRTC stack: %s", exc)
            await call.end("offer refused")
            if not resumed:
                live.close("call_failed")
                s.registry.detached(live)
            return _error(400, "invalid_offer", f"the SDP offer cannot be answered: {exc}")
        for other in self.calls.values():
            if other.live is live and other is not call:
                other.track.stop()  # a replaced call not yet ended (the new channel supersedes it) stops playing
        return Response(
            answer, status_code=201, media_type="application/sdp", headers={"Location": f"/v1/realtime/calls/{call_id}"}
        )

    def _replaced(self, live: LiveSession) -> OutboundAudio | None:
        """The outbound queue of the call a resume replaces: the new call plays on from its position and
        its unplayed audio."""
        before = [c for c in self.calls.values() if c.live is live]
        return before[-1].source if before else None

    def _ended(self, call: Call) -> None:
        if call.closing is not None and not call.closing.done():  # shutdown waits for it
            self._closing.add(call.closing)
            call.closing.add_done_callback(self._closing.discard)
        # the call id stays known while its session lives: a sideband socket or a hangup may still name it
        for cid in [cid for cid, c in self.calls.items() if c.live.closed]:
            del self.calls[cid]

    # ------------------------------------------------------------------ hangup, sideband

    def _find(self, call_id: str, key: str) -> Call | None:
        call = self.calls.get(call_id)
        if call is None or call.live.closed or not hmac.compare_digest(call.live.key, key):
            return None  # another key's call is reported as unknown: ids are not an oracle
        return call

    async def hangup(self, request: Request) -> Response:
        s = self.services()
        if not check_origin(request, s.config.server):
            return _error(403, "forbidden_origin", "this Origin may not use the server")
        try:
            key = ws_auth(request, s.config.server.api_keys).key
        except AuthRefused as exc:
            return _error(401, "invalid_api_key", str(exc))
        call = self._find(request.path_params["call_id"], key)
        if call is None:
            return _error(404, "call_not_found", "no such call")
        await call.hangup()
        return Response(status_code=200)

    async def sideband(self, ws: WebSocket) -> None:
        """``/v1/realtime?call_id=…``: a server's control socket on a call's session (same events)."""
        s = self.services()
        auth = await accept_authorized(ws, s.config.server)
        if auth is None:
            return
        call = self._find(ws.query_params.get("call_id", ""), auth.key)
        if call is None:
            await ws.send_json(se.error_event("call_not_found", "no such call for this API key"))
            await ws.close(CLOSE_POLICY, "call not found")
            return
        live = call.live
        try:
            last_seq = int(ws.query_params.get("last_seq", str(live.outbox.next_seq - 1)))
        except ValueError:
            last_seq = -2
        if live.outbox.since(last_seq) is None:
            await ws.send_json(se.error_event("resume_failed", f"events after seq {last_seq} are gone"))
            await ws.close(CLOSE_POLICY, "replay unavailable")
            return
        await Connection(ws, live, last_seq, sideband=True).run()

    async def close(self) -> None:
        """Shutdown: every peer connection goes (their sessions were ended by the registry's drain)."""
        for call in list(self.calls.values()):
            with contextlib.suppress(Exception):
                await call.end("server shutdown")
        self.calls.clear()
        if self._closing:
            await asyncio.wait(self._closing, timeout=10.0)
