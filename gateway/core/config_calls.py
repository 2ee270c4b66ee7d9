"""The ``webrtc:`` and ``telephony:`` sections: how calls reach the gateway (browsers, SIP trunks, media streams)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .config_model import Frozen as _Frozen


class IceServer(_Frozen):
    urls: str | list[str]  # stun:host:port, turn:host:port?transport=udp|tcp, turns:host:port
    username: str | None = None  # TURN long-term credential user
    credential: str | None = None  # TURN long-term credential password


class WebRtcConfig(_Frozen):
    """WebRTC calls (``POST /v1/realtime/calls``; docs/WEBRTC.md)."""

    enabled: bool = True  # serve /v1/realtime/calls
    # STUN/TURN servers the server's ICE agent uses (and documents for clients); none: host candidates only
    ice_servers: tuple[IceServer, ...] = ()
    # UDP ports host candidates bind, inclusive [low, high] (one port per call); None: ephemeral ports
    udp_ports: tuple[int, int] | None = None
    public_ip: str | None = None  # the address put in host candidates when the server sits behind a 1:1 NAT
    # the caller's Opus bitrate the answer asks for (maxaveragebitrate): 32 kbit/s is clear speech
    upstream_kbps: int = Field(default=32, ge=6, le=510)
    connect_timeout_s: float = Field(default=15.0, gt=0, le=300)  # the events channel must open this soon
    # a caller whose audio stops this long is gone (ICE failed, tab closed): the call ends, the session waits
    media_timeout_s: float = Field(default=10.0, gt=0, le=300)
    offers_per_s: float = Field(default=2.0, gt=0, le=1000)  # offers per second per API key, before media work
    offers_burst: int = Field(default=10, ge=1, le=10_000)  # offers one key may send at once
    stats_interval_s: float = Field(default=2.0, gt=0, le=60)  # how often a call's loss and jitter are sampled
    # caller's 20 ms frames held before decoding: 0 decodes each as it arrives (the server only listens: a
    # late packet is dropped, a lost one skipped); aiortc's own playout buffer holds 4 (80 ms more per turn)
    jitter_prefetch_frames: int = Field(default=0, ge=0, le=8)
    # ICE candidates one offer may hold (more: 400): each is an address the server sends STUN checks to
    max_candidates: int = Field(default=16, ge=1, le=256)
    # check an offer's private (RFC 1918, ULA, CGNAT, documentation ranges) and mDNS .local candidates:
    # true for a server callers reach on its own LAN; false: an offer cannot make the server probe its own
    # network; null (auto): checked only on a loopback-bound server with no API keys, whose callers are on
    # its own machine (loopback and link-local candidates are never checked)
    allow_private_candidates: bool | None = None
    # STUN connectivity checks one call starts per second, over all its candidate pairs (each is sent to an
    # address the caller named, and retransmitted up to 6 times unanswered)
    stun_checks_per_s: float = Field(default=20.0, gt=0, le=1000)
    stun_checks_burst: int = Field(default=20, ge=1, le=1000)  # checks one call starts at once, before the rate

    @model_validator(mode="after")
    def _port_range(self) -> WebRtcConfig:
        if self.udp_ports is not None:
            low, high = self.udp_ports
            if not 1024 <= low <= high <= 65535:
                raise ValueError("webrtc.udp_ports must be [low, high] with 1024 <= low <= high <= 65535")
        return self


class TelephonyConfig(_Frozen):
    """Phone calls: telephony media streams over WebSocket and OpenAI's call control (docs/TELEPHONY.md)."""

    enabled: bool = False  # serve /v1/telephony/media-stream and /v1/realtime/calls/{id}/accept|reject|refer
    # Twilio's auth token: the X-Twilio-Signature of each stream's upgrade is checked with it (None: not checked)
    twilio_auth_token: str | None = None
    # the URL the provider was told (wss://…): what it signed, when a proxy changes the Host the server sees
    public_url: str | None = None
    webhook_url: str | None = None  # realtime.call.incoming is POSTed here; None: default_session answers
    webhook_secret: str | None = None  # Standard Webhooks secret ("whsec_…" base64, or raw) the webhook is signed with
    accept_timeout_s: float = Field(default=10.0, gt=0, le=120)  # an incoming call not accepted by then is dropped
    default_session: dict[str, Any] = {}  # the session.update a call gets when no webhook is configured
    mark_ms: int = Field(default=100, ge=20, le=2000)  # a mark after this much audio: the playhead's resolution
    # a media stream's reply audio is sent this far ahead of real time into the provider's buffer, so a stall of
    # the gateway's loop shorter than it is not heard as a gap; barge-in clears the buffer, marks say what played
    stream_lead_ms: int = Field(default=200, ge=0, le=2000)
    sip_port: int | None = Field(default=None, ge=1, le=65535)  # take SIP calls on this UDP port (None: no SIP)
    sip_host: str = "127.0.0.1"  # the address SIP and RTP bind (and put in SDP answers)
    sip_allow: tuple[str, ...] = ("127.0.0.0/8",)  # networks a SIP call may come from (a trunk's) unchallenged
    sip_tcp: bool = True  # take SIP over TCP on sip_port too (framed by Content-Length), as over UDP
    sip_tls_port: int | None = Field(default=None, ge=1, le=65535)  # SIP over TLS here (None: no TLS); 5061 is usual
    sip_tls_cert: str | None = None  # PEM certificate chain served on sip_tls_port
    sip_tls_key: str | None = None  # its PEM private key
    # digest credentials (user name → password) a caller outside sip_allow must give: the INVITE gets 401 with
    # a nonce and is let in when retried with a right Authorization; none: such callers get 403
    sip_users: dict[str, str] = {}
    sip_realm: str = "stream-omni"  # the realm of the digest challenge (a trunk's credentials are for one realm)
    # digest algorithms offered, preferred first, one challenge each (RFC 8760); phones on libre < 2 know only MD5
    sip_digest_algorithms: tuple[Literal["SHA-256", "MD5"], ...] = Field(default=("SHA-256", "MD5"), min_length=1)
    sip_nonce_ttl_s: float = Field(default=300.0, gt=0, le=86_400)  # a challenge's nonce is stale after this
    # session timers (RFC 4028): the shortest interval accepted (422 below it; RFC floor 90 s), and the one asked
    # of a caller that supports timers but asked none (None: no timer then); an unrefreshed session is ended
    sip_min_se: int = Field(default=90, ge=90, le=86_400)
    sip_session_expires: int | None = Field(default=1800, ge=90, le=86_400)

    @model_validator(mode="after")
    def _tls_files(self) -> TelephonyConfig:
        if self.sip_tls_port is not None and (self.sip_tls_cert is None or self.sip_tls_key is None):
            raise ValueError("telephony.sip_tls_port needs telephony.sip_tls_cert and telephony.sip_tls_key")
        return self
