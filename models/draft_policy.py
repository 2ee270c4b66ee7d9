"""When a sequence drafts: acceptance per draft kind against the measured verify cost, with back-off.

Pure and clock-free: the caller hands in every number (step seconds, accepted counts, contexts).

* ``StepCosts`` is one cost curve of a backend: seconds of a forward by how many tokens it holds,
  relative to a one-token forward. Seeded with the start-up calibration
  (``models.verify.measure_cost_curve``: one sequence's block of 1–9 tokens), then refined by the
  engine's own step timings (``observe``), so the curve is the one this process meets, not a guess.
* ``StepCosts`` come in two (``DraftPolicy.costs`` and ``block``): a plain step of ``B`` sequences
  (one token each), and one sequence's block of ``t`` tokens alone. A verify inside a batch is not
  ``k`` more rows of the step: llama.cpp splits a batch into ubatches whose sequences hold equally
  many tokens (eight sequences of one token plus one of five: a ubatch of 8 × 1, then one of 1 ×
  4), and the transformers path groups its forwards by token count the same way, so ``k`` drafts
  next to ``others`` sequences cost ``rows(others + 1) + block(k)`` — a compute of their own, each
  reading every weight again. Alone (no others) they cost ``block(1 + k)``.
* ``DraftPolicy`` decides per sequence and per step. A proposal of kind ``c`` (a prompt-lookup
  n-gram length, or the draft model) is verified with ``k`` drafts only when
  ``(others + E(a_c, k)) / verify(others, k)`` beats ``(others + 1) / rows(others + 1)`` by the
  bar (``min_gain``; ``saturated_gain`` once the batch is past the measured saturation point),
  where ``a_c`` is the sequence's recent per-draft acceptance of that kind and ``E`` the expected
  tokens of a verify. Verifying is what costs; a free drafter's proposals that are not verified
  are still scored against the tokens decoded next (``observe``), which is exactly the acceptance
  a verify would have had (greedy: the same comparison; sampling with a one-hot draft: accepted
  with probability p(x), the chance the plain draw is x). A kind whose verify is rejected at its
  first draft sits out ``backoff_base * 2^(r-1)`` chances after ``r`` such rejections in a row; a
  kind that costs to propose (a draft model) and does not pay is tried again only by a probe of
  ``probe_k`` drafts after ``probe_every`` chances, a wait that doubles after every failed probe,
  and never at a batch size where even drafts that are all accepted would not pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


def cost_at(curve: Sequence[float], k: int) -> float:
    """``curve[k]``, extrapolated linearly past its end."""
    if k < len(curve):
        return float(curve[k])
    if len(curve) < 2:
        return float(curve[-1])
    slope = max(float(curve[-1]) - float(curve[-2]), 0.0)
    return float(curve[-1]) + slope * (k - len(curve) + 1)


def expected_tokens(a: float, k: int) -> float:
    """Tokens one verify step yields when each draft survives with probability ``a``."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


