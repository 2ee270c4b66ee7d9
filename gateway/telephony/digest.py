"""SIP digest authentication (RFC 3261 §22, RFC 7616's computation, RFC 8760's SHA-256): challenges with
self-verifying nonces, and the check of an ``Authorization`` against configured users. Pure: the clock and
the secret are given."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

ALGORITHMS = {"MD5": "md5", "SHA-256": "sha256"}  # RFC 8760's names → hashlib's (the -sess variants: not offered)


def _h(algorithm: str, text: str) -> str:
    return hashlib.new(ALGORITHMS[algorithm], text.encode()).hexdigest()


def response(
    algorithm: str,
    username: str,
    realm: str,
    password: str,
    method: str,
    uri: str,
    nonce: str,
    nc: str = "",
    cnonce: str = "",
    qop: str = "",
) -> str:
    """The digest ``response``: H(H(A1):nonce[:nc:cnonce:qop]:H(A2)), A1 = user:realm:password, A2 = method:uri."""
    ha1 = _h(algorithm, f"{username}:{realm}:{password}")
    ha2 = _h(algorithm, f"{method}:{uri}")
    if qop:
        return _h(algorithm, f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")
    return _h(algorithm, f"{ha1}:{nonce}:{ha2}")  # RFC 2069's form, which RFC 3261 keeps for old phones


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # why not (logged; the caller gets a fresh challenge): "" when ok
    stale: bool = False  # the response was right for a nonce that has expired: re-challenge with stale=true


class DigestAuth:
    """Challenges for ``realm`` and their answers, checked against ``users`` (name → password).

    A nonce is the time it was made and an HMAC of it under ``secret``: nothing is stored per challenge,
    a forged or altered nonce fails, and one older than ``nonce_ttl_s`` is stale. The highest nonce
    count seen per nonce (the last ``remember`` nonces) refuses a replayed ``Authorization``."""

    def __init__(
        self,
        realm: str,
        users: Mapping[str, str],
        secret: bytes,
        algorithms: tuple[str, ...] = ("SHA-256", "MD5"),
        nonce_ttl_s: float = 300.0,
        remember: int = 4096,
    ):
        unknown = [a for a in algorithms if a not in ALGORITHMS]
        if unknown or not algorithms:
            raise ValueError(f"digest algorithms must be among {sorted(ALGORITHMS)}: {unknown or 'none given'}")
        self.realm, self.users, self.secret = realm, dict(users), secret
        self.algorithms, self.nonce_ttl_s, self.remember = algorithms, nonce_ttl_s, remember
        self._counts: OrderedDict[str, int] = OrderedDict()

    def nonce(self, now: float) -> str:
        """The time, 8 random bytes (two callers challenged at once get their own), and their HMAC."""
        body = struct.pack(">d", now) + secrets.token_bytes(8)
        mac = hmac.new(self.secret, body, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(body + mac).decode()

    def _nonce_time(self, nonce: str) -> float | None:
        try:
            raw = base64.urlsafe_b64decode(nonce)
        except ValueError:
            return None
        if len(raw) != 32:
            return None
        mac = hmac.new(self.secret, raw[:16], hashlib.sha256).digest()[:16]
        return float(struct.unpack(">d", raw[:8])[0]) if hmac.compare_digest(mac, raw[16:]) else None

    def challenges(self, now: float, stale: bool = False) -> list[str]:
        """``WWW-Authenticate`` values, the preferred algorithm first (RFC 8760 §2.4: one per algorithm)."""
        nonce = self.nonce(now)
        tail = ", stale=true" if stale else ""
        head = f'Digest realm="{self.realm}", nonce="{nonce}"'
        return [f'{head}, algorithm={a}, qop="auth"{tail}' for a in self.algorithms]

    def check(self, method: str, params: Mapping[str, str], now: float) -> Verdict:
        """``params``: the parsed ``Authorization: Digest …`` parameters of a request with ``method``."""
        algorithm = params.get("algorithm", "MD5").upper()
        if algorithm not in self.algorithms:
            return Verdict(False, f"algorithm {algorithm} not offered")
        if params.get("realm") != self.realm:
            return Verdict(False, f"realm {params.get('realm')!r} is not {self.realm!r}")
        user = params.get("username", "")
        password = self.users.get(user)
        if password is None:
            return Verdict(False, f"no user {user!r}")
        nonce, qop = params.get("nonce", ""), params.get("qop", "")
        if qop not in ("", "auth"):
            return Verdict(False, f"qop {qop!r} (only auth)")
        made = self._nonce_time(nonce)
        if made is None:
            return Verdict(False, "a nonce this server did not make")
        expected = response(
            algorithm, user, self.realm, password, method, params.get("uri", ""), nonce,
            params.get("nc", ""), params.get("cnonce", ""), qop,
        )  # fmt: skip
        if not hmac.compare_digest(expected, params.get("response", "").lower()):
            return Verdict(False, f"wrong response for {user!r}")
        if now - made > self.nonce_ttl_s or made > now + 1:
            return Verdict(False, "the nonce has expired", stale=True)
        if qop:
            try:
                nc = int(params.get("nc", ""), 16)
            except ValueError:
                return Verdict(False, "nc is not a hex count")
            if nc <= self._counts.get(nonce, 0):
                return Verdict(False, f"nonce count {nc} seen before (a replay)")
            self._counts[nonce] = nc
            self._counts.move_to_end(nonce)
            while len(self._counts) > self.remember:
                self._counts.popitem(last=False)
        return Verdict(True, "")
