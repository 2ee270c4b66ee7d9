"""Fair synthesis across API keys, pure and on a fake clock: the queue's tiers and round robin
(``gateway.voice.tts_queue``), the per-key budget of ``/v1/audio/speech`` (``gateway.voice.speech_budget``), and the
bounded pieces long unpunctuated text is cut into (``processors.speech_text``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.voice.speech_budget import SpeechBudget
from gateway.voice.tts_queue import FIRST_CHUNKS, SynthesisQueue
from processors.speech_text import MAX_NUMBER_DIGITS, SpeechText, bounded_pieces, spoken_text

S_PER_CHAR = 56 / 4096  # what the attack measured: a 4,096-character input took 56 s of synthesis


@dataclass(frozen=True)
class Job:
    name: str
    chars: int


def simulate(arrivals: list[tuple[float, Job, int, str, bool]]) -> dict[str, float]:
    """One worker on a fake clock: ``arrivals`` (time, job, rank, owner, bulk) join the queue when the clock
    passes them; each job takes its characters × S_PER_CHAR. Returns each job's finish time."""
    q: SynthesisQueue[Job] = SynthesisQueue()
    pending = sorted(arrivals, key=lambda a: a[0])
    now, done = 0.0, {}
    while pending or len(q):
        while pending and pending[0][0] <= now:
            _, job, rank, owner, bulk = pending.pop(0)
            q.put(job, rank, owner, bulk, job.chars)
        job = q.take()
        if job is None:  # idle until the next arrival
            now = pending[0][0]
            continue
        now += job.chars * S_PER_CHAR
        done[job.name] = now
    return done


def long_request(owner: str, name: str, at: float, chars: int = 1200) -> list[tuple[float, Job, int, str, bool]]:
    pieces = bounded_pieces("word " * (chars // 5), 200)
    return [(at, Job(f"{name}{i}", len(p)), i, owner, True) for i, p in enumerate(pieces)]


def test_a_bystanders_short_request_waits_for_a_piece_not_for_two_long_requests():
    flood = long_request("A", "a", 0.0) + long_request("A", "b", 0.0)
    done = simulate([*flood, (0.1, Job("hi", 3), 0, "B", True)])
    quiet = 3 * S_PER_CHAR
    piece = 200 * S_PER_CHAR
    assert done["hi"] - 0.1 <= 2 * piece + quiet  # the piece running, at most one more, then its own
    fifo = sum(j.chars for _, j, *_ in flood) * S_PER_CHAR
    assert done["hi"] - 0.1 < fifo / 5  # arrival order made it wait for all of A's 2,400 characters


def test_a_realtime_first_chunk_never_waits_behind_another_keys_queued_pieces():
    flood = long_request("A", "a", 0.0, 4096)
    first = (1.0, Job("reply0", 40), 0, "C", False)
    later = (1.0, Job("reply5", 40), FIRST_CHUNKS + 2, "C", False)
    done = simulate([*flood, first, later])
    running_then = 200 * S_PER_CHAR  # one piece may be running when it arrives
    assert done["reply0"] - 1.0 <= running_then + 40 * S_PER_CHAR
    assert done["reply5"] < done[f"a{len(flood) - 1}"]  # a later chunk takes its key's turn, not the end


def test_keys_take_turns_by_characters_and_an_idle_key_keeps_no_credit():
    q: SynthesisQueue[str] = SynthesisQueue(quantum=200)
    for i in range(4):
        q.put(f"a{i}", i, "A", True, 200)
    for i in range(2):
        q.put(f"b{i}", i, "B", True, 100)
    assert [q.take() for _ in range(6)] == ["a0", "b0", "b1", "a1", "a2", "a3"]
    assert q.take() is None and len(q) == 0
    q.put("big", 0, "A", True, 500)  # over a quantum: served after enough turns, not never
    q.put("c0", 0, "C", True, 50)
    assert [q.take(), q.take()] == ["c0", "big"]


def test_http_pieces_are_never_urgent_and_the_first_chunk_thread_leaves_them():
    q: SynthesisQueue[str] = SynthesisQueue()
    q.put("http0", 0, "A", True, 200)
    assert q.take(max_rank=FIRST_CHUNKS - 1) is None
    q.put("rt0", 0, "B", False, 40)
    assert q.take(max_rank=FIRST_CHUNKS - 1) == "rt0" and q.take() == "http0"


def test_the_speech_budget_bounds_requests_at_once_and_characters_a_minute():
    b = SpeechBudget(max_concurrent=2, chars_per_min=6000)
    assert b.admit("A", 2500, 0.0) is None and b.admit("A", 2500, 0.0) is None
    refused = b.admit("A", 10, 0.0)
    assert refused is not None and "http_max_concurrent_per_key" in refused
    assert b.admit("B", 10, 0.0) is None  # another key is untouched
    b.release("A")
    refused = b.admit("A", 2000, 0.0)  # 1,000 characters left
    assert refused is not None and "http_chars_per_min_per_key" in refused
    assert b.retry_after_s("A", 2000) == 10  # 1,000 more at 100 a second
    assert b.admit("A", 2000, 10.0) is None  # refilled meanwhile
    for _ in range(2):
        b.release("A")
    b.release("A")  # an extra release is harmless
    assert b.admit("A", 10, 10.0) is not None and b.admit("A", 10, 11.0) is None  # 100 a second


def test_long_unpunctuated_text_is_cut_into_bounded_pieces_at_spaces():
    text = "word " * 819 + "x" * 450
    pieces = bounded_pieces(text, 200)
    assert all(0 < len(p) <= 200 for p in pieces)
    assert " ".join(pieces).split() == text.split()[:-1] + ["x" * 200, "x" * 200, "x" * 50]
    assert bounded_pieces("  Hi.  ", 200) == ["Hi."] and bounded_pieces("   ", 200) == []


@pytest.mark.parametrize("text", ["1" * 400, "1" * 400 + "st", "-" + "1" * 400, "$" + "1" * 400, "1" * 400 + "%"])
def test_a_number_past_what_num2words_reads_is_said_digit_by_digit(text):
    said = spoken_text(SpeechText().feed(text + "\n"))
    assert said.count("one") == 400 and len(said) < 400 * 5
    short = spoken_text(SpeechText().feed("1" * MAX_NUMBER_DIGITS + "\n"))
    assert "one one" not in short  # within the limit a number is still read as one number
