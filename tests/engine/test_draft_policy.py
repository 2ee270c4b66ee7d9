"""The drafting policy (models.draft_policy) on fakes: the measured cost curve, per-kind acceptance with
shadow scores, back-off and probes, the batch bar; and greedy identity while it switches drafting on and off."""

from __future__ import annotations

import threading

import pytest

from models.decode import DecodeJob
from models.draft_policy import DraftPolicy, PolicyConfig, StepCosts, expected_tokens
from models.drafters import PromptLookupDrafter
from models.engine import Engine
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from models.verify import DraftVerify
from testkit.fake_backend import FakeBackend

# llama.cpp on this CPU (bench/results/llama_cpp_curve.md): k + 1 tokens cost almost k + 1 steps at first
STEEP = (1.0, 1.85, 2.25, 2.64, 3.0, 3.4, 3.8, 4.17, 4.55, 4.9, 5.3, 5.65, 6.0, 6.4, 6.75, 7.13)
FLAT = tuple(1.0 + 0.02 * i for i in range(40))  # a forward that is not compute-bound yet
WAIT = 10.0


def policy(curve=STEEP, **cfg) -> DraftPolicy:
    return DraftPolicy(StepCosts(curve), PolicyConfig(**cfg))


# ----------------------------------------------------------------------------- the cost curve


def test_step_costs_start_from_the_calibration_and_follow_the_engines_timings():
    costs = StepCosts((1.0, 1.5, 2.0), min_seen=2)
    assert costs.cost(1) == 1.0 and costs.cost(3) == 2.0 and costs.cost(5) == pytest.approx(3.0)  # extrapolated
    for i in range(3):  # the engine's steps: one token takes 10 ms, three take 40 ms here
        costs.observe(1, 0.010, step=("a", i))
        costs.observe(3, 0.040, step=("b", i))
    assert costs.cost(3) == pytest.approx(4.0)
    assert costs.cost(2) == pytest.approx(2.5)  # not observed: between its observed neighbours
    assert costs.cost(5) == pytest.approx(6.0)  # past them: the calibration's shape at the observed level
    assert costs.one_step_seconds() == pytest.approx(0.010)


def test_a_batch_that_costs_more_than_the_calibration_does_not_make_drafts_look_free():
    # the calibration is one sequence's; eight sequences' one-token step costs 6 steps, not 4.17
    costs = StepCosts(STEEP)
    for i in range(3):
        costs.observe(1, 0.010, step=("one", i))
        costs.observe(8, 0.060, step=("eight", i))
    assert costs.cost(8) == pytest.approx(6.0)
    for t in range(9, 17):  # each draft past the batch's step still costs what the calibration says, scaled
        assert costs.cost(t) == pytest.approx(STEEP[t - 1] * 6.0 / STEEP[7])
    pol = DraftPolicy(costs, PolicyConfig())
    pol.lookahead(7)  # seven others in the step
    assert pol.best(0.6)[0] == 0  # an open-chat acceptance does not pay for its verify rows


def test_a_verify_next_to_others_costs_their_step_plus_its_own_block():
    # llama.cpp computes a batch as ubatches of equally many tokens per sequence (the transformers
    # path groups by token count): 7 rows + one sequence's 1 + k is a step of 8 rows, then a k-block
    rows, block = StepCosts(STEEP, min_seen=1, weight=1.0), StepCosts(STEEP, min_seen=1, weight=1.0)
    pol = DraftPolicy(rows, PolicyConfig(), block=block)
    pol.observe_step(1, 0.010, step=1, seqs=1)  # one sequence, one token: a point of both
    pol.observe_step(8, 0.060, step=2, seqs=8)  # eight rows
    pol.observe_step(5, 0.025, step=3, seqs=1)  # one sequence's block of 5
    pol.observe_step(12, 0.200, step=4, seqs=8)  # eight rows and a 4-block: two computes, neither curve
    assert rows.cost(8) == pytest.approx(6.0) and block.cost(5) == pytest.approx(2.5)
    assert 12 not in rows._seen and 12 not in block._seen
    pol.lookahead(7)
    assert pol.verify_cost(4) == pytest.approx(6.0 + block.cost(4))
    pol.lookahead(0)  # alone, the drafts ride in the sequence's own block
    assert pol.verify_cost(4) == pytest.approx(block.cost(5))
    # eight sequences are past this curve's saturation: a near-certain draft gains at most 1.14×
    # over a plain step with its block priced in, under the 1.2 bar there
    pol.lookahead(7)
    assert pol.bar() == 1.2 and pol.best(0.95)[0] == 0
    assert max((7 + expected_tokens(0.95, k)) / pol.verify_cost(k) for k in range(1, 9)) < 1.2 * 8 / 6.0


