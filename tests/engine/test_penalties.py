"""models.penalties on small integer logits, and DecodeJob applying them on every decoding path."""

from __future__ import annotations

import numpy as np
import pytest

from models.decode import DecodeJob
from models.penalties import active, breaker_mask, dry_runs, penalize
from models.sampling import SamplingParams, probs
from models.scheduler import SchedulerConfig
from models.verify import DraftVerify, FixedLookahead
from tests.engine.spec_fakes import FakeLM, ListDrafter, oracle_drafts
from tests.ngrams import repeats

LOGITS = np.array([4.0, 3.0, 2.0, 1.0, -1.0, -2.0], dtype=np.float32)


def test_nothing_on_returns_the_same_array():
    assert not active(SamplingParams())
    assert penalize(LOGITS, SamplingParams(), [0, 1], [2, 2]) is LOGITS


def test_frequency_counts_generated_tokens_only():
    out = penalize(LOGITS, SamplingParams(frequency_penalty=0.5), prompt=[1, 1, 1], generated=[0, 0, 2])
    assert out.tolist() == [3.0, 3.0, 1.5, 1.0, -1.0, -2.0]


def test_presence_counts_once():
    out = penalize(LOGITS, SamplingParams(presence_penalty=1.0), prompt=[3], generated=[0, 0, 5])
    assert out.tolist() == [3.0, 3.0, 2.0, 1.0, -1.0, -3.0]


def test_negative_frequency_favours_repeats():
    out = penalize(LOGITS, SamplingParams(frequency_penalty=-2.0), prompt=[], generated=[1])
    assert int(np.argmax(out)) == 1


def test_repetition_divides_positive_and_multiplies_negative_over_prompt_and_output():
    out = penalize(LOGITS, SamplingParams(repetition_penalty=2.0), prompt=[0], generated=[4])
    assert out.tolist() == [2.0, 3.0, 2.0, 1.0, -2.0, -2.0]


def test_logit_bias_adds():
    out = penalize(LOGITS, SamplingParams(logit_bias=((5, 10.0), (0, -100.0))), [], [])
    assert int(np.argmax(out)) == 5 and out[0] == -96.0


def test_dry_runs_find_the_longest_repeat_before_each_candidate():
    # ... 7 8 9 | 1 ... 8 9 | 2 ... then 8 9: after "8 9" came 1 (run 3: "7 8 9" matches? no: "x 8 9")
    hist = np.array([7, 8, 9, 1, 5, 8, 9, 2, 7, 8, 9])
    ids, runs = dry_runs(hist, 10)
    got = dict(zip(ids.tolist(), runs.tolist(), strict=True))
    assert got == {1: 3, 2: 2}  # "7 8 9" was followed by 1, "5 8 9" shares only "8 9" with the end


def test_dry_penalty_grows_with_the_run_and_spares_short_ones():
    hist = [7, 8, 9, 1, 5, 8, 9, 2, 7, 8, 9]
    p = SamplingParams(dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=2)
    out = penalize(np.zeros(10, dtype=np.float32), p, hist, [])
    assert out[1] == -2.0  # run 3: 1 x 2^(3-2)
    assert out[2] == -1.0  # run 2: 1 x 2^0
    p3 = SamplingParams(dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=3)
    out3 = penalize(np.zeros(10, dtype=np.float32), p3, hist, [])
    assert out3[1] == -1.0 and out3[2] == 0.0


def test_dry_stops_at_breakers():
    hist = np.array([7, 8, 9, 1, 7, 8, 9])
    brk = np.zeros(10, dtype=bool)
    brk[7] = True
    ids, runs = dry_runs(hist, 10, brk)
    assert dict(zip(ids.tolist(), runs.tolist(), strict=True)) == {1: 2}  # the run stops before 7
    brk[9] = True  # the last token is a breaker: nothing is a repeat
    assert len(dry_runs(hist, 10, brk)[0]) == 0


def test_dry_last_n_limits_the_search():
    hist = [7, 8, 9, 1, 0, 0, 0, 7, 8, 9]
    p = SamplingParams(dry_multiplier=1.0, dry_allowed_length=2, dry_penalty_last_n=6)
    assert penalize(np.zeros(10, dtype=np.float32), p, hist, [])[1] == 0.0
    p_all = SamplingParams(dry_multiplier=1.0, dry_allowed_length=2)
    assert penalize(np.zeros(10, dtype=np.float32), p_all, hist, [])[1] < 0.0


def test_breaker_mask_from_token_text():
    texts = ["a", "b\n", ":", "c"]
    assert breaker_mask(4, texts.__getitem__).tolist() == [False, True, True, False]


