"""Processor plugins: a tiny distribution declaring a ``stream_omni.processors`` entry point (a text/plain
reader) is installed into the test environment (a dist-info on sys.path) and used through Chat Completions
and the Realtime API, inline and uploaded, beside the built-in image and WAV processors of the same registry."""

from __future__ import annotations

import base64
import textwrap
from pathlib import Path

import httpx
import pytest
from openai import BadRequestError, OpenAI

from processors.registry import ENTRY_POINT_GROUP, ProcessorRegistry
from testkit.fake_backend import FakeBackend
from tests.wsclient import RealtimeClient

NO_AUDIO = {"audio.enabled": False}
NOTE = "the meeting moved to friday"

PLUGIN = """
from processors.registry import ProcessorError


class TextProcessor:
    name = "text"
    mimes = ("text/plain",)

    def check(self, data: bytes, mime: str) -> None:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise ProcessorError("invalid_text", "text/plain files must be UTF-8") from None

    def to_text(self, data: bytes, mime: str) -> str:
        return "Document says: " + data.decode("utf-8")
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``so_textplug`` 0.1 installed: its module and its dist-info (with the entry point) on sys.path."""
    site = tmp_path / "site"
    (site / "so_textplug").mkdir(parents=True)
    (site / "so_textplug" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "so_textplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: so-textplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntext = so_textplug:TextProcessor\n")
    monkeypatch.syspath_prepend(str(site))
    return "text"


def expected_prompt_len(text: str) -> int:
    return len(FakeBackend().chat_tokens([{"role": "user", "content": text}]))


def test_the_registry_finds_the_plugin_beside_the_builtins(plugin):
    reg = ProcessorRegistry()
    assert reg.load_entry_points() == ["text"]
    assert reg.find("text/plain; charset=utf-8").to_text(b"hi", "text/plain") == "Document says: hi"
    assert reg.find("image/png") is None  # built-ins are registered by the server, not by entry points


def test_a_broken_plugin_is_skipped_not_fatal(tmp_path, monkeypatch):
    info = tmp_path / "bad-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbad = no_such_module_zz:Nope\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "bad" not in ProcessorRegistry().load_entry_points()


def test_plugin_reads_files_in_chat_inline_and_uploaded(plugin, server_factory, tmp_path):
    data_url = "data:text/plain;base64," + base64.b64encode(NOTE.encode()).decode()
    with server_factory(FakeBackend(), **NO_AUDIO, **{"files.folder": str(tmp_path / "files")}) as addr:
        names = addr.call(lambda: addr.services.processors.names)
        image_proc = addr.call(lambda: addr.services.processors.find("image/png").name)
        with OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client:
            f = client.files.create(file=("note.txt", NOTE.encode(), "text/plain"), purpose="user_data")
            with pytest.raises(BadRequestError) as bad:
                client.files.create(file=("bad.txt", b"\xff\xfe\xfa", "text/plain"), purpose="user_data")

            def ask(file: dict) -> httpx.Response:
                body = {
                    "model": "fake",
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": [{"type": "file", "file": file}]}],
                }
                return httpx.post(f"http://{addr}/v1/chat/completions", json=body, timeout=60)

            inline = ask({"file_data": data_url, "filename": "note.txt"})
            by_id = ask({"file_id": f.id})
            unknown_type = ask({"file_data": "data:application/x-nothing;base64,AAAA"})
    assert names == ["audio", "image", "text"] and image_proc == "image"  # one registry for all
    assert bad.value.body["code"] == "invalid_text"  # the plugin checked the upload
    want = expected_prompt_len(f"Document says: {NOTE}")
    assert inline.status_code == by_id.status_code == 200, inline.text
    assert inline.json()["usage"]["prompt_tokens"] == by_id.json()["usage"]["prompt_tokens"] == want
    assert want != expected_prompt_len(NOTE)  # the plugin's text, not the raw note, reached the model
    assert unknown_type.status_code == 400 and unknown_type.json()["error"]["code"] == "unsupported_content"


async def test_plugin_reads_input_file_parts_on_realtime(plugin, server_factory, tmp_path):
    data_url = "data:text/plain;base64," + base64.b64encode(NOTE.encode()).decode()
    with (
        server_factory(FakeBackend(), **NO_AUDIO, **{"files.folder": str(tmp_path / "files")}) as addr,
        OpenAI(base_url=f"http://{addr}/v1", api_key="x", max_retries=0) as client,
    ):
        f = client.files.create(file=("note.txt", NOTE.encode(), "text/plain"), purpose="user_data")
        rt = await RealtimeClient.connect(addr, "model=fake")
        await rt.until("session.created")
        for part in ({"type": "input_file", "file_id": f.id}, {"type": "input_file", "file_data": data_url}):
            item = {"type": "message", "role": "user", "content": [part]}
            await rt.send({"type": "conversation.item.create", "item": item})
        added = [await rt.until("conversation.item.added", timeout=30) for _ in range(2)]
        done = await rt.ask("and?", max_output_tokens=3)
        await rt.close()
    texts = [a["item"]["content"][0]["text"] for a in added]
    assert texts == [f"Document says: {NOTE}"] * 2
    assert done["response"]["status"] in ("completed", "incomplete")
