"""Speculative decoding on real transformers models: tiny random Llamas, and the embedded SmolLM2.

Greedy decoding with any drafter must give exactly the tokens plain greedy decoding gives.
The tiny models run in float32; the embedded model runs in bf16, where identity needs the
batch-invariant fast path (a k-token verify block gives bitwise the logits of k one-token steps).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.decode import DecodeJob
from models.drafters import MODEL_CLASS, LookupFirstDrafter, ModelDrafter, PromptLookupDrafter, SelfDraftBackend
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from models.speculative import SpecConfig, Speculator
from models.verify import (
    DEFAULT_COST_CURVE,
    AdaptiveLookahead,
    DraftVerify,
    FixedLookahead,
    LookaheadConfig,
    draft_agreement,
)
from testkit.tiny_models import build_tiny_llama
from tests.fuzzing import examples

INIT = 0.1  # weight scale: 0.02 makes a random Llama repeat one token forever, 0.3 makes it chaotic
DRAFT_NOISE = 0.3  # the draft model is the target plus this much relative weight noise


def save_tiny_llama(out: Path, tokenizer_dir: Path, noise: float = 0.0) -> Path:
    """A random 2-layer Llama (SmolLM2's tokenizer); ``noise`` > 0 perturbs it into a draft model."""
    return build_tiny_llama(out, tokenizer_dir, init=INIT, noise=noise)


@pytest.fixture(scope="module")
def target(tmp_path_factory, tokenizer_dir):
    from models.llm import LLMConfig, load_backend

    path = save_tiny_llama(tmp_path_factory.mktemp("target"), tokenizer_dir)
    return load_backend(LLMConfig(model=str(path), dtype="float32", served_name="tiny-target"))


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory, tokenizer_dir):
    return save_tiny_llama(tmp_path_factory.mktemp("draft"), tokenizer_dir, noise=DRAFT_NOISE)


@pytest.fixture(scope="module")
def draft(draft_dir):
    from models.llm import LLMConfig, load_backend

    return load_backend(LLMConfig(model=str(draft_dir), dtype="float32", served_name="tiny-draft"))


def greedy(backend, prompt, max_tokens, spec=None):
    sched = SchedulerConfig(lookahead_tokens=8 if spec is not None else 0, draft_before_first_text=True)
    params = SamplingParams(max_tokens=max_tokens)
    job = DecodeJob(backend, backend.new_state(), prompt, params, sched, drafter=spec, verifier=spec)
    steps = 0
    while not job.finished:
        job.step()
        steps += 1
    job.steps = steps
    return job


def make_spec(kind: str, target, draft, k: int) -> DraftVerify:
    if kind == "lookup":
        return DraftVerify(PromptLookupDrafter(), FixedLookahead(k))
    if kind == "lookup_adaptive":
        return DraftVerify(PromptLookupDrafter(), AdaptiveLookahead(config=LookaheadConfig(k_max=k)))
    if kind == "draft":
        return DraftVerify(ModelDrafter(draft), FixedLookahead(k))
    if kind == "self":
        return DraftVerify(ModelDrafter(SelfDraftBackend(target, 1)), FixedLookahead(k))
    if kind == "lookup_first":  # wired like Speculator.for_job: lookup classes free, the model paid
        d = LookupFirstDrafter(PromptLookupDrafter(), ModelDrafter(draft, seconds_per_token=0.001))
        pol = AdaptiveLookahead(
            config=LookaheadConfig(k_max=k),
            draft_seconds=d.seconds_per_token,
            free_classes=frozenset({1, 2, 3}),
            step_seconds=0.01,
        )
        d.rate, d.budget = pol.rate, pol.budget
        return DraftVerify(d, pol)
    raise AssertionError(kind)


# ----------------------------------------------------------------------------- self-drafting


def test_self_draft_with_every_layer_is_the_target(target):
    full = SelfDraftBackend(target, 2)
    a_state, b_state = target.new_state(), full.new_state()
    prompt = list(range(100, 120))
    a = target.forward(a_state, prompt, n_logits=3)
    b = full.forward(b_state, prompt, n_logits=3)
    np.testing.assert_allclose(a, b, atol=1e-4)
    target.crop(a_state, 15)
    full.crop(b_state, 15)
    assert b_state.tokens == prompt[:15]
    a = target.forward(a_state, [5, 6], n_logits=2)
    b = full.forward(b_state, [5, 6], n_logits=2)
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_self_draft_with_fewer_layers_is_a_different_model(target):
    one = SelfDraftBackend(target, 1)
    a = target.forward(target.new_state(), list(range(10, 30)), n_logits=1)
    b = one.forward(one.new_state(), list(range(10, 30)), n_logits=1)
    assert not np.allclose(a, b, atol=1e-3)
    assert one.vocab_size == target.vocab_size and one.eos_ids == target.eos_ids


def test_self_draft_layer_count_is_checked(target):
    for bad in (0, 3):
        with pytest.raises(ValueError, match="1..2"):
            SelfDraftBackend(target, bad)


# ----------------------------------------------------------------------------- draft model


