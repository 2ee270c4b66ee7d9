"""processors/image.py: every rejection path has its code; valid images come back RGB and upright."""

from __future__ import annotations

import base64
import http.server
import io
import resource
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from processors.image import (
    ImageError,
    ImageLimits,
    RemoteImagePolicy,
    address_blocked,
    check_remote_url,
    decode_image,
    host_allowed,
    load_image_url,
    parse_data_url,
    to_data_url,
)
from tests.fuzzing import examples

RNG = np.random.default_rng(0)
PIXELS = RNG.integers(0, 256, (48, 64, 3), dtype=np.uint8)  # [H, W, 3]


def encode(fmt: str, im: Image.Image | None = None, **kw) -> bytes:
    buf = io.BytesIO()
    (im if im is not None else Image.fromarray(PIXELS)).save(buf, fmt, **kw)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose IHDR claims ``width`` × ``height`` RGB pixels (its IDAT holds 1 kB)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + _chunk(b"IEND", b"")
    )


def code_of(fn, *args, **kw) -> str:
    with pytest.raises(ImageError) as info:
        fn(*args, **kw)
    return info.value.code


# ----------------------------------------------------------------------------------- valid images


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_valid_image_decodes_to_rgb_of_the_same_size(fmt: str, mime: str) -> None:
    out = load_image_url(to_data_url(encode(fmt), mime))
    assert out.image.mode == "RGB" and out.image.size == (64, 48) and out.mime == mime


def test_png_pixels_survive_decoding_exactly() -> None:
    out = decode_image(encode("PNG"), "image/png")
    assert np.array_equal(np.asarray(out.image), PIXELS)


def test_jpeg_mime_alias_is_accepted() -> None:
    assert load_image_url(to_data_url(encode("JPEG"), "image/jpg")).mime == "image/jpeg"


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    out = decode_image(encode("JPEG", exif=exif.tobytes()), "image/jpeg")
    assert out.image.size == (48, 64) and out.source_size == (64, 48)


def test_alpha_is_flattened_onto_the_background() -> None:
    rgba = np.zeros((8, 8, 4), dtype=np.uint8)
    rgba[:4, :, :] = (255, 0, 0, 255)  # top half opaque red, bottom half fully transparent
    raw = encode("PNG", Image.fromarray(rgba, "RGBA"))
    out = decode_image(raw, "image/png", ImageLimits(background=(0, 0, 255)))
    arr = np.asarray(out.image)
    assert (arr[:4] == (255, 0, 0)).all() and (arr[4:] == (0, 0, 255)).all()


def test_palette_with_transparency_is_flattened() -> None:
    im = Image.new("P", (4, 4), 1)
    im.putpalette([0, 0, 0, 10, 200, 30] + [0] * 762)
    im.info["transparency"] = 1
    out = decode_image(encode("PNG", im, transparency=1), "image/png")
    assert (np.asarray(out.image) == 255).all()


def test_sixteen_bit_grey_keeps_its_range() -> None:
    grey = np.linspace(0, 65535, 64 * 8).astype(np.uint16).reshape(8, 64)
    out = np.asarray(decode_image(encode("PNG", Image.fromarray(grey)), "image/png").image)
    assert out[0, 0, 0] == 0 and out[-1, -1, 0] == 255 and len(np.unique(out)) > 100


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_max_side_downscales_keeping_aspect(fmt: str, mime: str) -> None:
    big = Image.fromarray(RNG.integers(0, 256, (768, 1024, 3), dtype=np.uint8))
    out = decode_image(encode(fmt, big), mime, ImageLimits(max_side=256))
    assert out.image.size == (256, 192) and out.source_size == (1024, 768)


def test_small_image_is_not_upscaled() -> None:
    assert decode_image(encode("PNG"), "image/png", ImageLimits(max_side=1000)).image.size == (64, 48)


# ----------------------------------------------------------------------------------- rejections


def test_declared_50k_by_50k_bomb_is_rejected_without_decoding() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    t0 = time.perf_counter()
    assert code_of(decode_image, png_declaring(50_000, 50_000), "image/png") == "image_too_large"
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 64  # decoding would need 7.5 GB
    assert time.perf_counter() - t0 < 5


