"""Speculative decoding, pure parts: drafters, acceptance, adaptive lookahead — integers and fakes."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from models.backend import KVState
from models.decode import DecodeJob
from models.drafters import PromptLookupDrafter
from models.sampling import SamplingParams, probs
from models.scheduler import SchedulerConfig
from models.speculative import SpecConfig, Speculator
from models.verify import (
    AdaptiveLookahead,
    FixedLookahead,
    LookaheadConfig,
    Speculation,
    accept_greedy,
    accept_sampling,
    cost_at,
    expected_tokens,
    measure_cost_curve,
)

# ----------------------------------------------------------------------------- fakes


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeLM:
    """A ``Backend`` whose next-token logits are a fixed function of the last two tokens.

    ``cost`` (optional) maps the number of tokens in a forward to fake seconds on ``clock``.
    """

    name = "fake"

    def __init__(self, vocab: int = 12, eos: int | None = None, scale: float = 3.0, clock=None, cost=None):
        self.vocab_size = vocab
        self.eos_ids = frozenset() if eos is None else frozenset({eos})
        self.max_context = 4096
        self.scale = scale
        self.clock = clock
        self.cost = cost
        self.calls: list[int] = []

    def logits(self, prefix: list[int]) -> np.ndarray:
        key = zlib.crc32(bytes(str(prefix[-2:]), "ascii"))
        return np.random.default_rng(key).normal(size=self.vocab_size).astype(np.float32) * self.scale

    def new_state(self) -> KVState:
        return KVState()

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        state.tokens.extend(tokens)
        self.calls.append(len(tokens))
        if self.clock is not None:
            self.clock.t += self.cost(len(tokens))
        n = len(state.tokens)
        return np.stack([self.logits(state.tokens[: n - n_logits + i + 1]) for i in range(n_logits)])

    def crop(self, state: KVState, length: int) -> None:
        del state.tokens[length:]

    def chat_tokens(self, messages, add_generation_prompt=True):  # pragma: no cover - unused
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        return "".join(f" t{i}" for i in ids)


def oracle_drafts(backend):
    """A drafter function that proposes exactly the target's greedy continuation."""

    def oracle(ctx, k):
        out, c = [], list(ctx)
        for _ in range(k):
            out.append(int(np.argmax(backend.logits(c))))
            c.append(out[-1])
        return out

    return oracle


class ListDrafter:
    """Proposes tokens from a fixed function of the context (``last_class`` 0)."""

    last_class = 0

    def __init__(self, fn):
        self.fn = fn

    def propose(self, context: list[int], k: int) -> list[int]:
        return self.fn(context, k)

    def draft_probs(self):
        return None


def decode(backend, prompt, params, drafter=None, verifier=None, lookahead=8):
    # draft from the very first token: these tests are about drafting, not time to first text
    sched = SchedulerConfig(lookahead_tokens=lookahead if drafter is not None else 0, draft_before_first_text=True)
    job = DecodeJob(backend, backend.new_state(), prompt, params, sched, drafter=drafter, verifier=verifier)
    for _ in range(10_000):
        if job.finished:
            break
        job.step()
    return job


# ----------------------------------------------------------------------------- prompt lookup


def reference_lookup(ctx: list[int], k: int, nmax: int = 3, nmin: int = 1) -> list[int]:
    """Brute force: longest n first, the most recent earlier occurrence, continued cyclically."""
    end = len(ctx)
    for n in range(min(nmax, end), nmin - 1, -1):
        suffix = ctx[end - n :]
        follows = [s + n for s in range(0, end - n) if ctx[s : s + n] == suffix]
        if follows:
            ext = ctx[follows[-1] :]
            out: list[int] = []
            for i in range(k):
                out.append(ext[i] if i < len(ext) else out[i - len(ext)])
            return out
    return []


def test_lookup_copies_what_followed_the_most_recent_match():
    d = PromptLookupDrafter()
    ctx = [5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 1, 2, 3]
    assert d.propose(ctx, 3) == [7, 8, 4]
    assert d.last_class == 3


