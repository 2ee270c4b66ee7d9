"""``server.tls``: the gateway serves https:// and wss:// itself; a bad certificate or key is a config error."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import httpx
import pytest
import websockets
from cryptography.hazmat.primitives import serialization

from gateway.core.config import ConfigError, load_config
from gateway.wiring.cli import main as cli_main
from testkit.tls import self_signed


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


def test_a_certificate_and_its_key_load(cert):
    certfile, keyfile = cert
    config = load_config(None, **{"server.tls": {"certfile": str(certfile), "keyfile": str(keyfile)}})
    assert config.server.tls is not None and config.server.tls.keyfile == str(keyfile)
    assert load_config(None).server.tls is None  # plain HTTP unless asked


@pytest.mark.parametrize("missing", ["certfile", "keyfile"])
def test_a_missing_file_is_a_config_error(cert, missing):
    files = {"certfile": str(cert[0]), "keyfile": str(cert[1]), missing: "/nonexistent/x.pem"}
    with pytest.raises(ConfigError, match=rf"server\.tls.*{missing}.*/nonexistent/x\.pem"):
        load_config(None, **{"server.tls": files})
    with pytest.raises(ConfigError, match="Field required"):
        load_config(None, **{"server.tls": {"certfile": str(cert[0])}})


def test_a_key_of_another_certificate_is_refused(cert, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = self_signed(other)
    with pytest.raises(ConfigError, match="cannot use certfile"):
        load_config(None, **{"server.tls": {"certfile": str(cert[0]), "keyfile": str(other_key)}})
    # a certificate given as the key, and a key given as the certificate
    with pytest.raises(ConfigError, match="cannot use certfile"):
        load_config(None, **{"server.tls": {"certfile": str(cert[1]), "keyfile": str(cert[0])}})


def test_an_encrypted_key_is_refused_without_prompting(cert, tmp_path):
    key = serialization.load_pem_private_key(cert[1].read_bytes(), password=None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(ConfigError, match="unencrypted"):
        load_config(None, **{"server.tls": {"certfile": str(cert[0]), "keyfile": str(locked)}})


def test_serve_exits_with_a_clear_message_before_loading_a_model(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("server:\n  tls: {certfile: /nonexistent/cert.pem, keyfile: /nonexistent/key.pem}\n")
    assert cli_main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "server.tls.certfile" in err and "/nonexistent/cert.pem" in err and "loading model" not in err


async def test_https_and_wss_are_served_with_the_certificate(cert, tiny_backend, server_factory):
    certfile, keyfile = cert
    tls = {"certfile": str(certfile), "keyfile": str(keyfile)}
    with server_factory(tiny_backend, **{"server.tls": tls}) as addr:
        port = addr.split(":")[1]
        trusted = ssl.create_default_context(cafile=str(certfile))
        async with httpx.AsyncClient(verify=trusted, timeout=30) as http:
            assert (await http.get(f"https://localhost:{port}/health")).status_code == 200
        async with httpx.AsyncClient(timeout=30) as untrusting:  # the system's CAs only
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.get(f"https://localhost:{port}/health")
        async with httpx.AsyncClient(timeout=30) as plain:  # no plain HTTP on a TLS port
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                await plain.get(f"http://localhost:{port}/health")

        url = f"wss://localhost:{port}/v1/realtime?model=tiny-llama"
        async with websockets.connect(url, ssl=trusted, open_timeout=30) as ws, asyncio.timeout(60):
            created = json.loads(await ws.recv())
            assert created["type"] == "session.created"
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 4}}))
            events = [created]
            while events[-1]["type"] != "response.done":
                events.append(json.loads(await ws.recv()))
        assert events[-1]["response"]["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
        assert [e["type"] for e in events].count("response.output_text.delta") >= 1  # the reply came over wss
