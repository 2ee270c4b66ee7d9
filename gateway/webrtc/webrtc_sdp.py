"""Checks on an SDP offer before any media work, and the public-address rewrite of an answer (pure).

An offer's ICE candidates are addresses the server's ICE agent will send STUN checks to, so they are
screened here, before aiortc sees the offer: more than ``max_candidates`` refuse the offer (a browser
offers a handful); loopback, link-local, unspecified, multicast and reserved addresses, and host names
other than mDNS ``.local`` ones, are taken out of it unseen; private ones too unless ``allow_private``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MAX_SDP_BYTES = 64 * 1024  # a browser's offer is 2-6 KB; this is ample and bounds the parse
DATA_CHANNEL_PROTOCOLS = ("UDP/DTLS/SCTP", "DTLS/SCTP")
MAX_PTIME_MS = 1000  # the longest a=maxptime read: RTP packets are 10-120 ms


@dataclass(frozen=True)
class CandidatePolicy:
    """Which of an offer's ICE candidates the server's ICE agent may check (``webrtc.*_candidates``)."""

    max_candidates: int = 16  # candidate lines one offer may hold (more: the offer is refused)
    allow_private: bool = False  # private (RFC 1918, ULA) and mDNS .local candidates: for callers on the LAN


class OfferError(ValueError):
    """The offer cannot be answered; the message says why (an HTTP 400 body)."""


@dataclass(frozen=True)
class WebRtcOffer:
    """What the gateway needs to know of a checked offer."""

    sdp: str  # the offer, normalised to CRLF line ends
    opus_payload: int  # the RTP payload type the offer gives Opus
    audio_direction: str  # sendrecv | sendonly | recvonly | inactive (the offerer's view)
    maxptime_ms: int | None = None  # the longest audio packet the offerer takes (a=maxptime), if it says


@dataclass
class _Media:
    kind: str
    proto: str
    formats: list[str]
    rtpmap: dict[str, str]
    direction: str = "sendrecv"
    maxptime: int | None = None


def _sections(text: str) -> list[_Media]:
    media: list[_Media] = []
    for n, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line:
            continue
        if len(line) < 2 or line[1] != "=" or not line[0].isalpha():
            raise OfferError(f"malformed SDP: line {n} is not '<letter>=<value>'")
        key, value = line[0], line[2:]
        if key == "m":
            parts = value.split()
            if len(parts) < 4:
                raise OfferError(f"malformed SDP: m-line {n} needs media, port, protocol and formats")
            media.append(_Media(parts[0], parts[2], parts[3:], {}))
        elif key == "a" and media:
            m = media[-1]
            if value.startswith("rtpmap:"):
                pt, _, codec = value[len("rtpmap:") :].partition(" ")
                m.rtpmap[pt] = codec.strip().lower()
            elif value in ("sendrecv", "sendonly", "recvonly", "inactive"):
                m.direction = value
            elif value.startswith("maxptime:"):
                ms = value[len("maxptime:") :].strip()
                if not ms.isdigit() or len(ms) > 4 or not 0 < int(ms) <= MAX_PTIME_MS:
                    raise OfferError(f"SDP a=maxptime on line {n} must be a whole number of ms, 1 to {MAX_PTIME_MS}")
                m.maxptime = int(ms)
    return media


_CANDIDATE = re.compile(r"^a=candidate:\S+ \d{1,3} \S+ \d{1,10} (\S+) \d{1,5} typ \S+")


def _candidate_refused(address: str, policy: CandidatePolicy) -> bool:
    """Whether the ICE agent must not send to ``address`` (an offer's candidate)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # a name: only an mDNS one, resolved on the LAN, and only where the LAN is allowed
        return not (policy.allow_private and address.lower().endswith(".local"))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return True
    return not ip.is_global and not policy.allow_private


def screen_candidates(sdp: str, policy: CandidatePolicy) -> str:
    """``sdp`` without the candidates the ICE agent must not check; ``OfferError`` past ``max_candidates``."""
    lines = sdp.split("\n")
    candidates = [i for i, line in enumerate(lines) if line.startswith("a=candidate:")]
    if len(candidates) > policy.max_candidates:
        raise OfferError(
            f"SDP offer has {len(candidates)} ICE candidates, over the {policy.max_candidates} served"
            " (webrtc.max_candidates)"
        )
    dropped = set()
    for i in candidates:
        m = _CANDIDATE.match(lines[i].rstrip("\r"))
        if m is None or _candidate_refused(m.group(1), policy):
            dropped.add(i)
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped)