class StepCosts:
    """Relative seconds of a forward by its token count: ``cost(1) == 1``.

    ``seed[i]`` is the calibrated cost of ``i + 1`` tokens (the start-up curve: one sequence, on a
    quiet start). Each ``observe`` moves the running seconds of that token count by ``weight``; a
    count with ``min_seen`` observations is *observed*. The table takes observed counts as measured
    (relative to a one-token step, or, before one is observed, to the calibration at the smallest
    observed count), interpolates linearly between two observed counts, and elsewhere follows the
    calibration's shape scaled to the nearest observed count: a batch of many sequences costs more
    than the one-sequence calibration says, and an unobserved count must not look cheaper than the
    observed one below it — else every draft past a batch's plain step would look free. The result
    is made non-decreasing in the token count, so noise cannot make more tokens look cheaper.
    """

    REFRESH = 16

    def __init__(self, seed: Sequence[float] = (1.0,), weight: float = 0.1, max_tokens: int = 128, min_seen: int = 3):
        self.seed = tuple(float(c) for c in seed) or (1.0,)
        self.weight = weight
        self.max_tokens = max_tokens
        self.min_seen = min_seen
        self._secs: dict[int, float] = {}
        self._seen: dict[int, int] = {}
        self._last_step: object = None
        self._table: list[float] | None = None  # cost(1..max_tokens), rebuilt after observations
        self._stale = 0  # observations since the table was built

    def observe(self, tokens: int, seconds: float, step: object = None) -> None:
        """One decode/verify forward of ``tokens`` tokens took ``seconds``. ``step``: an id of the
        engine step; every job of a batch reports the same step, and it counts once."""
        if step is not None:
            if step == self._last_step:
                return
            self._last_step = step
        if tokens < 1 or tokens > self.max_tokens or seconds <= 0.0:
            return
        old = self._secs.get(tokens)
        self._secs[tokens] = seconds if old is None else old + self.weight * (seconds - old)
        self._seen[tokens] = self._seen.get(tokens, 0) + 1
        self._stale += 1
        # a rebuild costs ~0.1 ms of Python: the running means move slowly, so the table is rebuilt
        # when a count becomes observed and every REFRESH observations after
        if self._seen[tokens] == self.min_seen or self._stale >= self.REFRESH:
            self._table = None

    def _build(self) -> list[float]:
        self._stale = 0
        n = self.max_tokens
        seed = [cost_at(self.seed, t - 1) for t in range(1, n + 1)]  # seed[t - 1]: t tokens
        seen = sorted(t for t, c in self._seen.items() if c >= self.min_seen)
        raw = seed
        if seen:
            first = seen[0]
            unit = self._secs[first] / (1.0 if first == 1 else seed[first - 1])  # seconds of cost 1
            obs, top = {}, 1.0
            for t in seen:  # made non-decreasing first: a noisy count must not scale the counts past it down
                top = max(top, self._secs[t] / unit)
                obs[t] = top
            raw, i = [], 0  # seen[i]: the first observed count >= t
            for t in range(1, n + 1):
                while i < len(seen) and seen[i] < t:
                    i += 1
                hi = seen[i] if i < len(seen) else None
                lo = seen[i - 1] if i > 0 else None
                if hi == t:
                    raw.append(obs[t])
                elif lo is not None and hi is not None:
                    raw.append(obs[lo] + (obs[hi] - obs[lo]) * (t - lo) / (hi - lo))
                else:
                    near = lo if lo is not None else hi
                    assert near is not None
                    raw.append(seed[t - 1] * obs[near] / seed[near - 1])
        out, top = [], 1.0  # (interpolation and scaling keep the order; this is for the seed itself)
        for c in raw:
            top = max(top, c)
            out.append(top)
        return out

    def cost(self, tokens: int) -> float:
        """Seconds of a ``tokens``-token forward over a one-token forward's."""
        if self._table is None:
            self._table = self._build()
        table = self._table
        if tokens <= len(table):
            return table[max(tokens, 1) - 1]
        return cost_at(table, tokens - 1)

    def one_step_seconds(self) -> float | None:
        """Seconds of a one-token forward as observed (None: not yet), to price a draft model."""
        return self._secs.get(1) if self._seen.get(1, 0) >= self.min_seen else None

    def curve(self, n: int) -> tuple[float, ...]:
        """``cost(1..n)`` (for reports)."""
        return tuple(round(self.cost(t), 3) for t in range(1, n + 1))

    def saturation(self, ratio: float = 0.75) -> int:
        """The smallest batch ``B`` where one more token costs at least ``ratio`` of the mean cost of
        the ``B`` already in the step: the machine is compute-bound, extra verify rows are no
        cheaper than the rows there are. ``max_tokens`` when it never is."""
        for b in range(2, self.max_tokens):
            if self.cost(b + 1) - self.cost(b) >= ratio * self.cost(b) / b:
                return b
        return self.max_tokens


@dataclass(frozen=True)
class PolicyConfig:
    k_max: int = 8  # most drafts per step (the scheduler's lookahead_tokens caps it again)
    decay: float = 0.85  # weight kept by a kind's acceptance history at each scored proposal
    prior_accept: float = 0.5  # per-draft acceptance assumed for a kind before any evidence
    prior_weight: float = 2.0  # how many drafts that prior is worth
    priors: tuple[tuple[int, float], ...] = ()  # (kind, prior acceptance) overriding prior_accept
    min_gain: float = 1.03  # a verify must beat a plain step by this factor
    saturated_gain: float = 1.2  # the bar once the batch is past the machine's saturation point
    saturation_ratio: float = 0.75  # StepCosts.saturation's test
    backoff_base: int = 4  # chances a kind sits out after a verify rejected at its first draft
    backoff_max: int = 256  # the longest such wait
    probe_every: int = 32  # a costly kind that does not pay: chances before its probe
    probe_backoff: int = 8  # failed probes double that wait, up to this many times probe_every
    probe_k: int = 1  # drafts in a probe (the cheapest verify that tells anything)
    shadow_k: int = 4  # drafts of an unverified free proposal scored against what is decoded


