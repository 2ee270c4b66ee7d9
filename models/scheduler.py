"""Sans-I/O chunk scheduler: accepted token ids in, finished text chunks out.

No torch, no asyncio, no clock of its own: the caller passes ``now`` (seconds, any origin).
It owns incremental detokenisation (never a broken UTF-8 sequence, never half a word), stop
sequences (held back until they are known not to match, never leaked partially) and the
decision where to cut the next chunk:

* a small first chunk (``first_chunk_tokens``) so first text arrives fast;
* afterwards a chunk is cut at the best semantic boundary once it holds ``min_chunk_tokens``
  (code-fence end > paragraph/line/sentence end > clause > word), and is forced at
  ``max_chunk_tokens`` (at the best boundary seen, else at the last word break);
* a chunk also goes out at a word break when it has waited ``latency_budget_s``;
* ``eager_first``: the first chunk goes out as soon as it holds ``first_chunk_tokens``, without
  waiting for the token that shows where its last word ends (a remote engine's first delta, as a
  plain OpenAI stream shows it: usually a word, sometimes its start, e.g. "B" of "Boil"). It saves
  one token interval of TTFT; stop-sequence prefixes and request openers are still held back,
  and every later chunk still ends at a word break or better.

``task_hint`` adapts the strategy's preset to the task: ``chat`` sentence cuts after a one-token
first chunk; ``code`` cuts at line ends only, in larger chunks; ``summarize`` sentence cuts;
``creative`` clause cuts in larger chunks. Explicit settings win over both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

# boundary quality of a cut position
WORD, CLAUSE, SENTENCE, LINE, FENCE = 1, 2, 3, 4, 5

_STRATEGIES = {
    # name: (first_chunk_tokens, min_chunk_tokens, max_chunk_tokens, min boundary quality, latency budget s)
    "fast": (1, 2, 16, WORD, 0.15),
    "balanced": (2, 8, 48, CLAUSE, 0.40),
    "quality": (4, 16, 96, SENTENCE, 1.00),
}

TASK_HINTS: dict[str, dict[str, object]] = {
    # name: what the hint changes in the strategy's preset
    "chat": {"first_chunk_tokens": 1, "min_boundary": SENTENCE},  # first word at once, then sentences
    "code": {"lines_only": True, "min_boundary": LINE, "scale_max": 2},  # whole lines, bigger chunks
    "summarize": {"min_boundary": SENTENCE},  # whole sentences
    "creative": {"min_boundary": CLAUSE, "scale_max": 2},  # flowing text: clauses, bigger chunks
}


@dataclass(frozen=True)
class SchedulerConfig:
    strategy: str = "balanced"  # fast | balanced | quality
    first_chunk_tokens: int = 2  # tokens before the first (small) chunk may go out
    min_chunk_tokens: int = 8  # a chunk is not cut at a boundary before this many tokens
    max_chunk_tokens: int = 48  # a chunk is forced out at this many tokens
    min_boundary: int = CLAUSE  # weakest boundary that ends a chunk once min is reached
    latency_budget_s: float = 0.40  # after this long a pending chunk goes out at any word break
    lookahead_tokens: int = 8  # most draft tokens verified per step (0: no drafting)
    draft_before_first_text: bool = False  # False: plain steps until the first chunk is out (TTFT first)
    task_hint: str | None = None  # chat | code | summarize | creative (TASK_HINTS); None: the preset as is
    lines_only: bool = False  # cut only at line ends, as inside a code block (task_hint code)
    stop: tuple[str, ...] = ()  # stop sequences (never shown)
    intercept: tuple[str, str] | None = None  # (open, close) tags of a model request (e.g. an image) to cut out
    tool_intercept: tuple[str, str] | None = None  # (open, close) tags of the model's tool calls, cut out likewise
    beam_width: int = 1  # > 1: each block of ``beam_block`` tokens is chosen by a small beam search
    beam_block: int = 8  # tokens decided per beam search (before they can be shown)
    eager_first: bool = False  # the first chunk may end where the known text ends (maybe mid-word): TTFT first

    @classmethod
    def for_strategy(cls, strategy: str = "balanced", **overrides: object) -> SchedulerConfig:
        if strategy not in _STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {sorted(_STRATEGIES)}")
        first, lo, hi, quality, budget = _STRATEGIES[strategy]
        cfg = cls(
            strategy=strategy,
            first_chunk_tokens=first,
            min_chunk_tokens=lo,
            max_chunk_tokens=hi,
            min_boundary=quality,
            latency_budget_s=budget,
            beam_width=2 if strategy == "quality" else 1,  # quality spends compute on better chunks
        )
        clean = {k: v for k, v in overrides.items() if v is not None}
        hint = clean.get("task_hint")
        if hint is not None:
            if hint not in TASK_HINTS:
                raise ValueError(f"unknown task_hint {hint!r}; expected one of {sorted(TASK_HINTS)}")
            adapt = dict(TASK_HINTS[str(hint)])
            scale = int(adapt.pop("scale_max", 1))  # type: ignore[call-overload]
            cfg = replace(cfg, max_chunk_tokens=cfg.max_chunk_tokens * scale, **adapt)  # type: ignore[arg-type]
        cfg = replace(cfg, **clean)  # type: ignore[arg-type]
        if cfg.max_chunk_tokens < cfg.min_chunk_tokens:
            cfg = replace(cfg, max_chunk_tokens=cfg.min_chunk_tokens)
        return cfg


@dataclass(frozen=True)
class Chunk:
    text: str
    tokens: int  # accepted tokens this chunk's text came from
    boundary: int  # the quality of the cut (0: end of response)


_FENCE_END = re.compile(r"```[ \t]*\n")


def boundary_quality(text: str, pos: int, in_code: bool) -> int:
    """How good a cut between ``text[:pos]`` and ``text[pos:]`` is (0: not allowed)."""
    if pos <= 0 or pos > len(text):
        return 0
    before = text[pos - 1]
    after = text[pos] if pos < len(text) else ""
    if before == "\n":
        if text.endswith("```\n", 0, pos) or _FENCE_END.search(text, max(0, pos - 8), pos):
            return FENCE
        return LINE
    if in_code:  # inside a code block only line ends are clean cuts
        return 0
    if after == "":
        return 0  # end of known text: the next token may still extend this word
    if not after.isspace():
        return 0
    if before in ".!?":
        return SENTENCE
    if before in ",;:)":
        return CLAUSE
    if not before.isspace():
        return WORD
    return 0


class ChunkScheduler:
    """Feeds on accepted tokens; returns chunks of final text."""

    def __init__(self, config: SchedulerConfig, decode: Callable[[list[int]], str]):
        self.config = config
        self._decode = decode
        self._ids: list[int] = []
        self._text = ""  # stable decoded text of all ids
        self._base = ""  # the incremental detokenizer's text so far
        self._prefix_off = 0  # ids[prefix_off:read_off] are context already decoded into _base
        self._read_off = 0
        self._offsets: list[int] = []  # stable-text length after each token (for token counts)
        self._emitted = 0  # characters of _text already handed out
        self._emitted_tokens = 0
        self._pending_since: float | None = None
        self._chunks = 0
        self.stopped = False  # a stop sequence matched: the response is over
        self._fences = 0  # code fences in _text[:_fence_pos] (kept incrementally: O(1) per token)
        self._fence_pos = 0
        self._hidden: list[tuple[int, int]] = []  # intercepted spans of _text, never shown
        self._scan = 0  # where the next intercept search starts
        self.requests: list[str] = []  # intercepted request bodies, taken by the caller
        self.tool_calls: list[str] = []  # intercepted tool-call bodies (the JSON inside the tags), likewise

    # -- text bookkeeping -------------------------------------------------------------------

    def _stable(self) -> str:
        """Decoded text of all ids so far, without an incomplete UTF-8 sequence at the end.

        Incremental (as vLLM/TGI do): only ``ids[prefix_off:]`` is decoded each time, with a few
        already-final tokens in front as context, so a long response costs O(1) per token.
        """
        ids = self._ids
        prefix_text = self._decode(ids[self._prefix_off : self._read_off])
        new_text = self._decode(ids[self._prefix_off :])
        if new_text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the rest
            return self._base
        if new_text.startswith(prefix_text):
            self._base += new_text[len(prefix_text) :]
        else:  # a tokenizer that rewrote its context: re-decode everything once
            self._base = self._decode(ids).rstrip("\ufffd")
        self._prefix_off, self._read_off = self._read_off, len(ids)
        return self._base

    def _visible(self, start: int, end: int) -> str:
        """``_text[start:end]`` without intercepted spans."""
        out, pos = [], start
        for a, b in self._hidden:
            if b <= pos or a >= end:
                continue
            out.append(self._text[pos : max(a, pos)])
            pos = max(pos, min(b, end))
        out.append(self._text[pos:end])
        return "".join(out)

    def _tokens_up_to(self, pos: int) -> int:
        n = self._emitted_tokens
        while n < len(self._offsets) and self._offsets[n] <= pos:
            n += 1
        return n

    def _in_code(self, pos: int) -> bool:
        """Inside a fenced code block at ``pos`` (pos ≥ the last emitted position)."""
        return (self._fences + self._text.count("```", self._fence_pos, pos)) % 2 == 1

    def _fence_starts(self, end: int) -> list[int]:
        """Where the fences in ``_text[_fence_pos:end]`` start, matched as ``str.count`` does
        (left to right, not overlapping), so a running count agrees with ``_in_code``."""
        out, i = [], self._text.find("```", self._fence_pos, end)
        while i >= 0:
            out.append(i)
            i = self._text.find("```", i + 3, end)
        return out

    def _stop_limit(self) -> int:
        """Text beyond this index might be the start of a stop sequence or a request: hold it back."""
        text = self._text
        limit = len(text)
        holds = list(self.config.stop)
        for opener, _ in self._tags():
            holds.append(opener)
            idx = text.find(opener, self._scan)
            if idx >= 0:  # an open request not closed yet
                limit = min(limit, idx)
        for stop in holds:
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    limit = min(limit, len(text) - k)
                    break
        return limit

    # -- the API ----------------------------------------------------------------------------

    def feed(self, ids: list[int], now: float) -> list[Chunk]:
        """Accept tokens; return the chunks that became final."""
        if self.stopped or not ids:
            return []
        for tok in ids:
            self._ids.append(tok)
            self._offsets.append(-1)
        text = self._stable()
        if not text.startswith(self._text[: self._emitted]):
            # a tokenizer that rewrites earlier text: keep what was shown, continue after it
            text = self._text[: self._emitted] + text[self._emitted :]
        self._text = text
        # token i's text ends at len(decode(ids[:i+1])); approximated by the stable length now
        for i in range(len(self._offsets) - len(ids), len(self._offsets)):
            self._offsets[i] = len(text)
        if self._pending_since is None:
            self._pending_since = now
        self._intercept()
        for stop in self.config.stop:
            idx = text.find(stop, self._emitted)
            if idx >= 0:
                self._text = text[:idx]
                self.stopped = True
                return [c for c in self._flush() if c.text]
        return [c for c in self._cut(now) if c.text]

    def _tags(self) -> list[tuple[str, str]]:
        return [t for t in (self.config.intercept, self.config.tool_intercept) if t]

    def _intercept(self) -> None:
        tags = self._tags()
        while tags:
            # the earliest opener of any kind is the next span (spans do not nest)
            found = [(i, k) for k, (opener, _) in enumerate(tags) if (i := self._text.find(opener, self._scan)) >= 0]
            if not found:
                return
            i, k = min(found)
            opener, closer = tags[k]
            j = self._text.find(closer, i + len(opener))
            if j < 0:
                return
            body = self._text[i + len(opener) : j].strip()
            (self.tool_calls if tags[k] == self.config.tool_intercept else self.requests).append(body)
            self._hidden.append((i, j + len(closer)))
            self._scan = j + len(closer)

    def finish(self) -> list[Chunk]:
        """The response ended (eos, length, cancel): hand out everything still pending."""
        if not self.stopped:
            self._text = self._stable() if self._ids else self._text
            limit = len(self._text)
            for stop in self.config.stop:  # an unfinished stop prefix at the very end stays hidden
                idx = self._text.find(stop, self._emitted)
                if idx >= 0:
                    limit = min(limit, idx)
            for opener, _ in self._tags():  # an unclosed request at the end is dropped, never shown
                idx = self._text.find(opener, self._scan)
                if idx >= 0:
                    limit = min(limit, idx)
            self._text = self._text[:limit]
        out = [c for c in self._flush() if c.text]
        left = len(self._ids) - self._emitted_tokens
        if left > 0:  # tokens whose text never became visible (an incomplete UTF-8 tail, a hidden span)
            if out:
                out[-1] = Chunk(out[-1].text, out[-1].tokens + left, out[-1].boundary)
            else:
                out.append(Chunk("", left, 0))  # carries the count only; nothing to show
            self._emitted_tokens += left
        return out

    @property
    def tokens(self) -> list[int]:
        return list(self._ids)

    # -- internals --------------------------------------------------------------------------

    def _flush(self) -> list[Chunk]:
        if len(self._text) <= self._emitted:
            return []
        return [self._emit(len(self._text), 0)]

    def _emit(self, pos: int, quality: int) -> Chunk:
        ntok = self._tokens_up_to(pos) - self._emitted_tokens
        if quality == 0:  # end of response: every remaining token belongs to this chunk
            ntok = len(self._ids) - self._emitted_tokens
        chunk = Chunk(self._visible(self._emitted, pos), ntok, quality)
        self._emitted = pos
        self._emitted_tokens += ntok
        self._fences += self._text.count("```", self._fence_pos, pos)
        self._fence_pos = pos
        self._chunks += 1
        self._pending_since = None
        return chunk

    def _eager_ok(self, limit: int) -> bool:
        """May the first chunk end at ``limit`` without a known word end? Only at the end of all known
        text (nothing held back for a stop sequence or a request: those rules stay exact), outside
        code, where only line ends are cuts, and not after a backtick (a code fence must not be split
        between chunks: fences are counted per chunk)."""
        text = self._text
        return limit == len(text) and not text.endswith("`") and not self.config.lines_only and not self._in_code(limit)

    def _cut(self, now: float) -> list[Chunk]:
        cfg = self.config
        out: list[Chunk] = []
        while True:
            limit = self._stop_limit()
            if limit <= self._emitted:
                return out
            pending_tokens = len(self._ids) - self._emitted_tokens
            first = self._chunks == 0
            lo = cfg.first_chunk_tokens if first else cfg.min_chunk_tokens
            need = WORD if first else cfg.min_boundary
            # best boundary in the pending text (latest among the best)
            best_pos, best_q, last_word = -1, 0, -1
            # One pass, O(1) per position: a long pending "word" (base64, a minified line) is
            # rescanned on every token, so a per-position recount would make it quadratic.
            # A cut needs at least one whole token before it: the first pending token's end.
            first_end = self._offsets[self._emitted_tokens] if pending_tokens else limit + 1
            fences = self._fence_starts(limit)  # pending fence openings, in order
            inside, f = self._fences % 2 == 1, 0
            for pos in range(self._emitted + 1, limit + 1):
                while f < len(fences) and fences[f] + 3 <= pos:  # a fence that ends by pos toggles code
                    inside, f = not inside, f + 1
                q = boundary_quality(self._text, pos, cfg.lines_only or inside)
                if q and pos >= first_end:
                    if q >= best_q:
                        best_pos, best_q = pos, q
                    last_word = pos
            waited = self._pending_since is not None and now - self._pending_since >= cfg.latency_budget_s
            if pending_tokens >= cfg.max_chunk_tokens:
                if best_q >= need:
                    out.append(self._emit(best_pos, best_q))
                elif last_word > 0:
                    out.append(self._emit(last_word, WORD))
                elif pending_tokens >= max(4 * cfg.max_chunk_tokens, 64):
                    out.append(self._emit(limit, WORD))  # a pathological "word" (URL, base64): bound it
                else:
                    return out  # wait for the word to end rather than split it
                continue
            if pending_tokens >= lo and best_q >= need:
                out.append(self._emit(best_pos, best_q))
                continue
            if first and cfg.eager_first and pending_tokens >= lo and self._eager_ok(limit):
                out.append(self._emit(limit, WORD))  # no word end known yet: all the text there is
                continue
            if pending_tokens >= lo and waited and last_word > 0:
                out.append(self._emit(last_word, WORD))
                continue
            return out