def test_step_costs_count_a_batch_step_once_and_stay_non_decreasing():
    costs = StepCosts((1.0, 2.0, 3.0), min_seen=1, weight=1.0)
    for _ in range(5):  # every job of one batch reports the same step
        costs.observe(1, 0.010, step=7)
    assert costs._seen[1] == 1
    costs.observe(2, 0.005, step=8)  # noise: two tokens "faster" than one
    assert costs.cost(2) == 1.0 and costs.cost(3) == 1.5  # the calibration's 2 → 3 step, from the level at 2
    assert list(costs.curve(3)) == sorted(costs.curve(3))


def test_saturation_is_where_one_more_token_costs_as_much_as_the_ones_there():
    # each token costs a quarter step until 8, then a whole one: compute-bound from 8 on
    curve = [1.0 + 0.25 * i for i in range(8)] + [2.75 + (i - 7) for i in range(8, 40)]
    costs = StepCosts(curve)
    assert costs.saturation() == 8
    assert StepCosts(FLAT).saturation() == StepCosts(FLAT).max_tokens  # never saturated


# ----------------------------------------------------------------------------- decisions


def test_a_steep_verify_needs_high_acceptance_and_a_flat_one_does_not():
    steep, flat = policy(), policy(FLAT)
    for a in (0.5, 0.7):
        assert steep.best(a)[0] == 0  # a verify of k costs almost k steps: these do not pay
        assert flat.best(a)[0] > 0
    k, gain = steep.best(0.97)
    assert k >= 4 and gain > 1.03
    # the choice maximises expected tokens per unit of cost
    rates = [expected_tokens(0.97, j) / steep.costs.cost(j + 1) for j in range(1, 9)]
    assert k == 1 + rates.index(max(rates))


def test_unverified_free_proposals_are_scored_against_what_is_decoded():
    pol = policy(priors=((3, 0.3),))
    pol.lookahead()
    ctx = [1, 2, 3, 4]
    assert pol.limit(3, [5, 6, 7, 8], len(ctx)) == 0  # does not pay at its prior: not verified...
    assert pol.kinds[3].skipped == 1 and pol.kinds[3].drafted == 0
    before = pol.acceptance(3)
    pol.observe([*ctx, 5, 6])  # outcome not known yet
    assert pol.acceptance(3) == before
    pol.observe([*ctx, 5, 6, 7, 8])  # ...but it would have been accepted whole
    assert pol.acceptance(3) > before
    turned_on = False
    for _ in range(10):  # a run of proposals that keep coming true turns verifying on
        if pol.limit(3, [9, 9, 9, 9], len(ctx)) > 0:
            turned_on = True
            break
        ctx += [9, 9, 9, 9]
        pol.observe(ctx)
    assert turned_on and pol.acceptance(3) > 0.75
    assert pol.kinds[3].drafted == 0  # nothing was verified to learn it
    high = pol.acceptance(3)
    pol._shadow = None
    assert pol.limit(3, [1, 2], 0) > 0
    pol.record(3, 2, 0)  # a real verify rejected at its first draft lowers it again
    assert pol.acceptance(3) < high and pol.kinds[3].wait > 0


