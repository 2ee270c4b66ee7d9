"""The `quality` strategy: a chunk-level beam that must beat greedy on mean log-probability."""

from __future__ import annotations

import numpy as np

from models.decode import DecodeJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig


def run(backend, prompt, strategy):
    job = DecodeJob(
        backend,
        backend.new_state(),
        prompt,
        SamplingParams(max_tokens=32),
        SchedulerConfig.for_strategy(strategy, lookahead_tokens=0),
        track_logprobs=True,
    )
    text = ""
    while not job.finished:
        ev = job.step()
        text += "".join(c.text for c in ev.chunks)
    return job, text


def test_quality_beats_greedy_mean_logprob(tiny_backend):
    rng = np.random.default_rng(3)
    diffs = []
    for _ in range(6):
        prompt = [int(x) for x in rng.integers(100, 40000, 12)]
        greedy, _ = run(tiny_backend, prompt, "balanced")
        quality, text = run(tiny_backend, prompt, "quality")
        assert len(quality.logprobs) == len(quality.generated) > 0
        assert text == tiny_backend.decode(quality.generated)  # what was shown is what was chosen
        diffs.append(np.mean(quality.logprobs) - np.mean(greedy.logprobs))
    assert np.mean(diffs) > 0 and sum(d >= -1e-6 for d in diffs) >= 5, diffs


def test_logprobs_of_greedy_match_a_fresh_scoring(tiny_backend):
    prompt = list(range(200, 215))
    job, _ = run(tiny_backend, prompt, "fast")
    state = tiny_backend.new_state()
    rows = tiny_backend.forward(state, prompt + job.generated[:-1], n_logits=len(job.generated))
    from models.sampling import log_softmax

    ref = [float(log_softmax(r)[t]) for r, t in zip(rows, job.generated, strict=True)]
    np.testing.assert_allclose(job.logprobs, ref, atol=1e-3)
