"""One response's decode loop, advanced one model step at a time.

A step is one forward pass (a prefill piece, one token, or one draft-and-verify) split in two so
the engine can batch it with every other running response's: ``plan()`` says what this job needs
forwarded (a ``Forward``: tokens + how many logit rows), the engine runs one
``Backend.forward_batch`` for all of them, and ``complete(rows)`` takes this job's rows, chooses
the next token and returns the events. ``step()`` is the same on a batch of one. A prompt is
prefilled in pieces of at most the ``prefill_budget`` the engine grants (chunked prefill), so
running streams keep flowing while a newcomer's prompt goes in. Beam search (``quality``) runs
several dependent forwards per step and so steps alone (``batchable`` is False). A job's
``phase`` (``JobPhase``) goes QUEUED → PREFILL → DECODE → DONE, set where each begins.
Sync code: it runs on the engine's thread.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .backend import Backend, KVState, sync_prefix
from .decode_ports import TokenConstraint, TokenDrafter, Verifier
from .lifecycle import Done as Done
from .lifecycle import JobEvents as JobEvents
from .lifecycle import JobLifecycle, JobPhase, merge
from .lifecycle import TokenLogprob as TokenLogprob
from .penalties import active as penalties_active
from .penalties import breaker_mask, check_bias, dry_active, penalize
from .sampling import SamplingParams, choose, log_softmax
from .scheduler import ChunkScheduler, SchedulerConfig

_BREAKERS: weakref.WeakKeyDictionary[Any, np.ndarray] = weakref.WeakKeyDictionary()  # backend → DRY breaker mask


def dry_breakers(backend: Backend) -> np.ndarray:
    """The backend's DRY sequence breakers (``models.penalties.breaker_mask``), scanned once per backend."""
    mask = _BREAKERS.get(backend)
    if mask is None:
        mask = _BREAKERS[backend] = breaker_mask(backend.vocab_size, lambda t: backend.decode([t]))
    return mask


class ContextOverflow(Exception):
    """The prompt does not fit the model's context."""


@dataclass
class Forward:
    """What one job needs forwarded this step: ``tokens`` appended to its state, logits of the
    last ``n_logits`` positions (rows ``[n_logits, V]`` go back to ``complete``)."""

    tokens: list[int]
    n_logits: int
    prefill: bool = False  # a piece of the prompt (the engine budgets these per step)


@dataclass(frozen=True)
class Prefill:
    """The planned forward feeds the next ``n`` prompt tokens (one piece of a chunked prefill)."""

    n: int


@dataclass(frozen=True)
class Advance:
    """The planned forward feeds the last shown ``token`` and the ``drafts`` after it, to a cache
    ``base`` tokens long: rejected drafts are cropped back to ``base + 1 + accepted``."""

    token: int
    drafts: list[int]
    base: int


