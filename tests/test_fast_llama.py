"""models.fast_llama reproduces transformers' own Llama forward (float32: to rounding)."""

from __future__ import annotations

import numpy as np
import pytest

from models.llm import LLMConfig, load_backend


@pytest.fixture(scope="module")
def pair(tiny_llama_dir):
    fast = load_backend(LLMConfig(model=str(tiny_llama_dir), dtype="float32"))
    slow = load_backend(LLMConfig(model=str(tiny_llama_dir), dtype="float32", fast_path=False))
    assert fast.fast is not None and slow.fast is None
    return fast, slow


def test_prefill_decode_and_multi_token_logits_match_transformers(pair):
    fast, slow = pair
    a, b = fast.new_state(), slow.new_state()
    prompt = list(range(100, 140))
    np.testing.assert_allclose(fast.forward(a, prompt, 5), slow.forward(b, prompt, 5), atol=1e-4)
    np.testing.assert_allclose(fast.forward(a, [7], 1), slow.forward(b, [7], 1), atol=1e-4)
    np.testing.assert_allclose(fast.forward(a, [8, 9, 10, 11], 4), slow.forward(b, [8, 9, 10, 11], 4), atol=1e-4)


def test_crop_then_refeed_equals_a_fresh_forward(pair):
    fast, _ = pair
    s = fast.new_state()
    fast.forward(s, list(range(50, 80)), 1)
    fast.forward(s, [1, 2, 3, 4], 4)
    fast.crop(s, 30)
    assert s.tokens == list(range(50, 80))
    again = fast.forward(s, [9], 1)
    fresh = fast.new_state()
    ref = fast.forward(fresh, [*range(50, 80), 9], 1)
    np.testing.assert_allclose(again, ref, atol=1e-4)


def test_cache_grows_past_its_first_allocation(pair):
    fast, slow = pair
    a, b = fast.new_state(), slow.new_state()
    ids = [int(x) for x in np.random.default_rng(0).integers(3, 40000, 300)]
    for i in range(0, 300, 100):  # three chunks, crossing the 256-position growth step
        got, ref = fast.forward(a, ids[i : i + 100], 1), slow.forward(b, ids[i : i + 100], 1)
    np.testing.assert_allclose(got, ref, atol=1e-4)
