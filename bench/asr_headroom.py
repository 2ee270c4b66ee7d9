"""`stream-omni bench asr_headroom`: word error rate of the short Whisper input per headroom, against the 30 s input.

26 espeak-ng sentences (the `bench voice`, `bench voices` and `bench asr_ctx` utterances and ten
more), each as synthesized, after an int16 WAV round trip, and spoken at 185 wpm: 78 clips. Each
is transcribed on Whisper's 30 s input (faster-whisper's own ``transcribe``) and on the short input
with 6, 8, 10, 12 and 16 s of headroom (a looping short pass counts as the 30 s pass, as the server
redoes it). Prints every clip whose words differ from the sentence, and per setting the mean WER
and how many clips have an error. Writes bench/results/asr_headroom.{json,md}. Needs espeak-ng.
"""

from __future__ import annotations

import math
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench.common import machine, markdown_table, write  # noqa: E402

EXTRA = [
    "Turn off the television in the living room.",
    "What is the capital of Germany?",
    "How do I make a cup of green tea?",
    "Play some relaxing music for me please.",
    "What is two plus two?",
    "Send a message to John saying I will be late.",
    "Where is the nearest train station?",
    "Tell me something interesting about the moon.",
    "Add milk and eggs to my shopping list.",
    "Who wrote the book Pride and Prejudice?",
]
HEADROOMS = [6, 8, 10, 12, 16]


def main() -> None:
    from bench.asr_ctx import MORE
    from bench.voice import UTTERANCES
    from bench.voices import UTTERANCES as SPEAKERS
    from processors.asr import FULL_FRAMES, SAMPLE_RATE, AsrConfig, FasterWhisper, normalize_words, word_error_rate
    from testkit.espeak import speak

    texts = list(dict.fromkeys([t for t, _ in UTTERANCES] + SPEAKERS + MORE + EXTRA))
    fw = FasterWhisper(AsrConfig(encoder_headroom_s=None))
    short = fw._short
    assert short is not None

    def wav(a: np.ndarray) -> np.ndarray:
        return np.round(np.clip(a, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32767

    wer: dict[str, list[float]] = {"30 s": [], **{f"{h} s": [] for h in HEADROOMS}}
    misheard: list[dict[str, Any]] = []
    for text in texts:
        for variant, audio in (
            ("as synthesized", speak(text)),
            ("WAV", wav(speak(text))),
            ("185 wpm", speak(text, wpm=185)),
        ):
            full = fw.transcribe(audio)
            heard = {"30 s": full}
            for h in HEADROOMS:
                frames = min(FULL_FRAMES, math.ceil(audio.size / SAMPLE_RATE + h) * 100)
                said = short.transcribe([audio], frames)[0]
                heard[f"{h} s"] = full if said is None else said  # None: looped, redone on 30 s
            for key, got in heard.items():
                wer[key].append(word_error_rate(text, got))
            wrong = {k: v for k, v in heard.items() if normalize_words(v) != normalize_words(text)}
            if wrong:
                misheard.append({"text": text, "variant": variant, **wrong})
                print(misheard[-1], flush=True)
    rows = [
        {"input": k, "mean WER": sum(v) / len(v), "clips with an error": sum(1 for x in v if x > 0), "clips": len(v)}
        for k, v in wer.items()
    ]
    md = (
        f"# bench asr_headroom — {machine()}\n\n"
        + __doc__.split("\n\n")[1]
        + "\n\n"
        + markdown_table(rows, list(rows[0]))
    )
    write("asr_headroom", {"machine": machine(), "rows": rows, "misheard": misheard}, md)


if __name__ == "__main__":
    main()
