"""Speculative decoding for ``models.decode.DecodeJob``: configuration and per-job wiring.

Built once at startup (loads a draft model if one is configured, measures the verify-cost
curve), then ``for_job()`` hands each response a fresh drafter + verifier::

    spec = Speculator(backend, SpecConfig(drafter="prompt_lookup"))  # once
    s = spec.for_job()  # per response: one object is both the drafter and the verifier
    job = DecodeJob(backend, state, prompt_ids, params, sched, drafter=s, verifier=s)

The drafters live in ``models.drafters``, acceptance and the adaptive lookahead in
``models.verify``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .backend import Backend
from .draft_policy import DraftPolicy, PolicyConfig, StepCosts
from .drafters import MODEL_CLASS, LookupFirstDrafter, ModelDrafter, PromptLookupDrafter, SelfDraftBackend
from .verify import (
    DEFAULT_COST_CURVE,
    DraftVerify,
    FixedLookahead,
    LookaheadConfig,
    draft_agreement,
    measure_cost_curve,
    token_seconds,
)

DRAFTERS = ("none", "prompt_lookup", "draft_model", "self", "auto")
DRAFT_BACKENDS = ("auto", "transformers", "llama_cpp")


@dataclass(frozen=True)
class SpecConfig:
    # auto: draft_model when one is configured or the target was loaded from a GGUF file (that
    # file through llama.cpp drafts), else prompt_lookup — see ``resolve_drafter``
    drafter: str = "prompt_lookup"  # none | prompt_lookup | draft_model | self | auto
    draft_model: str | None = None  # draft_model: "embedded" / hub id / folder / .gguf sharing the tokenizer
    draft_backend: str = "auto"  # auto: a .gguf drafts through llama.cpp (when installed), else transformers
    draft_threads: int = 2  # llama.cpp draft: its threads
    # llama.cpp draft: conversations whose draft cache stays resident (its sequences); the engine's
    # batch size, else the responses of a batch evict each other's draft cache and every proposal
    # re-prefills its whole context on the draft model
    draft_slots: int = 4
    draft_dtype: str = "bfloat16"  # draft_model through transformers: its dtype
    lookup_first: bool = True  # model drafters: use prompt lookup where its match pays more (it is free)
    self_layers: int = 6  # self: how many leading layers of the target draft
    ngram_max: int = 3  # prompt_lookup: longest n-gram tried first
    ngram_min: int = 1  # prompt_lookup: shortest n-gram still trusted
    min_confidence: float = 0.0  # model drafters stop drafting below this top probability
    k_max: int = 8  # most drafts per step (SchedulerConfig.lookahead_tokens caps it again)
    adaptive: bool = True  # False: always draft k_max (benchmarks)
    calibrate: bool = True  # measure the verify-cost curve at startup (≈ 1–2 s)
    cost_curve: tuple[float, ...] | None = None  # given cost(k)/cost(0): skips calibration
    probe_every: int = 24  # plain steps between probes once drafting does not pay

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ValueError(f"unknown drafter {self.drafter!r}; expected one of {list(DRAFTERS)}")
        if self.draft_backend not in DRAFT_BACKENDS:
            raise ValueError(f"unknown draft_backend {self.draft_backend!r}; expected one of {list(DRAFT_BACKENDS)}")
        if self.drafter == "draft_model" and not self.draft_model:
            raise ValueError("drafter 'draft_model' needs draft_model (a hub id, folder or .gguf path)")


def _llama_cpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def target_gguf(main: Any) -> str | None:
    """The GGUF file a transformers target was loaded from (dequantized), if any."""
    from .llm import LLMConfig, resolve

    cfg = getattr(main, "cfg", None)
    if not isinstance(cfg, LLMConfig):
        return None
    try:
        src, gguf, _ = resolve(cfg)
    except Exception:
        return None
    path = Path(src) / gguf if gguf else None
    return str(path) if path is not None and path.is_file() else None


def resolve_drafter(main: Any, cfg: SpecConfig) -> SpecConfig:
    """Settle ``drafter="auto"``: a configured draft model; else, for a transformers target
    loaded from a GGUF file, that same file run by llama.cpp (measured on the embedded model:
    its greedy choice agrees with the bf16 target's on ≈ 99% of tokens at ≈ 1/4 of a step's
    cost); else prompt lookup."""
    if cfg.drafter != "auto":
        return cfg
    if cfg.draft_model:
        return replace(cfg, drafter="draft_model")
    gguf = target_gguf(main)
    if gguf is not None and _llama_cpp_installed():
        return replace(cfg, drafter="draft_model", draft_model=gguf, draft_backend="llama_cpp")
    return replace(cfg, drafter="prompt_lookup")


_PROBE_CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Spell 'naïve café' and count: 1, 22, 333 — ok? 😀"},
]


# a short everyday exchange; its assistant turn is what draft and target must agree on
_AGREEMENT_CHAT = [
    {"role": "user", "content": "Can you give me two tips for sleeping better?"},
    {
        "role": "assistant",
        "content": "Sure! First, go to bed and wake up at the same time every day, even on weekends. "
        "Second, keep your bedroom cool, dark and quiet, and put your phone away an hour before sleep.",
    },
]


def load_draft_backend(main: Any, cfg: SpecConfig) -> Backend:
    """Load ``cfg.draft_model`` and check that it shares ``main``'s tokenizer."""
    from .llm import LLMConfig, embedded_gguf, load_backend

    assert cfg.draft_model is not None
    main_cfg = getattr(main, "cfg", LLMConfig())
    model = str(embedded_gguf()) if cfg.draft_model == "embedded" else cfg.draft_model
    via_llama = cfg.draft_backend == "llama_cpp" or (
        cfg.draft_backend == "auto" and model.endswith(".gguf") and _llama_cpp_installed()
    )
    draft: Any
    if via_llama:
        from .llama_cpp import LlamaCppConfig, load_llama_backend

        draft = load_llama_backend(
            LlamaCppConfig(
                model=model,
                threads=cfg.draft_threads,
                n_ctx=getattr(main, "max_context", 4096),
                n_seq=cfg.draft_slots,
            )
        )
    else:
        draft = load_backend(
            LLMConfig(
                model=model,
                dtype=cfg.draft_dtype,
                device=main_cfg.device,
                threads=main_cfg.threads,
                max_context=main_cfg.max_context,
            )
        )
    main_tok, draft_tok = getattr(main, "tokenizer", None), getattr(draft, "tokenizer", None)
    if main_tok is not None and draft_tok is not None:
        same = main_tok.get_vocab() == draft_tok.get_vocab()
    else:  # a llama.cpp side: compare what both make of the same chat
        same = main.chat_tokens(_PROBE_CHAT) == draft.chat_tokens(_PROBE_CHAT) and draft.vocab_size <= main.vocab_size
    if not same:
        raise ValueError(f"draft model {cfg.draft_model!r} does not share the target's tokenizer")
    return draft