def test_rejected_verifies_back_off_exponentially():
    pol = policy(FLAT, prior_accept=0.9, backoff_base=2, backoff_max=8)
    pol.lookahead()
    waits = []
    for _ in range(4):
        assert pol.limit(1, [7, 7, 7], 0) > 0
        pol.record(1, 3, 0)  # rejected at the first draft
        waits.append(pol.kinds[1].wait)
        while pol.kinds[1].wait:  # sits out that many chances (scored in the shadow, not verified)
            assert pol.limit(1, [7, 7, 7], 0) == 0
        pol._shadow = None
        pol.kinds[1].hits = pol.kinds[1].tries  # keep the rate paying: only the back-off is tested
    assert waits == [2, 4, 8, 8]
    pol.record(1, 3, 2)  # an accepted draft ends the run
    assert pol.kinds[1].wait == 0 and pol.kinds[1].rejections == 0


def test_a_costly_kind_that_does_not_pay_is_probed_rarely_and_ever_more_rarely():
    pol = DraftPolicy(StepCosts(STEEP), PolicyConfig(probe_every=4, probe_backoff=4, backoff_base=1), all_free=False)
    pol.draft_cost = 0.3
    seen = []
    for _ in range(40):
        k = pol.lookahead()
        seen.append(k)
        if k:
            assert pol.limit(0, [1] * k, 0) == k == 1  # a probe: one draft
            pol.record(0, 1, 0)  # which fails
    probes = [i for i, k in enumerate(seen) if k]
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert len(probes) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0]  # waits grow
    assert pol.kinds[0].skipped >= 30


def test_a_batch_raises_the_bar_and_past_saturation_the_bar_is_higher():
    pol = policy(prior_accept=0.85)
    assert pol.lookahead(0) and pol.rate(0)[0] > 0  # alone it pays
    pol.lookahead(15)
    assert pol.rate(0)[0] == 0  # with 15 others in the step the extra rows do not
    # a curve that saturates at 4: from there a verify must promise saturated_gain
    sat = [1.0, 1.05, 1.1, 1.15] + [1.15 + 0.2 * (i - 3) for i in range(4, 40)]
    cfg = {"prior_accept": 0.99, "saturation_ratio": 0.5}
    low, high = policy(sat, saturated_gain=1.0, **cfg), policy(sat, saturated_gain=9.0, **cfg)
    assert low.costs.saturation(0.5) == 4
    for p in (low, high):
        p.lookahead(5)
    assert low.bar() == 1.0 and high.bar() == 9.0
    assert low.rate(0)[0] > 0 and high.rate(0)[0] == 0


# ----------------------------------------------------------------------------- greedy identity


