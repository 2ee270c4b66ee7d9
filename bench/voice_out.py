"""`stream-omni bench voice_out`: spoken replies to real-time speech, beside text replies to the same speech.

One `stream-omni serve` on the embedded default (llama.cpp SmolLM2, Whisper tiny.en, Piper voice ``joe``),
server VAD defaults; sessions ask for ``output_modalities: ["audio"]`` (or ``["text"]``) and audio/pcm 24 kHz
out. The client is a live microphone: 40 ms pcm16 frames paced to the wall clock, silence between what it
says (espeak-ng, bench/voice.py's UTTERANCES). Measured:

1. end of speech (eos: the frame holding its last sample was sent) → first ``response.output_audio.delta``
   (median, p90) against the session's silence window; with ``["text"]``, eos → first ``output_text.delta``;
2. first text chunk → its audio: per spoken turn, the first ``output_audio_transcript.delta`` → the first
   ``output_audio.delta`` (≤ 0 by design: a chunk's transcript follows its audio), so also what a client can
   see of the synthesis: eos → audio − eos → text for the same utterance, and create → audio − create → text
   on a cold story prompt;
3. underruns on long spoken replies: bench/speech_bench.py's ``gaps`` on a playback clock started at the first delta;
4. barge-in: once ``--barge-after-s`` of a story has played, the microphone says an utterance;
   ``speech_started`` → the story's last audio delta; then, as a client does, ``conversation.item.truncate`` at
   the ms played when ``speech_started`` arrived, and the kept transcript (``conversation.item.retrieve``)
   against the words the server's Whisper hears in exactly that played prefix;
5. round trip: 20 sentences (bench/voice_out_score.py) through ``POST /v1/audio/speech`` (wav), heard back by
   our Whisper (base where installed, else tiny.en), WER on words as the voice says them.

Writes bench/results/voice_out.{json,md} (``--name`` for another). Needs espeak-ng.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from typing import Any

from bench.common import machine, markdown_table, server_process, write
from bench.speech_bench import PROMPT, gaps
from bench.voice import UTTERANCES, speculation_counts, utterance_audio
from bench.voice_out_score import SENTENCES, corpus_wer, played_ms, round_trip, stalls_ms, summary, truncation
from bench.voices import FRAME_MS, RATE, load

PCM_BYTES_PER_S = RATE * 2
LEAD_S = 0.5  # microphone silence before each utterance
RECV_S = 120.0  # the longest wait for any one server event
Match = Callable[[float, dict[str, Any]], bool]  # (arrival time, event) → is it the one


def speech_pcm(text: str, parts: tuple[str, str] | None) -> bytes:
    """An utterance of bench/voice.py as 24 kHz pcm16, no silence at either end."""
    from processors.audio import float32_to_pcm16, resample

    return float32_to_pcm16(resample(utterance_audio(text, parts), 16_000, RATE))


class Mic:
    """A live microphone: a 40 ms frame every 40 ms of wall clock, silence unless it is saying something."""

    def __init__(self, ws: Any) -> None:
        self.ws, self.pending = ws, bytearray()
        self.eos: float | None = None  # when the frame holding the last sample said was sent

    def say(self, pcm: bytes) -> None:
        self.pending += pcm
        self.eos = None

    async def run(self) -> None:
        step, t0, n = PCM_BYTES_PER_S * FRAME_MS // 1000, time.perf_counter(), 0
        while True:
            speaking = bool(self.pending)
            frame = bytes(self.pending[:step]).ljust(step, b"\0")
            del self.pending[:step]
            await self.ws.send(frame)
            if speaking and not self.pending:
                self.eos = time.perf_counter()
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * FRAME_MS / 1000 - time.perf_counter()))


class Events:
    """Every server event of one session, with its arrival time (perf_counter)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.log: list[tuple[float, dict[str, Any]]] = []
        self.ended = False  # the connection closed or went silent for RECV_S
        self._new = asyncio.Event()

    async def run(self) -> None:
        try:
            while True:
                ev = json.loads(await asyncio.wait_for(self.ws.recv(), RECV_S))
                self.log.append((time.perf_counter(), ev))
                self._new.set()
        finally:
            self.ended = True
            self._new.set()

    async def until(self, match: Match, within: float, seen: int = 0) -> tuple[float, dict[str, Any]]:
        """The first event from the ``seen``-th on (logged or still to come) that ``match``es; TimeoutError after
        ``within`` s."""
        async with asyncio.timeout(within):
            while True:
                for t, ev in self.log[seen:]:
                    if match(t, ev):
                        return t, ev
                if self.ended:
                    raise RuntimeError("the connection ended first")
                seen = len(self.log)
                self._new.clear()
                await self._new.wait()


def of(kind: str) -> Match:
    return lambda _t, ev: ev["type"] == kind