def test_lookup_prefers_the_longest_ngram():
    d = PromptLookupDrafter()
    # "2 3" → 4 (2-gram match, older); "3" alone most recently → 0
    ctx = [2, 3, 4, 4, 3, 0, 6, 2, 3]
    assert d.propose(ctx, 2) == [4, 4]
    assert d.last_class == 2


def test_lookup_falls_back_to_shorter_and_gives_up():
    d = PromptLookupDrafter(ngram_max=3, ngram_min=2)
    assert d.propose([1, 2, 3, 4], 4) == []
    assert d.last_class == 0
    assert d.propose([1, 2, 3, 4, 2, 3], 2) == [4, 2]


def test_lookup_extends_a_periodic_pattern_past_the_end():
    d = PromptLookupDrafter()
    assert d.propose([7, 1, 2, 3, 1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    assert d.propose([4, 4, 4], 5) == [4, 4, 4, 4, 4]


def test_lookup_indexes_incrementally():
    d = PromptLookupDrafter()
    ctx = list(range(50)) * 2
    d.propose(ctx, 4)
    size = sum(len(v) for v in d._index.values())
    assert size == 3 * len(ctx) - 3  # one entry per n-gram occurrence, built once
    d.propose([*ctx, 7], 4)  # one more token: three more entries, nothing rescanned
    assert sum(len(v) for v in d._index.values()) == size + 3


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 4), max_size=12), st.integers(0, 30), st.integers(1, 8)),
        min_size=1,
        max_size=12,
    )
)
def test_lookup_incremental_matches_brute_force(steps):
    """Grow, diverge (rewind), grow again: always the same as a fresh search over the context."""
    d = PromptLookupDrafter()
    ctx: list[int] = []
    for extra, keep, k in steps:
        ctx = ctx[: min(keep, len(ctx))] + extra
        assert d.propose(ctx, k) == reference_lookup(ctx, k)
    assert d.propose(ctx, 3) == PromptLookupDrafter().propose(ctx, 3)


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
    assert chisquare(counts, p * n).pvalue > 1e-3
    assert 0.5 * np.abs(counts / n - p).sum() < 0.015  # total variation


def test_speculative_sampling_keeps_top_p():
    """A draft outside the nucleus is always rejected; the residual stays inside it."""
    params = SamplingParams(temperature=1.0, top_p=0.5)
    rows = np.stack([np.log(np.array([0.6, 0.3, 0.1]))] * 2)
    rng = np.random.default_rng(1)
    for _ in range(200):
        out, n_ok = accept_sampling(rows, [2], params, rng)
        assert (out, n_ok) == ([0], 0)


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
        s = Speculation(drafter, FixedLookahead(3))
        job = decode(backend, prompt, params, s, s)
        counts[tuple(job.generated)] += 1
        drafted += job.drafted
    assert drafted > n  # drafting really happened
    keys = sorted(exact)
    obs = np.array([counts[kk] for kk in keys], dtype=float)
    exp = np.array([exact[kk] for kk in keys]) * n
    assert chisquare(obs, exp).pvalue > 1e-3
    assert 0.5 * np.abs(obs / n - exp / n).sum() < 0.06


# ----------------------------------------------------------------------------- greedy identity (fake LM)


@settings(max_examples=60, deadline=None)
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
    s = Speculation(drafter, policy)
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
    s = Speculation(ListDrafter(oracle), FixedLookahead(7))
    spec = decode(backend, [1, 2, 3], params, s, s)
    assert spec.generated == plain.generated
    assert spec.accepted == spec.drafted > 0
    assert len(backend.calls) <= n_plain / 4


# ----------------------------------------------------------------------------- adaptive lookahead

CURVE = (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4)


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_cost_curve_extrapolates_linearly():
    assert cost_at(CURVE, 3) == 1.15
    assert cost_at(CURVE, 10) == pytest.approx(1.5)


def test_best_k_maximises_tokens_per_unit_time():
    pol = AdaptiveLookahead(CURVE)
    for a in (0.2, 0.5, 0.8, 0.95):
        k, rate = pol.best(a)
        rates = [expected_tokens(a, kk) / cost_at(CURVE, kk) for kk in range(1, 9)]
        assert k == 1 + int(np.argmax(rates))
        assert rate == pytest.approx(max(rates))
    assert pol.best(0.95)[0] == 8
    assert pol.best(0.01)[0] == 0  # drafting does not pay: plain decoding


