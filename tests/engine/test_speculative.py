"""Speculative decoding, pure parts: acceptance keeps the target distribution, greedy identity — integers and fakes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.drafters import PromptLookupDrafter
from models.sampling import SamplingParams, probs
from models.verify import (
    AdaptiveLookahead,
    DraftVerify,
    FixedLookahead,
    LookaheadConfig,
    accept_greedy,
    accept_sampling,
)
from tests.engine.spec_fakes import FakeLM, ListDrafter, decode, oracle_drafts
from tests.fuzzing import examples

# ----------------------------------------------------------------------------- acceptance


def rows_with_argmax(best: list[int], vocab: int = 6) -> np.ndarray:
    rows = np.zeros((len(best), vocab), dtype=np.float32)
    for i, b in enumerate(best):
        rows[i, b] = 5.0
    return rows


def test_greedy_accepts_the_matching_prefix_and_adds_the_target_token():
    rows = rows_with_argmax([1, 2, 3, 4])
    assert accept_greedy(rows, [1, 2, 3]) == ([1, 2, 3, 4], 3)
    assert accept_greedy(rows, [1, 5, 3]) == ([1, 2], 1)
    assert accept_greedy(rows, [0, 2, 3]) == ([1], 0)
    assert accept_greedy(rows[:1], []) == ([1], 0)


def first_token_freq(p_logits, q, n, seed=0):
    """Empirical distribution of the first emitted token when the draft is sampled from ``q``."""
    rng = np.random.default_rng(seed)
    params = SamplingParams(temperature=1.0)
    vocab = len(p_logits)
    rows = np.stack([p_logits, p_logits])
    counts = np.zeros(vocab)
    for _ in range(n):
        x = int(rng.choice(vocab, p=q)) if q is not None else 2
        qrows = None if q is None else np.stack([q])
        out, _ = accept_sampling(rows, [x], params, rng, qrows)
        counts[out[0]] += 1
    return counts


@pytest.mark.parametrize("q", [None, np.array([0.5, 0.1, 0.1, 0.2, 0.1])], ids=["one-hot", "soft"])
def test_speculative_sampling_preserves_the_target_distribution(q):
    p_logits = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))
    p = probs(p_logits, SamplingParams(temperature=1.0))
    n = 20_000
    counts = first_token_freq(p_logits, q, n)
    assert chisquare(counts, p * n) > 1e-3
    assert 0.5 * np.abs(counts / n - p).sum() < 0.015  # total variation


def test_speculative_sampling_keeps_top_p():
    """A draft outside the nucleus is always rejected; the residual stays inside it."""
    params = SamplingParams(temperature=1.0, top_p=0.5)
    rows = np.stack([np.log(np.array([0.6, 0.3, 0.1]))] * 2)
    rng = np.random.default_rng(1)
    for _ in range(200):
        out, n_ok = accept_sampling(rows, [2], params, rng)
        assert (out, n_ok) == ([0], 0)


def chisquare(observed: np.ndarray, expected: np.ndarray) -> float:
    """The chi-square test's p-value (scipy, imported here: a second of import for two tests)."""
    from scipy.stats import chisquare as test

    return float(test(observed, expected).pvalue)


def sequence_distribution(backend, prompt, params, length):
    """Exact probability of every ``length``-token continuation."""
    dist = {}
    for seq in itertools.product(range(backend.vocab_size), repeat=length):
        ctx, pr = list(prompt), 1.0
        for t in seq:
            pr *= probs(backend.logits(ctx), params)[t]
            ctx.append(t)
        dist[seq] = pr
    return dist


@pytest.mark.parametrize("drafter_kind", ["lookup", "fixed"])
def test_sampled_decoding_with_drafts_has_the_plain_distribution(drafter_kind):
    """Whole 3-token responses through DecodeJob: chi-square against the exact distribution."""
    backend = FakeLM(vocab=4, scale=1.5)
    params0 = SamplingParams(temperature=0.8, max_tokens=3)
    prompt = [0, 1, 0, 1, 2]
    exact = sequence_distribution(backend, prompt, params0, 3)
    n = 3000
    counts = dict.fromkeys(exact, 0)
    drafted = 0
    for seed in range(n):
        params = SamplingParams(temperature=0.8, max_tokens=3, seed=seed)
        if drafter_kind == "lookup":
            drafter = PromptLookupDrafter()
        else:
            drafter = ListDrafter(lambda ctx, k: [1, 0, 1][:k])
        s = DraftVerify(drafter, FixedLookahead(3))
        job = decode(backend, prompt, params, s, s)
        counts[tuple(job.generated)] += 1
        drafted += job.drafted
    assert drafted > n  # drafting really happened
    keys = sorted(exact)
    obs = np.array([counts[kk] for kk in keys], dtype=float)
    exp = np.array([exact[kk] for kk in keys]) * n
    assert chisquare(obs, exp) > 1e-3
    assert 0.5 * np.abs(obs / n - exp / n).sum() < 0.06


# ----------------------------------------------------------------------------- greedy identity (fake LM)


@settings(max_examples=examples(60), deadline=None)
@given(
    prompt=st.lists(st.integers(0, 11), min_size=1, max_size=20),
    max_tokens=st.integers(1, 40),
    k=st.integers(1, 8),
    kind=st.sampled_from(["lookup", "garbage", "oracle", "adaptive"]),
)
def test_greedy_with_drafts_equals_plain_greedy(prompt, max_tokens, k, kind):
    backend = FakeLM(vocab=12, eos=11)
    params = SamplingParams(max_tokens=max_tokens)
    plain = decode(backend, prompt, params)

    def oracle(ctx, kk):  # the target's own greedy continuation, then noise
        out, c = [], list(ctx)
        for i in range(kk):
            t = int(np.argmax(backend.logits(c))) if i < 3 else (c[-1] + 1) % 12
            out.append(t)
            c.append(t)
        return out

    drafter = {
        "lookup": PromptLookupDrafter(),
        "garbage": ListDrafter(lambda ctx, kk: [(ctx[-1] * 7 + i) % 12 for i in range(kk)]),
        "oracle": ListDrafter(oracle),
        "adaptive": PromptLookupDrafter(),
    }[kind]
    policy = AdaptiveLookahead(config=LookaheadConfig(k_max=k)) if kind == "adaptive" else FixedLookahead(k)
    s = DraftVerify(drafter, policy)
    spec = decode(backend, prompt, params, s, s)
    assert spec.generated == plain.generated
    assert spec.metrics()["tokens"] == plain.metrics()["tokens"]


def test_oracle_drafts_cut_the_number_of_forwards():
    backend = FakeLM(vocab=12)
    params = SamplingParams(max_tokens=40)
    plain = decode(backend, [1, 2, 3], params)
    n_plain = len(backend.calls)

    oracle = oracle_drafts(backend)

    backend.calls.clear()
    s = DraftVerify(ListDrafter(oracle), FixedLookahead(7))
    spec = decode(backend, [1, 2, 3], params, s, s)
    assert spec.generated == plain.generated
    assert spec.accepted == spec.drafted > 0
    assert len(backend.calls) <= n_plain / 4