def deltas(log: list[tuple[float, dict[str, Any]]], response_id: str | None = None) -> list[tuple[float, str]]:
    """(arrival, base64 audio) of each ``response.output_audio.delta`` (of ``response_id``), in order."""
    return [
        (t, ev["delta"])
        for t, ev in log
        if ev["type"] == "response.output_audio.delta" and response_id in (None, ev["response_id"])
    ]


def arrivals(audio: list[tuple[float, str]]) -> list[tuple[float, float]]:
    """(arrival, seconds of audio) per delta, from the base64 length (no decoding: the barge-in polls it)."""
    return [(t, (len(b64) * 3 // 4 - b64[-2:].count("=")) / PCM_BYTES_PER_S) for t, b64 in audio]


@contextlib.asynccontextmanager
async def live_session(addr: str, modality: str, max_tokens: int) -> AsyncIterator[tuple[Events, Mic, int]]:
    """A Realtime session with a microphone streaming into it; yields (events, mic, silence window ms)."""
    import websockets

    async with websockets.connect(f"ws://{addr}/v1/realtime", max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), 30)  # session.created
        session = {
            "output_modalities": [modality],
            "max_output_tokens": max_tokens,
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": RATE}}},
        }
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        while (ev := json.loads(await asyncio.wait_for(ws.recv(), 30)))["type"] != "session.updated":
            if ev["type"] == "error":
                raise RuntimeError(f"session.update refused: {ev['error']}")
        window = int(ev["session"]["audio"]["input"]["turn_detection"].get("silence_duration_ms", 500))
        events, mic = Events(ws), Mic(ws)
        tasks = [asyncio.create_task(events.run()), asyncio.create_task(mic.run())]
        try:
            yield events, mic, window
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def voice_turn(addr: str, modality: str, text: str, parts: tuple[str, str] | None, tokens: int) -> dict[str, Any]:
    """One utterance said into a fresh session, up to the end of the reply to it."""
    pcm = speech_pcm(text, parts)
    out: dict[str, Any] = {"text": text, "modality": modality, "speech_s": round(len(pcm) / PCM_BYTES_PER_S, 2)}
    before = await asyncio.to_thread(speculation_counts, addr)
    async with live_session(addr, modality, tokens) as (events, mic, window):
        await asyncio.sleep(LEAD_S)
        mic.say(pcm)

        # the reply to the whole utterance (one to the first half of a split turn comes before its end)
        def answered(t: float, ev: dict[str, Any]) -> bool:
            done = ev["type"] == "response.done" and ev["response"]["status"] != "cancelled"
            return done and mic.eos is not None and t > mic.eos

        try:
            await events.until(answered, RECV_S)
        except (TimeoutError, RuntimeError) as exc:
            out["error"] = f"no reply: {exc!r}"
        log, eos = list(events.log), mic.eos
    out["window_ms"] = window
    after = [(t, ev) for t, ev in log if eos is not None and t >= eos]
    for key, kind in (
        ("speech_stopped", "input_audio_buffer.speech_stopped"),
        ("first_text", "response.output_text.delta"),
        ("first_audio", "response.output_audio.delta"),
        ("first_transcript", "response.output_audio_transcript.delta"),
    ):
        out[f"eos_to_{key}_ms"] = next((1000 * (t - (eos or 0.0)) for t, ev in after if ev["type"] == kind), None)
    late = gaps(arrivals(deltas(after)))
    out.update(underruns=late[0], stall_ms=sum(stalls_ms(arrivals(deltas(after)))), spoken_s=round(late[1], 2))
    chunks = ("response.output_text.delta", "response.output_audio_transcript.delta")
    out["reply"] = [(round(1000 * (t - (eos or 0.0))), ev["delta"]) for t, ev in after if ev["type"] in chunks]
    heard = "conversation.item.input_audio_transcription.completed"
    out["heard"] = next((ev["transcript"] for _, ev in log if ev["type"] == heard), None)
    after_counts = await asyncio.to_thread(speculation_counts, addr)
    out["speculation"] = {k: after_counts[k] - before[k] for k in after_counts}
    return out


async def ask_story(events: Events) -> float:
    """Ask for bench/speech_bench.py's long story; returns when response.create was sent."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}
    await events.ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await events.ws.send(json.dumps({"type": "response.create"}))
    return time.perf_counter()


async def story(addr: str, modality: str, tokens: int) -> dict[str, Any]:
    """A long reply: when its first text or audio came (ms from response.create), each audio delta's arrival."""
    async with live_session(addr, modality, tokens) as (events, _, _):
        t0 = await ask_story(events)
        await events.until(of("response.done"), RECV_S)
        log = list(events.log)

    def first(kind: str) -> float | None:
        return next((1000 * (t - t0) for t, ev in log if ev["type"] == kind), None)

    return {
        "first_text_ms": first("response.output_text.delta"),
        "first_audio_ms": first("response.output_audio.delta"),
        "arrivals": [(round(t - t0, 3), round(s, 3)) for t, s in arrivals(deltas(log))],
    }


async def barge_in(addr: str, text: str, parts: tuple[str, str] | None, after_s: float, tokens: int) -> dict[str, Any]:
    """A story interrupted by speech once ``after_s`` of it has played; truncated where the client's player stood."""
    pcm = speech_pcm(text, parts)
    out: dict[str, Any] = {"barge_in": text}
    async with live_session(addr, "audio", tokens) as (events, mic, _):
        await ask_story(events)
        _, first = await events.until(of("response.output_audio.delta"), RECV_S)
        rid, item_id = first["response_id"], first["item_id"]

        def clock(at: float) -> float:
            return played_ms(arrivals(deltas(events.log, rid)), at)

        async with asyncio.timeout(RECV_S):  # the player reaches after_s
            while clock(time.perf_counter()) < after_s * 1000:
                if any(ev["type"] == "response.done" for _, ev in events.log):
                    raise RuntimeError(f"the story ended before {after_s} s had played: raise --long-tokens")
                await asyncio.sleep(0.01)
        mic.say(pcm)
        started, _ = await events.until(of("input_audio_buffer.speech_started"), 30)
        end_ms = int(clock(started))
        cut = {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": end_ms}
        seen = len(events.log)
        await events.ws.send(json.dumps(cut))
        _, ack = await events.until(lambda _t, ev: ev["type"] in ("conversation.item.truncated", "error"), 30, seen)
        seen = len(events.log)
        await events.ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": item_id}))
        _, got = await events.until(lambda _t, ev: ev["type"] in ("conversation.item.retrieved", "error"), 30, seen)
        done_at, done = await events.until(
            lambda _t, ev: ev["type"] == "response.done" and ev["response"]["id"] == rid, RECV_S
        )
        log = list(events.log)
    story = deltas(log, rid)
    sent_after = [t for t, _ in story if t > started]
    said = [ev for _, ev in log if ev["type"] == "response.output_audio_transcript.delta"]
    full = "".join(ev["delta"] for ev in said if ev["item_id"] == item_id)
    audio = b"".join(base64.b64decode(a) for _, a in story)
    kept = got["item"]["content"][0].get("transcript", "") if got["type"] == "conversation.item.retrieved" else None
    out.update(
        status=done["response"]["status"],
        started_to_last_delta_ms=1000 * (story[-1][0] - started),
        deltas_after_started=len(sent_after),
        started_to_done_ms=1000 * (done_at - started),
        audio_end_ms=end_ms,
        received_ms=round(1000 * len(audio) / PCM_BYTES_PER_S),
        truncate_reply=ack if ack["type"] == "error" else ack["type"],
        retrieve_reply=got["error"] if got["type"] == "error" else got["type"],
        full_transcript=full,
        kept_transcript=kept,
        played=audio[: end_ms * PCM_BYTES_PER_S // 1000 // 2 * 2],  # left out of the JSON: heard by Whisper later
    )
    return out


async def live(addr: str, args: argparse.Namespace) -> dict[str, Any]:
    await voice_turn(addr, "audio", *UTTERANCES[0], args.max_tokens)  # warm-up: first Whisper, model and voice calls
    turns: dict[str, list[dict[str, Any]]] = {"text": [], "audio": []}
    for i, (text, parts) in enumerate(UTTERANCES[: args.utterances]):
        for modality in ("text", "audio") if i % 2 == 0 else ("audio", "text"):  # alternate: drift hits both
            turns[modality].append(await voice_turn(addr, modality, text, parts, args.max_tokens))
            print(f"  {modality:5} {turns[modality][-1]}  load {load()}", flush=True)
    await story(addr, "text", 8)  # the story's prompt in the engine's cache: both modalities then start alike
    stories = []
    for _ in range(args.long_runs):
        written, spoken = await story(addr, "text", args.long_tokens), await story(addr, "audio", args.long_tokens)
        late, seconds = gaps(spoken["arrivals"])
        stories.append(
            {
                "create_to_first_text_ms": written["first_text_ms"],
                "create_to_first_audio_ms": spoken["first_audio_ms"],
                "underruns": late,
                "stall_ms": sum(stalls_ms(spoken["arrivals"])),
                "spoken_s": round(seconds, 2),
                "arrivals": spoken["arrivals"],
            }
        )
        print(f"  story: { ({k: v for k, v in stories[-1].items() if k != 'arrivals'}) }  load {load()}", flush=True)
    barges = []
    for i in range(args.barge_ins):
        text, parts = UTTERANCES[(i + 1) % len(UTTERANCES)]
        try:
            barges.append(await barge_in(addr, text, parts, args.barge_after_s, args.long_tokens))
        except (TimeoutError, RuntimeError) as exc:
            barges.append({"barge_in": text, "error": repr(exc)})
        print(f"  barge-in: { ({k: v for k, v in barges[-1].items() if k != 'played'}) }  load {load()}", flush=True)
    return {"turns": turns, "stories": stories, "barge_ins": barges}


def synthesize(addr: str, text: str) -> tuple[Any, int]:
    """``POST /v1/audio/speech`` (wav) → (float32 samples, rate)."""
    import soundfile as sf

    body = json.dumps({"model": "tts-1", "input": text, "voice": "joe", "response_format": "wav"}).encode()
    req = urllib.request.Request(
        f"http://{addr}/v1/audio/speech", body, {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=RECV_S) as r:
        audio, rate = sf.read(io.BytesIO(r.read()), dtype="float32")
    return audio, int(rate)


def asr_config(model: str | None) -> Any:
    """The server's own Whisper settings (gateway/wiring/loading.py); ``model``: None the server's, "auto" base if
    installed (else tiny.en), or a name."""
    from gateway.core.config import load_config
    from processors.asr import AsrConfig, AsrError, model_dir

    a = load_config(None).audio
    model = model or a.model
    if model == "auto":
        try:
            model_dir("base")
            model = "base"
        except AsrError:
            model = "tiny.en"
    language = "en" if model == "base" else a.language
    return AsrConfig(a.engine, model, language, cpu_threads=a.threads, encoder_headroom_s=a.encoder_headroom_s)


def hear(asr: Any, audio: Any, rate: int) -> str:
    from processors.audio import resample

    return str(asr.transcribe(resample(audio, rate, 16_000)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utterances", type=int, default=len(UTTERANCES), help="of bench/voice.py's UTTERANCES")
    ap.add_argument("--sentences", type=int, default=len(SENTENCES), help="round-trip sentences")
    ap.add_argument("--long-runs", type=int, default=2, help="long spoken replies (underruns)")
    ap.add_argument("--barge-ins", type=int, default=3)
    ap.add_argument("--barge-after-s", type=float, default=2.0, help="audio played before the barge-in starts")
    ap.add_argument("--max-tokens", type=int, default=32, help="per reply to an utterance")
    ap.add_argument("--long-tokens", type=int, default=200, help="per story")
    ap.add_argument("--asr-model", default="auto", help="round trip Whisper: auto (base if installed), tiny.en, base")
    ap.add_argument("--name", default="voice_out", help="results file name under bench/results/")
    args = ap.parse_args()

    load_start, t0 = load(), time.perf_counter()
    with server_process({}) as addr:
        data = asyncio.run(live(addr, args))
        spoken = [synthesize(addr, s) for s in SENTENCES[: args.sentences]]
    # Whisper runs here only once the server is gone: nothing timed shares the cores with it
    import numpy as np

    from processors.asr import load_asr

    server_asr = load_asr(asr_config(None))
    for b in data["barge_ins"]:
        played = np.frombuffer(b.pop("played", b""), dtype="<i2").astype(np.float32) / 32768.0
        if b.get("kept_transcript") is not None:
            b["truncation"] = truncation(b["kept_transcript"], hear(server_asr, played, RATE))
    rt_cfg = asr_config(args.asr_model)
    rt_asr = load_asr(rt_cfg)
    data["round_trip"] = [round_trip(s, hear(rt_asr, a, r)) for s, (a, r) in zip(SENTENCES, spoken, strict=False)]
    wer = corpus_wer(data["round_trip"]) if data["round_trip"] else None
    rows = summary(data, wer)
    info = {
        "load_1m_start": load_start,
        "load_1m_end": load(),
        "wall_s": round(time.perf_counter() - t0, 1),
        "round_trip_whisper": rt_cfg.model,
    }
    md = f"# bench voice_out — {machine()}\n\n"
    md += f"One `stream-omni serve` on the embedded default (voice joe, server VAD defaults), {args.utterances} "
    md += f"espeak-ng utterances in {FRAME_MS} ms frames at real-time pace (spoken and text replies, ≤ "
    md += f"{args.max_tokens} tokens), {args.long_runs} stories of ≤ {args.long_tokens} tokens, {args.barge_ins} "
    md += f"barge-ins after {args.barge_after_s} s played, {len(data['round_trip'])} round-trip sentences heard by "
    md += f"Whisper {rt_cfg.model}. Load average (1 min) {load_start} at start, {info['load_1m_end']} at end; "
    md += f"{info['wall_s']} s in all.\n\n" + markdown_table(rows, list(rows[0]))
    write(args.name, {"machine": machine(), "args": vars(args), **info, "rows": rows, **data}, md)


if __name__ == "__main__":
    main()