def test_expensive_verification_needs_more_acceptance():
    steep = AdaptiveLookahead((1.0, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7))
    assert steep.best(0.5)[0] == 0
    assert steep.best(0.9)[0] > 0


def paid() -> float:
    return 0.001  # a drafter that costs something per token (a model), unlike prompt lookup


def test_lookahead_follows_acceptance_down_and_up():
    pol = AdaptiveLookahead(CURVE, LookaheadConfig(probe_every=5, probe_k=2), draft_seconds=paid)
    assert pol.lookahead() > 0  # prior: try
    for _ in range(10):
        pol.record(pol.lookahead(), 0, 0.05)
    assert pol.lookahead() == 0
    for _ in range(30):
        pol.record(8, 8, 0.07)
    assert pol.lookahead() == 8


def test_off_policy_probes_and_turns_back_on():
    pol = AdaptiveLookahead(CURVE, LookaheadConfig(probe_every=5, probe_k=2), draft_seconds=paid)
    pol.record(4, 0, 0.05)
    for _ in range(6):
        pol.record(1, 0, 0.05)
    ks = [pol.lookahead() for _ in range(6)]
    assert ks == [0, 0, 0, 0, 2, 2]  # armed probe stays until a step drafts
    assert pol.limit(0, 8) == 2
    for _ in range(6):  # probes succeed
        pol.record(2, 2, 0.05)
    assert pol.lookahead() > 2
    assert pol.limit(0, 8) > 2


def test_failed_probes_back_off():
    pol = AdaptiveLookahead(CURVE, LookaheadConfig(probe_every=4, probe_k=1, probe_backoff=4), draft_seconds=paid)
    drafted_at = []
    for step in range(200):
        k = pol.lookahead()
        k = pol.limit(0, k) if k else 0
        if k:
            drafted_at.append(step)
        pol.record(k, 0, 0.05)  # every draft is wrong
    gaps = np.diff(drafted_at).tolist()
    first_probe = next(i for i, g in enumerate(gaps) if g > 1)
    assert gaps[first_probe : first_probe + 5] == [4, 8, 16, 16, 16]


def test_free_drafter_is_always_asked_and_cut_by_limit():
    pol = AdaptiveLookahead(CURVE, LookaheadConfig(probe_every=50))
    for _ in range(10):
        pol.record(4, 0, 0.05)
    assert pol.best(pol.acceptance(0))[0] == 0
    assert pol.lookahead() > 0  # asking a free drafter costs nothing: a new class may pay
    assert pol.limit(0, 8) == 0


def test_acceptance_is_kept_per_class():
    pol = AdaptiveLookahead(CURVE, LookaheadConfig(probe_every=4, probe_k=1))
    for _ in range(10):
        pol.record(8, 8, 0.06, cls=3)  # 3-gram matches: always right
        pol.record(4, 0, 0.05, cls=1)  # 1-gram matches: always wrong
    assert pol.acceptance(3) > 0.9 and pol.acceptance(1) < 0.1
    assert pol.lookahead() == 8
    assert pol.limit(3, 8) == 8
    assert pol.limit(3, 5) == 5  # never more than proposed
    assert [pol.limit(1, 8) for _ in range(4)] == [0, 0, 0, 1]  # refused, then a probe


LLAMA_CPP_CURVE = (1.0, 1.85, 2.2, 2.6, 3.0, 3.5, 3.8, 4.0, 4.2)  # measured shape: verifying is steep


def test_class_priors_trust_long_matches_from_the_first_step_on_a_steep_curve():
    from models.speculative import lookup_priors

    plain = AdaptiveLookahead(LLAMA_CPP_CURVE, LookaheadConfig(probe_every=24))
    primed = AdaptiveLookahead(LLAMA_CPP_CURVE, LookaheadConfig(probe_every=24, class_priors=lookup_priors(1, 3)))
    assert plain.limit(3, 8) == 0  # the flat 0.5 prior: a 3-gram match waits for a probe
    assert primed.limit(3, 8) > 0  # trusted at once
    assert primed.limit(1, 8) == 0  # a 1-gram match is not
    for _ in range(3):  # evidence overrides the prior: a 3-gram class that keeps failing turns off
        primed.record(4, 0, 0.05, cls=3)
    assert primed.limit(3, 8) == 0


