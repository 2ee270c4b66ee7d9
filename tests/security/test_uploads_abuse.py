"""Uploads cannot plant pages, local mode is closed to foreign pages for every content type, files are
bounded in number and paged, and malformed multipart or header values are 400s, never 500s."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from gateway.core.file_store import FileStore, TooManyFiles

from .conftest import raw_exchange

LOCAL = {"audio.enabled": False}


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(out, "PNG")
    return out.getvalue()


def upload(addr: str, name: str, data: bytes, ctype: str, purpose: str = "user_data", **kw) -> httpx.Response:
    return httpx.post(
        f"http://{addr}/v1/files", files={"file": (name, data, ctype)}, data={"purpose": purpose}, timeout=10, **kw
    )


def test_content_is_a_sandboxed_download_typed_only_when_proven(fake, server_factory, tmp_path):
    page = b"<html><script>alert(document.domain)</script></html>"
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    with server_factory(fake, **LOCAL, **{"files.folder": str(tmp_path)}) as addr:
        ids = {
            name: upload(addr, name, data, ctype, purpose).json()["id"]
            for name, data, ctype, purpose in [
                ("x.html", page, "text/html", "user_data"),
                ("x.svg", svg, "image/svg+xml", "user_data"),
                ('dot"; evil.png', png(), "image/png", "vision"),
            ]
        }
        got = {name: httpx.get(f"http://{addr}/v1/files/{fid}/content", timeout=10) for name, fid in ids.items()}
    for r in got.values():
        assert r.status_code == 200
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["content-security-policy"] == "sandbox"
        # one quoted ASCII name with nothing that could end it early, then the exact name percent-encoded
        assert re.fullmatch(
            r"""attachment; filename="[^";\\]*"; filename\*=UTF-8''[^\s;"]*""", r.headers["content-disposition"]
        )
    assert got["x.html"].headers["content-type"] == "application/octet-stream" and got["x.html"].content == page
    assert got["x.svg"].headers["content-type"] == "application/octet-stream"
    assert got['dot"; evil.png'].headers["content-type"] == "image/png"


def test_a_foreign_origin_cannot_change_state_in_local_mode(fake, server_factory, tmp_path):
    with server_factory(fake, **LOCAL, **{"files.folder": str(tmp_path)}) as addr:
        own = f"http://{addr}"
        evil = {"Origin": "http://evil.example"}
        refused = [
            upload(addr, "a.txt", b"hello", "text/plain", headers=evil),
            httpx.post(f"{own}/v1/files", content=b"x=1", headers={**evil, "Content-Type": "text/plain"}, timeout=5),
            httpx.post(
                f"{own}/v1/chat/completions",
                json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]},
                headers=evil,
                timeout=5,
            ),
            httpx.post(f"{own}/v1/files", content=b"", headers={"Origin": "null"}, timeout=5),
        ]
        fid = upload(addr, "a.txt", b"hello", "text/plain").json()["id"]  # no Origin: a non-browser client
        refused.append(httpx.delete(f"{own}/v1/files/{fid}", headers=evil, timeout=5))
        same = upload(addr, "b.txt", b"hello", "text/plain", headers={"Origin": own})
        listed = httpx.get(f"{own}/v1/files", headers=evil, timeout=5)  # reads change nothing (CORS hides them)
        still = httpx.get(f"{own}/v1/files/{fid}", timeout=5)
    for r in refused:
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", r.text
    assert same.status_code == 200 and listed.status_code == 200 and still.status_code == 200


def test_with_api_keys_origin_is_the_deployments_business(fake, server_factory, tmp_path):
    conf = {**LOCAL, "files.folder": str(tmp_path), "server.api_keys": ["k"]}
    with server_factory(fake, **conf) as addr:
        r = upload(
            addr, "a.txt", b"hi", "text/plain", headers={"Origin": "http://app.example", "Authorization": "Bearer k"}
        )
    assert r.status_code == 200


def test_files_are_bounded_per_key_and_listed_in_pages(fake, server_factory, tmp_path):
    with server_factory(fake, **LOCAL, **{"files.folder": str(tmp_path), "files.max_per_key": 3}) as addr:
        ids = [upload(addr, f"{i}.txt", b"note %d" % i, "text/plain").json()["id"] for i in range(3)]
        over = upload(addr, "3.txt", b"one more", "text/plain")
        base = f"http://{addr}/v1/files"
        first = httpx.get(base, params={"limit": 2}, timeout=5).json()
        rest = httpx.get(base, params={"limit": 2, "after": first["last_id"]}, timeout=5).json()
        desc = httpx.get(base, params={"order": "desc", "limit": 1}, timeout=5).json()
        bad = [httpx.get(base, params=p, timeout=5) for p in ({"limit": 0}, {"limit": "9" * 50}, {"order": "up"})]
        gone = httpx.get(base, params={"after": "file-nope"}, timeout=5)
        httpx.delete(f"{base}/{ids[0]}", timeout=5)
        room = upload(addr, "4.txt", b"fits again", "text/plain")
    assert over.status_code == 429 and over.json()["error"]["code"] == "too_many_files"
    assert "files.max_per_key" in over.json()["error"]["message"]
    assert [f["id"] for f in first["data"]] == ids[:2] and first["has_more"] is True
    assert first["object"] == "list" and first["first_id"] == ids[0]
    assert [f["id"] for f in rest["data"]] == ids[2:] and rest["has_more"] is False
    assert [f["id"] for f in desc["data"]] == ids[2:] and desc["has_more"] is True
    assert all(r.status_code == 400 for r in bad) and gone.status_code == 404
    assert room.status_code == 200


def test_one_keys_uploads_never_read_another_keys_files(tmp_path: Path, monkeypatch):
    store = FileStore(tmp_path, quota_bytes=10**9, expiry_s=3600, max_per_key=5000)
    for _ in range(300):
        store.put("alice", b"x", "f", "user_data", "data", "text/plain")
    reads: list[str] = []
    real = FileStore._read_meta
    monkeypatch.setattr(FileStore, "_read_meta", lambda self, owner, fid: reads.append(owner) or real(self, owner, fid))
    fresh = FileStore(tmp_path, quota_bytes=10**9, expiry_s=3600, max_per_key=5000)  # a restarted server
    t0 = time.perf_counter()
    for _ in range(50):
        fresh.put("bob", b"y", "f", "user_data", "data", "text/plain")
    assert "alice" not in reads  # bob's uploads never looked at alice's 300 files
    assert time.perf_counter() - t0 < 5
    assert len(fresh.list("alice")) == 300 and reads.count("alice") == 300  # read once, when alice is asked for
    fresh.list("alice")
    assert reads.count("alice") == 300
    with pytest.raises(TooManyFiles):
        FileStore(tmp_path, quota_bytes=10**9, expiry_s=3600, max_per_key=300).put(
            "alice", b"z", "f", "user_data", "data", "x"
        )


# ---------------------------------------------------------------------- malformed input: 400, never 500


def _multipart(addr: str, body: bytes, boundary: str = "B") -> httpx.Response:
    return httpx.post(
        f"http://{addr}/v1/files",
        content=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        timeout=10,
    )


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    return b"--B\r\nContent-Disposition: " + disp.encode() + b"\r\n\r\n" + value + b"\r\n"


def test_malformed_multipart_is_400(fake, server_factory, tmp_path):
    with server_factory(fake, **LOCAL, **{"files.folder": str(tmp_path)}) as addr:
        answers = {
            "garbage": _multipart(addr, b"\x00\xff garbage \r\n--X--"),
            "no boundary": httpx.post(
                f"http://{addr}/v1/files", content=b"--B--", headers={"Content-Type": "multipart/form-data"}, timeout=5
            ),
            "nine fields": _multipart(addr, b"".join(_part(f"f{i}", b"v") for i in range(9)) + b"--B--\r\n"),
            "two files": _multipart(
                addr,
                _part("file", b"a", "a.txt")
                + _part("file", b"b", "b.txt")
                + _part("purpose", b"user_data")
                + b"--B--\r\n",
            ),
            "unterminated": _multipart(addr, b'--B\r\nContent-Disposition: form-data; name="file"\r\n'),
        }
        long_name = _multipart(
            addr, _part("file", b"data", "n" * 10_000) + _part("purpose", b"user_data") + b"--B--\r\n"
        )
    for what, r in answers.items():
        assert r.status_code == 400, (what, r.status_code, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert long_name.status_code in (200, 400), long_name.text
    if long_name.status_code == 200:
        assert len(long_name.json()["filename"]) == 255


def test_huge_numeric_headers_are_400(fake, server_factory):
    with server_factory(fake, **LOCAL) as addr:
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 2}
        r = httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=10)
        cid = r.text.split("id: ", 1)[1].split(":", 1)[0]
        resumed = httpx.get(
            f"http://{addr}/v1/chat/completions/{cid}/stream",
            headers={"Last-Event-ID": f"{cid}:" + "9" * 4300},
            timeout=10,
        )
        length = raw_exchange(
            addr,
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {'9' * 5000}\r\n\r\n{{}}"
            ).encode(),
        )
    assert resumed.status_code == 400 and resumed.json()["error"]["param"] == "Last-Event-ID"
    assert length.startswith(b"HTTP/1.1 4"), length[:100]
