"""models.scheduler with integer tokens, a fake vocabulary and a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from models.scheduler import FENCE, ChunkScheduler, SchedulerConfig
from tests.fuzzing import examples

# a byte-level fake vocabulary: token id → bytes (ids 0..255 are raw bytes)
WORDS = [b"Hello", b" world", b".", b" How", b" are", b" you", b"?", b"\n", b"```", b"py", b" x", b"=", b" 1", b","]
VOCAB = {i: bytes([i]) for i in range(256)} | {256 + i: w for i, w in enumerate(WORDS)}
ID = {w: 256 + i for i, w in enumerate(WORDS)}


def decode(ids: list[int]) -> str:
    return b"".join(VOCAB[i] for i in ids).decode("utf-8", errors="replace")


def run(ids: list[int], cfg: SchedulerConfig, step: float = 0.0):
    s = ChunkScheduler(cfg, decode)
    chunks = []
    for n, t in enumerate(ids):
        chunks += s.feed([t], now=n * step)
    chunks += s.finish()
    return s, chunks


def words(*ws: bytes) -> list[int]:
    return [ID[w] for w in ws]


def test_first_chunk_is_small_and_later_chunks_end_at_sentences():
    ids = words(b"Hello", b" world", b".", b" How", b" are", b" you", b"?", b" How", b" are", b" you", b"?")
    _, chunks = run(ids, SchedulerConfig.for_strategy("balanced", min_chunk_tokens=3))
    assert chunks[0].text == "Hello"
    assert "".join(c.text for c in chunks) == decode(ids)
    assert all(c.text.endswith(("?", ".", "\n")) for c in chunks[1:-1])


def test_never_emits_broken_utf8():
    text = "héllo wörld ✓ 你好 ".encode() * 3
    ids = list(text)  # one byte per token: multi-byte chars span tokens
    _, chunks = run(ids, SchedulerConfig.for_strategy("fast"))
    assert all("\ufffd" not in c.text for c in chunks)
    assert "".join(c.text for c in chunks) == text.decode()


def test_never_emits_half_a_word():
    ids = list(b"internationalization is a long word indeed ")
    _, chunks = run(ids, SchedulerConfig.for_strategy("fast"))
    # the character after each cut is whitespace or punctuation: no word is split
    full = "".join(c.text for c in chunks)
    pos = 0
    for c in chunks[:-1]:
        pos += len(c.text)
        assert full[pos].isspace() or full[pos - 1] in ".,;:!?\n", (c.text, full[pos:])


def test_max_chunk_forces_a_cut_at_a_word_break():
    ids = list(b"aa bb cc dd ee ff gg hh ii jj kk ll mm nn oo pp ")
    cfg = SchedulerConfig.for_strategy("quality", min_chunk_tokens=4, max_chunk_tokens=10)
    _, chunks = run(ids, cfg)
    assert max(c.tokens for c in chunks) <= 10
    assert len(chunks) > 3


def test_code_block_is_cut_at_line_and_fence_ends():
    ids = list(b"Look:\n```py\nx = 1\ny = 2\n```\nDone now. ")
    cfg = SchedulerConfig.for_strategy("balanced", min_chunk_tokens=2)
    _, chunks = run(ids, cfg)
    inside = [c for c in chunks if "=" in c.text]
    assert inside and all(c.text.endswith("\n") for c in inside)
    assert any(c.boundary == FENCE for c in chunks)


def test_stop_sequence_never_leaks_even_partially():
    ids = list(b"one two ST") + list(b"OP three")
    cfg = SchedulerConfig.for_strategy("fast", stop=("STOP",))
    s, chunks = run(ids, cfg)
    text = "".join(c.text for c in chunks)
    assert s.stopped and text == "one two " and "ST" not in text


def test_partial_stop_prefix_held_then_released():
    ids = list(b"one ST two three ")
    s, chunks = run(ids, SchedulerConfig.for_strategy("fast", stop=("STOP",)))
    assert not s.stopped and "".join(c.text for c in chunks) == "one ST two three "


def test_latency_budget_releases_a_pending_chunk():
    ids = list(b"aa bb cc dd ee ff ")
    cfg = SchedulerConfig.for_strategy("quality", min_chunk_tokens=4, max_chunk_tokens=96)
    s = ChunkScheduler(cfg, decode)
    got = []
    for i, t in enumerate(ids):
        got += s.feed([t], now=i * 0.5)  # slow tokens: budget (1 s) runs out
    assert len(got) >= 3 and all(c.boundary == 1 or c.text.endswith(" ") for c in got[1:])


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sampled_from(sorted(VOCAB)), max_size=80), st.sampled_from(["fast", "balanced", "quality"]))
@example([10, 128], "fast")  # "\n" goes out first; the lone continuation byte after it never shows
def test_chunks_concatenate_to_the_decoded_text_and_count_every_token(ids, strategy):
    s, chunks = run(ids, SchedulerConfig.for_strategy(strategy))
    full = decode(ids)
    while full.endswith("\ufffd"):
        full = full[:-1]
    assert "".join(c.text for c in chunks) == full
    assert sum(c.tokens for c in chunks) == len(ids)
    # every chunk shows text, except a last one that only carries the count of invisible tokens
    assert all(c.text for c in chunks[:-1])
    assert not chunks or chunks[-1].text or chunks[-1].tokens > 0


def test_tokens_after_the_last_visible_text_are_counted_in_the_final_chunk():
    s, chunks = run([10, 128], SchedulerConfig.for_strategy("fast"))
    assert [c.text for c in chunks] == ["\n", ""]
    assert [c.tokens for c in chunks] == [1, 1]


def test_intercepted_request_is_cut_out_and_reported():
    ids = list(b"Here you go. <image>a red fox in snow</image> Enjoy it. ")
    cfg = SchedulerConfig.for_strategy("fast", intercept=("<image>", "</image>"))
    s = ChunkScheduler(cfg, decode)
    chunks, requests = [], []
    for i, t in enumerate(ids):
        chunks += s.feed([t], now=i * 0.01)
        requests += s.requests
        s.requests = []
    chunks += s.finish()
    text = "".join(c.text for c in chunks)
    assert requests == ["a red fox in snow"]
    assert "<" not in text and "fox" not in text and "image" not in text
    assert text.replace(" ", "") == "Hereyougo.Enjoyit."


def test_unclosed_request_at_the_end_is_never_shown():
    ids = list(b"Sure. <image>half a req")
    s, chunks = run(ids, SchedulerConfig.for_strategy("fast", intercept=("<image>", "</image>")))
    assert "".join(c.text for c in chunks) == "Sure. " and s.requests == []


# ---------------------------------------------------------------------- task hints

CODE = b"def f(x):\n    y = x + 1\n    return y * 2\n\nprint(f(3))\n"


def test_task_hint_code_cuts_at_line_ends_only_in_larger_chunks():
    plain = SchedulerConfig.for_strategy("fast")
    code = SchedulerConfig.for_strategy("fast", task_hint="code")
    assert code.max_chunk_tokens == 2 * plain.max_chunk_tokens
    _, chunks = run(list(CODE), code, step=0.01)
    assert "".join(c.text for c in chunks) == CODE.decode()
    assert len(chunks) >= 2 and all(c.text.endswith("\n") for c in chunks)
    _, plain_chunks = run(list(CODE), plain, step=0.01)
    assert any(not c.text.endswith("\n") for c in plain_chunks)  # without the hint: word cuts too


def test_task_hint_chat_sends_a_one_token_first_chunk_then_whole_sentences():
    cfg = SchedulerConfig.for_strategy("balanced", task_hint="chat")
    clause = [b" How", b" are", b" you", b",", b" How", b" are", b" you", b",", b" How", b" are", b" you"]
    prose = words(b"Hello", b" world", *clause, b".", *clause, b"?", *clause, b".", b" How")
    _, chunks = run(prose, cfg)
    assert chunks[0].tokens == 1 and chunks[0].text == "Hello"
    assert all(c.text.rstrip().endswith((".", "?")) for c in chunks[1:-1])
    _, plain = run(prose, SchedulerConfig.for_strategy("balanced"))
    assert any(c.text.rstrip().endswith(",") for c in plain)  # without the hint: clause cuts too


def test_explicit_settings_win_over_the_task_hint_and_unknown_hints_are_refused():
    cfg = SchedulerConfig.for_strategy("fast", task_hint="code", max_chunk_tokens=7)
    assert cfg.max_chunk_tokens == 7 and cfg.lines_only
    with pytest.raises(ValueError, match="task_hint"):
        SchedulerConfig.for_strategy("fast", task_hint="poetry")


# ---------------------------------------------------------------------- eager first chunk (remote engines)


def feed_each(s: ChunkScheduler, ids: list[int], step: float = 0.0) -> list[list[str]]:
    """The texts each fed token released, token by token."""
    return [[c.text for c in s.feed([t], now=n * step)] for n, t in enumerate(ids)]


def test_eager_first_releases_the_first_token_before_its_word_end_is_known():
    ids = words(b"Hello", b" world", b".", b" How", b" are", b" you", b"?")
    eager = feed_each(ChunkScheduler(SchedulerConfig.for_strategy("fast", eager_first=True), decode), ids)
    plain = feed_each(ChunkScheduler(SchedulerConfig.for_strategy("fast"), decode), ids)
    assert eager[0] == ["Hello"]  # at once: TTFT saves one token interval
    assert plain[0] == [] and plain[1] == ["Hello"]  # without it: wait for " world" to show the word ended


def test_eager_first_may_split_the_first_word_only_and_keeps_all_text():
    ids = list(b"internationalization is a long word indeed ")
    s = ChunkScheduler(SchedulerConfig.for_strategy("fast", eager_first=True), decode)
    chunks = [c for t in ids for c in s.feed([t], now=0.0)] + s.finish()
    assert chunks[0].text == "i"  # the honest cost: the first chunk can be the start of a word
    full = "".join(c.text for c in chunks)
    assert full == bytes(ids).decode()
    pos = len(chunks[0].text)
    for c in chunks[1:-1]:  # every later cut still falls at a word break
        pos += len(c.text)
        assert full[pos].isspace() or full[pos - 1] in ".,;:!?\n", (c.text, full[pos:])


def test_eager_first_still_waits_for_first_chunk_tokens_and_prefers_a_known_word_end():
    balanced = SchedulerConfig.for_strategy("balanced", eager_first=True)  # first chunk after 2 tokens
    eager = feed_each(ChunkScheduler(balanced, decode), list(b"Hi there"))
    plain = feed_each(ChunkScheduler(SchedulerConfig.for_strategy("balanced"), decode), list(b"Hi there"))
    assert eager[:3] == [[], ["Hi"], []]  # two tokens, then at once
    assert plain[:3] == [[], [], ["Hi"]]  # without: until " " shows where "Hi" ends
    ids = words(b"Hello", b" world", b" How", b" are")
    got = feed_each(ChunkScheduler(balanced, decode), ids)
    assert got[:2] == [[], ["Hello"]]  # a word end is known: cut there, not mid-"world"


def test_eager_first_never_shows_a_stop_prefix_or_a_request_opener():
    cfg = SchedulerConfig.for_strategy("fast", eager_first=True, stop=("STOP",), intercept=("<image>", "</image>"))
    s = ChunkScheduler(cfg, decode)
    got = feed_each(s, list(b"ST"))
    assert got == [[], []]  # "S", "ST" may start STOP: held, as without eager_first
    got = feed_each(s, list(b"OP"))
    assert s.stopped and got == [[], []]
    s = ChunkScheduler(cfg, decode)
    assert feed_each(s, list(b"<ima")) == [[], [], [], []]
    rest = feed_each(s, list(b"ge>a fox</image> Hi there "))
    assert "".join(t for ts in rest for t in ts) + "".join(c.text for c in s.finish()) == " Hi there "
    assert s.requests == ["a fox"]


def test_eager_first_never_splits_a_code_fence_and_code_keeps_line_cuts():
    text = b"```py\nx = 1\ny = 2\n```\nDone now. "
    s = ChunkScheduler(SchedulerConfig.for_strategy("fast", eager_first=True), decode)
    got = feed_each(s, list(text))
    assert got[0] == got[1] == got[2] == []  # "`", "``", "```": a fence in the making is not cut
    chunks = [t for ts in got for t in ts] + [c.text for c in s.finish()]
    assert "".join(chunks) == text.decode()
    assert all(c.endswith("\n") for c in chunks if "=" in c)  # inside the block: whole lines, as without
    code = ChunkScheduler(SchedulerConfig.for_strategy("fast", task_hint="code", eager_first=True), decode)
    assert feed_each(code, list(b"def f")) == [[]] * 5  # lines only: no eager first chunk


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sampled_from(sorted(VOCAB)), max_size=80), st.sampled_from(["fast", "balanced", "quality"]))
def test_eager_first_keeps_every_character_and_token_count(ids, strategy):
    s, chunks = run(ids, SchedulerConfig.for_strategy(strategy, eager_first=True))
    full = decode(ids)
    while full.endswith("\ufffd"):
        full = full[:-1]
    assert "".join(c.text for c in chunks) == full
    assert sum(c.tokens for c in chunks) == len(ids)