def test_draft_cost_shrinks_lookahead():
    free = AdaptiveLookahead(CURVE)
    paid = AdaptiveLookahead(CURVE, draft_seconds=lambda: 0.02)
    for pol in (free, paid):
        pol.record(0, 0, 0.05)  # one plain step: 50 ms
        for _ in range(10):
            pol.record(3, 2, 0.06)
    assert paid.draft_cost() == pytest.approx(0.02 / paid._step_s)
    assert 0 < paid.lookahead() < free.lookahead()
    costly = AdaptiveLookahead(CURVE, draft_seconds=lambda: 0.05)
    costly.record(0, 0, 0.05)
    assert costly.best(0.6)[0] == 0


def test_adaptive_job_stops_drafting_garbage_but_keeps_good_drafts():
    clock = FakeClock()
    backend = FakeLM(vocab=12, clock=clock, cost=lambda n: 0.05 * cost_at(CURVE, n - 1))
    params = SamplingParams(max_tokens=200)
    cfg = LookaheadConfig(probe_every=20)
    wrong = ListDrafter(lambda ctx, k: [(int(np.argmax(backend.logits(ctx))) + 1) % 12] * k)
    garbage = Speculation(wrong, AdaptiveLookahead(CURVE, cfg))
    job = decode(backend, [1, 2], params, garbage, garbage)
    assert job.accepted == 0
    assert job.drafted <= 50  # a few tries, then only probes every 20 steps

    oracle = oracle_drafts(backend)

    good = Speculation(ListDrafter(oracle), AdaptiveLookahead(CURVE, cfg))
    job = decode(backend, [1, 2], params, good, good)
    assert job.drafted >= 150 and job.accepted == job.drafted


def test_free_classes_draft_longer_than_a_paid_model_at_the_same_acceptance():
    pol = AdaptiveLookahead(CURVE, draft_seconds=lambda: 0.01, free_classes=frozenset({3}), step_seconds=0.04)
    assert pol.draft_cost() == pytest.approx(0.25)  # seeded step time: priced from the first step
    for cls in (0, 3):
        for _ in range(6):
            pol.record(4, 3, 0.05, cls=cls)
    assert pol.acceptance(0) == pytest.approx(pol.acceptance(3))
    k_free, gain_free = pol.rate(3)
    k_paid, gain_paid = pol.rate(0)
    assert k_free > k_paid > 0 and gain_free > gain_paid > 1.0


def test_budget_skips_a_paid_class_that_does_not_pay_until_its_probe():
    pol = AdaptiveLookahead(
        CURVE, LookaheadConfig(probe_every=5, probe_k=2), draft_seconds=lambda: 0.03, step_seconds=0.04
    )
    for _ in range(4):
        pol.record(4, 0, 0.05, cls=0)  # the model's drafts keep failing
    budgets = [pol.budget(0) for _ in range(5)]
    assert budgets == [0, 0, 0, 0, 2]  # nothing drafted (nor paid for) until the probe is due
    assert pol.limit(0, 2) == 2  # and that probe is verified


