"""Image input: validate untrusted image URLs/bytes *before* decoding, then normalise to RGB.

Order of checks (each cheaper than the next, none decodes pixels before the last):
1. URL scheme: ``data:`` only by default; http(s) only through an opt-in ``RemoteImagePolicy``.
2. Declared MIME in the allowlist (png / jpeg / webp).
3. Encoded length vs the byte cap (before base64 decoding), strict base64, decoded byte cap.
4. ``Image.open`` restricted to the allowed formats (never EPS/PSD/…): reads the header only.
   Real format must equal the declared MIME; ``.size`` checked (0×0, declared pixels) before ``.load()``.
5. ``.load()`` (truncated files fail here), EXIF transpose, alpha flattened on white, RGB,
   optional downscale so the longer side is at most ``max_side`` (JPEGs decode at reduced scale).

Every failure is one ``ImageError(code, message)``; ``code`` is meant for the wire ``error.code``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import io
import ipaddress
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFile, ImageOps

from .errors import InputError

DEFAULT_MAX_BYTES = 20_000_000  # PROTOCOL.md: an image up to 20 MB …
DEFAULT_MAX_PIXELS = 40_000_000  # … and 40 megapixels declared

# Pillow's own bomb check is only a backstop (ours runs on ``.size`` first). It merely *warns*
# between 1× and 2× its limit, so lower the limit to ours and make that warning an error.
Image.MAX_IMAGE_PIXELS = DEFAULT_MAX_PIXELS
warnings.filterwarnings("error", category=Image.DecompressionBombWarning)
ImageFile.LOAD_TRUNCATED_IMAGES = False

MIME_TO_FORMAT = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}
_MIME_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "image/x-png": "image/png"}
_DATA_URL = re.compile(r"data:([^;,]*)((?:;[^;,]*)*),(.*)", re.DOTALL | re.IGNORECASE)


class ImageError(InputError):
    """A rejected image. ``code``: invalid_image | image_too_large | unsupported_image_format |
    image_url_not_allowed | image_fetch_failed."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int = DEFAULT_MAX_BYTES  # encoded (compressed) bytes after base64 decoding
    max_pixels: int = DEFAULT_MAX_PIXELS  # width × height declared in the header
    allowed_mimes: frozenset[str] = frozenset(MIME_TO_FORMAT)  # subset of MIME_TO_FORMAT's keys
    max_side: int | None = None  # downscale so max(width, height) <= this; None keeps the size
    background: tuple[int, int, int] = (255, 255, 255)  # what transparent pixels become


_DECODE_WAIT_S = 10.0  # longest wait for room in the decode budget before "server_busy"
_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})


def decode_memory(mode: str, width: int, height: int, fmt: str = "PNG", transparency: bool = False) -> int:
    """An upper bound on the bytes that decoding and normalising an image holds at once, from its
    header alone. Measured (bench/security_images.py, 36 MP): an RGB or 16-bit grey PNG peaks at
    ≈ 9.5 bytes a pixel (the decoded buffer, Pillow stores RGB in 4, plus the downscale), an
    image with alpha at ≈ 17 (RGBA copy, RGB base and alpha channel to flatten it), and libwebp
    decodes into a buffer of its own that Pillow then copies (+8); 16 MiB covers fixed costs
    (codec state, a JPEG's draft buffers). So: 16 MiB + pixels × (12 + 8 if alpha + 8 if WebP)."""
    alpha = mode in _ALPHA_MODES or (mode == "P" and transparency)
    per_pixel = 12 + (8 if alpha else 0) + (8 if fmt == "WEBP" else 0)
    return (16 << 20) + width * height * per_pixel


class DecodeGate:
    """What image decoding may hold at once across the process: a byte budget shared by every
    decode in flight (each reserves its ``decode_memory`` first) and a count of decodes at once.
    One image over the whole budget is refused; one that merely has to wait for room waits up to
    ``_DECODE_WAIT_S`` and is then refused as busy. Thread-safe (decodes run in worker threads)."""

    def __init__(self, budget_bytes: int, max_concurrent: int):
        self.budget_bytes = budget_bytes  # total estimated decode memory in flight
        self.max_concurrent = max_concurrent  # decodes in flight
        self._used = 0
        self._active = 0
        self._cv = threading.Condition()

    @contextlib.contextmanager
    def reserve(self, n_bytes: int, what: str) -> Iterator[None]:
        if n_bytes > self.budget_bytes:
            need, limit = n_bytes >> 20, self.budget_bytes >> 20
            raise ImageError("image_too_large", f"decoding {what} needs about {need} MiB (limit {limit} MiB)")

        def fits() -> bool:
            return self._active < self.max_concurrent and self._used + n_bytes <= self.budget_bytes

        with self._cv:
            if not self._cv.wait_for(fits, _DECODE_WAIT_S):
                raise ImageError("server_busy", "too many images are being decoded; retry shortly")
            self._used += n_bytes
            self._active += 1
        try:
            yield
        finally:
            with self._cv:
                self._used -= n_bytes
                self._active -= 1
                self._cv.notify_all()

    @property
    def in_flight(self) -> tuple[int, int]:
        """(decodes, reserved bytes) now."""
        with self._cv:
            return self._active, self._used


