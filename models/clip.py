"""Zero-shot image labels with open_clip, for giving a *text-only* LLM a hint of what an image shows.

Shapes: the preprocessed image is ``[1, 3, S, S]`` (S = the model's image size); image and text
features are L2-normalised ``[D]`` / ``[L, D]``; label probabilities are
``softmax(logit_scale · text @ image)`` over the whole vocabulary ``[L]`` (they sum to 1).

Loading goes through ``open_clip.create_model_and_transforms`` exactly as documented upstream:
``model="ViT-B-32", pretrained="laion2b_s34b_b79k"`` (a tag: read from the HF cache, so pre-fetch
it and run with HF_HUB_OFFLINE=1), ``pretrained="/path/open_clip_model.safetensors"`` (a file),
``model="local-dir:/path"`` (a folder with ``open_clip_config.json`` + weights, the layout of
``hf-hub:`` repos) or ``model="hf-hub:org/repo"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

# A small everyday vocabulary (COCO-like). Replace it per deployment: zero-shot CLIP only ever
# picks among the labels it is given.
DEFAULT_LABELS: tuple[str, ...] = (
    "person", "group of people", "child", "dog", "cat", "bird", "horse", "cow", "sheep", "fish",
    "car", "bus", "truck", "bicycle", "motorcycle", "train", "airplane", "boat", "street", "building",
    "house", "bridge", "mountain", "beach", "forest", "field", "river", "sky", "sunset", "snow",
    "flower", "tree", "food", "pizza", "cake", "fruit", "coffee", "drink", "table", "chair",
    "sofa", "bed", "kitchen", "bathroom", "office", "computer", "phone", "book", "document", "screenshot",
    "chart", "diagram", "map", "drawing", "painting", "cartoon", "logo", "text", "toy", "ball",
    "clock", "bottle", "cup", "shoe", "clothing", "bag", "sports game", "concert", "city at night", "selfie",
)  # fmt: skip
DEFAULT_TEMPLATES: tuple[str, ...] = ("a photo of a {}.", "a picture of a {}.", "an image of a {}.")


class ClipLoadError(Exception):
    """The configured CLIP model cannot be loaded; one line for the operator."""


@dataclass(frozen=True)
class ClipConfig:
    model: str = "ViT-B-32"  # open_clip model name | "local-dir:/path" | "hf-hub:org/repo"
    pretrained: str | None = "laion2b_s34b_b79k"  # open_clip tag | checkpoint file | None (random init)
    labels: tuple[str, ...] = DEFAULT_LABELS  # the zero-shot vocabulary ranked for every image
    templates: tuple[str, ...] = DEFAULT_TEMPLATES  # prompt ensemble; "{}" is replaced by the label
    top_k: int = 3  # labels returned / described
    min_score: float = 0.05  # labels after the first below this probability are left out of the text
    extra_model_configs: tuple[str, ...] = ()  # JSON config files/folders registered with open_clip
    device: str = "cpu"  # cpu | cuda | cuda:N
    precision: str = "fp32"  # open_clip precision: fp32 | fp16 | bf16 | amp
    cache_dir: str | None = None  # where open_clip looks for cached pretrained tags


@dataclass(frozen=True)
class ClipResult:
    top: tuple[tuple[str, float], ...]  # (label, probability), best first, at most top_k
    description: str  # "[image: likely a photo of X, Y]" for a text-only prompt


def describe(top: Sequence[tuple[str, float]], min_score: float = 0.0) -> str:
    """The hint injected into a text-only prompt; keeps the best label and those >= ``min_score``."""
    kept = [label for i, (label, score) in enumerate(top) if i == 0 or score >= min_score]
    return f"[image: likely a photo of {', '.join(kept)}]" if kept else "[image]"


class ClipLabeler:
    """Loads once, precomputes the label embeddings, then ranks images: ``rank(image) -> ClipResult``."""

    def __init__(self, cfg: ClipConfig):
        import open_clip
        import torch

        if not cfg.labels:
            raise ValueError("ClipConfig.labels must not be empty")
        if cfg.top_k < 1:
            raise ValueError("ClipConfig.top_k must be >= 1")
        self._torch = torch
        self.cfg = cfg
        for path in cfg.extra_model_configs:
            open_clip.add_model_config(path)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                cfg.model, pretrained=cfg.pretrained, device=cfg.device, precision=cfg.precision,
                cache_dir=cfg.cache_dir,
            )  # fmt: skip
            self.tokenizer = open_clip.get_tokenizer(cfg.model, cache_dir=cfg.cache_dir)
        except Exception as exc:  # one clear line, not a traceback
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ClipLoadError(f"cannot load CLIP {cfg.model!r} ({cfg.pretrained!r}): {first[:300]}") from None
        self.model = model.eval().requires_grad_(False)
        self.preprocess = preprocess  # PIL image -> [3, S, S]
        self.device = torch.device(cfg.device)
        self.labels: tuple[str, ...] = tuple(cfg.labels)
        self.label_features = self.encode_labels(self.labels)  # [L, D]

    def _dtype(self) -> Any:
        return next(self.model.parameters()).dtype

    def encode_labels(self, labels: Sequence[str]) -> Any:
        """Prompt-ensembled, normalised text features ``[L, D]``."""
        torch = self._torch
        feats = []
        with torch.inference_mode():
            for label in labels:
                tokens = self.tokenizer([t.format(label) for t in self.cfg.templates]).to(self.device)
                emb = self.model.encode_text(tokens).float()  # [T, D]
                emb = emb / emb.norm(dim=-1, keepdim=True)
                mean = emb.mean(dim=0)
                feats.append(mean / mean.norm())
        return torch.stack(feats)  # [L, D]

    def encode_image(self, image: Image.Image) -> Any:
        """Normalised image features ``[D]`` (float32) for one RGB PIL image."""
        torch = self._torch
        pixels = self.preprocess(image).unsqueeze(0).to(self.device, self._dtype())  # [1, 3, S, S]
        with torch.inference_mode():
            feat = self.model.encode_image(pixels).float()[0]  # [D]
        return feat / feat.norm()

    def probabilities(self, image: Image.Image) -> Any:
        """Label probabilities ``[L]`` over ``self.labels`` (softmax; sums to 1)."""
        torch = self._torch
        scale = float(self.model.logit_scale.detach().exp()) if hasattr(self.model, "logit_scale") else 100.0
        logits = scale * (self.label_features @ self.encode_image(image))  # [L]
        return torch.softmax(logits, dim=0)

    def rank(self, image: Image.Image, top_k: int | None = None) -> ClipResult:
        probs = self.probabilities(image)
        k = min(top_k or self.cfg.top_k, len(self.labels))
        values, idx = probs.topk(k)
        top = tuple((self.labels[int(i)], float(v)) for v, i in zip(values, idx, strict=True))
        return ClipResult(top=top, description=describe(top, self.cfg.min_score))