def test_lookup_first_takes_a_paying_match_and_else_the_model():
    from models.drafters import MODEL_CLASS, LookupFirstDrafter

    model_calls = []

    class Model:
        def propose(self, ctx, k):
            model_calls.append(k)
            return [99] * k

        def seconds_per_token(self):
            return 0.01

    ctx = [5, 6, 7, 8, 1, 2, 5, 6, 7]  # "5 6 7" occurred before: a 3-gram match proposing 8 1 2 …
    d = LookupFirstDrafter(PromptLookupDrafter(), Model())
    assert d.propose(ctx, 3) == [8, 1, 2] and d.last_class == 3 and model_calls == []
    assert d.propose([*ctx, 4], 3) == [99] * 3 and d.last_class == MODEL_CLASS  # no match
    # the policy decides: a match that pays less than the model goes to the model, whose
    # drafts are capped to what it is worth
    d.rate = lambda cls: (2, 1.2) if cls != MODEL_CLASS else (5, 2.0)
    d.budget = lambda cls: 5
    assert d.propose(ctx, 8) == [99] * 5 and d.last_class == MODEL_CLASS and model_calls[-1] == 5
    d.rate = lambda cls: (8, 3.0) if cls != MODEL_CLASS else (5, 2.0)
    assert d.propose(ctx, 8)[:3] == [8, 1, 2] and d.last_class == 3
    d.rate = lambda cls: (0, 1.0)
    d.budget = lambda cls: 0
    n = len(model_calls)
    assert d.propose([*ctx, 4], 8) == [] and len(model_calls) == n  # nothing paid for
    # the model has nothing to offer now: the (weaker) match is still proposed, under its class
    d.rate = lambda cls: (2, 1.2) if cls != MODEL_CLASS else (5, 2.0)
    assert d.propose(ctx, 8)[:3] == [8, 1, 2] and d.last_class == 3 and len(model_calls) == n


def test_model_drafter_catches_up_on_a_long_prompt_only_once_it_pays():
    from models.drafters import ModelDrafter

    draft = FakeLM(vocab=12)
    # catching up costs 0.01 s a token; a plain step lost to waiting costs half of 0.04 s
    d = ModelDrafter(draft, catch_up=(0.01, 0.04))
    prompt = list(range(1, 11)) * 4  # 40 new tokens, and one more per plain step taken meanwhile:
    waits = 0  # it waits w steps until 0.02 w >= 0.01 (40 + w), i.e. w = 40
    while not d.propose(prompt, 3):
        waits += 1
        prompt = [*prompt, 1]
    assert waits == 40 and draft.calls[0] == len(prompt)  # then one prefill of everything
    assert d.propose([*prompt, 3], 3)  # in step: drafts at once (the catch-up is 2 tokens)
    other = ModelDrafter(FakeLM(vocab=12), catch_up=(0.01, 0.04))
    other.backend.cached_prefix = lambda ctx: len(ctx) - 2  # a backend that shares a cached prefix
    assert other.propose(prompt, 3)  # nothing much to catch up: no wait
    assert ModelDrafter(FakeLM(vocab=12)).propose(prompt, 3)  # unmeasured costs: never waits


# ----------------------------------------------------------------------------- calibration, wiring


def test_measure_cost_curve_with_a_fake_clock():
    clock = FakeClock()
    table = {1: 0.040, 2: 0.044, 3: 0.048, 4: 0.046, 5: 0.052}  # 4 tokens dips: noise
    backend = FakeLM(clock=clock, cost=lambda n: table.get(n, 0.5))
    curve = measure_cost_curve(backend, k_max=4, repeats=2, context=16, clock=clock)
    assert curve == pytest.approx((1.0, 1.1, 1.2, 1.2, 1.3))


def test_spec_config_validates():
    with pytest.raises(ValueError, match="unknown drafter"):
        SpecConfig(drafter="magic")
    with pytest.raises(ValueError, match="needs draft_model"):
        SpecConfig(drafter="draft_model")


def test_speculator_wiring():
    clock = FakeClock()
    backend = FakeLM(clock=clock, cost=lambda n: 0.04 + 0.002 * n)
    assert Speculator(backend, SpecConfig(drafter="none")).for_job() is None
    spec = Speculator(backend, SpecConfig(k_max=4), clock=clock)  # calibrates on the fake clock
    assert len(spec.cost_curve) == 5 and spec.cost_curve[0] == 1.0
    a, b = spec.for_job(), spec.for_job()
    assert a is not b and isinstance(a.drafter, PromptLookupDrafter)
    given_curve = Speculator(backend, SpecConfig(cost_curve=CURVE))
    assert given_curve.cost_curve == CURVE
    fixed = Speculator(backend, SpecConfig(adaptive=False, k_max=5)).for_job()
    assert fixed.lookahead() == 5
    assert spec.with_config(k_max=2).cost_curve == spec.cost_curve