@dataclass(frozen=True)
class RemoteImagePolicy:
    """Opt-in http(s) fetching. Off unless ``allowed_hosts`` is non-empty."""

    allowed_hosts: frozenset[str] = frozenset()  # exact host names, or "*.example.com" for subdomains
    allowed_schemes: frozenset[str] = frozenset({"https"})  # add "http" only for trusted networks
    timeout_s: float = 10.0  # whole fetch: connect + headers + body
    allow_private_networks: bool = False  # True lets resolved private/loopback addresses through
    user_agent: str = "stream-omni-image-fetch/1"


@dataclass(frozen=True)
class DecodedImage:
    image: Image.Image  # RGB, EXIF-transposed, at most max_side on its longer side
    mime: str  # the verified MIME of the source bytes
    source_size: tuple[int, int]  # (width, height) declared by the source header, before transpose
    n_bytes: int  # encoded size


# ------------------------------------------------------------------------------------------ data URLs


def _canonical_mime(mime: str) -> str:
    mime = mime.strip().lower()
    return _MIME_ALIASES.get(mime, mime)


def _check_mime(mime: str, limits: ImageLimits) -> str:
    mime = _canonical_mime(mime)
    if mime not in limits.allowed_mimes or mime not in MIME_TO_FORMAT:
        allowed = ", ".join(sorted(limits.allowed_mimes))
        msg = f"image type {mime or '(none)'!r} not allowed ({allowed})"
        raise ImageError("unsupported_image_format", msg)
    return mime


def parse_data_url(url: str, limits: ImageLimits = ImageLimits()) -> tuple[str, bytes]:
    """``data:image/png;base64,…`` → (canonical MIME, raw bytes). Checks size before decoding."""
    if len(url) > (limits.max_bytes + 3) // 3 * 4 + 1024:  # longer than any allowed image could be
        raise ImageError("image_too_large", f"image larger than {limits.max_bytes} bytes")
    m = _DATA_URL.fullmatch(url)
    if m is None:
        raise ImageError("invalid_image", "malformed data URL")
    mime_s, params, payload = m.groups()
    if "base64" not in [p.strip().lower() for p in params.split(";") if p]:
        raise ImageError("invalid_image", "data URL must be base64-encoded")
    mime = _check_mime(mime_s, limits)
    # 4 base64 chars carry 3 bytes: reject before allocating the decoded buffer.
    if len(payload) // 4 * 3 > limits.max_bytes + 3:
        raise ImageError("image_too_large", f"image larger than {limits.max_bytes} bytes")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError("invalid_image", f"invalid base64 in data URL: {exc}") from None
    if len(raw) > limits.max_bytes:
        raise ImageError("image_too_large", f"image of {len(raw)} bytes exceeds {limits.max_bytes}")
    return mime, raw


def to_data_url(png_or_jpeg: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(png_or_jpeg).decode('ascii')}"


# ------------------------------------------------------------------------------------------ decoding


