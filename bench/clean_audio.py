"""`stream-omni bench clean_audio`: WER and self-interruptions with and without the input cleaner's stages.

The server's own pipeline, offline, side by side in one run: each microphone signal goes through
``processors.input_clean.InputCleaner`` (nothing / noise reduction near_field / far_field / echo
cancellation) in 20 ms frames at 24 kHz, then the server VAD (``processors.vad.ServerVad``, the session
defaults) and Whisper (faster-whisper tiny.en, the default).

- WER: espeak-ng utterances mixed with white noise, babble and music at 0, 5 and 10 dB SNR (LiveKit Agents'
  crowded-room and hold-music recordings when livekit-agents is installed, otherwise six espeak-ng voices
  talking at once and synthesized chords), 0.6 s of noise before the speech.
- Self-interruptions: the assistant's reply (espeak-ng, another voice, 60 s in all) played back into the
  microphone at -6 and -12 dB through a room (120 ms delay: playout buffer + sound; reflections at +23 ms and
  +56 ms), a -60 dBFS noise floor; every VAD ``speech_started`` during the reply is a self-interruption.
  Also the user talking over that echo (WER of the user's words), and over a headset that hears no echo.
- False turns: 30 s of each noise alone at its 5 dB SNR level; VAD ``speech_started`` per minute.
- CPU: each stage's thread CPU per second of audio, in % of a core.
Writes bench/results/clean_audio.{json,md}. Needs espeak-ng and libspeexdsp1.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench.common import machine, markdown_table, write  # noqa: E402

RATE = 24_000
FRAME = 480  # 20 ms
CLIPS = [
    "Please open the kitchen window.",
    "My favorite color is blue.",
    "Please turn on the lights in the kitchen.",
    "What is the weather going to be like tomorrow morning?",
    "Set a timer for ten minutes.",
    "Remind me to call my mother at six o'clock tonight.",
    "How far is it from London to Paris by train?",
    "Turn the music down a little.",
]
REPLY = (
    "Sure, here is the forecast for the week. Monday starts cloudy with a chance of light rain in the "
    "afternoon, and temperatures around fourteen degrees. Tuesday clears up nicely, with sunshine most of "
    "the day and a high of eighteen. On Wednesday expect strong winds from the west, so secure anything "
    "loose in the garden. Thursday and Friday look warm and dry, perfect for a walk or a picnic in the park."
)
OPTIONS: dict[str, dict[str, Any]] = {
    "none": {"echo_on": False},
    "near_field": {"echo_on": False, "noise": "near_field"},
    "far_field": {"echo_on": False, "noise": "far_field"},
    "gentle": {"echo_on": False, "noise": "near_field", "noise_level": 1},  # WebRTC's mildest, for comparison
    "echo": {"echo_on": True},
}
SUPPRESSORS = ("none", "near_field", "far_field", "gentle")


def _ogg(name: str) -> np.ndarray | None:
    try:
        import livekit.agents
        import soundfile as sf
        import soxr
    except ImportError:
        return None
    path = Path(livekit.agents.__file__).parent / "resources" / name
    if not path.exists():
        return None
    x, sr = sf.read(str(path), dtype="float32", always_2d=True)
    return soxr.resample(x.mean(axis=1), sr, RATE).astype(np.float32)


def noises(seconds: float) -> dict[str, tuple[np.ndarray, str]]:
    """name → (noise float32 at RATE, where it came from)."""
    from testkit.espeak import speak

    rng = np.random.default_rng(0)
    n = int(seconds * RATE)
    out: dict[str, tuple[np.ndarray, str]] = {"white": (rng.normal(0, 0.1, n).astype(np.float32), "numpy")}
    babble = _ogg("crowded-room.ogg")
    if babble is not None:
        out["babble"] = (np.resize(babble, n), "livekit-agents crowded-room.ogg")
    else:
        voices = ["en-us+m1", "en-us+f2", "en-gb+m3", "en-us+f4", "en-gb+f1", "en-us+m7"]
        mix = np.zeros(n, np.float32)
        for k, v in enumerate(voices):
            talk = np.concatenate([speak(t, rate=RATE, voice=v) for t in CLIPS[k:] + CLIPS[:k]])
            mix += np.resize(talk, n)
        out["babble"] = (mix, "6 espeak-ng voices")
    music = _ogg("hold_music.ogg")
    if music is not None:
        out["music"] = (np.resize(music, n), "livekit-agents hold_music.ogg")
    else:
        t = np.arange(n) / RATE
        chord = sum(np.sin(2 * np.pi * f * t) for f in (220.0, 277.2, 329.6, 440.0))
        out["music"] = ((0.2 * chord * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))).astype(np.float32), "synth chords")
    return out


def room(ref: np.ndarray, db: float, delay_s: float = 0.12) -> np.ndarray:
    d = int(delay_s * RATE)
    h = np.zeros(d + int(0.06 * RATE))
    h[d], h[d + int(0.023 * RATE)], h[d + int(0.056 * RATE)] = 1.0, 0.3, -0.15
    return (np.convolve(ref, h)[: len(ref)] * 10 ** (db / 20)).astype(np.float32)


def i16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def run(mic: np.ndarray, option: str, reply: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """The microphone through the cleaner → float32 at 16 kHz, and the stages' CPU in % of a core."""
    import soxr

    from processors.input_clean import InputCleaner

    cleaner = InputCleaner(RATE, **OPTIONS[option])
    if reply is not None:
        cleaner.played(i16(reply), RATE)
    raw = i16(mic)
    out = b"".join(cleaner.push(raw[i : i + 2 * FRAME]) for i in range(0, len(raw), 2 * FRAME))
    cleaner.close()
    audio = np.frombuffer(out, dtype="<i2").astype(np.float32) / 32768
    seconds = len(mic) / RATE
    return soxr.resample(audio, RATE, 16_000).astype(np.float32), {
        k: 100 * v / seconds for k, v in cleaner.cpu_s.items()
    }


