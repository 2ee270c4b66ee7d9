"""A SIP user agent server on UDP, TCP and TLS that takes calls into ``PhoneCall``s: INVITE (G.711 offer),
100/180/200, ACK, BYE, CANCEL, OPTIONS, re-INVITE (hold: the caller's direction and address change),
UPDATE, a BYE of our own when the gateway hangs up, and REFER (a transfer: the caller's phone calls the
target). Messages are parsed and built with ``sipmessage`` (BSD, typed); transactions and dialogs are
the few this server needs, kept here, whatever the transport (``sip_transport.Peer``).

A caller outside ``telephony.sip_allow`` must answer a digest challenge (``telephony.sip_users``) to open
a call; with no users configured it gets 403. Session timers (RFC 4028) are honoured: the caller
refreshes, or the gateway does with UPDATE, and a session nobody refreshed is ended with a BYE. RTP
goes on its own UDP socket per call (``rtp_line.RtpLine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sipmessage import AuthCredentials, Message, Request, Response

from . import phone_sdp as sdp
from . import session_timer
from .call import PhoneCall
from .digest import DigestAuth
from .rtp_line import RtpLine
from .sip_transport import Addr, Peer, StreamListener, udp_peer

log = logging.getLogger("stream_omni.telephony")

T1 = 0.5  # RFC 3261's round-trip estimate: a 200 to an INVITE is resent at T1, 2·T1, … until the ACK
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, NOTIFY, UPDATE"
SUPPORTED = "timer"


@dataclass(frozen=True)
class SipPolicy:
    """Who may call and how long a session lasts unrefreshed (from ``telephony``)."""

    allow: tuple[str, ...]  # networks a call may come from without credentials
    auth: DigestAuth | None = None  # callers elsewhere answer its challenge (None: they get 403)
    min_se: int = session_timer.RFC_MIN_SE  # the shortest session interval accepted (422 below it)
    session_expires: int | None = None  # the interval asked of a caller that supports timers but asked none


@dataclass
class Dialog:
    invite: Request  # the INVITE that made it (its headers build our responses and our BYE)
    source: Peer  # where its messages came from (responses and our requests go back there)
    line: RtpLine
    tag: str  # our To tag
    answered: asyncio.Future[tuple[int, str]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )  # the final status to send: 200 (accepted) or a refusal
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    confirmed: bool = False  # a 200 went out
    ended: bool = False
    cseq: int = 1  # of the requests we send in this dialog
    call_id: str = ""  # our call id (rtc_…)
    timer: session_timer.Timer | None = None  # the session timer agreed in the INVITE's 200
    clock: session_timer.SessionClock | None = None  # its running state once the call is confirmed
    refreshed: asyncio.Event = field(default_factory=asyncio.Event)  # wakes the timer task: a refresh came


Incoming = Callable[[Dialog, PhoneCall, list[tuple[str, str]]], Awaitable[None]]


def _listed(req: Request, name: str, token: str) -> bool:
    return any(token == t.strip().lower() for v in req.headers.getlist(name) for t in v.split(","))


class SipServer(asyncio.DatagramProtocol):
    def __init__(self, host: str, policy: SipPolicy, mark_ms: int, incoming: Incoming, forget: Callable[[str], None]):
        self.host = host
        self.policy = policy
        self.allow = [ipaddress.ip_network(a, strict=False) for a in policy.allow]
        self.mark_ms = mark_ms
        self.incoming = incoming  # the control layer: webhook or default session, then accept/reject
        self.forget = forget
        self.dialogs: dict[str, Dialog] = {}  # SIP Call-ID → dialog
        self._opening: set[str] = set()  # Call-IDs whose INVITE is being set up (retransmissions wait)
        self.transport: asyncio.DatagramTransport | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.streams: list[StreamListener] = []  # the TCP / TLS listeners, closed with the server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # (uvloop's is not the class itself)

    def datagram_received(self, data: bytes, addr: Addr) -> None:
        if self.transport is not None and data.strip() != b"":  # (an empty datagram: a keep-alive)
            self.handle(data, udp_peer(self.transport, addr))

    def handle(self, data: bytes, peer: Peer) -> None:
        """One whole message from ``peer``, over any transport."""
        try:
            msg = Message.parse(data)
        except (ValueError, UnicodeDecodeError, KeyError) as exc:
            log.info("SIP from %s: unparseable message: %s", peer.addr[0], exc)
            return
        if isinstance(msg, Response):
            self._response(msg)
            return
        assert isinstance(msg, Request)
        if not self._admitted(msg, peer):
            return
        handler = {
            "INVITE": self._invite, "ACK": self._ack, "BYE": self._bye, "CANCEL": self._cancel,
            "UPDATE": self._update,
        }  # fmt: skip
        if msg.method == "NOTIFY":  # the progress of a REFER (a sipfrag): the caller's phone hangs up when done
            self._reply(msg, peer, 200, "OK")
            return
        if msg.method == "OPTIONS":
            self._reply(msg, peer, 200, "OK", extra=[("Allow", ALLOW), ("Accept", "application/sdp")])
        elif msg.method in handler:
            handler[msg.method](msg, peer)
        else:
            self._reply(msg, peer, 405, "Method Not Allowed", extra=[("Allow", ALLOW)])

    def _admitted(self, req: Request, peer: Peer) -> bool:
        """The allow-list, else a dialog the caller already opened, else digest credentials (a 401 asks)."""
        if any(ipaddress.ip_address(peer.addr[0]) in net for net in self.allow):
            return True
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        if dialog is not None and dialog.source.addr[0] == peer.addr[0] and req.method != "INVITE":
            return True  # in a call that was let in (its ACK, BYE, CANCEL): ACKs cannot be challenged
        if self.policy.auth is None or req.method == "ACK":
            if req.method != "ACK":
                self._reply(req, peer, 403, "Forbidden")
            return False
        auth, now = self.policy.auth, time.time()
        given = req.headers.get("Authorization")
        stale = False
        if given is not None:
            try:
                creds = AuthCredentials.parse(given)
            except ValueError:
                self._reply(req, peer, 400, "Bad Authorization header")
                return False
            params = dict(creds.parameters or {}) if creds.scheme.lower() == "digest" else {}
            verdict = auth.check(req.method, params, now)
            if verdict.ok:
                return True
            stale = verdict.stale
            log.info("SIP %s from %s: digest refused: %s", req.method, peer.addr[0], verdict.reason)
        challenges = [("WWW-Authenticate", c) for c in auth.challenges(now, stale)]
        self._reply(req, peer, 401, "Unauthorized", secrets.token_hex(8), extra=challenges)
        return False

    # ------------------------------------------------------------------ messages

    def _reply(
        self,
        req: Request,
        peer: Peer,
        code: int,
        phrase: str,
        tag: str | None = None,
        body: str = "",
        extra: list[tuple[str, str]] | None = None,
    ) -> None:
        resp = Response(code, phrase, body.encode())
        for name in ("Via", "From", "To", "Call-ID", "CSeq"):
            for value in req.headers.getlist(name):
                if name == "To" and tag and ";tag=" not in value:
                    value += f";tag={tag}"
                resp.headers.add(name, value)
        for name, value in extra or []:
            resp.headers.add(name, value)
        if body:
            resp.headers.add("Content-Type", "application/sdp")
        resp.headers.add("Content-Length", str(len(resp.body)))
        peer.send(bytes(resp))

    def _invite(self, req: Request, peer: Peer) -> None:
        sip_call = req.headers.get("Call-ID") or ""
        dialog = self.dialogs.get(sip_call)
        if dialog is not None:
            if dialog.confirmed:  # a re-INVITE: hold or resume, or a new address; a refresh of its timer
                self._reinvite(dialog, req, peer)
            return  # else a retransmission: the answer is on its way
        if sip_call in self._opening:
            return  # a retransmission while its RTP socket is being made
        try:
            offer = sdp.parse_offer(req.body.decode("utf-8", errors="replace"))
        except sdp.SdpError as exc:
            self._reply(req, peer, 488, "Not Acceptable Here", extra=[("Warning", f'399 stream-omni "{exc}"')])
            return
        ok, timer = self._timer(req, peer)
        if not ok:
            return
        self._reply(req, peer, 100, "Trying")
        self._opening.add(sip_call)
        self._spawn(self._open(req, peer, offer, timer))

    def _timer(self, req: Request, peer: Peer) -> tuple[bool, session_timer.Timer | None]:
        """The request's session timer; (False, None) when it was refused here (400, or 422 with our Min-SE)."""
        supported = _listed(req, "Supported", "timer") or _listed(req, "Require", "timer")
        try:
            got = session_timer.negotiate(
                req.headers.get("Session-Expires"), req.headers.get("Min-SE"), supported,
                self.policy.min_se, self.policy.session_expires,
            )  # fmt: skip
        except session_timer.TimerError as exc:
            self._reply(req, peer, 400, "Bad Request", extra=[("Warning", f'399 stream-omni "{exc}"')])
            return False, None
        if isinstance(got, session_timer.TooSmall):
            self._reply(req, peer, 422, "Session Interval Too Small", extra=[("Min-SE", str(got.min_se))])
            return False, None
        return True, got

    def _timer_headers(self, timer: session_timer.Timer | None) -> list[tuple[str, str]]:
        if timer is None:
            return [("Supported", SUPPORTED)]
        out = [("Supported", SUPPORTED), ("Session-Expires", timer.header())]
        return out + ([("Require", "timer")] if timer.required else [])

    async def _open(self, req: Request, peer: Peer, offer: sdp.PhoneOffer, timer: session_timer.Timer | None) -> None:
        loop = asyncio.get_running_loop()
        sip_call = req.headers.get("Call-ID") or ""
        try:
            _, line = await loop.create_datagram_endpoint(lambda: RtpLine(offer), local_addr=(self.host, 0))
        finally:
            self._opening.discard(sip_call)
        dialog = Dialog(req, peer, line, secrets.token_hex(8), timer=timer)
        self.dialogs[sip_call] = dialog
        call_id = dialog.call_id = f"rtc_{secrets.token_hex(12)}"
        call = PhoneCall(line, call_id, self.mark_ms, lambda: self._ended(sip_call, call_id))
        call.hangup_hook = lambda: self._bye_out(dialog)
        call.refer_hook = lambda target: self.refer(dialog, target)
        line.call = call
        self._reply(req, peer, 180, "Ringing", dialog.tag)
        headers = [(name, value) for name in ("From", "To", "Call-ID") for value in req.headers.getlist(name)]
        self._spawn(self.incoming(dialog, call, headers))
        code, phrase = await dialog.answered
        if dialog.ended:
            return
        if code != 200:
            self._reply(req, peer, code, phrase, dialog.tag)
            dialog.ended = True
            return
        answer = sdp.answer(offer, self.host, line.port, secrets.randbits(31))
        dialog.confirmed = True
        extra = [("Contact", peer.contact()), ("Allow", ALLOW), *self._timer_headers(timer)]
        if timer is not None:
            dialog.clock = session_timer.SessionClock(timer, loop.time())
            self._spawn(self._keep(dialog))
        delay = T1
        for _ in range(7):  # until the ACK (64·T1 in all); resent on TCP too: a proxy may be on the way
            self._reply(req, peer, 200, "OK", dialog.tag, answer, extra)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(dialog.acked.wait(), delay)
                return
            delay = min(delay * 2, 4.0)
        await call.end("no ACK for the 200")

    async def _keep(self, dialog: Dialog) -> None:
        """The session timer of a confirmed call: our refresh (UPDATE) when we are the refresher, a BYE at expiry."""
        loop = asyncio.get_running_loop()
        clock = dialog.clock
        while clock is not None and not dialog.ended:
            dialog.refreshed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(dialog.refreshed.wait(), max(0.0, clock.next_at() - loop.time()))
            due = clock.due(loop.time())
            if isinstance(due, session_timer.Refresh):
                self._send_in_dialog(dialog, "UPDATE", [("Session-Expires", clock.timer.header())])
            elif isinstance(due, session_timer.Expire) and dialog.line.call is not None:
                log.info("call %s: its session expired unrefreshed", dialog.call_id)
                await dialog.line.call.end("the session expired (no refresh)")
                return

    def _refresh(self, dialog: Dialog, req: Request, peer: Peer) -> list[tuple[str, str]] | None:
        """A refresh in the dialog (re-INVITE, UPDATE): its timer restarts; the headers of its 200, None if refused."""
        ok, timer = self._timer(req, peer)
        if not ok:
            return None
        timer = timer or dialog.timer
        if dialog.clock is not None:
            dialog.clock.refreshed(asyncio.get_running_loop().time(), timer)
            dialog.refreshed.set()
        return self._timer_headers(timer)

    def _reinvite(self, dialog: Dialog, req: Request, peer: Peer) -> None:
        try:
            offer = sdp.parse_offer(req.body.decode("utf-8", errors="replace"))
        except sdp.SdpError as exc:
            self._reply(req, peer, 488, "Not Acceptable Here", extra=[("Warning", f'399 stream-omni "{exc}"')])
            return
        extra = self._refresh(dialog, req, peer)
        if extra is None:
            return
        line = dialog.line
        line.offer, line.remote = offer, (offer.address, offer.port)  # hold: sendonly/inactive, no audio out
        answer = sdp.answer(offer, self.host, line.port, secrets.randbits(31))
        self._reply(req, peer, 200, "OK", dialog.tag, answer, [("Contact", peer.contact()), *extra])

    def _update(self, req: Request, peer: Peer) -> None:
        """UPDATE (RFC 3311) without a body: a session refresh; the media stays as it is."""
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        if dialog is None or dialog.ended:
            self._reply(req, peer, 481, "Call/Transaction Does Not Exist")
            return
        if req.body.strip():
            self._reply(req, peer, 488, "Not Acceptable Here", extra=[("Warning", '399 stream-omni "UPDATE with SDP"')])
            return
        extra = self._refresh(dialog, req, peer)
        if extra is not None:
            self._reply(req, peer, 200, "OK", dialog.tag, extra=[("Contact", peer.contact()), *extra])

    def _response(self, resp: Response) -> None:
        """An answer to a request of ours: a 2xx to our UPDATE refreshes the session; the rest needs nothing."""
        dialog = self.dialogs.get(resp.headers.get("Call-ID") or "")
        cseq = (resp.headers.get("CSeq") or "").split()
        if dialog is not None and dialog.clock is not None and cseq[-1:] == ["UPDATE"] and 200 <= resp.code < 300:
            dialog.clock.refreshed(asyncio.get_running_loop().time())
            dialog.refreshed.set()

    def _ack(self, req: Request, peer: Peer) -> None:
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        if dialog is not None:
            dialog.acked.set()

    def _bye(self, req: Request, peer: Peer) -> None:
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        self._reply(req, peer, 200 if dialog is not None else 481, "OK" if dialog else "Call Does Not Exist")
        if dialog is not None and dialog.line.call is not None:
            dialog.ended = True
            self._spawn(dialog.line.call.end("the caller hung up (BYE)"))

    def _cancel(self, req: Request, peer: Peer) -> None:
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        if dialog is None:
            self._reply(req, peer, 481, "Call/Transaction Does Not Exist")
            return
        self._reply(req, peer, 200, "OK")
        if not dialog.confirmed and not dialog.ended:
            dialog.ended = True
            if not dialog.answered.done():
                dialog.answered.set_result((487, "Request Terminated"))
            self._spawn(self._cancelled(dialog))

    async def _cancelled(self, dialog: Dialog) -> None:
        """The INVITE's 487 once the call is freed: a caller that sees it finds nothing left."""
        if dialog.line.call is not None:
            await dialog.line.call.end("the caller cancelled")
        self._reply(dialog.invite, dialog.source, 487, "Request Terminated", dialog.tag)

    def _bye_out(self, dialog: Dialog) -> None:
        """The gateway hangs up: BYE to the caller (From and To swapped: we are the callee)."""
        if dialog.ended:
            return
        dialog.ended = True
        dialog.refreshed.set()  # the timer task sees the end
        if not dialog.confirmed:  # not answered yet: the app's refusal, or 480, as the INVITE's final answer
            done = dialog.answered.done() and dialog.answered.result()[0] != 200
            code, phrase = dialog.answered.result() if done else (480, "Temporarily Unavailable")
            self._reply(dialog.invite, dialog.source, code, phrase, dialog.tag)
            return
        self._send_in_dialog(dialog, "BYE")

    def refer(self, dialog: Dialog, target: str) -> bool:
        """Ask the caller's phone to call ``target`` instead (REFER, RFC 3515); False before the answer."""
        if not dialog.confirmed or dialog.ended:
            return False
        extra = [("Refer-To", f"<{target}>"), ("Referred-By", dialog.source.contact())]
        self._send_in_dialog(dialog, "REFER", extra)
        return True

    def _send_in_dialog(self, dialog: Dialog, method: str, extra: list[tuple[str, str]] | None = None) -> None:
        """A request of ours in the call's dialog (From and To swapped: we are the callee), on its transport."""
        inv, peer = dialog.invite, dialog.source
        contact = inv.headers.get("Contact") or inv.headers.get("From") or ""
        target = contact[contact.find("<") + 1 : contact.find(">")] if "<" in contact else contact.split(";")[0]
        req = Request(method, inv.uri.parse(target))
        host, port = peer.local
        req.headers.add("Via", f"SIP/2.0/{peer.transport} {host}:{port};branch=z9hG4bK{secrets.token_hex(8)};rport")
        req.headers.add("Max-Forwards", "70")
        to = inv.headers.get("To") or ""
        req.headers.add("From", to if ";tag=" in to else f"{to};tag={dialog.tag}")
        req.headers.add("To", inv.headers.get("From") or "")
        req.headers.add("Call-ID", inv.headers.get("Call-ID") or "")
        dialog.cseq += 1
        req.headers.add("CSeq", f"{dialog.cseq} {method}")
        req.headers.add("Contact", peer.contact())
        for name, value in extra or []:
            req.headers.add(name, value)
        req.headers.add("Content-Length", "0")
        peer.send(bytes(req))

    def _ended(self, sip_call: str, call_id: str) -> None:
        dialog = self.dialogs.pop(sip_call, None)
        if dialog is not None:
            dialog.ended = True
            dialog.refreshed.set()  # the timer task sees the end
            if not dialog.answered.done():
                dialog.answered.set_result((480, "Temporarily Unavailable"))
        self.forget(call_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for s in self.streams:
            await s.close()
        if self.transport is not None:
            self.transport.close()
