"""`stream-omni bench webrtc`: the WebRTC call path against the WebSocket path, in the same run.

One server process (the embedded model, as users run it). Per utterance (espeak-ng, streamed at
real-time pace then silence), alternating transports: the time from the end of speech (the moment
the frame holding its last sample went out) to the first ``response.output_text.delta``. The same
over WebRTC with ``--beside`` calls open, the others' mics sending a quiet room (their VAD runs),
with their outbound frames per second meanwhile. Then, audio input off, calls held open with audio
flowing: the server process's CPU per call (over an idle baseline), the frames of the server's
track each client received per second (50 is real time: fewer is an underrun), and the upstream
bytes per second of the (aiortc) client's Opus track. Last, in this process, the outbound track's
own cost per 20 ms frame: voice (encoded) and idle (cached silence). Each row carries the 1-minute
load average when it was measured: on a shared box, read it first. Writes
bench/results/webrtc.{json,md}. Needs espeak-ng.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, median, server_pid, server_process, write  # noqa: E402

UTTERANCES = [
    "Please open the kitchen window.",
    "What is the capital of France?",
    "Please turn on the lights in the kitchen.",
]


def speech_pcm(text: str, rate: int) -> tuple[Any, int]:
    """float32 audio at ``rate``: 0.5 s silence, the speech, 2 s silence; and the index where speech ends."""
    import numpy as np
    import soxr

    from testkit.espeak import speak

    speech = soxr.resample(speak(text), 16_000, rate).astype(np.float32)
    lead, tail = np.zeros(rate // 2, np.float32), np.zeros(rate * 2, np.float32)
    return np.concatenate([lead, speech, tail]), len(lead) + len(speech)


async def over_websocket(addr: str, text: str) -> float:
    import websockets

    from processors.audio import float32_to_pcm16

    audio, eos = speech_pcm(text, 24_000)
    pcm = float32_to_pcm16(audio)
    step = 24_000 * 2 * 20 // 1000  # 20 ms frames, as the WebRTC client sends
    marks: dict[str, float] = {}
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await ws.recv()

        async def reader() -> None:
            while True:
                ev = json.loads(await ws.recv())
                if ev["type"] == "response.output_text.delta" and "eos" in marks:
                    marks["first"] = time.perf_counter()
                    return

        task = asyncio.create_task(reader())
        t0 = time.perf_counter()
        for i in range(0, len(pcm), step):
            if task.done():
                break
            await ws.send(pcm[i : i + step])
            if "eos" not in marks and i + step >= eos * 2:
                marks["eos"] = time.perf_counter()
            await asyncio.sleep(max(0.0, t0 + (i + step) / (24_000 * 2) - time.perf_counter()))
        await asyncio.wait_for(task, 120)
    return (marks["first"] - marks["eos"]) * 1000


async def over_webrtc(addr: str, text: str) -> float:
    import numpy as np

    from testkit.rtcclient import FRAME, RtcClient

    audio, eos = speech_pcm(text, 48_000)
    c = await RtcClient.call(addr)
    try:
        await c.until("session.created", 20)
        c.mic.play((np.clip(audio, -1, 1) * 32767).astype(np.int16))
        eos_frame = eos // FRAME + c.mic.sent  # the frame holding the last speech sample
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while True:
            ev = await c.recv(max(0.01, deadline - loop.time()))
            if ev["type"] == "response.output_text.delta":
                break
        first = time.perf_counter()
        # the client's track paces frames from its first one: when the eos frame went out, in perf_counter time
        assert c.mic._start is not None
        eos_at = c.mic._start + (eos_frame + 1) * FRAME / 48_000 - time.monotonic() + time.perf_counter()
        return (first - eos_at) * 1000
    finally:
        await c.close()


async def beside_calls(addr: str, others: int, rounds: int) -> dict[str, Any]:
    """The WebRTC latency again with ``others`` calls open, each mic sending a quiet room (white noise
    at -60 dBFS, so their VAD runs as it would on a real microphone), and their frames of the server's
    track per second meanwhile."""
    import numpy as np

    from testkit.rtcclient import RATE, RtcClient

    rng = np.random.default_rng(0)
    calls = [await RtcClient.call(addr) for _ in range(others)]
    try:
        for c in calls:
            await c.until("session.created", 20)
            c.mic.play((rng.standard_normal(RATE * 30 * rounds) * 33).astype(np.int16))
        await asyncio.sleep(2.0)  # past DTLS and the first frames
        frames0, t0 = [c.audio_frames for c in calls], time.perf_counter()
        latency = [await over_webrtc(addr, text) for _ in range(rounds) for text in UTTERANCES]
        t1 = time.perf_counter()
        frames = [(c.audio_frames - f) / (t1 - t0) for c, f in zip(calls, frames0, strict=True)]
    finally:
        for c in calls:
            await c.close()
    return {"latency_ms": latency, "frames_per_s": frames}


async def hold_calls(addr: str, n: int, seconds: float, pid: int) -> dict[str, Any]:
    import numpy as np
    import psutil

    from testkit.espeak import speak
    from testkit.rtcclient import RtcClient, pcm48

    proc = psutil.Process(pid)
    calls = [await RtcClient.call(addr) for _ in range(n)]
    voice = pcm48(np.tile(speak("One two three four five six seven eight nine ten."), 4))
    for c in calls:
        await c.until("session.created", 20)
        c.mic.play(voice)  # speech (VAD, Whisper work excluded below: audio.enabled false)
    await asyncio.sleep(2.0)  # past DTLS and the first frames
    frames0 = [c.audio_frames for c in calls]
    sent0 = [await bytes_sent(c) for c in calls]
    cpu0, t0 = sum(proc.cpu_times()[:2]), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu1, t1 = sum(proc.cpu_times()[:2]), time.perf_counter()
    frames = [(c.audio_frames - f) / (t1 - t0) for c, f in zip(calls, frames0, strict=True)]
    up = [(await bytes_sent(c) - s) / (t1 - t0) for c, s in zip(calls, sent0, strict=True)]
    for c in calls:
        await c.close()
    return {"cpu_core_share": (cpu1 - cpu0) / (t1 - t0), "frames_per_s": frames, "up_bytes_per_s": up}


async def track_frame_cost(frames: int = 500) -> dict[str, float]:
    """µs of CPU per frame of the server's outbound track (``PacedTrack.recv``, unpaced): voice and idle."""
    import numpy as np

    from gateway.webrtc.track_pacing import RATE, OutboundAudio
    from gateway.webrtc.tracks import PacedTrack
    from testkit.espeak import speak

    out: dict[str, float] = {}
    voice = (np.clip(np.tile(speak("One two three four five six seven eight nine ten."), 10), -1, 1) * 32767).astype(
        np.int16
    )
    for case in ("voice", "idle"):
        source = OutboundAudio()
        if case == "voice":
            source.push(np.repeat(voice, RATE // 16_000), "r", "i")
        track = PacedTrack(source, lambda _events: None)
        track._start = -1e9  # every frame is due: measure the work, not the pacing
        t0 = time.process_time()
        for _ in range(frames):
            await track.recv()
        out[case] = (time.process_time() - t0) / frames * 1e6
    return out


async def bytes_sent(c: Any) -> int:
    for s in (await c.pc.getStats()).values():
        if s.type == "outbound-rtp" and s.kind == "audio":
            return int(s.bytesSent)
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=2, help="times each utterance is asked over each transport")
    ap.add_argument("--hold-s", type=float, default=15.0, help="seconds the held calls are measured")
    ap.add_argument("--calls", default="1,8", help="numbers of concurrent calls to hold")
    ap.add_argument("--beside", type=int, default=8, help="calls open while the latency is measured again")
    args = ap.parse_args()
    overrides = {"session.max_output_tokens": 16, "speculative.drafter": "none", "server.grace_period_s": 0}
    overrides["webrtc.allow_private_candidates"] = True  # the bench's caller offers this machine's LAN address
    latency: dict[str, list[float]] = {"websocket": [], "webrtc": []}
    with server_process(overrides) as addr:
        asyncio.run(over_websocket(addr, UTTERANCES[0]))  # warm-up: the first Whisper and model calls
        asyncio.run(over_webrtc(addr, UTTERANCES[0]))
        for _ in range(args.rounds):
            for text in UTTERANCES:
                latency["websocket"].append(asyncio.run(over_websocket(addr, text)))
                latency["webrtc"].append(asyncio.run(over_webrtc(addr, text)))
        latency_load = round(os.getloadavg()[0], 2)
        busy = asyncio.run(beside_calls(addr, args.beside - 1, args.rounds)) if args.beside > 1 else None
        busy_load = round(os.getloadavg()[0], 2)
    held: dict[int, dict[str, Any]] = {}
    with server_process({**overrides, "audio.enabled": False}) as addr:  # media cost alone: no VAD/Whisper
        pid = server_pid(addr.rsplit(":", 1)[1])
        idle = asyncio.run(hold_calls(addr, 0, args.hold_s, pid))["cpu_core_share"]
        for n in [int(x) for x in args.calls.split(",")]:
            held[n] = asyncio.run(hold_calls(addr, n, args.hold_s, pid))
            held[n]["idle_cpu_core_share"] = idle
            held[n]["load"] = round(os.getloadavg()[0], 2)
    ws_ms, rtc_ms = median(latency["websocket"]), median(latency["webrtc"])
    load = latency_load
    rows = [
        {"measure": "eos → first reply text, WebSocket (median ms)", "value": ws_ms, "target": "", "load": load},
        {
            "measure": "eos → first reply text, WebRTC (median ms)",
            "value": rtc_ms,
            "target": f"≤ {ws_ms + 30:.0f}",
            "load": load,
        },
        {"measure": "WebRTC − WebSocket (medians, ms)", "value": rtc_ms - ws_ms, "target": "≤ 30", "load": load},
    ]
    if busy is not None:
        n = args.beside
        window = 500  # server VAD's default silence window: the voice target is window + 150 ms
        row = f"eos → first reply text, WebRTC, {n} calls open (median ms)"
        value = median(busy["latency_ms"])
        rows.append({"measure": row, "value": value, "target": f"≤ {window + 150}", "load": busy_load})
        row = f"outbound frames/s per call, the other {n - 1} calls meanwhile (min)"
        rows.append({"measure": row, "value": min(busy["frames_per_s"]), "target": "50", "load": busy_load})
    for n, h in held.items():
        per_call = (h["cpu_core_share"] - h["idle_cpu_core_share"]) / n
        cpu = f"server CPU per call, {n} calls (% of a core)"
        rows.append({"measure": cpu, "value": 100 * per_call, "target": "≤ 3", "load": h["load"]})
        frames = f"outbound frames/s per call, {n} calls (min)"
        rows.append({"measure": frames, "value": min(h["frames_per_s"]), "target": "50", "load": h["load"]})
        up = median(h["up_bytes_per_s"])
        # aiortc's own encoder (96 kbit/s stereo, ignoring the answer's maxaveragebitrate): Chromium's is
        # measured by tests/e2e/test_webrtc_browser.py
        up_row = f"aiortc client upstream bytes/s, {n} calls (median)"
        rows.append({"measure": up_row, "value": up, "target": "", "load": h["load"]})
    cost = asyncio.run(track_frame_cost())
    now = os.getloadavg()[0]
    for case, us in cost.items():
        frame_row = f"outbound track CPU per 20 ms frame, {case} (µs)"
        rows.append({"measure": frame_row, "value": us, "target": "", "load": now})
    m = machine()
    md = f"# bench webrtc — {m}\n\nEmbedded model, max 16 output tokens, server VAD defaults, {len(UTTERANCES)} "
    md += f"espeak-ng utterances × {args.rounds} rounds per transport, alternating, 20 ms frames on both paths. "
    md += f"Then WebRTC again with {args.beside} calls open (the others' mics send white noise at -60 dBFS). "
    md += f"Held calls: {args.hold_s:.0f} s each with speech flowing, audio input off (the media cost alone). "
    md += f"Load average at the end: {os.getloadavg()[0]:.2f}.\n\n"
    md += markdown_table(rows, ["measure", "value", "target", "load"])
    out = {"machine": m, "latency_ms": latency, "beside": busy, "held": held, "frame_cost_us": cost, "rows": rows}
    write("webrtc", out, md)


if __name__ == "__main__":
    main()