class SwitchingDrafter:
    """Prompt-lookup-like (free, class 3) proposals: the target's own greedy continuation during some
    stretches of the answer, wrong tokens in others, so the policy turns verifying off and on."""

    last_class = 3

    def __init__(self, fake: FakeBackend, period: int = 24):
        self.fake, self.period = fake, period

    def propose(self, ctx: list[int], k: int) -> list[int]:
        out, c = [], list(ctx)
        for _ in range(k):
            out.append(self.fake._next(c))
            c.append(out[-1])
        if (len(ctx) // self.period) % 2:
            out = [t % 20 + 1 for t in out]  # wrong: never the target's token
        return out

    def draft_probs(self):
        return None


def _job(fake: FakeBackend, text: str, drafting: bool, n: int = 150) -> tuple[DecodeJob, DraftVerify | None]:
    spec = None
    if drafting:
        spec = DraftVerify(
            SwitchingDrafter(fake),
            DraftPolicy(StepCosts(FLAT), PolicyConfig(k_max=6, backoff_base=2, priors=((3, 0.5),))),
        )
    job = DecodeJob(
        fake,
        fake.new_state(),
        fake.chat_tokens([{"role": "user", "content": text}]),
        SamplingParams(temperature=0.0, max_tokens=n),
        SchedulerConfig(lookahead_tokens=6, draft_before_first_text=True),
        drafter=spec,
        verifier=spec,
    )
    return job, spec


def test_greedy_output_is_plain_greedy_while_the_policy_switches_drafting_on_and_off():
    texts = [f"tell me about thing {i}" for i in range(4)]
    fake = FakeBackend(answer_tokens=140)
    plain = []
    for t in texts:
        job, _ = _job(fake, t, False)
        while not job.finished:
            job.step()
        plain.append(job.generated)
    # alone
    for t, ref in zip(texts, plain, strict=True):
        job, spec = _job(fake, t, True)
        while not job.finished:
            job.step()
        assert job.generated == ref
        counts = spec.kind_counts()["prompt_lookup_3gram"]
        assert counts["drafted"] > 0 and counts["accepted"] > 0 and counts["skipped"] > 0  # on and off
        assert job.metrics()["draft_kinds"] == spec.kind_counts()
    # batched: one engine, every response in one forward per step
    eng = Engine(max_running=8)
    try:
        done: list[tuple[DecodeJob, DraftVerify]] = []
        finished = []
        for t in texts:
            job, spec = _job(fake, t, True)
            ev = threading.Event()
            eng.submit(job, lambda e, ev=ev: ev.set() if e.done is not None else None)
            done.append((job, spec))
            finished.append(ev)
        for ev in finished:
            assert ev.wait(WAIT)
    finally:
        eng.close()
    assert [j.generated for j, _ in done] == plain
    assert all(s.kind_counts()["prompt_lookup_3gram"]["skipped"] > 0 for _, s in done)
    assert sum(s.kind_counts()["prompt_lookup_3gram"]["accepted"] for _, s in done) > 0
    # the engine's step timings reached the shared cost curve's owner (each job's policy here)
    assert any(s.policy.costs._seen for _, s in done)


def test_prompt_lookup_default_wiring_uses_the_policy():
    from models.speculative import SpecConfig, Speculator

    fake = FakeBackend()
    spec = Speculator(fake, SpecConfig(cost_curve=STEEP))
    s = spec.for_job()
    assert isinstance(s.policy, DraftPolicy) and isinstance(s.drafter, PromptLookupDrafter)
    assert s.policy.costs is spec.step_costs is spec.with_config(k_max=4).step_costs  # one pair of curves per backend
    assert s.policy.block is spec.block_costs is spec.with_config(k_max=4).block_costs
    assert s.policy.prior(3) == pytest.approx(0.8)


class EngineJob:
    """A batchable engine job on ``backend`` (jobs on one backend share each step's forward) that
    records each ``plan`` call's arguments (``plans``) and forwards ``width`` tokens a step; it ends
    after ``steps_to_end`` steps, or when ``until`` has ended (so the two share steps)."""

    batchable = True

    def __init__(
        self, backend: FakeBackend, width: int = 1, steps_to_end: int = 3, until: EngineJob | None = None
    ) -> None:
        self.backend = backend
        self.state = self.backend.new_state()
        self.state.tokens = [1, 2, 3]
        self.width, self.steps_to_end, self.until = width, steps_to_end, until
        self.steps, self.finished = 0, False
        self.plans: list[dict[str, object]] = []
        self.observed: list[tuple[int, int]] = []  # (tokens, sequences) of each reported step

    def plan(self, load=0, prefill_budget=None, draft=True, prefill_piece=None):
        from models.decode import Forward

        self.plans.append({"load": load, "draft": draft})
        return Forward([5] * self.width, 1)

    def observe_step(self, tokens, seconds, step=None, seqs=1):
        self.observed.append((tokens, seqs))

    def complete(self, rows, seconds=0.0):
        from models.decode import Done, JobEvents

        self.steps += 1
        self.finished = self.until.finished if self.until is not None else self.steps == self.steps_to_end
        return JobEvents(done=Done("stop", {}) if self.finished else None)

    def step(self):  # pragma: no cover - batchable
        raise AssertionError

    def cancel(self):
        from models.decode import JobEvents

        return JobEvents()


def run_in_engine(*jobs: EngineJob) -> None:
    """Submit ``jobs`` to one engine, in order, and wait for every one to end."""
    eng = Engine(max_running=8)
    try:
        ends = [threading.Event() for _ in jobs]
        for j, ev in zip(jobs, ends, strict=True):
            eng.submit(j, lambda e, ev=ev: ev.set() if e.done is not None else None)
        for ev in ends:
            assert ev.wait(WAIT)
    finally:
        eng.close()


def test_each_job_sees_the_other_sequences_of_the_step_and_each_step_is_reported_with_them():
    fake = FakeBackend()
    jobs = (EngineJob(fake, width=9), EngineJob(fake), EngineJob(fake))
    run_in_engine(*jobs)
    # a's 9-token block is a compute of its own: to b and c it is one more sequence, as they are to a
    assert all(p["load"] == 2 for j in jobs for p in j.plans)
    assert (11, 3) in jobs[0].observed  # the engine tells how many sequences held the step's tokens


def test_metrics_count_drafted_accepted_and_skipped_per_kind():
    from prometheus_client.parser import text_string_to_metric_families

    from gateway.core.metrics import Metrics

    m = Metrics()
    kinds = {"prompt_lookup_3gram": {"drafted": 12, "accepted": 10, "skipped": 3}}
    m.observe_response({"tokens": 20, "draft_kinds": kinds})
    m.observe_response(
        {"tokens": 5, "draft_kinds": {"prompt_lookup_1gram": {"drafted": 0, "accepted": 0, "skipped": 7}}}
    )
    m.observe_response({"tokens": 5})  # no drafting: nothing per kind
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(m.render(0, 0).decode())
        for s in fam.samples
    }
    k3, k1 = (("kind", "prompt_lookup_3gram"),), (("kind", "prompt_lookup_1gram"),)
    assert samples[("stream_omni:spec_decode_kind_draft_tokens_total", k3)] == 12
    assert samples[("stream_omni:spec_decode_kind_accepted_tokens_total", k3)] == 10
    assert samples[("stream_omni:spec_decode_kind_skipped_total", k3)] == 3
    assert samples[("stream_omni:spec_decode_kind_skipped_total", k1)] == 7
    assert samples[("stream_omni:spec_decode_kind_draft_tokens_total", k1)] == 0


