"""models/vlm.py end-to-end on a tiny random Idefics3 (SmolVLM architecture) saved and reloaded.

Random weights: these tests check that images reach the model and tokens stream back, never
that the text means anything.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from models.vlm import VisionLanguageModel, VLMConfig, VLMLoadError, VLMStep, to_template_messages


def _image(seed: int, size: tuple[int, int] = (100, 60)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def _ask(image: Image.Image, text: str = "What is in this picture?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def vlm(tiny_vlm_dir: Path) -> VisionLanguageModel:  # noqa: F811
    return VisionLanguageModel(VLMConfig(model=str(tiny_vlm_dir), dtype="float32", threads=1))


def test_loads_through_the_auto_classes(vlm: VisionLanguageModel) -> None:
    assert type(vlm.model).__name__ == "Idefics3ForConditionalGeneration"
    assert type(vlm.processor).__name__ == "Idefics3Processor"


def test_prepare_expands_the_image_into_image_tokens(vlm: VisionLanguageModel) -> None:
    inputs = vlm.prepare(_ask(_image(0)))
    n_image_tokens = int((inputs["input_ids"] == vlm.model.config.image_token_id).sum())
    n_tiles = inputs["pixel_values"].shape[1]  # [1, N_tiles, 3, 32, 32]
    assert inputs["pixel_values"].shape[2:] == (3, 32, 32)
    assert n_tiles >= 1 and n_image_tokens == n_tiles * vlm.processor.image_seq_len


def test_image_pixels_change_the_logits(vlm: VisionLanguageModel) -> None:
    with torch.inference_mode():
        a = vlm.model(**vlm.prepare(_ask(_image(1)))).logits[0, -1]
        b = vlm.model(**vlm.prepare(_ask(_image(2)))).logits[0, -1]
    assert not torch.allclose(a, b)


def test_stream_produces_tokens_for_an_image(vlm: VisionLanguageModel) -> None:
    steps = list(vlm.stream(_ask(_image(3)), max_new_tokens=8))
    ids = [i for s in steps for i in s.token_ids]
    assert all(isinstance(s, VLMStep) for s in steps)
    eos = vlm.model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    assert len(ids) == 8 or (1 <= len(ids) < 8 and ids[-1] in eos_ids)
    assert "".join(s.text for s in steps) == vlm.tokenizer.decode(ids, skip_special_tokens=True)


def test_greedy_generation_is_deterministic(vlm: VisionLanguageModel) -> None:
    first = [s.token_ids for s in vlm.stream(_ask(_image(4)), max_new_tokens=6)]
    assert first == [s.token_ids for s in vlm.stream(_ask(_image(4)), max_new_tokens=6)]


def test_generate_returns_the_joined_text(vlm: VisionLanguageModel) -> None:
    text = vlm.generate(_ask(_image(5)), max_new_tokens=6)
    assert text == "".join(s.text for s in vlm.stream(_ask(_image(5)), max_new_tokens=6))


def test_text_only_message_works(vlm: VisionLanguageModel) -> None:
    steps = list(vlm.stream([{"role": "user", "content": "hello"}], max_new_tokens=4))
    assert 1 <= sum(len(s.token_ids) for s in steps) <= 4


def test_preset_cancel_stops_after_the_first_token(vlm: VisionLanguageModel) -> None:
    cancel = threading.Event()
    cancel.set()
    steps = list(vlm.stream(_ask(_image(6)), max_new_tokens=50, cancel=cancel))
    assert sum(len(s.token_ids) for s in steps) == 1


def test_cancel_mid_stream_stops_early(vlm: VisionLanguageModel) -> None:
    cancel = threading.Event()
    n = 0
    for step in vlm.stream(_ask(_image(7)), max_new_tokens=200, cancel=cancel):
        n += len(step.token_ids)
        if n == 2:
            cancel.set()
    assert 2 <= n < 200


def test_closing_the_stream_joins_the_worker(vlm: VisionLanguageModel) -> None:
    stream = vlm.stream(_ask(_image(8)), max_new_tokens=200)
    next(stream)
    stream.close()
    assert not [t for t in threading.enumerate() if t.name == "vlm-generate"]


def test_concurrent_streams_are_serialised_and_agree(vlm: VisionLanguageModel) -> None:
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(vlm.generate(_ask(_image(11)), max_new_tokens=6)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2 and results[0] == results[1]


def test_bfloat16_weights_run(tiny_vlm_dir: Path) -> None:  # noqa: F811
    vlm = VisionLanguageModel(VLMConfig(model=str(tiny_vlm_dir), dtype="bfloat16", threads=1))
    assert vlm.model.dtype == torch.bfloat16 and vlm.prepare(_ask(_image(12)))["pixel_values"].dtype == torch.bfloat16
    assert 1 <= sum(len(s.token_ids) for s in vlm.stream(_ask(_image(12)), max_new_tokens=3)) <= 3


def test_template_messages_keep_image_order() -> None:
    a, b = _image(9, (8, 8)), _image(10, (9, 9))
    msgs, images = to_template_messages(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "image", "image": a}, {"type": "text", "text": "and"}]},
            {"role": "user", "content": [{"type": "image", "image": b}]},
        ]
    )
    assert [img.size for img in images] == [(8, 8), (9, 9)]
    assert msgs[0]["content"] == [{"type": "text", "text": "be brief"}]
    assert msgs[1]["content"] == [{"type": "image"}, {"type": "text", "text": "and"}]


@pytest.mark.parametrize(
    "part,exc", [({"type": "audio"}, ValueError), ({"type": "image", "image": b"png bytes"}, TypeError)]
)
def test_bad_content_parts_are_refused(part: dict, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        to_template_messages([{"role": "user", "content": [part]}])


def test_missing_model_is_a_one_line_load_error(tmp_path: Path) -> None:
    with pytest.raises(VLMLoadError) as info:
        VisionLanguageModel(VLMConfig(model=str(tmp_path / "nope")))
    assert "\n" not in str(info.value)
