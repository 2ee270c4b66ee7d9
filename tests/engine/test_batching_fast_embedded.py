"""Greedy identity of the transformers fast Llama path on the embedded model, in bf16, batched.

The tiny test models keep every GEMM in one kernel regime; the embedded SmolLM2-135M's shapes
do not (past 32 rows the CPU GEMM rounds differently, and a prompt cut by a shared prefill budget
attends through other kernels): measured before both fixes, 6 of 8 replies to eight different
questions asked at once differed from the same question asked alone (``bench batch``)."""

from __future__ import annotations

import pytest

from models.llm import LLMConfig, load_backend
from testkit.engine_runs import greedy_job, run_on_engine

pytestmark = pytest.mark.real_model  # the embedded SmolLM2 in bf16

QUESTIONS = [
    "Why is the sky blue? Explain it to a curious child in a few sentences.",
    "What makes a good friend?",
    "How do airplanes stay in the air, and why do their wings have that shape?",
    "Why do we dream at night?",
    "What is the best way to learn a new language as an adult with a busy job?",
    "How does a refrigerator keep food cold?",
]


@pytest.fixture(scope="module")
def embedded_bf16():
    b = load_backend(LLMConfig(dtype="bfloat16"))
    assert b.fast is not None  # the fast Llama path: the default for Llama models
    return b


def test_six_questions_at_once_get_the_replies_they_get_alone(embedded_bf16):
    prompts = [embedded_bf16.encode(q) for q in QUESTIONS]
    assert sum(map(len, prompts)) > 64  # the prompts share steps (prefill pieces beside decode rows)
    # prefill_chunk 128 (the default): the prompts share its budget
    alone = [run_on_engine([greedy_job(embedded_bf16, p, 40)], 128, timeout_s=120)[0] for p in prompts]
    assert run_on_engine([greedy_job(embedded_bf16, p, 40) for p in prompts], 128, timeout_s=120) == alone
