"""Checks on an SDP offer before any media work, and the public-address rewrite of an answer (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SDP_BYTES = 64 * 1024  # a browser's offer is 2-6 KB; this is ample and bounds the parse
DATA_CHANNEL_PROTOCOLS = ("UDP/DTLS/SCTP", "DTLS/SCTP")


class OfferError(ValueError):
    """The offer cannot be answered; the message says why (an HTTP 400 body)."""


@dataclass(frozen=True)
class Offer:
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
            elif value.startswith("maxptime:") and value[len("maxptime:") :].strip().isdigit():
                m.maxptime = int(value[len("maxptime:") :])
    return media


def check_offer(text: str) -> Offer:
    """The offer, or ``OfferError``: not SDP, no audio, no data channel, or no Opus."""
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
    opus = [pt for pt in audio[0].formats if audio[0].rtpmap.get(pt, "").startswith("opus/48000")]
    if not opus:
        offered = sorted({c.split("/")[0] for c in audio[0].rtpmap.values()}) or audio[0].formats
        raise OfferError(f"SDP offer's audio has no Opus (offered: {', '.join(offered)}); only opus/48000 is served")
    return Offer(
        sdp=body.replace("\r\n", "\n").replace("\n", "\r\n") + "\r\n",
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