def test_bomb_between_one_and_two_times_pillows_limit_is_an_error_not_a_warning() -> None:
    assert code_of(decode_image, png_declaring(7000, 6000), "image/png") == "image_too_large"  # 42 MP


def test_configured_pixel_limit_is_checked_from_the_header() -> None:
    assert code_of(decode_image, encode("PNG"), "image/png", ImageLimits(max_pixels=64 * 48 - 1)) == ("image_too_large")
    assert decode_image(encode("PNG"), "image/png", ImageLimits(max_pixels=64 * 48)).image.size == (64, 48)


def test_a_larger_configured_pixel_limit_lifts_pillows_backstop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored after the test
    raw = png_declaring(7000, 6000)  # 42 MP header, 1 kB of pixel data
    # allowed by the header check, so it fails later, at decoding, as a truncated image
    assert code_of(decode_image, raw, "image/png", ImageLimits(max_pixels=50_000_000)) == "invalid_image"


def test_jpeg_declaring_huge_dimensions_is_rejected() -> None:
    raw = bytearray(encode("JPEG"))
    sof = raw.index(b"\xff\xc0")  # baseline SOF0: marker, length(2), precision(1), height(2), width(2)
    raw[sof + 5 : sof + 9] = struct.pack(">HH", 60_000, 60_000)
    assert code_of(decode_image, bytes(raw), "image/jpeg") == "image_too_large"


@pytest.mark.parametrize("width,height", [(0, 0), (0, 10), (10, 0)])
def test_zero_sized_image_is_rejected(width: int, height: int) -> None:
    assert code_of(decode_image, png_declaring(width, height), "image/png") == "invalid_image"


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
@pytest.mark.parametrize("keep", [0.5, 0.8])
def test_truncated_file_is_rejected(fmt: str, mime: str, keep: float) -> None:
    raw = encode(fmt)
    assert code_of(decode_image, raw[: int(len(raw) * keep)], mime) == "invalid_image"


@pytest.mark.parametrize(
    "fmt,declared",
    [("JPEG", "image/png"), ("PNG", "image/jpeg"), ("WEBP", "image/png"), ("PNG", "image/webp")],
)
def test_content_must_match_the_declared_mime(fmt: str, declared: str) -> None:
    assert code_of(load_image_url, to_data_url(encode(fmt), declared)) == "invalid_image"


@pytest.mark.parametrize("mime", ["image/gif", "image/svg+xml", "text/html", "application/octet-stream", ""])
def test_mime_outside_the_allowlist_is_refused(mime: str) -> None:
    assert code_of(load_image_url, f"data:{mime};base64,{base64.b64encode(encode('PNG')).decode()}") == (
        "unsupported_image_format"
    )


def test_allowlist_can_be_narrowed() -> None:
    limits = ImageLimits(allowed_mimes=frozenset({"image/png"}))
    url = to_data_url(encode("JPEG"), "image/jpeg")
    assert code_of(load_image_url, url, limits) == "unsupported_image_format"


def test_other_pillow_formats_are_never_parsed() -> None:
    gif = encode("GIF")
    assert code_of(decode_image, gif, "image/png") == "invalid_image"


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,iVBORw0K!!!",  # not base64 alphabet
        "data:image/png;base64,iVBORw0",  # bad padding
        "data:image/png;base64,iVBO Rw0K",  # whitespace is not strict base64
        "data:image/png,rawbytes",  # not base64-encoded
        "data:image/png;base64",  # no comma
        "data:image/png;base64,",  # empty
    ],
)
def test_bad_data_urls_are_invalid_image(url: str) -> None:
    assert code_of(load_image_url, url) == "invalid_image"


def test_byte_cap_is_checked_before_base64_decoding() -> None:
    limits = ImageLimits(max_bytes=1000)
    huge = "data:image/png;base64," + "A" * 10_000_000  # would decode to 7.5 MB
    t0 = time.perf_counter()
    assert code_of(parse_data_url, huge, limits) == "image_too_large"
    assert time.perf_counter() - t0 < 1.0


def test_byte_cap_applies_to_decoded_bytes() -> None:
    raw = encode("PNG")
    assert code_of(load_image_url, to_data_url(raw), ImageLimits(max_bytes=len(raw) - 1)) == "image_too_large"
    assert load_image_url(to_data_url(raw), ImageLimits(max_bytes=len(raw))).n_bytes == len(raw)