def test_model_drafter_drafts_greedily_and_follows_the_context(draft):
    d = ModelDrafter(draft)
    ctx = list(range(50, 70))
    drafts = d.propose(ctx, 4)
    assert drafts == greedy(draft, ctx, 4).generated  # its own greedy continuation
    assert d.state.tokens == ctx + drafts[:-1]
    assert d.seconds_per_token() > 0
    # the target kept two drafts and chose another token: the drafter re-syncs by common prefix
    ctx2 = [*ctx, *drafts[:2], 7]
    again = d.propose(ctx2, 3)
    assert again == greedy(draft, ctx2, 3).generated
    assert d.state.tokens[: len(ctx2)] == ctx2


def test_draft_model_is_built_from_config(target, draft_dir):
    cfg = SpecConfig(drafter="draft_model", draft_model=str(draft_dir), draft_dtype="float32")
    spec = Speculator(target, cfg)  # calibrates the cost curve on the target (≈ a second)
    assert len(spec.cost_curve) == cfg.k_max + 1 and spec.cost_curve[0] == 1.0
    s = spec.for_job()  # prompt lookup first where it pays, the draft model otherwise
    assert isinstance(s.drafter, LookupFirstDrafter) and s.drafter.model.backend is spec.draft_backend
    assert spec.draft_s > 0 and spec.step_s > 0  # measured once, so drafting is never thought free
    prompt = list(range(300, 320))
    assert greedy(target, prompt, 24, s).generated == greedy(target, prompt, 24).generated
    alone = Speculator(target, replace(cfg, lookup_first=False), draft_backend=spec.draft_backend).for_job()
    assert isinstance(alone.drafter, ModelDrafter)
    assert greedy(target, prompt, 24, alone).generated == greedy(target, prompt, 24).generated


def test_draft_agreement_is_how_often_two_models_choose_alike(target, draft):
    ids = list(range(200, 260))
    assert draft_agreement(target, target, ids) == 1.0  # a model always agrees with itself
    mine = target.forward(target.new_state(), ids, n_logits=len(ids)).argmax(-1)
    theirs = draft.forward(draft.new_state(), ids, n_logits=len(ids)).argmax(-1)
    assert draft_agreement(target, draft, ids) == pytest.approx(float(np.mean(mine == theirs)))
    assert 0.0 < draft_agreement(target, draft, ids) < 1.0  # a noisy copy: sometimes, not always
    with pytest.raises(ValueError):
        draft_agreement(target, draft, [5])


def test_speculator_starts_model_drafts_at_their_measured_agreement(target, draft):
    """The model class's prior acceptance is the measured agreement (clipped), so a good draft
    model wins over prompt lookup's guesses from the first step and a useless one starts off."""
    same = Speculator(target, SpecConfig(drafter="draft_model", draft_model="x"), draft_backend=target)
    assert same.draft_accept == 1.0 and dict(same.lookahead.class_priors)[MODEL_CLASS] == 0.95
    noisy = Speculator(target, SpecConfig(drafter="draft_model", draft_model="x"), draft_backend=draft)
    assert dict(noisy.lookahead.class_priors)[MODEL_CLASS] == pytest.approx(min(max(noisy.draft_accept, 0.05), 0.95))
    assert noisy.with_config(k_max=4).lookahead.class_priors == noisy.lookahead.class_priors
    assert noisy.for_job().policy.acceptance(MODEL_CLASS) == dict(noisy.lookahead.class_priors)[MODEL_CLASS]
    plain = Speculator(target, SpecConfig(drafter="prompt_lookup"))
    assert plain.draft_accept is None and MODEL_CLASS not in dict(plain.lookahead.class_priors)


# ----------------------------------------------------------------------------- greedy identity


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seg=st.lists(st.integers(0, 400), min_size=1, max_size=16),
    repeat=st.integers(1, 3),
    max_tokens=st.integers(1, 40),
    k=st.integers(1, 8),
    kind=st.sampled_from(["lookup", "lookup_adaptive", "draft", "self", "lookup_first"]),
)
def test_greedy_speculative_equals_plain_greedy(target, draft, seg, repeat, max_tokens, k, kind):
    prompt = seg * repeat
    plain = greedy(target, prompt, max_tokens)
    spec = greedy(target, prompt, max_tokens, make_spec(kind, target, draft, k))
    assert spec.generated == plain.generated
    assert spec.accepted <= spec.drafted


@pytest.mark.parametrize("kind", ["lookup", "draft", "self"])
def test_each_drafter_accepts_and_rejects_on_tiny_llama(target, draft, kind):
    rng = np.random.default_rng(0)
    drafted = accepted = 0
    for _ in range(6):
        prompt = [int(x) for x in rng.integers(0, 300, 12)]
        plain = greedy(target, prompt, 30)
        spec = greedy(target, prompt, 30, make_spec(kind, target, draft, 4))
        assert spec.generated == plain.generated
        drafted += spec.drafted
        accepted += spec.accepted
    assert 0 < accepted < drafted  # both paths of the verifier ran


# ----------------------------------------------------------------------------- the embedded model

_TEXT = (
    "The city council met on Tuesday to discuss the new bicycle lanes on Main Street. Supporters "
    "said the lanes would make the street safer for children riding to school."
)


