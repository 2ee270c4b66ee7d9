"""A real SIP phone calls the gateway over loopback: Debian's baresip dials ``sip:…@127.0.0.1`` with a WAV
(espeak-ng speech) as its microphone (``aufile``), records what it hears (``sndfile``), and hangs up (a BYE
typed on its console) once the sideband socket (``?call_id=``), which watches the call's session, reports
the reply played out. Whisper transcribes the recording."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from processors.asr import load_asr, word_error_rate
from processors.audio import resample
from testkit.espeak import silence, speak
from testkit.fake_backend import FakeBackend
from testkit.live_server import free_port
from tests.conftest import requires_espeak
from tests.wsclient import RealtimeClient

QUESTION = "What is the weather going to be like tomorrow morning?"
VOICE = {
    "output_modalities": ["audio"],
    "audio": {"input": {"turn_detection": {"type": "server_vad", "transcription_interval_ms": 0}}},
}
requires_baresip = pytest.mark.skipif(shutil.which("baresip") is None, reason="needs baresip (apt-get install baresip)")


def phone(root: Path, wav: Path, port: int, account: str = "", ca: str | None = None) -> Path:
    """A baresip config dir: loopback only, G.711, the WAV as microphone, recordings under root/rec;
    ``account``: more of the account line (auth_user, auth_pass); ``ca``: a certificate the phone trusts (TLS)."""
    conf = root / "baresip"
    (conf / "rec").mkdir(parents=True)
    lines = [
        "poll_method epoll",
        f"sip_listen 127.0.0.1:{port}",
        "net_interface 127.0.0.1",
        f"audio_source aufile,{wav}",
        "audio_player aubridge,nil",  # no sound card: sndfile records what is played
        "audio_alert aubridge,nil",
        "audio_srate 8000",
        "ausrc_channels 1",
        "auplay_channels 1",
        f"snd_path {conf / 'rec'}",
        "module_path /usr/lib/baresip/modules",
        "module stdio.so",
        "module g711.so",
        "module aufile.so",
        "module aubridge.so",
        "module sndfile.so",
        "module_app account.so",
        "module_app menu.so",
        *([f"sip_cafile {ca}"] if ca else []),
    ]
    (conf / "config").write_text("\n".join(lines) + "\n")
    (conf / "accounts").write_text(f"<sip:caller@127.0.0.1:{port}>;regint=0;audio_codecs=PCMU,PCMA{account}\n")
    return conf


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


TCP_DIGEST = {  # over TCP, from outside the allow-list: the phone answers the digest challenge (MD5: libre 1.1)
    "telephony.sip_allow": [],
    "telephony.sip_users": {"trunk": "s3cret-pass"},
    "telephony.sip_digest_algorithms": ["MD5"],
}


@requires_baresip
@requires_espeak
@pytest.mark.parametrize(
    ("transport", "more", "account"),
    [("udp", {}, ""), ("tcp", TCP_DIGEST, ";auth_user=trunk;auth_pass=s3cret-pass"), ("tls", {}, "")],
    ids=["udp", "tcp-digest", "tls"],
)
async def test_baresip_calls_asks_and_hears_the_spoken_reply(
    server_factory, tmp_path, self_signed, transport, more, account
):
    sip_port = dial_port = free_port()
    overrides = {
        "speculative.drafter": "none",
        "telephony.enabled": True,
        "telephony.sip_port": sip_port,
        "telephony.default_session": VOICE,
        **more,
    }
    if transport == "tls":  # on its own port, with a certificate made for the test; the phone trusts it
        dial_port = free_port()
        tls = {"sip_tls_port": dial_port, "sip_tls_cert": self_signed[0], "sip_tls_key": self_signed[1]}
        overrides |= {f"telephony.{k}": v for k, v in tls.items()}
    wav = tmp_path / "mic.wav"
    audio = np.concatenate(
        [silence(0.5), speak(QUESTION), silence(40.0)]
    )  # the call outlives any reply: the test hangs up
    sf.write(wav, resample(audio, 16_000, 8_000), 8000, subtype="PCM_16")
    conf = phone(tmp_path, wav, free_port(), account, self_signed[0] if transport == "tls" else None)
    with server_factory(FakeBackend(answer_tokens=10, step_s=0.005), **overrides) as addr:
        calls = addr.app.state.telephony.calls
        proc = await asyncio.create_subprocess_exec(
            "baresip",
            "-f",
            str(conf),
            "-e",
            f"/dial sip:assistant@127.0.0.1:{dial_port};transport={transport}",
            "-t",
            "60",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        side: RealtimeClient | None = None
        dialog = None
        listening: asyncio.Task[None] | None = None

        async def listen(c: RealtimeClient) -> None:
            with contextlib.suppress(Exception):  # until the socket closes
                while True:
                    await c.recv(60)

        def played_out() -> bool:
            types = [e["type"] for e in side.events] if side is not None else []
            return "response.done" in types and "output_audio_buffer.stopped" in types

        hung_up = timed_out = False
        try:
            async with asyncio.timeout(55):
                while proc.returncode is None:  # attach the sideband as soon as the call exists
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), 0.05)
                    if side is None and calls and next(iter(calls.values())).call.live is not None:
                        side = await RealtimeClient.connect(addr, query=f"call_id={next(iter(calls))}")
                        dialog = next(iter(addr.app.state.telephony.sip.dialogs.values()))
                        listening = asyncio.create_task(listen(side))
                    if not hung_up and played_out() and proc.stdin is not None:
                        proc.stdin.write(b"/hangup\n")
                        hung_up = True
                    if hung_up and not calls and proc.stdin is not None and not proc.stdin.is_closing():
                        proc.stdin.write(b"/quit\n")  # the BYE freed the call; the recording is closed
                        proc.stdin.close()
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:
                proc.kill()
            log = (await proc.stdout.read()).decode(errors="replace") if proc.stdout else ""
        assert not timed_out and side is not None and listening is not None and dialog is not None, log[-3000:]
        assert dialog.source.transport == transport.upper()  # the call's signalling came the way it was dialled
        assert (dialog.invite.headers.get("Authorization") is not None) == bool(more), log[-3000:]
        types = [e["type"] for e in side.events]
        assert "response.done" in types, (types, log[-3000:])
        heard_q = next(e for e in side.events if e["type"] == "conversation.item.input_audio_transcription.completed")
        assert word_error_rate(QUESTION, heard_q["transcript"]) <= 0.35, heard_q["transcript"]
        reply = "".join(e["delta"] for e in side.events if e["type"] == "response.output_audio_transcript.delta")
        assert reply, log[-3000:]
        recorded = sorted((conf / "rec").glob("*-dec.wav"))
        assert recorded, log[-3000:]
        pcm, rate = sf.read(recorded[-1], dtype="float32")
        voiced = np.flatnonzero(np.abs(pcm) > 0.01)
        assert len(voiced), "the phone heard nothing"
        clip = np.concatenate([np.zeros(2000, np.float32), pcm[voiced[0] : voiced[-1] + 1]])
        heard = await asyncio.to_thread(load_asr().transcribe, resample(clip, rate, 16_000))
        similarity = difflib.SequenceMatcher(None, " ".join(words(reply)), " ".join(words(heard))).ratio()
        assert similarity >= 0.5, (reply, heard, similarity)
        assert not calls  # the phone's BYE freed the call
        await side.ws.close()
        await listening