class DecodeJob(JobLifecycle):
    def __init__(
        self,
        backend: Backend,
        state: KVState,
        prompt_ids: list[int],
        params: SamplingParams,
        sched: SchedulerConfig,
        drafter: TokenDrafter | None = None,
        verifier: Verifier | None = None,
        clock: Callable[[], float] = time.perf_counter,
        track_logprobs: bool = False,
        top_logprobs: int | None = None,
        constraint: TokenConstraint | None = None,
    ):
        """``top_logprobs``: None, or 0..n to report each token's logprob (``JobEvents.logprobs``)
        with that many alternatives."""
        if len(prompt_ids) + 1 > backend.max_context:
            raise ContextOverflow(f"prompt is {len(prompt_ids)} tokens; the model's context is {backend.max_context}")
        self.backend = backend
        self.state = state
        self.prompt_ids = prompt_ids
        self.params = params
        check_bias(params, backend.vocab_size)
        self._start(ChunkScheduler(sched, backend.decode), clock)
        self.constraint = constraint  # grammar mask on every chosen token (json_schema, forced tool calls)
        self.penalised = penalties_active(params)  # logits go through models.penalties before each choice
        # beam search only refines plain greedy decoding: no grammar, no penalties over the history
        self.beam = sched.beam_width if params.greedy and constraint is None and not self.penalised else 1
        self.drafter = drafter if sched.lookahead_tokens > 0 and self.beam == 1 else None
        self.verifier = verifier
        self.rng = np.random.default_rng(params.seed)
        self.generated: list[int] = []
        self.top_logprobs = top_logprobs if top_logprobs is not None else params.top_logprobs
        self.track_logprobs = track_logprobs or self.beam > 1 or self.top_logprobs is not None
        self._breakers: np.ndarray | None = None  # DRY's sequence breakers, on first use
        self.logprobs: list[float] = []  # log p of each generated token under the model (when tracked)
        self._pending_lp = 0.0
        self._pending_top: list[tuple[int, float]] = []
        self._held = JobEvents()  # ids and logprobs of steps that produced no chunk yet
        self.t_prefilled: float | None = None
        self.t_admitted: float | None = None  # the engine first planned its prompt (queue wait ends here)
        self.prompt_tokens = 0  # tokens actually prefilled (cache reuse shows here)
        self.cached_tokens = 0
        self.drafted = 0
        self.accepted = 0
        self._next_logits: np.ndarray | None = None  # [V] distribution of the next position
        self._pending: int | None = None  # the next token, when already chosen
        self._feed: int | None = None  # the last shown token, not yet fed to the model (set all through DECODE)
        self._prompt_left: list[int] = []  # prompt ids still to prefill (chunked prefill: PREFILL)
        self._inflight: Prefill | Advance | None = None  # what the planned forward was for

    # -------------------------------------------------------------------------------------

    @property
    def batchable(self) -> bool:
        """False: beam search, whose step is several dependent forwards (the engine runs it alone)."""
        return self.beam == 1

    def step(self) -> JobEvents:
        """One model forward, then the next token is chosen and shown at once (a batch of one).

        A chosen token is emitted *before* it is fed to the model (it is fed at the start of the
        next step), so text reaches the client one model step earlier than forward-then-emit.
        """
        return self._release(self._step())

    def _release(self, ev: JobEvents) -> JobEvents:
        """Ids and logprobs wait for the next chunk or the end: the engine hands on only events with
        one, and a wake-up of the event loop per token would cost every response time."""
        self._held.tokens.extend(ev.tokens)
        self._held.logprobs.extend(ev.logprobs)
        if not ev.chunks and ev.done is None:
            ev.tokens, ev.logprobs = [], []
            return ev
        ev.tokens, ev.logprobs = self._held.tokens, self._held.logprobs
        self._held = JobEvents()
        return ev

    def _step(self) -> JobEvents:
        if self.finished:
            return JobEvents()
        if self.beam > 1:
            if self.phase is JobPhase.QUEUED:
                self._prefill()
            return self._beam_block()
        fw = self.plan()
        if fw is None:
            return JobEvents()
        t0 = self.clock()
        rows = self.backend.forward(self.state, fw.tokens, fw.n_logits)
        seconds = self.clock() - t0
        if not fw.prefill:
            self.observe_step(len(fw.tokens), seconds)
        return self._complete(rows, seconds)

    def observe_step(self, tokens: int, seconds: float, step: object = None, seqs: int = 1) -> None:
        """A decode/verify step of ``seqs`` sequences that held ``tokens`` tokens in all took
        ``seconds``: the drafting policy's cost curves learn from it. ``step``: the engine step's id."""
        observe = getattr(self.verifier, "observe_step", None)
        if observe is not None:
            observe(tokens, seconds, step, seqs)

    def plan(
        self, load: int = 0, prefill_budget: int | None = None, draft: bool = True, prefill_piece: int | None = None
    ) -> Forward | None:
        """What this step needs forwarded; None: nothing now (finished, or no prefill budget left).

        ``load``: other jobs sharing the step (the adaptive lookahead weighs drafts against it);
        ``draft=False``: no drafting this step (the engine's batch already fills the machine).
        ``prefill_budget``: the most prompt tokens this step may feed (None: all at once).
        ``prefill_piece``: the prompt goes in whole pieces of this many tokens (the last one shorter),
        cut where they would be cut alone, each when the budget holds all of it: where the budget
        cuts a prompt must not depend on who else is prefilling, because a backend's attention may
        round a prompt cut 16 + 32 differently from 48 at once (the transformers fast path in bf16).
        """
        assert self._inflight is None, "plan() twice without complete()"
        if self.finished or self.beam > 1:
            return None
        if self.phase is JobPhase.QUEUED:
            self.t_admitted = self.clock()
            to_feed = sync_prefix(self.backend, self.state, self.prompt_ids)  # never empty
            self.cached_tokens = len(self.prompt_ids) - len(to_feed)
            self.prompt_tokens = len(to_feed)
            self._prompt_left = to_feed
            self.phase = JobPhase.PREFILL
        if self.phase is JobPhase.PREFILL:
            left = len(self._prompt_left)
            if prefill_piece is not None:
                n = min(prefill_piece, left)
                if prefill_budget is not None and n > prefill_budget:
                    return None  # the whole piece next step
            else:
                n = left if prefill_budget is None else min(prefill_budget, left)
            if n <= 0:
                return None
            self._inflight = Prefill(n)
            return Forward(self._prompt_left[:n], 1, prefill=True)
        tok = self._feed
        assert tok is not None, "DECODE without its last shown token"
        budget = self.params.max_tokens - len(self.generated)  # tokens we may still show
        room = self.backend.max_context - len(self.state.tokens) - 1
        drafts: list[int] = []
        # no drafting before the first text is out: a verify batch costs more than one token, and
        # time to first text matters more than throughput until then
        first_out = self.t_first is not None or self.scheduler.config.draft_before_first_text
        if draft and self.drafter is not None and self.verifier is not None and budget > 0 and room > 2 and first_out:
            # k = budget: when every draft is accepted the response is complete without another forward
            k = min(self.verifier.lookahead(load, budget), budget, room - 2, self.scheduler.config.lookahead_tokens)
            if k > 0:
                drafts = self.drafter.propose(self.state.tokens + [tok], k)[:k]
                if self.constraint is not None:  # only drafts the grammar allows are verified (it is past tok)
                    drafts = drafts[: self.constraint.valid_prefix(drafts)]
        self._inflight = Advance(tok, drafts, len(self.state.tokens))
        return Forward([tok, *drafts], len(drafts) + 1)

    @property
    def prompt_pending(self) -> bool:
        """Its prompt is not all in yet (not planned, or pieces left): it has no first token."""
        return self.phase in (JobPhase.QUEUED, JobPhase.PREFILL)

    @property
    def prefilling(self) -> bool:
        """Prompt tokens are still to go in (``plan`` may be waiting for prefill budget)."""
        return self.phase is JobPhase.PREFILL

    def complete(self, rows: np.ndarray, seconds: float = 0.0) -> JobEvents:
        """This job's rows ``[n_logits, V]`` of the forward ``plan()`` asked for → its events.

        ``seconds``: the forward's wall time when it ran alone (0: shared with others, not timed).
        """
        return self._release(self._complete(rows, seconds))

    def _complete(self, rows: np.ndarray, seconds: float) -> JobEvents:
        assert self._inflight is not None, "complete() without plan()"
        inflight, self._inflight = self._inflight, None
        out = JobEvents()
        match inflight:
            case Prefill(n):
                self._prompt_left = self._prompt_left[n:]
                if self._prompt_left:
                    return out  # more pieces to go
                self._next_logits = rows[0]
                self.t_prefilled = self.clock()
                self.phase = JobPhase.DECODE
            case Advance(tok, drafts, base):
                self._feed = None
                out = self._verified(rows, tok, drafts, base, seconds)
                if self.finished:
                    return out
        if self._pending is not None:  # chosen by the verifier
            tok, self._pending = self._pending, None
            lp, top = self._pending_lp, self._pending_top
        else:
            assert self._next_logits is not None
            row = self._next_logits
            if self.penalised:
                row = self._penalize(row, [])
            if self.constraint is not None:
                row = self.constraint.mask(row, greedy=self.params.greedy)
            tok = choose(row, self.params, self.rng)
            lp, top = self._lp(row, tok), self._top(row)
        if tok in self.backend.eos_ids:
            return merge(out, self._finish("stop"))
        no_room = len(self.state.tokens) + 1 >= self.backend.max_context
        ev = self._accept([tok], lps=[lp], final="length" if no_room else None, tops=[top])
        if not self.finished:
            self._feed = tok
        return merge(out, ev)

    def _verified(self, rows: np.ndarray, tok: int, drafts: list[int], base: int, seconds: float) -> JobEvents:
        """The forward of the last shown token (and drafts after it) is done: accept what verifies."""
        if drafts:
            assert self.verifier is not None
            if self.penalised:  # row i under the history that ends in drafts[:i]: exactly what plain decoding sees
                rows = np.stack([self._penalize(rows[i], drafts[:i]) for i in range(len(rows))])
            if self.constraint is not None:  # row i under the grammar state after drafts[:i]
                rows = rows.copy()  # (a view into the engine's batch)
                self.constraint.mask_rows(rows, drafts, greedy=self.params.greedy)
            new, n_ok = self.verifier.accept(rows, drafts, self.params, self.rng)
            # new = drafts[:n_ok] + [next token chosen from row n_ok]; rejected drafts leave the cache
            self.backend.crop(self.state, base + 1 + n_ok)
            self.drafted += len(drafts)
            self.accepted += n_ok
            self.verifier.record(len(drafts), n_ok, seconds)
            self._next_logits = None
            self._pending = new[-1]  # for sampling chosen from the residual distribution
            self._pending_lp = self._lp(rows[n_ok], new[-1])
            self._pending_top = self._top(rows[n_ok])
            if n_ok:
                return self._accept(
                    drafts[:n_ok],
                    lps=[self._lp(rows[i], d) for i, d in enumerate(drafts[:n_ok])],
                    tops=[self._top(rows[i]) for i in range(n_ok)],
                )
            return JobEvents()
        if self.verifier is not None:
            self.verifier.record(0, 0, seconds)
        self._next_logits = rows[0]
        return JobEvents()

    def _penalize(self, row: np.ndarray, drafts: list[int]) -> np.ndarray:
        """``row`` penalised for the history it follows: the prompt, the generated tokens, then ``drafts``."""
        if self._breakers is None and dry_active(self.params):
            self._breakers = dry_breakers(self.backend)
        generated = self.generated + drafts if drafts else self.generated
        return penalize(row, self.params, self.prompt_ids, generated, self._breakers)

    def _lp(self, row: np.ndarray, tok: int) -> float:
        return float(log_softmax(row)[tok]) if self.track_logprobs else 0.0

    def _top(self, row: np.ndarray) -> list[tuple[int, float]]:
        """The ``top_logprobs`` most likely (id, logprob) of ``row [V]``, best first (none when not asked)."""
        k = min(self.top_logprobs or 0, row.shape[-1])
        if k <= 0:
            return []
        lp = log_softmax(row)  # [V]
        ids = np.argpartition(-lp, k - 1)[:k]
        return [(int(i), float(lp[i])) for i in ids[np.argsort(-lp[ids], kind="stable")]]

    def _beam_block(self) -> JobEvents:
        """``quality``: decide the next ``beam_block`` tokens by a beam search of width ``beam``.

        Each candidate's next-token row comes from the shared cache, re-synced to that
        candidate's prefix (crop + a short batched forward), so no second cache is needed.
        The block with the best mean log-probability wins and is committed to the cache.
        """
        assert self._next_logits is not None
        base = list(self.state.tokens)
        budget = self.params.max_tokens - len(self.generated)
        room = self.backend.max_context - len(base) - 2
        depth = max(1, min(self.scheduler.config.beam_block, budget, room))
        width = self.beam
        eos = self.backend.eos_ids
        beams: list[tuple[list[int], list[float], np.ndarray]] = [([], [], self._next_logits)]
        done: list[tuple[list[int], list[float]]] = []
        for _ in range(depth):
            cands: list[tuple[float, list[int], list[float]]] = []
            for suffix, lps, row in beams:
                lp_row = log_softmax(row)
                for t in np.argpartition(-lp_row, width)[:width]:
                    t = int(t)
                    new_lps = [*lps, float(lp_row[t])]
                    cands.append((sum(new_lps), [*suffix, t], new_lps))
            cands.sort(key=lambda c: -c[0])
            beams = []
            for _, suffix, lps in cands[:width]:
                if suffix[-1] in eos:
                    done.append((suffix, lps))
                    continue
                feed = sync_prefix(self.backend, self.state, base + suffix)
                beams.append((suffix, lps, self.backend.forward(self.state, feed, n_logits=1)[0]))
            if not beams:
                break
        pool = done + [(s, lps) for s, lps, _ in beams]
        best, best_lps = max(pool, key=lambda c: sum(c[1]) / len(c[1]))
        if best[-1] in eos:  # the cache may hold another candidate's tail: the next turn re-syncs it
            out = self._accept(best[:-1], lps=best_lps[:-1])
            if out.done is None:
                fin = self._finish("stop")
                out.chunks.extend(fin.chunks)
                out.done = fin.done
            return out
        feed = sync_prefix(self.backend, self.state, base + best)
        row = self.backend.forward(self.state, feed, n_logits=1)[0]
        return self._accept(best, next_row=row, lps=best_lps)

    def cancel(self) -> JobEvents:
        return self._release(self._finish("cancelled"))

    # -------------------------------------------------------------------------------------

    def _prefill(self) -> None:
        self.t_admitted = self.clock()
        to_feed = sync_prefix(self.backend, self.state, self.prompt_ids)
        self.cached_tokens = len(self.prompt_ids) - len(to_feed)
        self.prompt_tokens = len(to_feed)
        rows = self.backend.forward(self.state, to_feed, n_logits=1)
        self._next_logits = rows[0]
        self.t_prefilled = self.clock()
        self.phase = JobPhase.DECODE

    def _accept(
        self,
        toks: list[int],
        next_row: np.ndarray | None = None,
        final: str | None = None,
        lps: list[float] | None = None,
        tops: list[list[tuple[int, float]]] | None = None,
    ) -> JobEvents:
        stop_at = None
        for i, t in enumerate(toks):
            if t in self.backend.eos_ids:
                stop_at = i
                break
        if stop_at is not None:
            toks = toks[:stop_at]
        room = self.params.max_tokens - len(self.generated)
        length_hit = len(toks) >= room
        toks = toks[:room]
        if self.constraint is not None:
            self.constraint.advance(toks)
        self.generated.extend(toks)
        if self.track_logprobs:
            self.logprobs.extend((lps or [0.0] * len(toks))[: len(toks)])
        out = JobEvents(chunks=self.scheduler.feed(toks, self.clock()), tokens=list(toks))
        if self.top_logprobs is not None:
            out.logprobs = self._token_logprobs(
                toks, self.logprobs[len(self.logprobs) - len(toks) :] if toks else [], tops
            )
        self._note_chunks(out.chunks)
        out.requests, self.scheduler.requests = self.scheduler.requests, []
        out.tool_calls, self.scheduler.tool_calls = self.scheduler.tool_calls, []
        if next_row is not None:
            self._next_logits = next_row
        reason = final
        if self.scheduler.stopped or stop_at is not None:
            reason = "stop"
        elif self.constraint is not None and self.constraint.complete:  # only end-of-turn could follow
            reason = "stop"
        elif length_hit:
            reason = "length"
        if reason is not None:
            done = self._finish(reason)
            out.chunks.extend(done.chunks)
            out.done = done.done
        return out

    def _token_logprobs(
        self, toks: list[int], lps: list[float], tops: list[list[tuple[int, float]]] | None
    ) -> list[TokenLogprob]:
        """What ``logprobs`` shows of ``toks``: each one's text and logprob, with the alternatives'
        (a beam block has no alternatives to show: its tokens were chosen over several rows)."""
        out = []
        for i, (t, lp) in enumerate(zip(toks, lps, strict=True)):
            top = tops[i] if tops is not None and i < len(tops) else []
            out.append(TokenLogprob(self.backend.decode([t]), lp, tuple((self.backend.decode([j]), v) for j, v in top)))
        return out

    def _finish(self, reason: str) -> JobEvents:
        return self._end(Done(reason, {}))

    def metrics(self) -> dict[str, Any]:
        now = self.clock()
        n = len(self.generated)
        start = self.t_prefilled or now
        decode_s = max(now - start, 1e-9)
        return {
            "ttft_ms": None if self.t_first is None else round((self.t_first - self.t_start) * 1000, 2),
            # submitted → the engine starting its prompt, and the prompt's forwards (turn latency, traces)
            "queue_ms": None if self.t_admitted is None else round((self.t_admitted - self.t_start) * 1000, 2),
            "prefill_ms": None
            if self.t_prefilled is None or self.t_admitted is None
            else round((self.t_prefilled - self.t_admitted) * 1000, 2),
            "tokens": n,
            "chunks": self.n_chunks,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "draft_tokens": self.drafted,
            "draft_acceptance": None if self.drafted == 0 else round(self.accepted / self.drafted, 4),
            "draft_kinds": getattr(self.verifier, "kind_counts", dict)(),  # kind → drafted/accepted/skipped
            "tokens_per_s": round(n / decode_s, 2) if n else 0.0,
            "e2e_s": round(now - self.t_start, 4),
            "mean_logprob": round(sum(self.logprobs) / len(self.logprobs), 4) if self.logprobs else None,
        }
