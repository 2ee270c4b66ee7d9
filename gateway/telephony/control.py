"""Call control like OpenAI's SIP calls: ``realtime.call.incoming`` to a signed webhook, then
``POST /v1/realtime/calls/{call_id}/accept|reject|refer|hangup``, and the sideband ``?call_id=``; served
here for telephony media streams (``/v1/telephony/media-stream``).

With no webhook configured a call is answered at once with ``telephony.default_session``. A call
id this table does not hold is handed to the WebRTC calls (hangup, sideband), which share the paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from ..core.security import AuthRefused, accept_authorized, check_origin, ws_auth
from ..core.services import Services
from ..core.session_registry import TooManySessions
from ..http.error_bodies import error_body
from ..realtime import protocol as p
from ..realtime import server_events as se
from ..realtime.bigframes import ParseLimits, parse_checked
from ..realtime.connection import Connection
from ..realtime.live_session import LiveSession
from ..realtime.protocol import CLOSE_POLICY
from . import twilio, webhooks
from .call import ANY_KEY, PhoneCall, telephone_session
from .digest import DigestAuth
from .media_stream import StreamLine, serve
from .playout import FRAME_MS
from .sip import Dialog, SipPolicy, SipServer
from .sip_transport import serve_stream, tls_context

log = logging.getLogger("stream_omni.telephony")

START_TIMEOUT_S = 10.0  # the provider's start message must come this soon after the upgrade
MAX_BODY = 256 * 1024  # an accept's session, long instructions included


def _error(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, code, message, param), status_code=status)


@dataclass
class Pending:
    """A call between the webhook and the app's answer."""

    call: PhoneCall
    answered: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    owner: str = ANY_KEY  # key digest of the app that accepted it (ANY_KEY: answered by the default session)


Fallback = Callable[[Request], Awaitable[Response]]


