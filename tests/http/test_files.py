"""/v1/files through the openai SDK's client.files: upload, list, retrieve, content, delete; limits as inline data;
per-key isolation and quota; file ids in Chat Completions and Realtime parts behave as the inline forms."""

from __future__ import annotations

import base64
import io
import re

import httpx
import numpy as np
import pytest
from openai import BadRequestError, NotFoundError, OpenAI
from PIL import Image

from gateway.core.file_store import FileStore, QuotaExceeded
from processors.audio import AudioError, AudioLimits, decode_wav
from processors.image import ImageError, ImageLimits, decode_image
from testkit.espeak import speak, wav_bytes
from testkit.fake_backend import FakeBackend
from tests.conftest import requires_espeak
from tests.wsclient import RealtimeClient

NO_AUDIO = {"audio.enabled": False}


def png(size: tuple[int, int] = (8, 6), color: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def tone(seconds: float, rate: int = 16_000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return wav_bytes((0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)


def client(addr: str, key: str = "x") -> OpenAI:
    return OpenAI(base_url=f"http://{addr}/v1", api_key=key, max_retries=0)


def chat(addr: str, content: list, key: str = "x", **kw) -> httpx.Response:
    body = {"model": "fake", "messages": [{"role": "user", "content": content}], "max_tokens": 8, **kw}
    return httpx.post(
        f"http://{addr}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )


def test_upload_list_retrieve_content_delete(server_factory, tmp_path):
    data = png()
    with server_factory(FakeBackend(), **NO_AUDIO, **{"files.folder": str(tmp_path)}) as addr:
        c = client(addr)
        f = c.files.create(file=("dot.png", data, "image/png"), purpose="vision")
        notes = c.files.create(file=("notes.txt", b"hello notes", "text/plain"), purpose="user_data")
        listed = [x.id for x in c.files.list()]
        only_vision = [x.id for x in c.files.list(purpose="vision")]
        got = c.files.retrieve(f.id)
        body = c.files.content(f.id).read()
        deleted = c.files.delete(f.id)
        with pytest.raises(NotFoundError, match="deleted, expired or never existed"):
            c.files.retrieve(f.id)
        with pytest.raises(NotFoundError):
            c.files.content(f.id)
        after = [x.id for x in c.files.list()]
    assert f.id.startswith("file-") and f.object == "file" and f.purpose == "vision"
    assert f.bytes == len(data) and f.filename == "dot.png" and f.expires_at - f.created_at == 24 * 3600
    assert listed == [f.id, notes.id] and only_vision == [f.id]
    assert got.id == f.id and got.bytes == len(data)
    assert body == data
    assert deleted.deleted and deleted.id == f.id
    assert after == [notes.id]
    assert list(tmp_path.glob("*/file-*.bin")) == [next(tmp_path.glob(f"*/{notes.id}.bin"))]  # under the folder


def test_uploads_are_checked_as_inline_data_is(server_factory, tmp_path):
    cfg = {
        **NO_AUDIO,
        "files.folder": str(tmp_path),
        "vision.max_image_pixels": 100,
        "audio.max_buffer_s": 0.5,
        "files.max_file_bytes": 50_000,
    }
    big, long_wav = png((20, 20)), tone(1.0)
    with pytest.raises(ImageError) as inline_img:
        decode_image(big, "image/png", ImageLimits(max_pixels=100))
    with pytest.raises(AudioError) as inline_wav:
        decode_wav(long_wav, AudioLimits(max_buffer_s=0.5))
    with server_factory(FakeBackend(), **cfg) as addr:
        c = client(addr)
        with pytest.raises(BadRequestError) as img:
            c.files.create(file=("big.png", big, "image/png"), purpose="vision")
        with pytest.raises(BadRequestError) as wav:
            c.files.create(file=("long.wav", long_wav, "audio/wav"), purpose="user_data")
        with pytest.raises(BadRequestError) as not_image:
            c.files.create(file=("a.txt", b"text", "text/plain"), purpose="vision")
        with pytest.raises(BadRequestError) as corrupt:
            c.files.create(file=("bad.png", png()[:30], "image/png"), purpose="vision")
        too_big = httpx.post(
            f"http://{addr}/v1/files",
            files={"file": ("x.bin", b"\0" * 60_000)},
            data={"purpose": "user_data"},
            timeout=30,
        )
        bad_purpose = httpx.post(
            f"http://{addr}/v1/files", files={"file": ("x.txt", b"x")}, data={"purpose": "fine-tune"}, timeout=30
        )
        left = list(c.files.list())
    assert img.value.status_code == 400 and img.value.body["code"] == "image_too_large"
    assert img.value.body["message"] == inline_img.value.message and "limit 100" in inline_img.value.message
    assert wav.value.body["code"] == "buffer_too_long" and wav.value.body["message"] == inline_wav.value.message
    assert "0.5 s" in wav.value.body["message"]
    assert not_image.value.body["code"] == "unsupported_image_format"
    assert corrupt.value.body["code"] == "invalid_image"
    assert too_big.status_code == 413 and "files.max_file_bytes" in too_big.json()["error"]["message"]
    assert bad_purpose.status_code == 400 and bad_purpose.json()["error"]["param"] == "purpose"
    assert left == []  # nothing refused was kept


def test_files_belong_to_their_key_and_a_quota_bounds_them(server_factory, tmp_path):
    cfg = {**NO_AUDIO, "server.api_keys": ["k1", "k2"], "files.folder": str(tmp_path)}
    cfg["files.quota_bytes_per_key"] = 30_000
    cfg["files.max_file_bytes"] = 25_000  # one file must fit the quota (the config refuses otherwise)
    with server_factory(FakeBackend(), **cfg) as addr:
        mine, theirs = client(addr, "k1"), client(addr, "k2")
        f = mine.files.create(file=("a.bin", b"a" * 20_000, "application/octet-stream"), purpose="user_data")
        with pytest.raises(NotFoundError):
            theirs.files.retrieve(f.id)
        with pytest.raises(NotFoundError):
            theirs.files.content(f.id)
        with pytest.raises(NotFoundError):
            theirs.files.delete(f.id)
        their_list = list(theirs.files.list())
        used = chat(addr, [{"type": "file", "file": {"file_id": f.id}}], key="k2")
        with pytest.raises(Exception) as over:
            mine.files.create(file=("b.bin", b"b" * 20_000, "application/octet-stream"), purpose="user_data")
        theirs.files.create(file=("b.bin", b"b" * 20_000, "application/octet-stream"), purpose="user_data")
        still = mine.files.retrieve(f.id)
    assert their_list == [] and still.id == f.id
    assert used.status_code == 404 and used.json()["error"]["code"] == "file_not_found"
    assert over.value.status_code == 413 and over.value.body["code"] == "file_quota_exceeded"
    assert "30000 bytes" in over.value.body["message"]


def test_store_expiry_and_sweep_on_a_fake_clock(tmp_path):
    now = [1000.0]
    store = FileStore(tmp_path, quota_bytes=100, expiry_s=60, clock=lambda: now[0])
    a = store.put("o", b"x" * 60, "a", "user_data", "data", "text/plain")
    with pytest.raises(QuotaExceeded):
        store.put("o", b"y" * 41, "b", "user_data", "data", "text/plain")
    assert store.get("other", a.id) is None and store.get("o", "../o/" + a.id) is None
    now[0] += 61
    assert store.get("o", a.id) is None and store.list("o") == []  # expired: gone for readers at once
    b = store.put("o", b"y" * 90, "b", "user_data", "data", "text/plain")  # the sweep freed the quota
    assert not (tmp_path / "o" / f"{a.id}.bin").exists() and store.list("o") == [b]


def test_image_file_in_chat_is_described_as_the_inline_image(server_factory, tmp_path):
    data = png(color="blue")
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    seen: list[str] = []

    def describer(u: str) -> str:
        seen.append(u)
        return f"a picture of {len(u)} characters"

    with server_factory(FakeBackend(), **NO_AUDIO, **{"files.folder": str(tmp_path)}) as addr:
        # one describer for the inline path and the registry's built-in image processor (files)
        addr.call(lambda: setattr(addr.services, "image_describer", describer))
        addr.call(lambda: setattr(addr.services.processors.find("image/png"), "describe", describer))
        f = client(addr).files.create(file=("b.png", data, "image/png"), purpose="vision")
        inline = chat(addr, [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": url}}])
        by_id = chat(addr, [{"type": "text", "text": "what?"}, {"type": "file", "file": {"file_id": f.id}}])
        unknown = chat(addr, [{"type": "file", "file": {"file_id": "file-0000"}}])
    assert seen == [url, url]  # the describer got the very same image
    assert inline.status_code == by_id.status_code == 200
    assert inline.json()["choices"][0]["message"] == by_id.json()["choices"][0]["message"]
    assert inline.json()["usage"] == by_id.json()["usage"]
    err = unknown.json()["error"]
    assert unknown.status_code == 404 and err["code"] == "file_not_found" and "file-0000" in err["message"]
    assert err["param"] == "messages[0].content[0].file"


@requires_espeak
async def test_wav_file_is_transcribed_as_inline_audio_on_both_apis(server_factory, tmp_path):
    wav = wav_bytes(speak("What is the capital of France?"), 16_000)
    pcm = (np.clip(speak("What is the capital of France?", rate=24_000), -1, 1) * 32767).astype("<i2").tobytes()
    with server_factory(FakeBackend(), **{"files.folder": str(tmp_path)}) as addr:
        f = client(addr).files.create(file=("q.wav", wav, "audio/wav"), purpose="user_data")
        inline = chat(
            addr, [{"type": "input_audio", "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"}}]
        )
        by_id = chat(addr, [{"type": "file", "file": {"file_id": f.id}}])
        rt = await RealtimeClient.connect(addr, "model=fake")
        await rt.until("session.created")
        for part in (
            {"type": "input_audio", "file_id": f.id},
            {"type": "input_audio", "audio": base64.b64encode(pcm).decode()},
        ):
            await rt.send(
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [part]}}
            )
        added = [await rt.until("conversation.item.added", timeout=60) for _ in range(2)]
        await rt.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "file_id": "file-ffff"}],
                },
            }
        )
        missing = await rt.until("error")
        await rt.close()
        async with httpx.AsyncClient(timeout=30) as h:
            metrics = (await h.get(f"http://{addr}/metrics")).text
    assert inline.status_code == by_id.status_code == 200, by_id.text
    # every clip went through the Whisper queue the voice sessions share: chat inline, chat file,
    # Realtime file and Realtime inline, one pass each
    passes = re.search(r"^stream_omni:voice_asr_batch_passes_sum (\S+)$", metrics, re.M)
    assert passes is not None and float(passes.group(1)) == 4.0
    assert inline.json()["choices"][0]["message"] == by_id.json()["choices"][0]["message"]
    assert inline.json()["usage"] == by_id.json()["usage"]
    texts = [a["item"]["content"][0]["text"] for a in added]
    assert "france" in texts[0].lower() and texts[0] == texts[1]
    assert missing["error"]["code"] == "file_not_found" and "file-ffff" in missing["error"]["message"]


async def test_realtime_sees_only_its_own_keys_files(server_factory, tmp_path):
    cfg = {**NO_AUDIO, "server.api_keys": ["k1", "k2"], "files.folder": str(tmp_path)}
    with server_factory(FakeBackend(), **cfg) as addr:
        f = client(addr, "k1").files.create(file=("n.txt", b"hello", "text/plain"), purpose="user_data")
        rt = await RealtimeClient.connect(addr, "model=fake", additional_headers={"Authorization": "Bearer k2"})
        await rt.until("session.created")
        item = {"type": "message", "role": "user", "content": [{"type": "input_audio", "file_id": f.id}]}
        await rt.send({"type": "conversation.item.create", "item": item})
        err = await rt.until("error", timeout=30)
        await rt.close()
        owner = await RealtimeClient.connect(addr, "model=fake", additional_headers={"Authorization": "Bearer k1"})
        await owner.until("session.created")
        await owner.send({"type": "conversation.item.create", "item": item})
        found = await owner.until("error", timeout=30)  # found, but it is not audio
        await owner.close()
    assert err["error"]["code"] == "file_not_found" and f.id in err["error"]["message"]
    assert found["error"]["code"] == "invalid_file" and "not audio" in found["error"]["message"]
