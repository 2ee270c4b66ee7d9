"""MCP safety policy, pure: which URLs and addresses a session may reach, which calls need approval,
and how much of a tool's output reaches the model. No I/O: resolved addresses come in as strings.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
SECRET_FIELDS = ("headers", "authorization")
TRUNCATED = "\n[output truncated]"  # ends an output that was cut


class PolicyError(Exception):
    """A target the policy refuses; ``message`` is fit for the client (it never holds a secret)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Target:
    """A URL cut into the parts the allow-list compares."""

    scheme: str
    host: str  # lower case, IPv6 without brackets
    port: int
    path: str  # "/" when empty


def split(url: str) -> Target:
    """``url`` → its parts; ``PolicyError`` for anything but a plain http(s) URL (no user info, no fragment)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise PolicyError("server_url is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise PolicyError("server_url must be an http or https URL with a host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise PolicyError("server_url must not carry user info")
    if parts.fragment:
        raise PolicyError("server_url must not carry a fragment")
    return Target(scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme], _normal_path(parts.path))


def _normal_path(path: str) -> str:
    """``path`` with its dot segments resolved (RFC 3986 5.2.4, as the HTTP client sends it), so the
    allow-list compares what is requested. An encoded dot segment (``%2e%2e``) or slash (``%2f``) is
    refused: a server may decode it after the check and climb out of the allowed prefix."""
    out: list[str] = []
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    for seg in segments:
        lowered = seg.lower()
        if seg not in (".", "..") and unquote(seg) in (".", ".."):
            raise PolicyError("server_url must not carry percent-encoded dot segments")
        if "%2f" in lowered or "%5c" in lowered:
            raise PolicyError("server_url must not carry percent-encoded slashes")
        if seg == ".":
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    if segments and segments[-1] in (".", ".."):
        out.append("")  # "/a/b/.." is "/a/"
    return "/" + "/".join(out)


def _host_matches(rule: str, host: str) -> bool:
    if rule.startswith("*."):  # any subdomain, never the bare domain
        return host.endswith(rule[1:]) and len(host) > len(rule) - 1
    return rule == host


def _path_matches(rule: str, path: str) -> bool:
    if rule in ("", "/") or path == rule:
        return True
    base = rule if rule.endswith("/") else rule + "/"
    return path.startswith(base)  # on a segment boundary: /mcp allows /mcp/x, not /mcpx


def matching_rule(url: str, allowed: tuple[str, ...]) -> Target | None:
    """The allow-list entry ``url`` falls under (scheme, host and port equal, path under the entry's), or None.

    Entries are URLs; a host ``*.example.com`` stands for its subdomains. Raises ``PolicyError`` for a bad URL."""
    t = split(url)
    for entry in allowed:
        wild = "://*." in entry
        rule = split(entry.replace("://*.", "://", 1))
        host = f"*.{rule.host}" if wild else rule.host
        if (
            rule.scheme == t.scheme
            and rule.port == t.port
            and _host_matches(host, t.host)
            and _path_matches(rule.path, t.path)
        ):
            return Target(rule.scheme, host, rule.port, rule.path)
    return None


def check_url(url: str, allowed: tuple[str, ...]) -> Target:
    """The allow-list entry that admits a client-supplied ``url``; ``PolicyError`` when none does."""
    rule = matching_rule(url, allowed)
    if rule is None:
        raise PolicyError("server_url is not in this server's tools.mcp_allowed_urls")
    return rule


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_address(host: str) -> bool:
    return _literal(host) is not None


def check_address(address: str, rule_host: str) -> None:
    """May a connection admitted by an entry whose host is ``rule_host`` go to ``address`` (resolved)?

    Public addresses: yes. Loopback, private, link-local (cloud metadata), reserved ones: only when the
    operator wrote that very address as the entry's host — a name that resolves there is refused, so a
    DNS answer (or a rebinding one) cannot turn an allowed name into a way to internal hosts."""
    ip = _literal(address.split("%", 1)[0])
    if ip is None:
        raise PolicyError("the server's address could not be read")
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified or ip.is_multicast:
        raise PolicyError("the server resolves to an address that cannot be reached")
    if ip.is_global:
        return
    literal = _literal(rule_host)
    if literal is not None and literal == ip:
        return
    raise PolicyError("the server resolves to an internal address, which only an address entry may allow")


# ---------------------------------------------------------------- client headers

# what the HTTP client and the MCP SDK set themselves: the connection to the checked address, the framing of
# each message, and the MCP session. A client's Host would steer a shared ingress to another virtual host.
FORBIDDEN_HEADERS = frozenset(
    {
        "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer",
        "expect", "proxy-authorization", "proxy-authenticate", "proxy-connection", "content-type", "accept",
        "accept-encoding", "content-encoding", "mcp-session-id", "mcp-protocol-version", "last-event-id",
        "cookie", "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip",
    }
)  # fmt: skip
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")  # an HTTP field name (RFC 9110 token)
MAX_HEADERS = 16


def check_headers(headers: dict[str, str]) -> None:
    """``PolicyError`` naming the first client-supplied header a server request may not carry: a name that is
    not an HTTP token, one the gateway sets itself (``FORBIDDEN_HEADERS``), or a value with a control
    character. What is left (``Authorization``, an API-key header of the server's own) is what MCP needs."""
    if len(headers) > MAX_HEADERS:
        raise PolicyError(f"at most {MAX_HEADERS} headers")
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise PolicyError(f"header name {name[:40]!r} is not an HTTP field name")
        if name.lower() in FORBIDDEN_HEADERS:
            raise PolicyError(f"header {name!r} is set by the gateway, not by a client")
        if any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F for c in value) or len(value) > 8192:
            raise PolicyError(f"header {name!r} has a control character or is over 8192 characters")


# ---------------------------------------------------------------- approvals


def needs_approval(require: Any, name: str) -> bool:
    """GA ``require_approval``: "always" (also when unset, as OpenAI), "never", or a filter
    ``{never: {tool_names: [...]}, always: {tool_names: [...]}}`` (tools in neither need approval)."""
    if require is None or require == "always":
        return True
    if require == "never":
        return False
    if isinstance(require, dict):
        never = (require.get("never") or {}).get("tool_names") or []
        always = (require.get("always") or {}).get("tool_names") or []
        if name in always:
            return True
        return name not in never
    return True


def tool_allowed(allowed: Any, name: str) -> bool:
    """GA ``allowed_tools``: None (all), a list of names, or a filter ``{tool_names: [...]}``."""
    if allowed is None:
        return True
    if isinstance(allowed, list):
        return name in allowed
    if isinstance(allowed, dict):
        names = allowed.get("tool_names")
        return names is None or name in names
    return False


# ---------------------------------------------------------------- output caps


def cap_output(text: str, max_bytes: int, max_tokens: int, count: Callable[[str], int] | None = None) -> str:
    """A tool's output as the model may see it: at most ``max_bytes`` of UTF-8 and ``max_tokens`` tokens
    (``count`` measures; None: a token is taken as at most 4 bytes). A cut output says so at its end."""
    note = TRUNCATED
    raw = text.encode("utf-8")
    cut = False
    if len(raw) > max_bytes:
        text = raw[: max(0, max_bytes - len(note))].decode("utf-8", "ignore")
        cut = True
    measure = count or (lambda s: (len(s.encode("utf-8")) + 3) // 4)
    if measure(text) > max_tokens:
        lo, hi = 0, len(text)  # the longest prefix that fits, by bisection (count may be a tokenizer)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if measure(text[:mid]) + measure(note) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        text, cut = text[:lo], True
    return text + note if cut else text


def public(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool entry without its secrets (what events, logs and snapshots may hold)."""
    return {k: v for k, v in tool.items() if k not in SECRET_FIELDS}