@dataclass
class KindStats:
    """One draft kind's record in one sequence."""

    hits: float  # decayed drafts accepted
    tries: float  # decayed drafts tried (the accepted ones and the first rejected one)
    drafted: int = 0  # draft tokens verified
    accepted: int = 0  # of those, accepted
    skipped: int = 0  # chances to verify a proposal of this kind that the policy declined
    rejections: int = 0  # verifies in a row rejected at their first draft
    wait: int = 0  # chances still to sit out (back-off)
    off_seen: int = 0  # costly kind: chances declined since it last drafted
    probe_wait: int = 0  # costly kind: chances before its next probe (0: probe_every)


@dataclass
class _Shadow:
    kind: int
    start: int  # context length when proposed: drafts[i] predicts context[start + i]
    drafts: tuple[int, ...]


@dataclass
class DraftPolicy:
    """Per-sequence drafting decisions (see the module docstring).

    ``free``: kinds that cost nothing to propose (prompt lookup's); ``draft_cost``: a costly
    kind's proposal cost per draft token in plain steps. ``costs`` is shared by every sequence of
    a backend. Interface of ``models.verify.DraftVerify``'s policy: ``lookahead``, ``limit``,
    ``rate``, ``budget``, ``record``, ``acceptance``; plus ``observe`` for the shadow scores.
    """

    costs: StepCosts  # a plain step of B one-token rows (shared by every sequence of a backend)
    config: PolicyConfig = PolicyConfig()
    free: frozenset[int] = frozenset()
    all_free: bool = True  # every kind is free (a prompt-lookup-only drafter)
    draft_cost: float = 0.0
    kinds: dict[int, KindStats] = field(default_factory=dict)
    block: StepCosts | None = None  # one sequence's block of t tokens alone (None: ``costs`` itself)
    _others: int = 0
    _left: int | None = None  # the most tokens the response may still write (None: unknown)
    _shadow: _Shadow | None = None
    _probing: int | None = None

    # -- evidence ---------------------------------------------------------------------------

    def stats(self, kind: int) -> KindStats:
        st = self.kinds.get(kind)
        if st is None:
            c = self.config
            st = self.kinds[kind] = KindStats(self.prior(kind) * c.prior_weight, c.prior_weight)
        return st

    def is_free(self, kind: int) -> bool:
        """Proposing ``kind`` costs nothing (only its verify does)."""
        return self.all_free or kind in self.free

    def prior(self, kind: int) -> float:
        return dict(self.config.priors).get(kind, self.config.prior_accept)

    def acceptance(self, kind: int = 0) -> float:
        st = self.kinds.get(kind)
        return self.prior(kind) if st is None else st.hits / st.tries

    def _score(self, kind: int, drafted: int, accepted: int) -> None:
        st = self.stats(kind)
        keep = self.config.decay
        st.hits = keep * st.hits + accepted
        st.tries = keep * st.tries + accepted + (1 if accepted < drafted else 0)

    def observe_step(self, tokens: int, seconds: float, step: object = None, seqs: int = 1) -> None:
        """An engine step of ``seqs`` sequences and ``tokens`` tokens in all took ``seconds``. One
        sequence: a block (or a one-token step); one token each: a plain step of ``seqs`` rows.
        A batch with a verify or prompt block in it is several computes of both kinds: not a point
        of either curve."""
        block = self.block or self.costs
        if seqs == 1:
            block.observe(tokens, seconds, step)
        if tokens == seqs and (seqs > 1 or block is not self.costs):
            self.costs.observe(tokens, seconds, step)

    def verify_cost(self, k: int) -> float:
        """A step with this sequence's ``k`` drafts, next to the others' one-token rows."""
        block = self.block or self.costs
        n = self._others
        if n == 0:
            return block.cost(1 + k)
        return self.costs.cost(n + 1) + block.cost(k)

    def observe(self, context: Sequence[int]) -> None:
        """The sequence so far: scores a pending shadow proposal once its outcome is known."""
        sh = self._shadow
        if sh is None:
            return
        got = context[sh.start : sh.start + len(sh.drafts)]
        n = 0
        while n < len(got) and got[n] == sh.drafts[n]:
            n += 1
        if n < len(got) or len(got) == len(sh.drafts):  # a miss seen, or every draft matched
            self._score(sh.kind, len(sh.drafts), n)
            self._shadow = None

    # -- decisions --------------------------------------------------------------------------

    def bar(self) -> float:
        """The gain a verify must promise at this batch size."""
        saturated = self._others + 1 >= self.costs.saturation(self.config.saturation_ratio)
        return self.config.saturated_gain if saturated else self.config.min_gain

    def best(self, a: float, free: bool = True) -> tuple[int, float]:
        """(k, expected gain over a plain step) at per-draft acceptance ``a`` and this batch."""
        d = 0.0 if free else self.draft_cost
        n = self._others
        plain = (n + 1) / self.costs.cost(n + 1)
        best_k, best_rate = 0, 1.0
        for k in range(1, self.config.k_max + 1):
            rate = (n + expected_tokens(a, k)) / (self.verify_cost(k) + k * d) / plain
            if rate > best_rate:
                best_k, best_rate = k, rate
        if best_rate < self.bar():
            return 0, 1.0
        return best_k, best_rate

    def catch_up_saving(self, kind: int) -> float:
        """What one chance to draft ``kind`` is expected to save, in one-token steps, at this batch
        size: what a draft model that sat out weighs against the prefill that catches it up, which
        the whole batch waits for (``ModelDrafter``'s ski rental). The step of ``others + 1`` rows
        yields ``rate`` times its plain tokens, so a chance saves ``(rate - 1)`` of that step; a
        probe is priced at the kind's prior acceptance (it asks whether that came back)."""
        a = self.acceptance(kind)
        if self._probing == kind:
            a = max(a, self.prior(kind))
        gain = self.best(a, free=self.is_free(kind))[1]
        return (gain - 1.0) * self.costs.cost(self._others + 1)

    def chances_left(self) -> int | None:
        """The most steps the response may still take (a step writes at least one token): what a
        catch-up prefill can be earned back over. None: not known."""
        return self._left

    def rate(self, kind: int) -> tuple[int, float]:
        """(k, expected gain) for kind ``kind`` now."""
        return self.best(self.acceptance(kind), self.is_free(kind))

    def lookahead(self, load: int = 0, left: int | None = None) -> int:
        """The most drafts any kind may take this step; ``load``: the other sequences of the step;
        ``left``: the most tokens the response may still write. A free drafter is always asked
        (its proposals are scored even when not verified)."""
        self._others = max(0, load)
        self._left = left
        if self.all_free or self.free:
            return self.config.k_max
        ks = [self.rate(c)[0] for c in self.kinds] or [self.rate(0)[0]]
        k = max(ks)
        if k > 0:
            return k
        return self.budget(0)

    def budget(self, kind: int) -> int:
        """Drafts of costly kind ``kind`` worth producing now: its best k, a probe when due, else 0."""
        st = self.stats(kind)
        if st.wait > 0:
            st.wait -= 1
            st.skipped += 1
            return 0
        k = self.rate(kind)[0]
        if k > 0:
            return k
        st.off_seen += 1
        # a probe asks whether the acceptance came back; where even drafts that are all accepted
        # would not pay at this batch size the answer changes nothing, and a draft model that has
        # sat out must first catch up on every token since (a prefill the whole batch waits for)
        if st.off_seen >= (st.probe_wait or self.config.probe_every) and self.best(1.0, free=False)[0] > 0:
            self._probing = kind
            return min(self.config.probe_k, self.config.k_max)
        st.skipped += 1
        return 0

    def limit(self, kind: int, proposed: Sequence[int], start: int) -> int:
        """How many of the ``proposed`` drafts of ``kind`` to verify; ``start``: the context length
        they follow (an unverified free proposal is scored later, see ``observe``)."""
        if not proposed:
            return 0
        st = self.stats(kind)
        if not self.is_free(kind):  # budget() already decided (a probe, or what the kind earns)
            k = len(proposed) if self._probing == kind else self.rate(kind)[0]
            return min(k, len(proposed))
        k = 0
        if st.wait > 0:
            st.wait -= 1
        else:
            k = self.rate(kind)[0]
        if k == 0:
            st.skipped += 1
            if self._shadow is None:
                self._shadow = _Shadow(kind, start, tuple(proposed[: self.config.shadow_k]))
        return min(k, len(proposed))

    def record(self, kind: int, drafted: int, accepted: int) -> None:
        """A verify of ``drafted`` drafts of ``kind`` accepted ``accepted``."""
        if drafted <= 0:
            return
        st = self.stats(kind)
        st.drafted += drafted
        st.accepted += accepted
        self._score(kind, drafted, accepted)
        c = self.config
        if accepted == 0:
            st.rejections += 1
            st.wait = min(c.backoff_base << min(st.rejections - 1, 30), c.backoff_max)
        else:
            st.rejections = 0
        if self._probing == kind:
            failed = self.rate(kind)[0] == 0
            base = c.probe_every
            st.probe_wait = min(2 * (st.probe_wait or base), base * c.probe_backoff) if failed else 0
            st.off_seen = 0
        elif accepted:
            st.off_seen = 0
        self._probing = None

    def counts(self) -> dict[int, tuple[int, int, int]]:
        """kind → (drafted, accepted, skipped)."""
        return {k: (s.drafted, s.accepted, s.skipped) for k, s in self.kinds.items()}