def lookup_priors(ngram_min: int, ngram_max: int) -> tuple[tuple[int, float], ...]:
    """Prior per-draft acceptance of a prompt-lookup proposal by the length of its n-gram match.

    Measured on the embedded model (llama.cpp, 128 tokens, 4 drafts per try, 13 prompts): a
    3-gram match was accepted 0.96 of the time on input-grounded tasks and 0.62 in open chat,
    2-gram 0.75 / 0.46, 1-gram 0.35 / 0.20. Long matches start trusted, so drafting begins at
    once where the verify cost is steep (llama.cpp); the running rates take over after a few tries.
    """
    table = {1: 0.25, 2: 0.55}
    return tuple((n, table.get(n, 0.8)) for n in range(ngram_min, ngram_max + 1))


class Speculator:
    """Per-process speculative-decoding setup; ``for_job()`` per response."""

    def __init__(
        self,
        backend: Backend,
        cfg: SpecConfig = SpecConfig(),
        draft_backend: Backend | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.backend = backend
        cfg = resolve_drafter(backend, cfg)
        self.cfg = cfg
        self.clock = clock
        self.draft_backend: Backend | None = None
        if cfg.drafter == "draft_model":
            self.draft_backend = draft_backend or load_draft_backend(backend, cfg)
        elif cfg.drafter == "self":
            self.draft_backend = draft_backend or SelfDraftBackend(backend, cfg.self_layers)
        if cfg.cost_curve is not None:
            self.cost_curve = tuple(cfg.cost_curve)
        elif cfg.drafter != "none" and cfg.adaptive and cfg.calibrate:
            self.cost_curve = measure_cost_curve(backend, k_max=cfg.k_max, clock=clock)
        else:
            self.cost_curve = DEFAULT_COST_CURVE
        # a model drafter's cost per token and one target step, so the first response drafts
        # as much as it pays from its first step (unmeasured, drafting would look free)
        self.draft_prefill_s = self.draft_s = self.step_s = 0.0
        # and how often its greedy choice is the target's (teacher-forced on a short chat): the
        # model drafts' prior acceptance, so a good draft is preferred to prompt lookup's weak
        # matches from the first step and a poor one is not tried at every step first
        self.draft_accept: float | None = None
        if self.draft_backend is not None and cfg.adaptive and cfg.calibrate:
            self.draft_prefill_s, self.draft_s = token_seconds(self.draft_backend)
            self.step_s = token_seconds(backend)[1]
            self.draft_accept = draft_agreement(backend, self.draft_backend, backend.chat_tokens(_AGREEMENT_CHAT))
        self.lookahead = self._lookahead()
        # the cost curves every response of this backend decides by (models.draft_policy): a plain step
        # of B rows and one sequence's block, both from the calibration above and refined by the engine's
        # step timings (shared: one pair per backend)
        self.step_costs = StepCosts(self.cost_curve)
        self.block_costs = StepCosts(self.cost_curve)

    def _lookahead(self) -> LookaheadConfig:
        cfg = self.cfg
        lookup = cfg.drafter == "prompt_lookup" or (cfg.drafter in ("draft_model", "self") and cfg.lookup_first)
        priors = lookup_priors(cfg.ngram_min, cfg.ngram_max) if lookup else ()
        if self.draft_accept is not None:  # clipped: a running rate must be able to move it
            priors += ((MODEL_CLASS, min(max(self.draft_accept, 0.05), 0.95)),)
        return LookaheadConfig(k_max=cfg.k_max, probe_every=cfg.probe_every, class_priors=priors)

    def with_config(self, **changes: Any) -> Speculator:
        """Same backends and cost curve, other settings (e.g. per-request k_max)."""
        cfg = replace(self.cfg, cost_curve=self.cost_curve, **changes)
        same = cfg.drafter == self.cfg.drafter and cfg.draft_model == self.cfg.draft_model
        if not same:
            return Speculator(self.backend, cfg, clock=self.clock)
        draft = self.draft_backend
        out = Speculator(self.backend, replace(cfg, calibrate=False), draft_backend=draft, clock=self.clock)
        out.draft_prefill_s, out.draft_s, out.step_s = self.draft_prefill_s, self.draft_s, self.step_s  # measured once
        out.draft_accept = self.draft_accept
        out.lookahead = out._lookahead()
        out.step_costs, out.block_costs = self.step_costs, self.block_costs
        return out

    def for_job(self) -> DraftVerify | None:
        """A fresh drafter + verifier for one ``DecodeJob`` (pass it as both); None when off."""
        cfg = self.cfg
        if cfg.drafter == "none":
            return None
        drafter: Any
        if cfg.drafter == "prompt_lookup":
            drafter = PromptLookupDrafter(cfg.ngram_max, cfg.ngram_min)
        else:
            assert self.draft_backend is not None
            drafter = ModelDrafter(
                self.draft_backend,
                min_confidence=cfg.min_confidence,
                clock=self.clock,
                seconds_per_token=self.draft_s,
                catch_up=(self.draft_prefill_s, self.step_s),
            )
            if cfg.lookup_first:
                drafter = LookupFirstDrafter(PromptLookupDrafter(cfg.ngram_max, cfg.ngram_min), drafter)
        policy: DraftPolicy | FixedLookahead
        if cfg.adaptive:
            lookup_first = isinstance(drafter, LookupFirstDrafter)
            free = frozenset(range(1, cfg.ngram_max + 1)) if lookup_first else frozenset()
            la = self.lookahead
            policy = DraftPolicy(
                self.step_costs,
                PolicyConfig(k_max=la.k_max, priors=la.class_priors, probe_every=la.probe_every),
                free=free,
                all_free=cfg.drafter == "prompt_lookup",
                draft_cost=self.draft_s / self.step_s if self.draft_s > 0 and self.step_s > 0 else 0.0,
                block=self.block_costs,
            )
            model = drafter.model if lookup_first else drafter
            if isinstance(model, ModelDrafter):
                model.saving = functools.partial(policy.catch_up_saving, MODEL_CLASS)
                model.chances_left = policy.chances_left
            if lookup_first:
                drafter.rate, drafter.budget = policy.rate, policy.budget
        else:
            policy = FixedLookahead(cfg.k_max)
        return DraftVerify(drafter, policy, model_kind=cfg.drafter != "prompt_lookup")
