"""A SIP user agent server on UDP that takes calls into ``PhoneCall``s: INVITE (G.711 offer), 100/180/200,
ACK, BYE, CANCEL, OPTIONS, re-INVITE (hold: the caller's direction and address change), a BYE of our
own when the gateway hangs up, and REFER (a transfer: the caller's phone calls the target). Messages
are parsed and built with ``sipmessage`` (BSD, typed); transactions and dialogs are the few this
server needs, kept here. Callers outside ``telephony.sip_allow`` get 403.

RTP goes on its own UDP socket per call (``RtpLine``): 20 ms G.711 packets out as the call paces them
(a mark is played as soon as it is sent: no buffer at the far end to wait for), the caller's packets
through a reordering jitter buffer, RFC 4733 key presses as DTMF.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sipmessage import Message, Request, Response

from . import rtp, sdp
from .call import PhoneCall

log = logging.getLogger("stream_omni.telephony")

T1 = 0.5  # RFC 3261's round-trip estimate: a 200 to an INVITE is resent at T1, 2·T1, … until the ACK
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, NOTIFY"
Addr = tuple[str, int]


class RtpLine(asyncio.DatagramProtocol):
    """A call's RTP: frames out to the caller's address, the caller's audio and keys into ``call``."""

    def __init__(self, offer: sdp.Offer, jitter_depth: int = 3):
        self.codec = offer.codec
        self.offer = offer
        self.remote: Addr = (offer.address, offer.port)
        self.call: PhoneCall | None = None
        self.transport: asyncio.DatagramTransport | None = None
        self.jitter = rtp.JitterBuffer(jitter_depth)
        self.dtmf = rtp.DtmfReceiver()
        self._ssrc = secrets.randbits(32)
        self._seq = secrets.randbits(16)
        self._ts = secrets.randbits(32)
        self._first = True
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # (uvloop's is not the class itself)

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def datagram_received(self, data: bytes, addr: Addr) -> None:
        packet = rtp.parse(data)
        call = self.call
        if packet is None or call is None:
            return
        self.received += 1
        if packet.payload_type == self.offer.dtmf_type:
            key = self.dtmf.push(packet)
            if key is not None:
                call.on_dtmf(key)
        elif packet.payload_type == self.offer.payload_type:
            for payload in self.jitter.push(packet.seq, packet.payload):
                call.on_audio(payload)

    async def send(self, frames: list[bytes | str]) -> None:
        for f in frames:
            if isinstance(f, str):
                if self.call is not None:
                    self.call.on_mark(f)  # sent is played: nothing buffers it on the way
                continue
            if self.transport is not None and self.offer.direction in ("sendrecv", "recvonly"):
                packet = rtp.build(self.offer.payload_type, self._seq, self._ts, self._ssrc, f, self._first)
                self.transport.sendto(packet, self.remote)
            self._first = False
            self._seq = (self._seq + 1) & 0xFFFF
            self._ts = (self._ts + len(f)) & 0xFFFFFFFF

    async def clear(self) -> None:
        self._first = True  # the next talkspurt starts with the marker bit

    async def close(self, reason: str) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass
class Dialog:
    invite: Request  # the INVITE that made it (its headers build our responses and our BYE)
    source: Addr  # where its messages came from (responses go back there)
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


Incoming = Callable[[Dialog, PhoneCall, list[tuple[str, str]]], Awaitable[None]]