class TelephonyApi:
    def __init__(self, services: Callable[[], Services]):
        self.services = services
        self.calls: dict[str, Pending] = {}  # call id → its call, until it ends
        self._webhooks: set[asyncio.Task[None]] = set()
        self.sip: SipServer | None = None

    async def start(self) -> None:
        """Listen for SIP (UDP and TCP ``telephony.sip_port``, TLS ``sip_tls_port``) when configured."""
        cfg = self.services().config.telephony
        if not cfg.enabled or cfg.sip_port is None:
            return
        loop = asyncio.get_running_loop()
        auth = None
        if cfg.sip_users:  # the nonce key lives as long as the process: a restart re-challenges
            auth = DigestAuth(cfg.sip_realm, cfg.sip_users, secrets.token_bytes(32), cfg.sip_digest_algorithms,
                              cfg.sip_nonce_ttl_s)  # fmt: skip
        policy = SipPolicy(cfg.sip_allow, auth, cfg.sip_min_se, cfg.sip_session_expires)
        server = SipServer(cfg.sip_host, policy, cfg.mark_ms, self._sip_incoming, self._forget)
        await loop.create_datagram_endpoint(lambda: server, local_addr=(cfg.sip_host, cfg.sip_port))
        self.sip = server
        if cfg.sip_tcp:
            server.streams.append(await serve_stream(cfg.sip_host, cfg.sip_port, server.handle))
        if cfg.sip_tls_port is not None and cfg.sip_tls_cert is not None and cfg.sip_tls_key is not None:
            tls = tls_context(cfg.sip_tls_cert, cfg.sip_tls_key)
            server.streams.append(await serve_stream(cfg.sip_host, cfg.sip_tls_port, server.handle, tls))
        log.info("SIP: listening on %s:%s (udp%s)%s", cfg.sip_host, cfg.sip_port, ", tcp" if cfg.sip_tcp else "",
                 f", tls on {cfg.sip_tls_port}" if cfg.sip_tls_port else "")  # fmt: skip

    def routes(self, hangup_fallback: Fallback) -> list[BaseRoute]:
        async def hangup(request: Request) -> Response:
            if request.path_params["call_id"] not in self.calls:
                return await hangup_fallback(request)  # a WebRTC call
            return await self.hangup(request)

        return [
            WebSocketRoute("/v1/telephony/media-stream", self.media_stream),
            Route("/v1/realtime/calls/{call_id}/accept", self.accept, methods=["POST"]),
            Route("/v1/realtime/calls/{call_id}/reject", self.reject, methods=["POST"]),
            Route("/v1/realtime/calls/{call_id}/refer", self.refer, methods=["POST"]),
            Route("/v1/realtime/calls/{call_id}/hangup", hangup, methods=["POST"]),
        ]

    # ------------------------------------------------------------------ the media stream

    def _signed_url(self, ws: WebSocket, public_url: str | None) -> str:
        if public_url is None:
            return str(ws.url)
        query = ws.url.query
        return public_url + (("&" if "?" in public_url else "?") + query if query else "")

    async def media_stream(self, ws: WebSocket) -> None:
        s = self.services()
        cfg = s.config.telephony
        if not cfg.enabled:
            await ws.close(CLOSE_POLICY)  # before accept: the provider sees HTTP 403
            return
        if cfg.twilio_auth_token is not None:
            given = ws.headers.get("x-twilio-signature", "")
            if not twilio.valid(cfg.twilio_auth_token, self._signed_url(ws, cfg.public_url), given):
                s.metrics.errors.labels(code="invalid_signature").inc()
                log.warning("media stream refused: X-Twilio-Signature does not match")
                await ws.close(CLOSE_POLICY)
                return
        await ws.accept()
        start = await self._await_start(ws)
        if start is None:
            await ws.close(CLOSE_POLICY, "no start message")
            return
        call_id = f"rtc_{secrets.token_hex(12)}"
        line = StreamLine(ws, start, cfg.stream_lead_ms // FRAME_MS)
        call = PhoneCall(line, call_id, cfg.mark_ms, lambda: self._forget(call_id))
        reader = asyncio.create_task(serve(ws, call), name="telephony-read")
        headers = [("X-Twilio-CallSid", start.call_sid), ("X-Twilio-StreamSid", start.stream_sid)]
        headers += [(f"X-Twilio-Param-{k}", v) for k, v in start.custom.items()]
        outcome = await self._decide(s, call, headers, reader)
        if outcome == "accepted" and not reader.done():
            ended = asyncio.ensure_future(call.ended.wait())  # a hangup ends it from the control API
            await asyncio.wait({reader, ended}, return_when=asyncio.FIRST_COMPLETED)
            ended.cancel()
        reason = reader.result() if reader.done() and not reader.cancelled() else outcome
        reader.cancel()
        await call.end(reason)

    async def _decide(
        self, s: Services, call: PhoneCall, headers: list[tuple[str, str]], gone: asyncio.Future[Any]
    ) -> str:
        """Announce the call (webhook) or answer it with the default session; "accepted", "rejected <code>",
        or why not (``gone``: the caller left first)."""
        cfg = s.config.telephony
        pending = self.calls[call.call_id] = Pending(call)
        if cfg.webhook_url is None:
            refusal = self._answer(s, pending, ANY_KEY, dict(cfg.default_session))
            pending.answered.set_result(refusal or "accepted")
        else:
            task = asyncio.create_task(self._announce(s, call.call_id, headers))
            self._webhooks.add(task)
            task.add_done_callback(self._webhooks.discard)
        await asyncio.wait({gone, pending.answered}, timeout=cfg.accept_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if pending.answered.done():
            return pending.answered.result()
        return "caller left" if gone.done() else "not accepted within accept_timeout_s"

    async def _sip_incoming(self, dialog: Dialog, call: PhoneCall, headers: list[tuple[str, str]]) -> None:
        """A SIP INVITE: decided like any call; the dialog sends 200 or the refusal."""
        gone = asyncio.ensure_future(call.ended.wait())
        outcome = await self._decide(self.services(), call, headers, gone)
        gone.cancel()
        if outcome == "accepted":
            dialog.answered.set_result((200, "OK"))
            return
        code = int(outcome.split()[1]) if outcome.startswith("rejected ") else 480
        if not dialog.answered.done():
            dialog.answered.set_result(
                (code, "Declined" if code == 603 else "Rejected" if code != 480 else "Temporarily Unavailable")
            )
        await call.end(outcome)

    async def _await_start(self, ws: WebSocket) -> twilio.Start | None:
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while True:
                    ev = twilio.parse(await ws.receive_text())
                    if isinstance(ev, twilio.Start):
                        return ev
                    if isinstance(ev, twilio.Stop):
                        return None
        except Exception:  # timeout, a close, a binary frame: no call
            return None

    async def _announce(self, s: Services, call_id: str, headers: list[tuple[str, str]]) -> None:
        """POST ``realtime.call.incoming`` (signed) to the app; its answer comes as an accept or reject."""
        cfg = s.config.telephony
        now = int(time.time())
        body = webhooks.call_incoming(f"evt_{secrets.token_hex(12)}", call_id, headers, now)
        sig = webhooks.signed_headers(cfg.webhook_secret or "", f"wh_{secrets.token_hex(12)}", now, body)
        if cfg.webhook_secret is None:
            sig = {"content-type": "application/json"}
        try:
            async with httpx.AsyncClient(timeout=cfg.accept_timeout_s) as client:
                r = await client.post(str(cfg.webhook_url), content=body, headers=sig)
            if r.status_code >= 300:
                log.warning("call %s: the webhook answered %s", call_id, r.status_code)
        except httpx.HTTPError as exc:  # the call waits for an accept all the same, then times out
            log.warning("call %s: the webhook failed: %s", call_id, type(exc).__name__)

    def _answer(self, s: Services, pending: Pending, owner: str, session: dict[str, Any]) -> str | None:
        """Make the call's session and attach it; a refusal's reason, or None."""
        try:
            s.registry.admit(owner)
            live = LiveSession(s, owner)
        except TooManySessions as exc:
            return f"session_limit: {exc}"
        s.registry.add(live)
        session = telephone_session(session, pending.call.line.codec)
        live.on_text(json.dumps({"type": "session.update", "session": session}))
        pending.owner = owner
        pending.call.attach(live)
        return None

    def _forget(self, call_id: str) -> None:
        pending = self.calls.pop(call_id, None)
        if pending is not None and not pending.answered.done():
            pending.answered.set_result("ended")

    # ------------------------------------------------------------------ call control

    def _auth(self, s: Services, request: Request) -> str | Response:
        if not check_origin(request, s.config.server):
            return _error(403, "forbidden_origin", "this Origin may not use the server")
        try:
            return ws_auth(request, s.config.server.api_keys).key
        except AuthRefused as exc:
            return _error(401, "invalid_api_key", str(exc))

    def _find(self, call_id: str, key: str) -> Pending | None:
        pending = self.calls.get(call_id)
        if pending is None or pending.call.ended.is_set():
            return None
        if pending.owner != ANY_KEY and not hmac.compare_digest(pending.owner, key):
            return None  # another app's call is unknown: ids are not an oracle
        return pending

    async def _json(self, request: Request) -> dict[str, Any] | Response:
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, "request_too_large", f"the request body is larger than {MAX_BODY} bytes")
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            return _error(400, "invalid_json", "the body is not JSON")
        return data if isinstance(data, dict) else _error(400, "invalid_json", "the body must be a JSON object")

    async def _control(self, request: Request) -> tuple[Services, Pending, dict[str, Any]] | Response:
        s = self.services()
        key = self._auth(s, request)
        if isinstance(key, Response):
            return key
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        pending = self._find(request.path_params["call_id"], key)
        if pending is None:
            return _error(404, "call_not_found", "no such call")
        request.state.key = key
        return s, pending, body

    async def accept(self, request: Request) -> Response:
        got = await self._control(request)
        if isinstance(got, Response):
            return got
        s, pending, session = got
        if pending.answered.done():
            return _error(409, "call_already_answered", "this call was already accepted or rejected")
        ev = parse_checked(json.dumps({"type": "session.update", "session": session}), ParseLimits.of(s.config.limits))
        if isinstance(ev, p.ProtocolError):
            return _error(400, ev.code, ev.message, ev.param)
        refusal = self._answer(s, pending, request.state.key, session)
        if refusal is not None:
            return _error(429, "session_limit", refusal)
        pending.answered.set_result("accepted")
        return Response(status_code=200)

    async def reject(self, request: Request) -> Response:
        got = await self._control(request)
        if isinstance(got, Response):
            return got
        _, pending, body = got
        code = body.get("status_code", 603)
        if not isinstance(code, int) or isinstance(code, bool) or not 400 <= code <= 699:
            return _error(400, "invalid_value", "status_code must be a SIP final status, 400-699", "status_code")
        if pending.answered.done():
            return _error(409, "call_already_answered", "this call was already accepted or rejected")
        pending.answered.set_result(f"rejected {code}")
        return Response(status_code=200)

    async def refer(self, request: Request) -> Response:
        got = await self._control(request)
        if isinstance(got, Response):
            return got
        _, pending, body = got
        target = body.get("target_uri")
        if (
            not isinstance(target, str)
            or not target.startswith(("tel:", "sip:", "sips:"))
            or any(c in target for c in "<>\r\n")
        ):
            return _error(400, "invalid_value", "target_uri must be a tel: or sip: URI", "target_uri")
        refer = pending.call.refer_hook
        if refer is None:
            msg = "a media-stream call cannot be transferred from here: use the provider's call API (Twilio: <Dial>)"
            return _error(409, "refer_unsupported", msg)
        if not refer(target):
            return _error(409, "call_not_answered", "a call is transferred once it is answered")
        return Response(status_code=200)

    async def hangup(self, request: Request) -> Response:
        got = await self._control(request)
        if isinstance(got, Response):
            return got
        _, pending, _ = got
        await pending.call.end("hung up")
        return Response(status_code=200)

    # ------------------------------------------------------------------ sideband

    async def sideband(self, ws: WebSocket, fallback: Callable[[WebSocket], Awaitable[None]]) -> None:
        """``/v1/realtime?call_id=…`` of a phone call: its session's events and control (same as WebRTC's)."""
        pending = self.calls.get(ws.query_params.get("call_id", ""))
        if pending is None:
            await fallback(ws)
            return
        s = self.services()
        auth = await accept_authorized(ws, s.config.server)
        if auth is None:
            return
        found = self._find(pending.call.call_id, auth.key)
        live = found.call.live if found is not None else None
        if live is None or live.closed:
            await ws.send_json(se.error_event("call_not_found", "no such call for this API key, or not accepted yet"))
            await ws.close(CLOSE_POLICY, "call not found")
            return
        await Connection(ws, live, live.outbox.next_seq - 1, sideband=True).run()

    async def close(self) -> None:
        """Shutdown: every call ends."""
        for pending in list(self.calls.values()):
            with contextlib.suppress(Exception):
                await pending.call.end("server shutdown")
        for task in list(self._webhooks):
            task.cancel()
        if self.sip is not None:
            await self.sip.close()