def test_top_k_and_min_p_cut_the_tail():
    p = probs(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    assert np.count_nonzero(p) == 2 and p.sum() == pytest.approx(1.0)
    p = probs(LOGITS, SamplingParams(temperature=1.0, min_p=0.3))  # e^-1 = 0.37 ≥ 0.3, e^-2 = 0.14 < 0.3
    assert np.count_nonzero(p) == 2


# ----------------------------------------------------------------------------- DecodeJob


def decode(params: SamplingParams, drafter=None, top=None, scale=3.0) -> DecodeJob:
    backend = FakeLM(vocab=12, scale=scale)
    sched = SchedulerConfig(lookahead_tokens=8 if drafter else 0, draft_before_first_text=True)
    spec = DraftVerify(drafter, FixedLookahead(4)) if drafter else None
    job = DecodeJob(backend, backend.new_state(), [1, 2, 3], params, sched, spec, spec, top_logprobs=top)
    while not job.finished:
        job.step()
    return job


@pytest.mark.parametrize(
    "knob",
    [
        {"frequency_penalty": 1.5},
        {"repetition_penalty": 1.8},
        {"dry_multiplier": 0.8},
    ],
)
def test_each_penalty_makes_greedy_output_repeat_less(knob):
    plain = decode(SamplingParams(max_tokens=60)).generated
    pen = decode(SamplingParams(max_tokens=60, **knob)).generated
    assert repeats(pen, 3) < repeats(plain, 3), (plain, pen)


def test_presence_penalty_brings_new_tokens_first():
    # logits within ≈ 2 of each other: a presence penalty of 2 puts every unseen token first
    plain = decode(SamplingParams(max_tokens=12), scale=0.5).generated
    pen = decode(SamplingParams(max_tokens=12, presence_penalty=2.0), scale=0.5).generated
    assert len(set(pen)) > len(set(plain)), (plain, pen)


def test_logit_bias_steers_the_choice():
    plain = decode(SamplingParams(max_tokens=30)).generated
    assert 4 not in plain or plain.count(4) < 30
    biased = decode(SamplingParams(max_tokens=30, logit_bias=((4, 100.0),))).generated
    assert biased == [4] * 30
    banned = decode(SamplingParams(max_tokens=30, logit_bias=((plain[0], -100.0),))).generated
    assert plain[0] not in banned


def test_logit_bias_outside_the_vocabulary_is_refused():
    with pytest.raises(ValueError, match="logit_bias"):
        decode(SamplingParams(logit_bias=((12, 1.0),)))


@pytest.mark.parametrize("drafter", ["oracle", "list"])
def test_drafting_under_penalties_keeps_greedy_output_exact(drafter):
    """Drafts are verified against the penalised rows: drafting changes nothing, and it still drafts."""
    params = SamplingParams(max_tokens=60, dry_multiplier=0.8, frequency_penalty=0.3, repetition_penalty=1.2)
    plain = decode(params)
    fn = oracle_drafts(FakeLM(vocab=12)) if drafter == "oracle" else (lambda ctx, k: (ctx[-4:] * k)[:k])
    spec = decode(params, drafter=ListDrafter(fn))
    assert spec.generated == plain.generated
    assert spec.drafted > 0


def test_sampled_drafting_under_penalties_matches_the_penalised_distribution():
    """First-token-after-a-draft frequencies with drafting match plain sampling (both penalised)."""
    params = dict(temperature=1.0, max_tokens=6, dry_multiplier=2.0, presence_penalty=1.5)
    backend = FakeLM(vocab=12)
    counts_plain = np.zeros(12)
    counts_spec = np.zeros(12)
    for seed in range(300):
        p = SamplingParams(seed=seed, **params)
        counts_plain[decode(p).generated[-1]] += 1
        counts_spec[decode(p, drafter=ListDrafter(oracle_drafts(backend))).generated[-1]] += 1
    # the same distribution: total variation small for 300 draws each
    tv = 0.5 * np.abs(counts_plain / 300 - counts_spec / 300).sum()
    assert tv < 0.15, (counts_plain, counts_spec)


def test_logprobs_hold_the_chosen_token_and_sum_below_one():
    """Under a penalty the report is of the distribution the token was chosen from: at greedy the
    chosen token is the first alternative, with the same logprob, and the alternatives' mass is ≤ 1."""
    backend = FakeLM(vocab=12)
    params = SamplingParams(max_tokens=20, presence_penalty=3.0, top_logprobs=3)
    job = DecodeJob(backend, backend.new_state(), [1, 2, 3], params, SchedulerConfig(lookahead_tokens=0))
    got = []
    while not job.finished:
        got += job.step().logprobs
    assert len(got) == 20
    for lp in got:
        assert lp.top[0] == (lp.text, pytest.approx(lp.logprob))
        assert sum(np.exp(v) for _, v in lp.top) <= 1.0 + 1e-6
    plain = decode(SamplingParams(max_tokens=20, top_logprobs=3))
    assert job.generated != plain.generated  # the penalty changed the choice the logprobs describe