def test_nobody_drafts_while_a_prompt_goes_in():
    # a verify block lengthens the step a newcomer's first text waits for
    class Newcomer(EngineJob):
        @property
        def prompt_pending(self) -> bool:
            return self.steps < 2  # its prompt goes in over two steps

    fake = FakeBackend()
    newcomer = Newcomer(fake, steps_to_end=4)
    running = EngineJob(fake, until=newcomer)
    run_in_engine(running, newcomer)
    # the newcomer's two prompt steps: no drafting for anyone; after them, drafting is allowed again
    assert [p["draft"] for p in newcomer.plans] == [False, False, True, True]
    drafts = [p["draft"] for p in running.plans]
    assert drafts[-2:] == [True, True] and False in drafts


def test_no_probe_at_a_batch_size_where_even_perfect_drafts_would_not_pay():
    # a draft model that has sat out must catch up on every token since before it can draft (a
    # prefill the whole batch waits for): at a batch size no acceptance could pay for, a probe
    # tells nothing and costs that prefill
    costs = StepCosts(STEEP)
    for i in range(3):
        costs.observe(1, 0.010, step=("one", i))
        costs.observe(8, 0.030, step=("eight", i))  # eight rows cost three steps: rows are cheap
    pol = DraftPolicy(costs, PolicyConfig(probe_every=4), all_free=False, draft_cost=0.5)
    for _ in range(10):
        pol.record(0, 4, 0)  # the model's drafts stopped paying
        pol.kinds[0].wait = 0
    assert [pol.budget(0) for _ in range(3)] == [0, 0, 0]
    assert pol.lookahead(7) == 0 and all(pol.budget(0) == 0 for _ in range(40))  # eight in the step: never
    assert pol.kinds[0].skipped >= 40
    pol.lookahead(0)  # alone, perfect drafts would pay: the probe comes
    assert any(pol.budget(0) for _ in range(40))