@pytest.mark.real_model
def test_real_model_greedy_with_prompt_lookup_is_identical(real_backend):
    """Copy-heavy text: long accepted runs, and the output is exactly plain greedy's."""
    prompt = real_backend.chat_tokens([{"role": "user", "content": f"Repeat this text exactly: {_TEXT}"}])
    plain = greedy(real_backend, prompt, 48)
    spec = Speculator(real_backend, SpecConfig(cost_curve=DEFAULT_COST_CURVE)).for_job()
    fast = greedy(real_backend, prompt, 48, spec)
    assert real_backend.decode(fast.generated) == real_backend.decode(plain.generated)
    assert fast.generated == plain.generated
    assert "bicycle lanes" in real_backend.decode(plain.generated)
    assert fast.accepted >= 0.6 * fast.drafted > 0
    assert fast.steps <= plain.steps / 2  # at least twice fewer forwards


_OPEN = [
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
]


@pytest.mark.real_model
def test_real_model_bf16_verify_rows_are_bitwise_single_steps(real_backend):
    """On the embedded bf16 model, every row of a k-token verify block equals, bit for bit, the
    logits of plain one-token decoding at that position (across a 32-position key bucket too)."""
    prompt = real_backend.chat_tokens([{"role": "user", "content": "Name three rivers in Europe."}])
    ref = real_backend.new_state()
    last = real_backend.forward(ref, prompt, 1)[0]
    seq, rows = [], []
    for _ in range(40):
        seq.append(int(last.argmax()))
        last = real_backend.forward(ref, [seq[-1]], 1)[0]
        rows.append(last)
    for k in (3, 8, 17):
        s = real_backend.new_state()
        real_backend.forward(s, prompt, 1)
        got = []
        for j in range(0, len(seq), k):
            got.extend(real_backend.forward(s, seq[j : j + k], len(seq[j : j + k])))
        assert all(np.array_equal(a, b) for a, b in zip(got, rows, strict=True)), k


@pytest.mark.real_model
@pytest.mark.parametrize("prompt_text", _OPEN)
def test_real_model_bf16_greedy_identity_under_many_rejections(real_backend, prompt_text):
    """bf16, open prompts, a weak self-draft (20 of 30 layers) proposing 4 tokens at every step:
    verify blocks of every length, mostly rejected and cropped. Exact identity holds because the
    fast path is batch-invariant (models/fast_llama.py), not because ties happen to be absent."""
    assert real_backend.fast is not None and real_backend.cfg.dtype == "bfloat16"
    prompt = real_backend.chat_tokens([{"role": "user", "content": prompt_text}])
    plain = greedy(real_backend, prompt, 40)
    spec = DraftVerify(ModelDrafter(SelfDraftBackend(real_backend, 20)), FixedLookahead(4))
    fast = greedy(real_backend, prompt, 40, spec)
    assert 0 < fast.accepted < fast.drafted
    assert fast.generated == plain.generated


@pytest.mark.real_model
def test_real_model_auto_drafter_is_the_same_gguf_through_llama_cpp(real_backend):
    """``drafter: auto`` on the bf16 transformers target loaded from the embedded GGUF drafts
    with that file through llama.cpp: its greedy choice agrees with the target's almost always,
    the drafts are verified in bf16, and the output is exactly plain greedy's."""
    pytest.importorskip("llama_cpp")
    spec = Speculator(real_backend, SpecConfig(drafter="auto", k_max=16))
    assert spec.cfg.drafter == "draft_model" and spec.cfg.draft_backend == "llama_cpp"
    assert type(spec.draft_backend).__name__ == "LlamaCppBackend"
    # both costs measured (which is cheaper is a timing on this shared box: bench decode, not a test)
    assert spec.draft_s > 0 and spec.step_s > 0
    assert spec.draft_accept >= 0.9  # teacher-forced agreement of Q4_1 with its bf16 dequantization: 0.98 here
    # the checks below must not hang on this box's timings: a fixed cost curve, no measured costs
    fixed = replace(spec.cfg, cost_curve=DEFAULT_COST_CURVE, calibrate=False)
    # the model's drafts alone, always 8 a step: the counts below then depend on the models, not on timings
    alone = replace(fixed, lookup_first=False, adaptive=False, k_max=8)
    model_only = Speculator(real_backend, alone, draft_backend=spec.draft_backend)
    spec = Speculator(real_backend, fixed, draft_backend=spec.draft_backend)
    for text in _OPEN:
        prompt = real_backend.chat_tokens([{"role": "user", "content": text}])
        plain = greedy(real_backend, prompt, 48)
        fast = greedy(real_backend, prompt, 48, spec.for_job())
        assert fast.generated == plain.generated
        assert fast.steps <= plain.steps / 2
        drafts = greedy(real_backend, prompt, 48, model_only.for_job())
        assert drafts.generated == plain.generated
        # drafted counts every draft of a block, also those after its first miss: 0.71 and 0.84
        # here, with 8 target forwards for 48 tokens on both prompts
        assert drafts.accepted >= 0.6 * drafts.drafted > 0
        assert drafts.steps <= plain.steps / 4
