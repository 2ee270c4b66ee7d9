"""The end-of-turn model: Smart Turn v3.2 (ONNX, a Whisper-tiny encoder) on a turn's last 8 s of audio.

Smart Turn (Daily, BSD-2-Clause, 23 languages) hears from the audio alone — intonation, a drawn-out
last syllable, a cut-off word — whether a speaker has finished. The weights are
``smart-turn-v3.2-cpu.onnx`` (8.7 MB), shipped inside the ``pipecat-ai`` wheel; they are read from
the installed package's data folder without importing pipecat (whose dependencies the gateway
does not need: ``pip install --no-deps pipecat-ai==1.14.0`` is enough, as the README's serve
command does). Where the file is absent, ``SmartTurnUnavailable`` says so and the gateway falls
back to the transcript heuristic (``processors.turn_text``).

The input is what pipecat's ``LocalSmartTurnAnalyzerV3`` feeds it: 16 kHz audio, the last 8 s
(zero-padded in front when shorter), as Whisper log-mel features (transformers'
``WhisperFeatureExtractor(chunk_length=8)`` with ``do_normalize=True``, computed by faster-whisper's
numpy twin): float32 ``[1, 80, 800]`` named ``input_features``; the output ``logits`` ``[1, 1]`` is already a sigmoid
probability that the turn is complete. One call took 8 ms (features) + 23-30 ms (model) on one
core of this 2-core box at load 2, ≈ 165 ms at load 10: it runs on a worker thread, never on the
event loop.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .audio import TARGET_RATE

WINDOW_S = 8  # the model reads the last 8 s of the turn
WINDOW_SAMPLES = WINDOW_S * TARGET_RATE
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
CARRIER = "pipecat"  # the installed package whose data folder holds MODEL_FILE
CARRIER_DATA = ("audio", "turn", "smart_turn", "data")


class SmartTurnUnavailable(RuntimeError):
    """The Smart Turn model file is not installed (or does not load)."""


class TurnModel(Protocol):
    """Audio of a turn so far → probability that the speaker has finished (``SmartTurn``, or a fake)."""

    def __call__(self, audio: np.ndarray) -> float:
        """float32 ``[n]`` at 16 kHz (any length; the last 8 s count) → P(complete) in [0, 1]."""
        ...


def model_path() -> Path:
    """``pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx`` in the installed wheel, located
    without importing the package."""
    spec = importlib.util.find_spec(CARRIER)
    if spec is None or not spec.submodule_search_locations:
        raise SmartTurnUnavailable(
            f"{MODEL_FILE} ships in the pipecat-ai wheel, which is not installed "
            "(pip install --no-deps pipecat-ai==1.14.0)"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*CARRIER_DATA, MODEL_FILE)
    if not path.is_file():
        raise SmartTurnUnavailable(f"pipecat is installed but {path} is missing (pipecat-ai 1.14.0 ships it)")
    return path


def available() -> bool:
    """Whether the model file is installed (cheap: no loading)."""
    try:
        model_path()
    except SmartTurnUnavailable:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _extractor() -> Any:
    # faster-whisper's numpy log-mel is Whisper's (the features transformers' WhisperFeatureExtractor
    # makes, which pipecat feeds the model): transformers would import torch into every gateway
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor(chunk_length=WINDOW_S)


@functools.lru_cache(maxsize=1)
def _session() -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # one core, lent by the LLM while it runs (models.cores)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(model_path()), sess_options=opts, providers=["CPUExecutionProvider"])
    except SmartTurnUnavailable:
        raise
    except Exception as exc:  # onnxruntime raises its own exception types
        raise SmartTurnUnavailable(f"could not load {MODEL_FILE}: {exc}") from exc


def features(audio: np.ndarray) -> np.ndarray:
    """float32 ``[n]`` at 16 kHz → float32 ``[1, 80, 800]``: the last 8 s, zero-padded in front."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)[-WINDOW_SAMPLES:]
    if x.size < WINDOW_SAMPLES:
        x = np.pad(x, (WINDOW_SAMPLES - x.size, 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)  # do_normalize: zero mean, unit variance
    out = _extractor()(x, padding=0)  # [80, 800]: 8 s of 10 ms frames
    arr: np.ndarray = np.asarray(out, dtype=np.float32)[None]
    return arr


class SmartTurn:
    """The shared model (one ``InferenceSession`` per process; calls are serialised: one core)."""

    def __init__(self) -> None:
        self._session = _session()
        self._lock = threading.Lock()

    def __call__(self, audio: np.ndarray) -> float:
        x = features(audio)
        with self._lock:
            (out,) = self._session.run(["logits"], {"input_features": x})
        return float(np.clip(out.reshape(-1)[0], 0.0, 1.0))


@functools.lru_cache(maxsize=1)
def load() -> SmartTurn:
    """The process's model, loaded and warmed once (raises ``SmartTurnUnavailable``)."""
    model = SmartTurn()
    model(np.zeros(TARGET_RATE // 2, dtype=np.float32))
    return model