def test_default_byte_cap_is_20_mb() -> None:
    big = "data:image/png;base64," + "A" * (20_000_000 // 3 * 4 + 8)
    assert code_of(load_image_url, big) == "image_too_large"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x/y.png", "gopher://x", "/tmp/a.png", "javascript:1"])
def test_non_data_schemes_are_refused(url: str) -> None:
    assert code_of(load_image_url, url) == "image_url_not_allowed"


def test_http_urls_are_refused_by_default() -> None:
    assert code_of(load_image_url, "https://example.com/cat.png") == "image_url_not_allowed"
    assert code_of(load_image_url, "http://example.com/cat.png", remote=RemoteImagePolicy()) == (
        "image_url_not_allowed"
    )


# ----------------------------------------------------------------------------------- fuzz

VALID = [encode("PNG"), encode("JPEG"), encode("WEBP")]
MIMES = ["image/png", "image/jpeg", "image/webp"]


def _decode_or_image_error(raw: bytes, mime: str) -> None:
    try:
        out = decode_image(raw, mime, ImageLimits(max_pixels=1_000_000))
    except ImageError as exc:
        assert exc.code in {"invalid_image", "image_too_large"}
    else:
        assert out.image.mode == "RGB" and out.image.width > 0 and out.image.height > 0


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=2048), mime=st.sampled_from(MIMES))
def test_fuzz_random_bytes_give_image_error_or_an_image(raw: bytes, mime: str) -> None:
    _decode_or_image_error(raw, mime)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, 2),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(1, 10_000),
)
def test_fuzz_mutated_real_images_give_image_error_or_an_image(
    which: int, edits: list[tuple[int, int]], cut: int
) -> None:
    raw = bytearray(VALID[which])
    for pos, val in edits:
        raw[pos % len(raw)] = val
    _decode_or_image_error(bytes(raw[: max(1, cut % (len(raw) + 1))]), MIMES[which])


@settings(max_examples=examples(200), deadline=None)
@given(text=st.text(max_size=200))
def test_fuzz_any_url_string_gives_image_error_or_an_image(text: str) -> None:
    for url in (text, "data:" + text, "data:image/png;base64," + text):
        try:
            load_image_url(url)
        except ImageError:
            pass


# ----------------------------------------------------------------------------------- remote (opt-in)


def test_host_allowlist_exact_and_wildcard() -> None:
    allowed = frozenset({"images.example.com", "*.cdn.example.org"})
    assert host_allowed("images.example.com", allowed) and host_allowed("IMAGES.example.com.", allowed)
    assert host_allowed("a.b.cdn.example.org", allowed)
    assert not host_allowed("cdn.example.org", allowed)
    assert not host_allowed("evilcdn.example.org", allowed)
    assert not host_allowed("images.example.com.evil.net", allowed)


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "100.64.0.1",
        "224.0.0.1",
        "fd00::1",
    ],
)
def test_non_public_addresses_are_blocked(ip: str) -> None:
    assert address_blocked(ip) is not None


