"""models/clip.py on a tiny random open_clip model saved to disk and loaded through open_clip's loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from models.clip import ClipConfig, ClipLabeler, ClipLoadError, describe

LABELS = ("dog", "cat", "car", "tree", "pizza", "chart")


def _image(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def labeler(tiny_clip_dir: Path) -> ClipLabeler:  # noqa: F811
    return ClipLabeler(ClipConfig(model=f"local-dir:{tiny_clip_dir}", pretrained=None, labels=LABELS, top_k=3))


def test_saved_weights_are_the_ones_loaded(labeler: ClipLabeler, tiny_clip_dir: Path) -> None:  # noqa: F811
    saved = load_file(str(tiny_clip_dir / "open_clip_model.safetensors"))
    loaded = labeler.model.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k], loaded[k]) for k in saved)


def test_probabilities_cover_the_vocabulary_and_sum_to_one(labeler: ClipLabeler) -> None:
    probs = labeler.probabilities(_image(0))
    assert probs.shape == (len(LABELS),)
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-5)
    full = labeler.rank(_image(0), top_k=len(LABELS))
    assert sorted(label for label, _ in full.top) == sorted(LABELS)
    assert sum(score for _, score in full.top) == pytest.approx(1.0, abs=1e-5)


def test_rank_returns_top_k_best_first(labeler: ClipLabeler) -> None:
    result = labeler.rank(_image(1))
    scores = [s for _, s in result.top]
    assert len(result.top) == 3 and scores == sorted(scores, reverse=True)
    probs = labeler.probabilities(_image(1))
    assert result.top[0] == (LABELS[int(probs.argmax())], pytest.approx(float(probs.max())))


def test_ranking_is_deterministic(labeler: ClipLabeler) -> None:
    assert labeler.rank(_image(2)) == labeler.rank(_image(2))


def test_different_images_get_different_scores(labeler: ClipLabeler) -> None:
    assert not torch.allclose(labeler.probabilities(_image(3)), labeler.probabilities(_image(4)))


def test_label_nearest_the_image_embedding_ranks_first(labeler: ClipLabeler) -> None:
    feat = labeler.encode_image(_image(5))  # [D], unit norm
    assert feat.shape == (32,) and float(feat.norm()) == pytest.approx(1.0, abs=1e-5)
    other = torch.nn.functional.normalize(torch.randn(len(LABELS) - 1, feat.shape[0]), dim=-1)
    original = labeler.label_features
    try:
        labeler.label_features = torch.cat([other[:3], feat[None], other[3:]])  # "tree" == the image
        assert labeler.rank(_image(5)).top[0][0] == "tree"
    finally:
        labeler.label_features = original


def test_description_names_the_top_labels(labeler: ClipLabeler) -> None:
    result = labeler.rank(_image(6))
    assert result.description.startswith("[image: likely a photo of ") and result.description.endswith("]")
    assert result.top[0][0] in result.description


def test_describe_drops_unlikely_labels_but_keeps_the_best() -> None:
    top = [("dog", 0.02), ("cat", 0.01)]
    assert describe(top, min_score=0.05) == "[image: likely a photo of dog]"
    assert describe([("dog", 0.6), ("cat", 0.3), ("car", 0.01)], 0.05) == "[image: likely a photo of dog, cat]"


def test_builtin_name_plus_checkpoint_file_loads_the_same_model(
    labeler: ClipLabeler,
    tiny_clip_dir: Path,  # noqa: F811
) -> None:
    cfg = ClipConfig(
        model="tiny-clip",
        pretrained=str(tiny_clip_dir / "open_clip_model.safetensors"),
        extra_model_configs=(str(tiny_clip_dir / "tiny-clip.json"),),
        labels=LABELS,
    )
    other = ClipLabeler(cfg)
    assert torch.allclose(other.probabilities(_image(7)), labeler.probabilities(_image(7)), atol=1e-6)


def test_missing_model_is_a_one_line_load_error(tmp_path: Path) -> None:
    with pytest.raises(ClipLoadError) as info:
        ClipLabeler(ClipConfig(model=f"local-dir:{tmp_path / 'nope'}", pretrained=None))
    assert "\n" not in str(info.value) and "nope" in str(info.value)


def test_empty_vocabulary_is_refused(tiny_clip_dir: Path) -> None:  # noqa: F811
    with pytest.raises(ValueError):
        ClipLabeler(ClipConfig(model=f"local-dir:{tiny_clip_dir}", pretrained=None, labels=()))
