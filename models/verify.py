"""Verification of drafted tokens and the adaptive choice of how many to draft.

Pure numpy (``measure_cost_curve`` only calls a ``Backend``). Shapes: ``rows [k + 1, V]`` are
the target logits after ``[tok, *drafts]`` — row ``i`` is the distribution the ``i``-th draft
must match, row ``k`` the bonus position after all drafts.

* greedy: the longest prefix with ``argmax(row i) == drafts[i]``, then ``argmax(row n_ok)``;
  token-identical to plain greedy decoding whenever the backend's logits do not depend on how
  many tokens one forward is fed (float32: equal to ~1e-5). In bf16 they round differently
  (up to ~0.6 logits on SmolLM2), so at a bf16 near-tie the two may pick different tokens.
* sampling (Leviathan et al. 2023 / Chen et al. 2023): accept draft ``x`` with probability
  ``min(1, p(x) / q(x))``; on rejection draw from ``max(0, p - q)`` normalised. ``p`` is
  ``models.sampling.probs`` (temperature + top-p, exactly what plain decoding draws from), ``q``
  the drafter's distribution — a one-hot for deterministic drafters — so every emitted token
  is distributed exactly as in plain sampling.
* ``DraftVerify`` (one response's drafter + verifier) asks its policy how much to verify: the
  default ``models.draft_policy.DraftPolicy`` (acceptance per draft kind against the measured
  verify cost at the batch size, back-off, shadow scores of unverified free proposals), or
* ``AdaptiveLookahead``, which picks ``k`` each step to maximise expected tokens per unit time,
  ``E(k) / (cost(k) + k · d)`` with ``E(k) = sum_{i<=k} a^i``, from a decayed acceptance rate
  ``a``, the verify-cost curve ``cost(k)`` (forward of ``k + 1`` tokens over forward of one)
  and the drafter's cost per drafted token ``d`` (relative to one plain step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .backend import Backend
from .draft_policy import DraftPolicy, cost_at, expected_tokens
from .sampling import SamplingParams, probs

# SmolLM2-135M bf16 through the fast Llama path, 1 thread, this 2-core CPU (CPU time, quiet
# moment); index = number of drafts verified alongside the real token. Used when not calibrating.
DEFAULT_COST_CURVE: tuple[float, ...] = (1.0, 1.01, 1.06, 1.12, 1.16, 1.2, 1.2, 1.23, 1.3)


# ----------------------------------------------------------------------------- acceptance


def accept_greedy(rows: np.ndarray, drafts: list[int]) -> tuple[list[int], int]:
    """``rows [len(drafts)+1, V]`` → (``drafts[:n_ok]`` + the target's next token, ``n_ok``)."""
    best = np.argmax(rows, axis=-1)
    n_ok = 0
    while n_ok < len(drafts) and int(best[n_ok]) == drafts[n_ok]:
        n_ok += 1
    return drafts[:n_ok] + [int(best[n_ok])], n_ok


def accept_sampling(
    rows: np.ndarray,
    drafts: list[int],
    params: SamplingParams,
    rng: np.random.Generator,
    q: np.ndarray | None = None,
) -> tuple[list[int], int]:
    """Speculative sampling. ``q [len(drafts), V]`` is the draft distribution (None: one-hot)."""
    vocab = rows.shape[-1]
    for i, x in enumerate(drafts):
        p = probs(rows[i], params)  # row by row: later rows are rarely needed
        qx = 1.0 if q is None else float(q[i, x])
        if qx > 0.0 and rng.random() < min(1.0, float(p[x]) / qx):
            continue
        if q is None:
            resid = p.copy()
            resid[x] = 0.0
        else:
            resid = np.maximum(p - q[i], 0.0)
        total = resid.sum()
        if total <= 0.0:  # p == q: rejection has probability 0; only rounding gets here
            resid, total = p, p.sum()
        return drafts[:i] + [int(rng.choice(vocab, p=resid / total))], i
    p = probs(rows[len(drafts)], params)
    return drafts + [int(rng.choice(vocab, p=p))], len(drafts)


# ----------------------------------------------------------------------------- cost curve


def measure_cost_curve(
    backend: Backend,
    k_max: int = 8,
    repeats: int = 5,
    context: int = 64,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, ...]:
    """Time a forward of ``k + 1`` tokens (``n_logits = k + 1``) over one of a single token.

    Returns ``cost[0..k_max]`` with ``cost[0] == 1`` from the fastest of ``repeats`` rounds per
    ``k`` (each round visits every ``k``; the minimum is what background load disturbs least),
    made non-decreasing.
    """
    state = backend.new_state()
    vocab = backend.vocab_size
    prompt = [(17 + 31 * i) % vocab for i in range(context)]
    probe = [(101 + 7 * i) % vocab for i in range(k_max + 1)]
    backend.forward(state, prompt, n_logits=1)
    base = len(state.tokens)
    for k in (0, k_max):  # warm-up: first calls allocate
        backend.forward(state, probe[: k + 1], n_logits=k + 1)
        backend.crop(state, base)
    times: list[list[float]] = [[] for _ in range(k_max + 1)]
    for _ in range(repeats):
        for k in range(k_max + 1):
            t0 = clock()
            backend.forward(state, probe[: k + 1], n_logits=k + 1)
            times[k].append(clock() - t0)
            backend.crop(state, base)
    fastest = [min(t) for t in times]
    one = max(fastest[0], 1e-9)
    curve, top = [], 1.0
    for m in fastest:
        top = max(top, m / one)
        curve.append(round(top, 4))
    curve[0] = 1.0
    return tuple(curve)


def token_seconds(backend: Backend, context: int = 32, steps: int = 6) -> tuple[float, float]:
    """(prefill seconds per token of a ``context``-token prompt, median seconds of a one-token
    forward after it), on a fresh state with ids no conversation holds."""
    vocab = backend.vocab_size
    warm = backend.new_state()  # first calls allocate (llama.cpp builds its graphs): not timed
    backend.forward(warm, [(3 + 11 * i) % vocab for i in range(context)], n_logits=1)
    backend.forward(warm, [5], n_logits=1)
    del warm
    state = backend.new_state()
    t0 = time.perf_counter()
    backend.forward(state, [(17 + 31 * i + 5 * i * i) % vocab for i in range(context)], n_logits=1)
    prefill = (time.perf_counter() - t0) / context
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        backend.forward(state, [(101 + 7 * i) % vocab], n_logits=1)
        times.append(time.perf_counter() - t0)
    return prefill, float(np.median(times))


def draft_agreement(target: Backend, draft: Backend, ids: Sequence[int]) -> float:
    """Share of positions of ``ids`` (teacher-forced, one forward each) where the draft's greedy
    choice equals the target's: an estimate of greedy acceptance before any response has run."""
    ids = list(ids)
    if len(ids) < 2:
        raise ValueError("draft_agreement needs at least two tokens")
    a = target.forward(target.new_state(), ids, n_logits=len(ids)).argmax(-1)
    b = draft.forward(draft.new_state(), ids, n_logits=len(ids)).argmax(-1)
    return float(np.mean(a == b))


# ----------------------------------------------------------------------------- lookahead


@dataclass(frozen=True)
class LookaheadConfig:
    k_max: int = 8  # most drafts per step (the scheduler's lookahead_tokens caps it again)
    decay: float = 0.85  # weight kept by the acceptance history at each drafting step
    prior_accept: float = 0.5  # acceptance assumed before any evidence
    prior_weight: float = 2.0  # how many draft tries that prior is worth
    class_priors: tuple[tuple[int, float], ...] = ()  # (class, prior acceptance) overriding prior_accept
    min_gain: float = 1.03  # drafting must beat plain decoding by this factor to be chosen
    probe_every: int = 24  # plain steps between probes once drafting is off
    probe_k: int = 3  # drafts in a probe
    probe_backoff: int = 8  # a failed probe doubles the wait, up to this many times probe_every


class FixedLookahead:
    """Always ``k`` (benchmarks, tests)."""

    def __init__(self, k: int):
        self.k = k

    def lookahead(self, load: int = 0, left: int | None = None) -> int:
        return self.k

    def record(self, drafted: int, accepted: int, seconds: float, cls: int = 0) -> None:
        pass


@dataclass
class _ClassStats:
    hits: float  # decayed accepted drafts
    tries: float  # decayed drafts tried (accepted + the first rejection)
    off_seen: int = 0  # proposals of this class refused since it last drafted
    wait: int = 0  # refusals before its next probe (0: probe_every)


class AdaptiveLookahead:
    """Chooses ``k`` per step from running acceptance rates and the cost curve.

    Acceptance is kept per draft class (prompt lookup: the n-gram length of the match; model
    drafters: one class), because a 3-gram match and a 1-gram match are very different bets.
    ``lookahead()`` is asked before drafting (the most any class would take); ``limit(cls)``
    after, to cut the proposal to what its class earns. A class that does not pay gets
    ``probe_k`` drafts every ``probe_every`` chances so it can turn back on; when no class
    pays, ``lookahead()`` returns 0 (plain decoding) and probes every ``probe_every`` steps.
    A probe that fails doubles the wait before the next (up to ``probe_backoff`` times), so a
    hopeless drafter costs little; one that succeeds resets it.

    ``draft_seconds()`` is the drafter's wall time per drafted token (0 for prompt lookup); it
    becomes a cost relative to one plain step through the step time seen in ``record``.
    Classes in ``free_classes`` cost nothing to draft whatever ``draft_seconds`` says (prompt
    lookup's classes when it is combined with a draft model, ``LookupFirstDrafter``).
    """

    def __init__(
        self,
        cost_curve: Sequence[float] = DEFAULT_COST_CURVE,
        config: LookaheadConfig = LookaheadConfig(),
        draft_seconds: Callable[[], float] = lambda: 0.0,
        free_classes: frozenset[int] = frozenset(),
        step_seconds: float | None = None,
    ):
        self.cost = tuple(float(c) for c in cost_curve)
        self.config = config
        self.free_classes = free_classes
        self._priors = dict(config.class_priors)
        self._top_prior = max([config.prior_accept, *self._priors.values()])  # what an unseen class may earn
        self.draft_seconds = draft_seconds
        self._classes: dict[int, _ClassStats] = {}
        self._step_s: float | None = step_seconds  # EMA of one plain step's seconds (seeded when measured)
        self._plain_steps = 0  # consecutive steps without drafting
        self._probe = False  # a probe is armed (kept until a step actually drafts)
        self._wait = config.probe_every  # plain steps before the next global probe
        self._probing_cls: int | None = None  # the class whose proposal the last limit() probed
        self._load = 0  # other tokens sharing this step's forward (set by lookahead)

    def _stats(self, cls: int) -> _ClassStats:
        st = self._classes.get(cls)
        if st is None:
            c = self.config
            st = self._classes[cls] = _ClassStats(self._prior(cls) * c.prior_weight, c.prior_weight)
        return st

    def _prior(self, cls: int) -> float:
        return self._priors.get(cls, self.config.prior_accept)

    def acceptance(self, cls: int = 0) -> float:
        st = self._classes.get(cls)
        return self._prior(cls) if st is None else st.hits / st.tries

    def draft_cost(self) -> float:
        """Drafting cost per token in units of one plain step."""
        per_token = self.draft_seconds()
        if per_token <= 0.0 or self._step_s is None:
            return 0.0  # not measured yet: the first tries measure it
        return per_token / self._step_s

    def best(self, a: float, free: bool = False) -> tuple[int, float]:
        """(k, expected speed-up over plain decoding) at per-draft acceptance ``a``; ``free``:
        drafting costs nothing (else it costs ``draft_cost()`` per token)."""
        d = 0.0 if free else self.draft_cost()
        # in a batch with ``load`` other tokens the step yields load + E(k) tokens at cost(load + k):
        # drafts pay only while the batch has not already made the step compute-bound
        n = self._load
        plain = (n + 1) / cost_at(self.cost, n)
        best_k, best_rate = 0, 1.0  # plain: one token per unit time
        for k in range(1, self.config.k_max + 1):
            rate = (n + expected_tokens(a, k)) / (cost_at(self.cost, n + k) + k * d) / plain
            if rate > best_rate:
                best_k, best_rate = k, rate
        if best_rate < self.config.min_gain:
            return 0, 1.0
        return best_k, best_rate

    def _probe_k(self) -> int:
        return min(self.config.probe_k, self.config.k_max)

    def rate(self, cls: int) -> tuple[int, float]:
        """(k, expected speed-up) for class ``cls`` now (its prior when not met yet)."""
        return self.best(self.acceptance(cls), cls in self.free_classes)

    def budget(self, cls: int) -> int:
        """How many drafts of class ``cls`` are worth producing now, before paying for them
        (a draft model): its best ``k``, or ``probe_k`` when it does not pay but its probe is
        due, else 0 (that skipped chance counts towards the probe)."""
        k = self.rate(cls)[0]
        if k > 0:
            return k
        st = self._stats(cls)
        if self._probe or st.off_seen + 1 >= (st.wait or self.config.probe_every):
            return self._probe_k()
        st.off_seen += 1
        return 0

    def lookahead(self, load: int = 0, left: int | None = None) -> int:
        """The most drafts any class would take now; ``load``: other responses in the same step
        (kept for this step's ``limit``/``budget`` too)."""
        self._load = max(0, load)
        ks = [self.rate(c)[0] for c in self._classes]
        free = self.draft_seconds() <= 0.0 or bool(self.free_classes)
        if not self._classes or free:
            # a class not met yet starts at the prior; when drafting is free (prompt lookup) it
            # costs nothing to ask, and ``limit`` cuts proposals of classes that do not pay
            ks.append(self.best(self._top_prior, free)[0])
        k = max(ks)
        if k > 0:
            return k
        if not self._probe:
            self._plain_steps += 1
            self._probe = self._plain_steps >= self._wait
        return self._probe_k() if self._probe else 0

    def limit(self, cls: int, proposed: int) -> int:
        """How many of ``proposed`` drafts of class ``cls`` to verify."""
        if proposed <= 0:
            return 0
        st = self._stats(cls)
        k, _ = self.rate(cls)
        self._probing_cls = None
        if k == 0:
            st.off_seen += 1
            if self._probe or st.off_seen >= (st.wait or self.config.probe_every):
                k = self._probe_k()
                self._probing_cls = cls
        return min(k, proposed)

    def _backoff(self, wait: int, failed: bool) -> int:
        base = self.config.probe_every
        return min(2 * wait, base * self.config.probe_backoff) if failed else base

    def record(self, drafted: int, accepted: int, seconds: float, cls: int = 0) -> None:
        if seconds > 0.0:
            step = seconds / cost_at(self.cost, drafted)
            self._step_s = step if self._step_s is None else 0.8 * self._step_s + 0.2 * step
        if drafted <= 0:
            return
        st = self._stats(cls)
        tries = accepted + (1 if accepted < drafted else 0)  # the first rejection is a try too
        keep = self.config.decay
        st.hits = keep * st.hits + accepted
        st.tries = keep * st.tries + tries
        st.off_seen = 0
        if self._probing_cls == cls:  # that was a probe: did it turn the class back on?
            failed = self.rate(cls)[0] == 0
            st.wait = self._backoff(st.wait or self.config.probe_every, failed)
            if self._probe:
                self._wait = self._backoff(self._wait, failed)
        self._probing_cls = None
        self._probe = False
        self._plain_steps = 0


# ----------------------------------------------------------------------------- per job


class VerifyDrafter(Protocol):
    last_class: int

    def propose(self, context: list[int], k: int) -> list[int]: ...

    def draft_probs(self) -> np.ndarray | None:
        """``[len(last drafts), V]`` draft distribution of the last proposal; None: one-hot."""
        ...


Policy = AdaptiveLookahead | FixedLookahead | DraftPolicy


def kind_name(cls: int, model: bool) -> str:
    """A draft kind as /metrics labels it: the draft model's drafts, or prompt lookup by n-gram."""
    return "draft_model" if model and cls == 0 else f"prompt_lookup_{cls}gram"


class DraftVerify:
    """One response's drafter + verifier: ``models.decode``'s ``VerifyDrafter`` and ``Verifier`` at once.

    ``propose`` asks the drafter, then cuts the proposal to what its kind earns; ``accept``
    is greedy or speculative sampling; ``record`` feeds the policy under that kind.
    ``model_kind``: class 0 is a draft model's (it costs time to propose), not prompt lookup's.
    """

    def __init__(self, drafter: VerifyDrafter, policy: Policy, model_kind: bool = False):
        self.drafter = drafter
        self.policy = policy
        self.model_kind = model_kind
        self._cls = 0

    def propose(self, context: list[int], k: int) -> list[int]:
        pol = self.policy
        if isinstance(pol, DraftPolicy):
            pol.observe(context)
            per_token = getattr(self.drafter, "seconds_per_token", None)
            one = pol.costs.one_step_seconds()
            if per_token is not None and one:
                pol.draft_cost = per_token() / one
        drafts = self.drafter.propose(context, k)
        self._cls = self.drafter.last_class
        if isinstance(pol, AdaptiveLookahead):
            drafts = drafts[: pol.limit(self._cls, len(drafts))]
        elif isinstance(pol, DraftPolicy):
            drafts = drafts[: pol.limit(self._cls, drafts, len(context))]
        return drafts

    def lookahead(self, load: int = 0, left: int | None = None) -> int:
        return self.policy.lookahead(load, left)

    def accept(
        self, rows: np.ndarray, drafts: list[int], params: SamplingParams, rng: np.random.Generator
    ) -> tuple[list[int], int]:
        if params.greedy:
            return accept_greedy(rows, drafts)
        q = self.drafter.draft_probs()
        if q is not None:
            q = q[: len(drafts)]
        return accept_sampling(rows, drafts, params, rng, q)

    def record(self, drafted: int, accepted: int, seconds: float) -> None:
        if isinstance(self.policy, DraftPolicy):
            self.policy.record(self._cls, drafted, accepted)  # step seconds arrive by observe_step
        else:
            self.policy.record(drafted, accepted, seconds, self._cls)

    def observe_step(self, tokens: int, seconds: float, step: object = None, seqs: int = 1) -> None:
        """A decode/verify step of ``seqs`` sequences, ``tokens`` tokens in all, took ``seconds``."""
        if isinstance(self.policy, DraftPolicy):
            self.policy.observe_step(tokens, seconds, step, seqs)

    def kind_counts(self) -> dict[str, dict[str, int]]:
        """Draft kind → drafted / accepted tokens and skipped chances (for /metrics)."""
        if not isinstance(self.policy, DraftPolicy):
            return {}
        return {
            kind_name(c, self.model_kind): {"drafted": d, "accepted": a, "skipped": s}
            for c, (d, a, s) in self.policy.counts().items()
            if d or s
        }