def decode_image(
    raw: bytes, mime: str, limits: ImageLimits = ImageLimits(), gate: DecodeGate | None = None
) -> DecodedImage:
    """Validate ``raw`` (claimed to be ``mime``) and return it as a normalised RGB image. With a
    ``gate``, the decode first reserves its estimated memory there (``decode_memory``)."""
    mime = _check_mime(mime, limits)
    if len(raw) > limits.max_bytes:
        raise ImageError("image_too_large", f"image of {len(raw)} bytes exceeds {limits.max_bytes}")
    if not raw:
        raise ImageError("invalid_image", "empty image")
    if limits.max_pixels > (Image.MAX_IMAGE_PIXELS or 0):  # Pillow's backstop follows the largest limit
        Image.MAX_IMAGE_PIXELS = limits.max_pixels
    allowed_formats = [MIME_TO_FORMAT[m] for m in sorted(limits.allowed_mimes) if m in MIME_TO_FORMAT]
    try:
        img = Image.open(io.BytesIO(raw), formats=allowed_formats)  # header only, no pixels yet
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError("image_too_large", f"image declares too many pixels: {exc}") from None
    except Image.UnidentifiedImageError:
        raise ImageError("invalid_image", f"content is not a valid {mime} image") from None
    except Exception as exc:  # any parser failure on untrusted bytes is an invalid image
        raise ImageError("invalid_image", f"cannot read image header: {type(exc).__name__}: {exc}") from None
    with img:
        if img.format != MIME_TO_FORMAT[mime]:
            raise ImageError("invalid_image", f"declared {mime} but the content is {img.format}")
        width, height = img.size
        if width <= 0 or height <= 0:
            raise ImageError("invalid_image", f"image has no pixels ({width}x{height})")
        if width * height > limits.max_pixels:
            raise ImageError("image_too_large", f"image declares {width}x{height} pixels (limit {limits.max_pixels})")
        if limits.max_side and img.format == "JPEG" and max(width, height) > limits.max_side:
            # DCT scaling: decode at 1/2…1/8 while the longer side stays >= max_side
            ratio = limits.max_side / max(width, height)
            box = (max(1, math.ceil(width * ratio - 1e-6)), max(1, math.ceil(height * ratio - 1e-6)))
            img.draft("RGB", box)
        # img.size is the reduced one when draft() scaled a JPEG down
        need = decode_memory(img.mode, *img.size, img.format or "", "transparency" in img.info)
        what = f"a {img.size[0]}x{img.size[1]} {img.mode} {img.format}"
        reservation = gate.reserve(need, what) if gate is not None else contextlib.nullcontext()
        try:
            with reservation:
                img.load()
                out = _normalise(img, limits)
        except ImageError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageError("image_too_large", f"image declares too many pixels: {exc}") from None
        except MemoryError:
            raise ImageError("image_too_large", "image too large to decode") from None
        except Exception as exc:  # OSError "truncated", SyntaxError, struct.error, bad EXIF, …
            msg = f"corrupt or truncated image: {type(exc).__name__}: {exc}"
            raise ImageError("invalid_image", msg) from None
    return DecodedImage(image=out, mime=mime, source_size=(width, height), n_bytes=len(raw))


