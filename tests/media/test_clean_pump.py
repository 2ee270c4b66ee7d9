"""The cleaning pump keeps a session's frames, played audio and commits in order while the DSP runs on its
worker thread, and hands frames on untouched, at once, while there is nothing to clean."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.voice.clean_input import CleanPump
from processors.input_clean import InputCleaner
from processors.speexdsp import available

pytestmark = pytest.mark.skipif(not available(), reason="libspeexdsp1 is not installed")

FRAME = 960  # 20 ms at 24 kHz, in bytes


def frames(n: int, seed: int = 0) -> list[bytes]:
    x = (np.random.default_rng(seed).normal(0, 0.05, n * FRAME // 2) * 32767).astype("<i2").tobytes()
    return [x[i : i + FRAME] for i in range(0, len(x), FRAME)]


async def drained(pump: CleanPump) -> None:
    """Every frame queued so far is delivered (``then`` runs after them)."""
    done = asyncio.Event()
    pump.then(done.set)
    async with asyncio.timeout(10):
        await done.wait()


async def test_idle_frames_pass_untouched_and_at_once():
    got: list[tuple[bytes, str | None]] = []
    pump = CleanPump(InputCleaner(24_000), lambda raw, eid: got.append((raw, eid)))
    fs = frames(3)
    for k, f in enumerate(fs):
        pump.append(f, f"e{k}")
    assert got == [(f, f"e{k}") for k, f in enumerate(fs)] and not pump.busy  # synchronously, unchanged


async def test_a_commit_runs_once_after_every_frame_before_it():
    log: list[str] = []
    pump = CleanPump(InputCleaner(24_000), lambda raw, eid: log.append(f"frame {eid}"))
    pump.played(b"\x10\x00" * 24_000, 24_000)  # a second of reply: frames now go through the worker
    for k, f in enumerate(frames(5)):
        pump.append(f, str(k))
    assert pump.busy

    def commit() -> None:
        if pump.busy:  # what MediaInput.commit does: wait for the frames before it
            pump.then(commit)
            return
        log.append("commit")

    commit()
    pump.append(frames(1, 1)[0], "after")
    await drained(pump)
    assert log.count("commit") == 1
    before, after = log[: log.index("commit")], log[log.index("commit") + 1 :]
    assert after == ["frame after"]  # cleaned audio of the frame sent after the commit comes after it
    # the frames before it, in order (the first comes back empty: the cleaner holds 10 ms, it is in the next)
    assert before == [f"frame {k}" for k in range(1, 5)]