def check_offer(text: str, candidates: CandidatePolicy | None = None) -> WebRtcOffer:
    """The offer (its candidates screened by ``candidates``), or ``OfferError``: not SDP, no audio, no data
    channel, no Opus, a bad a=maxptime, too many candidates."""
    if len(text.encode()) > MAX_SDP_BYTES:
        raise OfferError(f"SDP offer is larger than {MAX_SDP_BYTES} bytes")
    body = text.strip()
    if not body.startswith("v=0"):
        raise OfferError("malformed SDP: an offer starts with 'v=0'")
    media = _sections(body)
    if not re.search(r"^a=fingerprint:", body, re.M):
        raise OfferError("SDP offer has no a=fingerprint (DTLS is required)")
    if not re.search(r"^a=ice-ufrag:", body, re.M) or not re.search(r"^a=ice-pwd:", body, re.M):
        raise OfferError("SDP offer has no ICE credentials (a=ice-ufrag / a=ice-pwd)")
    audio = [m for m in media if m.kind == "audio"]
    if not audio:
        raise OfferError("SDP offer has no audio m-line: add one audio track (or a recvonly transceiver)")
    if len(audio) > 1:
        raise OfferError("SDP offer has more than one audio m-line: one Opus track each way is served")
    if not any(m.kind == "application" and m.proto in DATA_CHANNEL_PROTOCOLS for m in media):
        raise OfferError("SDP offer has no data channel: create the 'oai-events' channel before the offer")
    opus = [
        pt
        for pt in audio[0].formats
        if audio[0].rtpmap.get(pt, "").startswith("opus/48000") and pt.isdigit() and len(pt) <= 3 and int(pt) <= 127
    ]
    if not opus:
        offered = sorted({c.split("/")[0] for c in audio[0].rtpmap.values()}) or audio[0].formats
        raise OfferError(f"SDP offer's audio has no Opus (offered: {', '.join(offered)}); only opus/48000 is served")
    body = screen_candidates(body.replace("\r\n", "\n"), candidates or CandidatePolicy())
    return WebRtcOffer(
        sdp=body.replace("\n", "\r\n") + "\r\n",
        opus_payload=int(opus[0]),
        audio_direction=audio[0].direction,
        maxptime_ms=audio[0].maxptime,
    )


_HOST_CANDIDATE = re.compile(r"^(a=candidate:\S+ \d+ \S+ \d+ )(\S+)( \d+ typ host.*)$", re.M)
_CONNECTION = re.compile(r"^c=IN IP4 (\S+)\r?$", re.M)


def with_public_ip(sdp: str, public_ip: str) -> str:
    """The answer with its IPv4 host candidates (and ``c=`` lines) naming ``public_ip``: the address a
    client behind the server's NAT (1:1, same ports) must send to. IPv6 candidates are left alone."""

    def host(m: re.Match[str]) -> str:
        return m.group(1) + public_ip + m.group(3) if ":" not in m.group(2) else m.group(0)

    sdp = _HOST_CANDIDATE.sub(host, sdp)
    return _CONNECTION.sub(lambda m: m.group(0).replace(m.group(1), public_ip), sdp)


def with_opus_bitrate(sdp: str, payload: int, bits_per_s: int) -> str:
    """The answer asking the caller's Opus encoder for at most ``bits_per_s`` (``maxaveragebitrate``,
    RFC 7587; browsers honour it) — a voice needs about 32 kbit/s, not a music encoder's default."""
    fmtp = re.compile(rf"^a=fmtp:{payload} (.*?)(\r?)$", re.M)
    if fmtp.search(sdp):
        return fmtp.sub(
            lambda m: (
                f"a=fmtp:{payload} "
                + ";".join(
                    [p for p in m.group(1).split(";") if not p.strip().startswith("maxaveragebitrate=")]
                    + [f"maxaveragebitrate={bits_per_s}"]
                )
                + m.group(2)
            ),
            sdp,
        )
    rtpmap = re.compile(rf"^(a=rtpmap:{payload} .*?)(\r?)$", re.M)
    line = f"a=fmtp:{payload} maxaveragebitrate={bits_per_s}"
    return rtpmap.sub(lambda m: f"{m.group(1)}{m.group(2)}\n{line}{m.group(2)}", sdp)
