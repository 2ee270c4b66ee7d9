"""The adaptive lookahead (how many tokens to draft) and the speculator's calibration and wiring."""

from __future__ import annotations

import numpy as np
import pytest

from models.drafters import PromptLookupDrafter
from models.sampling import SamplingParams
from models.speculative import SpecConfig, Speculator
from models.verify import (
    AdaptiveLookahead,
    DraftVerify,
    LookaheadConfig,
    cost_at,
    expected_tokens,
    measure_cost_curve,
)
from tests.engine.spec_fakes import FakeClock, FakeLM, ListDrafter, decode, oracle_drafts

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
    garbage = DraftVerify(wrong, AdaptiveLookahead(CURVE, cfg))
    job = decode(backend, [1, 2], params, garbage, garbage)
    assert job.accepted == 0
    assert job.drafted <= 50  # a few tries, then only probes every 20 steps

    oracle = oracle_drafts(backend)

    good = DraftVerify(ListDrafter(oracle), AdaptiveLookahead(CURVE, cfg))
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


def test_model_drafter_weighs_a_catch_up_by_what_the_policy_expects_and_the_tokens_left():
    from models.drafters import ModelDrafter

    prompt = list(range(1, 11)) * 4  # 40 tokens to catch up on: 0.4 s at 0.01 s a token
    # the policy expects each chance to save a whole 0.04 s step (the constant guess: half of one)
    d = ModelDrafter(FakeLM(vocab=12), catch_up=(0.01, 0.04))
    d.saving, d.chances_left = (lambda: 1.0), (lambda: 200)
    waits = 0
    while not d.propose(prompt, 3):
        waits += 1
        prompt = [*prompt, 1]
    assert waits == 14  # 1.0 * 0.04 * w >= 0.01 * (40 + w): the first w is 14 (the old half-step saving: 40)
    # six tokens left: even drafting at every one of them saves 0.24 s, under the 0.46 s catch-up
    late = ModelDrafter(FakeLM(vocab=12), catch_up=(0.01, 0.04))
    late.saving, late.chances_left = (lambda: 1.0), (lambda: 6)
    assert all(late.propose([*prompt, *[1] * i], 3) == [] for i in range(100))
    assert late.backend.calls == []  # never paid for


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