def starts(audio16: np.ndarray) -> int:
    from processors.vad import ServerVad, SpeechStarted

    vad = ServerVad()
    return sum(
        isinstance(e, SpeechStarted) for i in range(0, len(audio16), 320) for e in vad.feed(audio16[i : i + 320])
    )


def mix_at(speech: np.ndarray, noise: np.ndarray, snr_db: float, lead: int) -> np.ndarray:
    sig = np.concatenate([np.zeros(lead, np.float32), speech, np.zeros(RATE // 4, np.float32)])
    nz = noise[: len(sig)]
    noise_power = float(np.mean(nz[lead : lead + len(speech)] ** 2))
    gain = np.sqrt(np.mean(speech**2) / noise_power / 10 ** (snr_db / 10)) if noise_power > 0 else 0.0
    return (sig + gain * nz).astype(np.float32)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from processors.asr import AsrConfig, FasterWhisper, word_error_rate
    from testkit.espeak import speak

    parser = argparse.ArgumentParser(prog="stream-omni bench clean_audio", description=__doc__)
    parser.add_argument("--clips", type=int, default=len(CLIPS), help="utterances per condition")
    parser.add_argument("--snr", default="0,5,10", help="SNRs in dB")
    parser.add_argument("--asr-model", default="tiny.en", help="Whisper model (tiny.en: the default; base)")
    args = parser.parse_args(argv)
    start = machine()
    asr = FasterWhisper(AsrConfig(model=args.asr_model))
    clips = [(t, speak(t, rate=RATE)) for t in CLIPS[: args.clips]]
    lead = int(0.6 * RATE)
    noise = noises(60.0)

    def wer(audio16: np.ndarray, text: str) -> float:
        return float(word_error_rate(text, asr.transcribe(audio16)))

    rows: list[dict[str, Any]] = []
    cpu: dict[str, list[float]] = {}
    silent = np.zeros(len(noise["white"][0]), np.float32)
    rows.append({"condition": "clean"})
    for o in SUPPRESSORS:
        rows[0][f"WER {o}"] = float(np.mean([wer(run(mix_at(s, silent, 0, lead), o)[0], t) for t, s in clips]))
    for name, (nz, _) in noise.items():
        for snr in [float(x) for x in args.snr.split(",")]:
            row: dict[str, Any] = {"condition": f"{name} {snr:g} dB"}
            for o in SUPPRESSORS:
                ws = []
                for k, (t, s) in enumerate(clips):
                    audio, c = run(mix_at(s, np.roll(nz, k * RATE), snr, lead), o)
                    ws.append(wer(audio, t))
                    for stage, pct in c.items():
                        cpu.setdefault(f"{o}:{stage}", []).append(pct)
                row[f"WER {o}"] = float(np.mean(ws))
            rows.append(row)

    # false turns: 30 s of each noise alone, as loud as it is at 5 dB SNR
    level = float(np.sqrt(np.mean(np.concatenate([s for _, s in clips]) ** 2)) / 10 ** (5 / 20))
    false_rows: list[dict[str, Any]] = []
    for name, (nz, _) in noise.items():
        seg = nz[: 30 * RATE] * level / (float(np.sqrt(np.mean(nz[: 30 * RATE] ** 2))) + 1e-12)
        false_rows.append(
            {"noise alone (5 dB SNR level)": name}
            | {f"speech_started/min {o}": starts(run(seg, o)[0]) * 2.0 for o in SUPPRESSORS}
        )

    reply = speak(REPLY, rate=RATE, voice="en-us+m3")
    reply = np.concatenate([reply] * max(1, int(np.ceil(60 * RATE / len(reply)))))[: 60 * RATE]
    floor = np.random.default_rng(5).normal(0, 1e-3, len(reply)).astype(np.float32)
    echo_rows: list[dict[str, Any]] = []
    for db in (-6.0, -12.0, None):  # None: a headset, no echo (the canceller must leave the user's words be)
        mic = room(reply, db) + floor if db is not None else floor
        row = {"echo": f"{db:g} dB" if db is not None else "none (headset)"}
        for o in ("none", "echo"):
            audio, c = run(mic, o, reply)
            row[f"self-interruptions/min {o}"] = starts(audio) / (len(reply) / RATE / 60)
            for stage, pct in c.items():
                cpu.setdefault(f"{o}:{stage}", []).append(pct)
            ws = []
            for k, (t, s) in enumerate(clips):  # the user talks over the reply, 2 s + k s into it
                at = (2 + k) * RATE
                talk = mic[: at + len(s) + RATE // 4].copy()
                talk[at : at + len(s)] += s
                audio_t, _ = run(talk, o, reply[: len(talk)])
                ws.append(wer(audio_t[int(at * 16_000 / RATE) - 3200 :], t))
            row[f"WER over echo {o}"] = float(np.mean(ws))
        echo_rows.append(row)

    cpu_rows = [
        {"stage": k, "% of a core (mean)": float(np.mean(v)), "max": float(np.max(v))} for k, v in sorted(cpu.items())
    ]
    end = machine()
    data = {
        "machine": {"start": start, "end": end},
        "noise_sources": {k: v[1] for k, v in noise.items()},
        "wer": rows,
        "echo": echo_rows,
        "cpu": cpu_rows,
    }
    md = "\n".join(
        [
            "# bench clean_audio",
            "",
            f"{start['when']}, load {start.get('loadavg_1m')} → {end.get('loadavg_1m')}; "
            + f"{len(clips)} espeak-ng utterances per condition; "
            + ", ".join(f"{k}: {v[1]}" for k, v in noise.items()),
            "",
            f"## WER (Whisper {args.asr_model}) by noise and suppressor",
            "",
            markdown_table(rows, ["condition"] + [f"WER {o}" for o in SUPPRESSORS]),
            "",
            "## False turns: the VAD's speech_started on noise alone",
            "",
            markdown_table(false_rows, list(false_rows[0])),
            "",
            "## The reply's echo: self-interruptions (speech_started per minute of reply), the user's WER over it",
            "",
            markdown_table(echo_rows, list(echo_rows[0])),
            "",
            "## CPU per session per stage (thread CPU / audio time)",
            "",
            markdown_table(cpu_rows, ["stage", "% of a core (mean)", "max"]),
            "",
        ]
    )
    write("clean_audio" if args.asr_model == "tiny.en" else f"clean_audio_{args.asr_model}", data, md)
    print(md)
    return data


if __name__ == "__main__":
    main()