@pytest.mark.parametrize("ip", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"])
def test_public_addresses_are_not_blocked(ip: str) -> None:
    assert address_blocked(ip) is None


def test_host_not_in_allowlist_is_refused_before_resolving() -> None:
    resolved: list[str] = []
    policy = RemoteImagePolicy(allowed_hosts=frozenset({"images.example.com"}))
    url = "https://other.example.com/a.png"
    assert code_of(check_remote_url, url, policy, lambda h, p: resolved.append(h) or ["8.8.8.8"]) == (
        "image_url_not_allowed"
    )
    assert resolved == []


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_allowlisted_host_resolving_to_loopback_is_refused(host: str) -> None:
    policy = RemoteImagePolicy(allowed_hosts=frozenset({host}), allowed_schemes=frozenset({"http", "https"}))
    assert code_of(load_image_url, f"http://{host}:1/a.png", remote=policy) == "image_url_not_allowed"


def test_one_private_address_among_public_ones_is_refused() -> None:
    policy = RemoteImagePolicy(allowed_hosts=frozenset({"img.example.com"}))
    resolver = lambda host, port: ["8.8.8.8", "10.0.0.5"]  # noqa: E731
    url = "https://img.example.com/a.png"
    assert code_of(check_remote_url, url, policy, resolver) == "image_url_not_allowed"


def test_public_resolution_pins_the_first_address() -> None:
    policy = RemoteImagePolicy(allowed_hosts=frozenset({"img.example.com"}))
    _, ip = check_remote_url("https://img.example.com/a.png", policy, lambda h, p: ["8.8.4.4", "8.8.8.8"])
    assert ip == "8.8.4.4"


@pytest.mark.parametrize(
    "url",
    [
        "http://img.example.com/a.png",
        "https://user:pw@img.example.com/a.png",
        "https://img.example.com:99999/",
    ],
)
def test_scheme_credentials_and_bad_ports_are_refused(url: str) -> None:
    policy = RemoteImagePolicy(allowed_hosts=frozenset({"img.example.com"}))
    assert code_of(check_remote_url, url, policy, lambda h, p: ["8.8.8.8"]) == "image_url_not_allowed"


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes, float]] = {}

    def do_GET(self) -> None:  # noqa: N802
        status, headers, body, delay = self.routes[self.path]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        for i in range(0, len(body), 256):
            if delay:
                time.sleep(delay)
            try:
                self.wfile.write(body[i : i + 256])
            except OSError:
                return

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def local_server() -> Iterator[int]:
    png = encode("PNG")
    _Handler.routes = {
        "/ok.png": (200, {"Content-Type": "image/png", "Content-Length": str(len(png))}, png, 0.0),
        "/redirect": (302, {"Location": "http://169.254.169.254/"}, b"", 0.0),
        "/missing": (404, {}, b"", 0.0),
        "/html": (200, {"Content-Type": "text/html"}, b"<html>", 0.0),
        "/big-declared": (200, {"Content-Type": "image/png", "Content-Length": "999999999"}, b"", 0.0),
        "/big-streamed": (200, {"Content-Type": "image/png"}, b"\0" * 50_000, 0.0),
        "/slow": (200, {"Content-Type": "image/png"}, png, 0.2),
    }
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _loopback_policy(**kw) -> RemoteImagePolicy:
    """Tests reach a server on 127.0.0.1 only through the explicit private-network opt-in."""
    return RemoteImagePolicy(
        allowed_hosts=frozenset({"127.0.0.1"}),
        allowed_schemes=frozenset({"http"}),
        allow_private_networks=True,
        **kw,
    )


def test_opt_in_fetch_downloads_and_decodes(local_server: int) -> None:
    out = load_image_url(f"http://127.0.0.1:{local_server}/ok.png", remote=_loopback_policy())
    assert np.array_equal(np.asarray(out.image), PIXELS)


def test_fetch_does_not_follow_redirects(local_server: int) -> None:
    url = f"http://127.0.0.1:{local_server}/redirect"
    assert code_of(load_image_url, url, remote=_loopback_policy()) == "image_url_not_allowed"


@pytest.mark.parametrize(
    "path,code",
    [
        ("/missing", "image_fetch_failed"),
        ("/html", "unsupported_image_format"),
        ("/big-declared", "image_too_large"),
        ("/big-streamed", "image_too_large"),
    ],
)
def test_fetch_failures_have_codes(local_server: int, path: str, code: str) -> None:
    limits = ImageLimits(max_bytes=20_000)
    url = f"http://127.0.0.1:{local_server}{path}"
    assert code_of(load_image_url, url, limits, _loopback_policy()) == code


def test_fetch_has_a_wall_clock_cap(local_server: int) -> None:
    t0 = time.perf_counter()
    url = f"http://127.0.0.1:{local_server}/slow"  # ≈ 37 chunks × 0.2 s
    assert code_of(load_image_url, url, remote=_loopback_policy(timeout_s=0.5)) == "image_fetch_failed"
    assert time.perf_counter() - t0 < 2.5


def test_fetch_connection_refused_is_a_fetch_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connect is refused
        assert code_of(load_image_url, f"http://127.0.0.1:{port}/a.png", remote=_loopback_policy()) == (
            "image_fetch_failed"
        )
