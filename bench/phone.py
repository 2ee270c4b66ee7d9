"""`stream-omni bench phone`: telephony media streams, measured as a caller hears them.

1. Narrowband: word error rate of Whisper (the configured model) on an espeak-ng set, wideband
   (16 kHz) against what a phone line carries (µ-law 8 kHz, resampled back to 16 kHz), side by side.
2. Latency: one server process (the embedded model, as users run it); a scripted SIP caller (RTP)
   and a scripted Twilio-protocol caller (``testkit.phonecall``) each stream the utterances in real
   time: the caller stops speaking → the first reply packet / frame arrives, p50 / p90.
3. Concurrency: ``--calls`` callers ask at once; each reply's frames per second and longest gap
   between two frames while it plays (50/s and 20 ms is real time).

Each row carries the 1-minute load average: on a shared box, read it first. Writes
bench/results/phone.{json,md}. Needs espeak-ng. SIP latency uses the scripted caller (``testkit.sipclient``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import free_port, machine, markdown_table, server_process, write  # noqa: E402

SET = [
    "Please open the kitchen window.",
    "What is the capital of France?",
    "Please turn on the lights in the kitchen.",
    "I would like to book a table for two at seven tonight.",
    "My account number is four five six seven.",
    "Can you tell me when the next train to Boston leaves?",
    "I need to cancel my appointment on Thursday.",
    "The package was supposed to arrive yesterday afternoon.",
    "Please transfer me to the billing department.",
    "What time does the pharmacy close on Sunday?",
]
VOICE = {
    "output_modalities": ["audio"],
    "audio": {"input": {"turn_detection": {"type": "server_vad", "transcription_interval_ms": 0}}},
}


def narrowband() -> dict[str, Any]:
    import numpy as np

    from processors.asr import load_asr, word_error_rate
    from processors.audio import resample
    from processors.g711 import ulaw_decode
    from testkit.phonecall import to_ulaw
    from testkit.speech import speak

    asr = load_asr()
    rows = []
    for text in SET:
        wide = speak(text)
        phone = resample(ulaw_decode(to_ulaw(wide)).astype(np.float32) / 32768.0, 8000, 16_000)
        w16, w8 = word_error_rate(text, asr.transcribe(wide)), word_error_rate(text, asr.transcribe(phone))
        rows.append({"text": text, "wer_16k": round(w16, 3), "wer_8k_ulaw": round(w8, 3)})
    words = [len(r["text"].split()) for r in rows]
    mean = {k: sum(r[k] * n for r, n in zip(rows, words, strict=True)) / sum(words) for k in ("wer_16k", "wer_8k_ulaw")}
    return {"utterances": rows, "wer_16k": round(mean["wer_16k"], 3), "wer_8k_ulaw": round(mean["wer_8k_ulaw"], 3)}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


async def one_turn(addr: str, text: str, wait_s: float = 180) -> tuple[float | None, list[float]]:
    """(ms from the end of speech to the first reply frame, None if no reply came; its frames' arrival times)."""
    import numpy as np

    from testkit.phonecall import PhoneCall, to_ulaw
    from testkit.speech import silence, speak

    call = await PhoneCall.dial(addr)
    times = call.frame_times
    speech = to_ulaw(np.concatenate([silence(0.3), speak(text)]))
    await call.say(speech)
    ended = time.monotonic()
    await call.say(to_ulaw(silence(1.0)))  # the line stays open, as a phone's does
    try:
        await call.wait(lambda: call.first_audio_at is not None, wait_s)  # the first turn loads Whisper, the voice
        await call.wait(lambda: not call.buffer and times and time.monotonic() - times[-1] > 1.0, 120)
    except TimeoutError:
        return None, times  # refused (server_busy past the voice capacity) or too slow
    finally:
        await call.hang_up()
    return ((call.first_audio_at or ended) - ended) * 1000, times


async def sip_turn(port: int, text: str) -> float | None:
    """A SIP call (scripted caller, RTP PCMU): ms from the end of speech to the first reply packet."""
    import re

    import numpy as np

    from testkit.phonecall import to_ulaw
    from testkit.sipclient import SipCaller
    from testkit.speech import silence, speak

    c = await SipCaller.open(port)
    try:
        c.send("INVITE", c.offer())
        ok = await c.final(30)
        c.send("ACK", cseq=1)
        m = re.search(r"m=audio (\d+) ", ok.body.decode())
        if ok.code != 200 or m is None:
            return None
        c.rtp_dest = ("127.0.0.1", int(m.group(1)))
        await c.say(to_ulaw(np.concatenate([silence(0.3), speak(text)])))
        ended = time.monotonic()
        say_rest = asyncio.create_task(c.say(to_ulaw(silence(3.0)), seq=20000, timestamp=10**6))
        try:
            await c.heard(60)
        except TimeoutError:
            return None
        finally:
            say_rest.cancel()
        return (time.monotonic() - ended) * 1000
    finally:
        c.send("BYE", cseq=2)
        c.close()


def gaps(times: list[float]) -> tuple[float, float]:
    """(frames per second while the reply played, the longest gap between two frames in ms)."""
    if len(times) < 2:
        return 0.0, 0.0
    span = times[-1] - times[0]
    longest = max(b - a for a, b in zip(times, times[1:], strict=False))
    return round((len(times) - 1) / span, 1), round(longest * 1000, 1)


async def run(addr: str, sip_port: int, turns: int, calls: int) -> dict[str, Any]:
    sip = []
    for i in range(turns):
        lat = await sip_turn(sip_port, SET[i % len(SET)])
        if lat is not None:
            sip.append(lat)
    print(f"SIP, end of speech -> first reply packet (ms): {[round(x) for x in sip]}", flush=True)
    latencies = []
    for i in range(turns):
        lat, _ = await one_turn(addr, SET[i % len(SET)])
        if lat is not None:
            latencies.append(lat)
    print(f"single call, end of speech -> first reply frame (ms): {[round(x) for x in latencies]}", flush=True)
    together = await asyncio.gather(*(one_turn(addr, SET[i % len(SET)], 60) for i in range(calls)))
    per_call = [gaps(t) for lat, t in together if lat is not None]
    return {
        "sip_latency_ms": [round(x, 1) for x in sip],
        "sip_latency_p50_ms": pct(sip, 0.5) if sip else None,
        "sip_latency_p90_ms": pct(sip, 0.9) if sip else None,
        "answered_together": len(per_call),
        "latency_together_ms": [round(lat) for lat, _ in together if lat is not None],
        "latency_ms": [round(x, 1) for x in latencies],
        "latency_p50_ms": pct(latencies, 0.5),
        "latency_p90_ms": pct(latencies, 0.9),
        "calls": calls,
        "frames_per_s": [f for f, _ in per_call],
        "longest_gap_ms": [g for _, g in per_call],
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="stream-omni bench phone")
    ap.add_argument("--turns", type=int, default=5, help="single-call turns timed for the latency")
    ap.add_argument("--calls", type=int, default=8, help="calls asking at once for the concurrency row")
    ap.add_argument("--skip-wer", action="store_true")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"machine": machine()}
    if not args.skip_wer:
        report["narrowband"] = narrowband()
    sip_port = free_port()
    overrides = {
        "telephony.enabled": True,
        "telephony.default_session": VOICE,
        "telephony.sip_port": sip_port,
        "speculative.drafter": "none",
    }
    with server_process(overrides) as addr:
        report["media_stream"] = asyncio.run(run(addr, sip_port, args.turns, args.calls))
    ms = report["media_stream"]
    md = ["# Phone calls (telephony media stream)", ""]
    if "narrowband" in report:
        nb = report["narrowband"]
        md += [
            f"Whisper WER on {len(SET)} espeak-ng utterances: 16 kHz {nb['wer_16k']}, µ-law 8 kHz {nb['wer_8k_ulaw']}",
            "",
        ]
        md += [markdown_table(nb["utterances"], ["text", "wer_16k", "wer_8k_ulaw"]), ""]
    md += [
        f"End of caller speech → first reply frame, media stream: p50 {ms['latency_p50_ms']} ms, "
        f"p90 {ms['latency_p90_ms']} ms ({len(ms['latency_ms'])} turns, load {ms['load_1m']}); "
        f"SIP (RTP): p50 {ms['sip_latency_p50_ms']} ms, p90 {ms['sip_latency_p90_ms']} ms",
        "",
        f"{ms['calls']} calls at once, {ms['answered_together']} answered (latency ms {ms['latency_together_ms']}): "
        f"frames/s {ms['frames_per_s']}, longest gap ms {ms['longest_gap_ms']}",
    ]
    write("phone", report, "\n".join(md) + "\n")
    print("\n".join(md))
    return report


if __name__ == "__main__":
    main()