class SipServer(asyncio.DatagramProtocol):
    def __init__(
        self, host: str, allow: tuple[str, ...], mark_ms: int, incoming: Incoming, forget: Callable[[str], None]
    ):
        self.host = host
        self.allow = [ipaddress.ip_network(a, strict=False) for a in allow]
        self.mark_ms = mark_ms
        self.incoming = incoming  # the control layer: webhook or default session, then accept/reject
        self.forget = forget
        self.dialogs: dict[str, Dialog] = {}  # SIP Call-ID → dialog
        self._opening: set[str] = set()  # Call-IDs whose INVITE is being set up (retransmissions wait)
        self.transport: asyncio.DatagramTransport | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # (uvloop's is not the class itself)

    def datagram_received(self, data: bytes, addr: Addr) -> None:
        if data.strip() == b"":
            return  # a keep-alive
        try:
            msg = Message.parse(data)
        except (ValueError, UnicodeDecodeError, KeyError) as exc:
            log.info("SIP from %s: unparseable message: %s", addr[0], exc)
            return
        if not isinstance(msg, Request):
            return  # answers to our BYE: nothing to do with them
        if not any(ipaddress.ip_address(addr[0]) in net for net in self.allow):
            self._reply(msg, addr, 403, "Forbidden")
            return
        handler = {"INVITE": self._invite, "ACK": self._ack, "BYE": self._bye, "CANCEL": self._cancel}
        if msg.method == "NOTIFY":  # the progress of a REFER (a sipfrag): the caller's phone hangs up when done
            self._reply(msg, addr, 200, "OK")
            return
        if msg.method == "OPTIONS":
            self._reply(msg, addr, 200, "OK", extra=[("Allow", ALLOW), ("Accept", "application/sdp")])
        elif msg.method in handler:
            handler[msg.method](msg, addr)
        else:
            self._reply(msg, addr, 405, "Method Not Allowed", extra=[("Allow", ALLOW)])

    # ------------------------------------------------------------------ messages

    def _reply(
        self,
        req: Request,
        addr: Addr,
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
        if self.transport is not None:
            self.transport.sendto(bytes(resp), addr)

    def _contact(self) -> str:
        assert self.transport is not None
        host, port = self.transport.get_extra_info("sockname")[:2]
        return f"<sip:stream-omni@{host}:{port}>"

    def _invite(self, req: Request, addr: Addr) -> None:
        sip_call = req.headers.get("Call-ID") or ""
        dialog = self.dialogs.get(sip_call)
        if dialog is not None:
            if dialog.confirmed:  # a re-INVITE: hold or resume, or a new address
                self._reinvite(dialog, req, addr)
            return  # else a retransmission: the answer is on its way
        if sip_call in self._opening:
            return  # a retransmission while its RTP socket is being made
        try:
            offer = sdp.parse_offer(req.body.decode("utf-8", errors="replace"))
        except sdp.SdpError as exc:
            self._reply(req, addr, 488, "Not Acceptable Here", extra=[("Warning", f'399 stream-omni "{exc}"')])
            return
        self._reply(req, addr, 100, "Trying")
        self._opening.add(sip_call)
        self._spawn(self._open(req, addr, offer))

    async def _open(self, req: Request, addr: Addr, offer: sdp.Offer) -> None:
        loop = asyncio.get_running_loop()
        sip_call = req.headers.get("Call-ID") or ""
        try:
            _, line = await loop.create_datagram_endpoint(lambda: RtpLine(offer), local_addr=(self.host, 0))
        finally:
            self._opening.discard(sip_call)
        dialog = Dialog(req, addr, line, secrets.token_hex(8))
        self.dialogs[sip_call] = dialog
        call_id = dialog.call_id = f"rtc_{secrets.token_hex(12)}"
        call = PhoneCall(line, call_id, self.mark_ms, lambda: self._ended(sip_call, call_id))
        call.hangup_hook = lambda: self._bye_out(dialog)
        call.refer_hook = lambda target: self.refer(dialog, target)
        line.call = call
        self._reply(req, addr, 180, "Ringing", dialog.tag)
        headers = [(name, value) for name in ("From", "To", "Call-ID") for value in req.headers.getlist(name)]
        self._spawn(self.incoming(dialog, call, headers))
        code, phrase = await dialog.answered
        if dialog.ended:
            return
        if code != 200:
            self._reply(req, addr, code, phrase, dialog.tag)
            dialog.ended = True
            return
        answer = sdp.answer(offer, self.host, line.port, secrets.randbits(31))
        dialog.confirmed = True
        delay = T1
        for _ in range(7):  # until the ACK (64·T1 in all)
            self._reply(req, addr, 200, "OK", dialog.tag, answer, [("Contact", self._contact()), ("Allow", ALLOW)])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(dialog.acked.wait(), delay)
                return
            delay = min(delay * 2, 4.0)
        await call.end("no ACK for the 200")

    def _reinvite(self, dialog: Dialog, req: Request, addr: Addr) -> None:
        try:
            offer = sdp.parse_offer(req.body.decode("utf-8", errors="replace"))
        except sdp.SdpError as exc:
            self._reply(req, addr, 488, "Not Acceptable Here", extra=[("Warning", f'399 stream-omni "{exc}"')])
            return
        line = dialog.line
        line.offer, line.remote = offer, (offer.address, offer.port)  # hold: sendonly/inactive, no audio out
        answer = sdp.answer(offer, self.host, line.port, secrets.randbits(31))
        self._reply(req, addr, 200, "OK", dialog.tag, answer, [("Contact", self._contact())])

    def _ack(self, req: Request, addr: Addr) -> None:
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        if dialog is not None:
            dialog.acked.set()

    def _bye(self, req: Request, addr: Addr) -> None:
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        self._reply(req, addr, 200 if dialog is not None else 481, "OK" if dialog else "Call Does Not Exist")
        if dialog is not None and dialog.line.call is not None:
            dialog.ended = True
            self._spawn(dialog.line.call.end("the caller hung up (BYE)"))

    def _cancel(self, req: Request, addr: Addr) -> None:
        dialog = self.dialogs.get(req.headers.get("Call-ID") or "")
        if dialog is None:
            self._reply(req, addr, 481, "Call/Transaction Does Not Exist")
            return
        self._reply(req, addr, 200, "OK")
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
        if dialog.ended or self.transport is None:
            return
        dialog.ended = True
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
        self._send_in_dialog(dialog, "REFER", [("Refer-To", f"<{target}>"), ("Referred-By", self._contact())])
        return True

    def _send_in_dialog(self, dialog: Dialog, method: str, extra: list[tuple[str, str]] | None = None) -> None:
        """A request of ours in the call's dialog (From and To swapped: we are the callee)."""
        assert self.transport is not None
        inv = dialog.invite
        contact = inv.headers.get("Contact") or inv.headers.get("From") or ""
        target = contact[contact.find("<") + 1 : contact.find(">")] if "<" in contact else contact.split(";")[0]
        req = Request(method, inv.uri.parse(target))
        host, port = self.transport.get_extra_info("sockname")[:2]
        req.headers.add("Via", f"SIP/2.0/UDP {host}:{port};branch=z9hG4bK{secrets.token_hex(8)};rport")
        req.headers.add("Max-Forwards", "70")
        to = inv.headers.get("To") or ""
        req.headers.add("From", to if ";tag=" in to else f"{to};tag={dialog.tag}")
        req.headers.add("To", inv.headers.get("From") or "")
        req.headers.add("Call-ID", inv.headers.get("Call-ID") or "")
        dialog.cseq += 1
        req.headers.add("CSeq", f"{dialog.cseq} {method}")
        req.headers.add("Contact", self._contact())
        for name, value in extra or []:
            req.headers.add(name, value)
        req.headers.add("Content-Length", "0")
        self.transport.sendto(bytes(req), dialog.source)

    def _ended(self, sip_call: str, call_id: str) -> None:
        dialog = self.dialogs.pop(sip_call, None)
        if dialog is not None and not dialog.answered.done():
            dialog.answered.set_result((480, "Temporarily Unavailable"))
        self.forget(call_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self.transport is not None:
            self.transport.close()