def _normalise(img: Image.Image, limits: ImageLimits) -> Image.Image:
    """EXIF transpose → flatten alpha onto ``background`` → RGB → downscale to ``max_side``."""
    img = ImageOps.exif_transpose(img) or img
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        base = Image.new("RGB", rgba.size, limits.background)
        base.paste(rgba, mask=rgba.getchannel("A"))
        img = base
    elif img.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit grey PNG: Pillow's convert clips at 255
        # [H, W] in the source's own width (2 bytes for I;16): an int64 copy cost 8 bytes a pixel
        # twice over (a 101 KB PNG peaked at +744 MB)
        grey = np.asarray(img)
        if grey.dtype.kind == "i":  # mode I: int32, may hold values outside 0..65535
            grey = grey.clip(0, 65535)
        img = Image.fromarray((grey // 257).astype(np.uint8), "L")
    if img.mode != "RGB":
        img = img.convert("RGB")
    if limits.max_side and max(img.size) > limits.max_side:
        img.thumbnail((limits.max_side, limits.max_side), Image.Resampling.LANCZOS)
    return img


def load_image_url(
    url: str,
    limits: ImageLimits = ImageLimits(),
    remote: RemoteImagePolicy | None = None,
    *,
    resolver: Callable[[str, int], list[str]] | None = None,
    gate: DecodeGate | None = None,
) -> DecodedImage:
    """The one entry point for ``input_image.image_url`` / chat ``image_url.url``.

    ``data:`` URLs always; ``http(s)`` only when ``remote`` allows the host (else
    ``image_url_not_allowed``). ``resolver`` is for tests (host, port → IP strings).
    """
    if not isinstance(url, str) or not url:
        raise ImageError("invalid_image", "image_url must be a non-empty string")
    scheme = url.split(":", 1)[0].strip().lower() if ":" in url else ""
    if scheme == "data":
        mime, raw = parse_data_url(url, limits)
        return decode_image(raw, mime, limits, gate)
    if scheme in ("http", "https"):
        if remote is None or not remote.allowed_hosts:
            raise ImageError("image_url_not_allowed", "only data: image URLs are accepted by this server")
        mime, raw = fetch_image(url, remote, limits, resolver=resolver)
        return decode_image(raw, mime, limits, gate)
    raise ImageError("image_url_not_allowed", f"unsupported image URL scheme {scheme or '(none)'!r}")


# ------------------------------------------------------------------------------------------ remote


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Exact match, or a ``*.suffix`` entry matching any subdomain (not the bare suffix)."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().rstrip(".")
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif host == entry:
            return True
    return False


def address_blocked(ip: str) -> str | None:
    """Why ``ip`` must not be fetched from (loopback, private, link-local, …), or None if public."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    checks = ("is_loopback", "is_private", "is_link_local", "is_multicast", "is_reserved", "is_unspecified")
    for attr in checks:
        if getattr(addr, attr):
            return attr[3:].replace("_", "-")
    if not addr.is_global:
        return "non-global"
    return None


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check_remote_url(
    url: str, policy: RemoteImagePolicy, resolver: Callable[[str, int], list[str]] | None = None
) -> tuple[urllib.parse.SplitResult, str]:
    """Refuse anything but an allowlisted host whose every address is public → (parts, pinned IP)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in policy.allowed_schemes:
        raise ImageError("image_url_not_allowed", f"scheme {scheme!r} not allowed for image URLs")
    if parts.username or parts.password:
        raise ImageError("image_url_not_allowed", "credentials in image URLs are not allowed")
    try:
        host, port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ImageError("image_url_not_allowed", "malformed image URL") from None
    if not host or not host_allowed(host, policy.allowed_hosts):
        raise ImageError("image_url_not_allowed", f"host {host!r} is not in the image host allowlist")
    try:
        ips = (resolver or _system_resolver)(host, port)
    except (OSError, UnicodeError) as exc:
        raise ImageError("image_fetch_failed", f"cannot resolve {host!r}: {exc}") from None
    if not ips:
        raise ImageError("image_fetch_failed", f"{host!r} resolved to no address")
    if not policy.allow_private_networks:
        for ip in ips:  # all of them: a host with one private A record could be rebound to it
            why = address_blocked(ip)
            if why:
                raise ImageError("image_url_not_allowed", f"{host!r} resolves to a {why} address ({ip})")
    return parts, ips[0]


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to the already-vetted IP, so a second DNS answer cannot redirect us."""

    def __init__(self, host: str, port: int, ip: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._ip = ip

    def connect(self) -> None:
        self.sock = socket.create_connection((self._ip, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, ip: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._ip = ip

    def connect(self) -> None:
        sock = socket.create_connection((self._ip, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # cert checked for host


def fetch_image(
    url: str,
    policy: RemoteImagePolicy,
    limits: ImageLimits = ImageLimits(),
    *,
    resolver: Callable[[str, int], list[str]] | None = None,
) -> tuple[str, bytes]:
    """GET ``url`` under ``policy``: no redirects, byte cap, wall-clock cap → (MIME, bytes)."""
    parts, ip = check_remote_url(url, policy, resolver)
    deadline = time.monotonic() + policy.timeout_s
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    cls = _PinnedHTTPS if parts.scheme.lower() == "https" else _PinnedHTTP
    conn = cls(parts.hostname or "", port, ip, timeout=policy.timeout_s)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    resp: http.client.HTTPResponse | None = None
    try:
        conn.request("GET", path, headers={"User-Agent": policy.user_agent, "Accept": "image/*"})
        resp = conn.getresponse()
        if 300 <= resp.status < 400:
            msg = f"image URL redirects (HTTP {resp.status}); redirects are not followed"
            raise ImageError("image_url_not_allowed", msg)
        if resp.status != 200:
            raise ImageError("image_fetch_failed", f"image URL answered HTTP {resp.status}")
        mime = _check_mime((resp.getheader("Content-Type") or "").split(";", 1)[0], limits)
        length = resp.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > limits.max_bytes:
            raise ImageError("image_too_large", f"image of {length} bytes exceeds {limits.max_bytes}")
        buf = bytearray()
        while True:
            if time.monotonic() > deadline:
                raise ImageError("image_fetch_failed", f"image fetch took over {policy.timeout_s} s")
            if conn.sock is not None:  # each read waits at most for the time left
                conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > limits.max_bytes:
                raise ImageError("image_too_large", f"image larger than {limits.max_bytes} bytes")
        return mime, bytes(buf)
    except ImageError:
        raise
    except (OSError, http.client.HTTPException) as exc:
        raise ImageError("image_fetch_failed", f"image fetch failed: {type(exc).__name__}: {exc}") from None
    finally:
        if resp is not None:
            resp.close()  # after getresponse() the response, not the connection, owns the socket
        conn.close()


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PIXELS",
    "DecodeGate",
    "DecodedImage",
    "ImageError",
    "ImageLimits",
    "RemoteImagePolicy",
    "check_remote_url",
    "decode_image",
    "decode_memory",
    "fetch_image",
    "load_image_url",
    "parse_data_url",
    "to_data_url",
]
