"""SDP offer/answer for a SIP call (RFC 3264): G.711 audio and RFC 4733 telephone-events. Pure."""

from __future__ import annotations

from dataclasses import dataclass

STATIC = {0: "audio/pcmu", 8: "audio/pcma"}  # RTP's static payload types for G.711
NAMES = {"pcmu": "audio/pcmu", "pcma": "audio/pcma"}


class SdpError(ValueError):
    """An offer the gateway cannot answer; the message says why (and goes in the 488's Warning)."""


@dataclass(frozen=True)
class PhoneOffer:
    address: str  # where the caller wants RTP
    port: int
    payload_type: int  # the G.711 payload chosen (µ-law first)
    codec: str  # "audio/pcmu" or "audio/pcma"
    dtmf_type: int | None  # telephone-event/8000's payload type, if offered
    direction: str  # sendrecv, sendonly (the caller holds), recvonly, inactive


def parse_offer(text: str) -> PhoneOffer:
    address, port, formats = "", 0, []
    rtpmap: dict[int, str] = {}
    direction = "sendrecv"
    in_audio = False
    for line in text.replace("\r\n", "\n").split("\n"):
        kind, _, value = line.strip().partition("=")
        if kind == "c" and value.startswith("IN IP4 ") and (not address or in_audio):
            address = value[7:].split("/")[0].strip()
        elif kind == "m":
            in_audio = value.startswith("audio ") and port == 0
            if in_audio:
                parts = value.split()
                if len(parts) < 4 or not parts[1].isdigit() or parts[2] != "RTP/AVP":
                    raise SdpError(f"the audio m-line is not plain RTP/AVP: {value}")
                port = int(parts[1])
                formats = [int(f) for f in parts[3:] if f.isdigit()]
        elif kind == "a" and in_audio:
            if value.startswith("rtpmap:"):
                pt, _, enc = value[7:].partition(" ")
                if pt.isdigit():
                    rtpmap[int(pt)] = enc.strip().lower()
            elif value in ("sendrecv", "sendonly", "recvonly", "inactive"):
                direction = value
    if not port or not address:
        raise SdpError("no audio m-line with a connection address")
    codecs = {pt: NAMES.get(rtpmap.get(pt, "").split("/")[0], STATIC.get(pt, "")) for pt in formats}
    chosen = next((pt for want in ("audio/pcmu", "audio/pcma") for pt in formats if codecs[pt] == want), None)
    if chosen is None:
        offered = ", ".join(rtpmap.get(pt, str(pt)) for pt in formats)
        raise SdpError(f"no PCMU or PCMA offered (offered: {offered})")
    dtmf = next((pt for pt in formats if rtpmap.get(pt, "").startswith("telephone-event/8000")), None)
    return PhoneOffer(address, port, chosen, codecs[chosen], dtmf, direction)


def answer(offer: PhoneOffer, address: str, port: int, session_id: int) -> str:
    """Our answer: the chosen codec, telephone-events if offered, the direction that mirrors the offer's."""
    mirror = {"sendonly": "recvonly", "recvonly": "sendonly"}.get(offer.direction, offer.direction)
    formats = [offer.payload_type] + ([offer.dtmf_type] if offer.dtmf_type is not None else [])
    lines = [
        "v=0",
        f"o=stream-omni {session_id} {session_id} IN IP4 {address}",
        "s=stream-omni",
        f"c=IN IP4 {address}",
        "t=0 0",
        f"m=audio {port} RTP/AVP {' '.join(map(str, formats))}",
        f"a=rtpmap:{offer.payload_type} {offer.codec[6:].upper()}/8000",
    ]
    if offer.dtmf_type is not None:
        lines += [f"a=rtpmap:{offer.dtmf_type} telephone-event/8000", f"a=fmtp:{offer.dtmf_type} 0-16"]
    lines += ["a=ptime:20", f"a={mirror}"]
    return "\r\n".join(lines) + "\r\n"
