"""Constrained decoding on the embedded SmolLM2 through the default llama.cpp backend (and the same mask
on the transformers backend): every answer parses and validates; drafting does not change it.

The model is slow next to the fake vocabulary of test_constrain.py (~15-100 tokens/s here, depending
on load), so this draws fewer schemas: 12 on llama.cpp (~1-2 s each on a quiet 2-core box, several times that
under load); the 400-schema property test runs on the fake.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import constrain
from models.decode import DecodeJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from models.speculative import SpecConfig, Speculator
from tests.engine.test_constrain import SCHEMAS, _obj
from tests.fuzzing import examples

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def llama() -> Any:
    pytest.importorskip("llama_cpp")
    from models.llama_cpp import LlamaCppConfig, load_llama_backend

    return load_llama_backend(LlamaCppConfig(threads=1, n_seq=2))


PROMPTS = [
    "Describe a person as JSON.",
    "What is the weather in Paris? Answer in JSON.",
    "List three fruits.",
    "Give me a product record.",
    "Say hello.",
]


def generate(backend: Any, schema: Any, prompt: str, spec: Any = None, max_tokens: int = 400) -> tuple[str, Any]:
    con = constrain.constraint_for(backend, constrain.json_grammar(schema))
    job = DecodeJob(
        backend,
        backend.new_state(),
        backend.chat_tokens([{"role": "user", "content": prompt}]),
        SamplingParams(max_tokens=max_tokens),
        SchedulerConfig(lookahead_tokens=8 if spec else 0),
        *((spec, spec) if spec else ()),
        constraint=con,
    )
    text, done = "", None
    while not job.finished:
        ev = job.step()
        text += "".join(c.text for c in ev.chunks)
        done = ev.done or done
    return text, (done, job)


@pytest.mark.timeout(1200)
@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(schema=st.one_of(_obj(SCHEMAS), st.none()), prompt=st.sampled_from(PROMPTS))
def test_model_answers_always_validate(llama: Any, schema: Any, prompt: str) -> None:
    text, (done, _) = generate(llama, schema, prompt, max_tokens=1000)
    assert done.reason == "stop", (done.reason, text[:300])
    value = json.loads(text)
    jsonschema.validate(value, schema or {"type": "object"})


def test_drafting_keeps_the_constrained_greedy_answer(llama: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
        "required": ["name", "age", "city"],
    }
    prompt = "Describe a fictional person named John Smith who is 30 and lives in Boston, as JSON."
    plain, (_, pjob) = generate(llama, schema, prompt)
    spec = Speculator(llama, SpecConfig(drafter="prompt_lookup", adaptive=False, k_max=6)).for_job()
    drafted, (done, djob) = generate(llama, schema, prompt, spec)
    assert djob.generated == pjob.generated and drafted == plain
    assert djob.drafted > 0  # drafting really ran (the prompt's words are in the answer)
    jsonschema.validate(json.loads(drafted), schema)


def test_same_mask_on_the_transformers_backend(real_backend: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "temp_c": {"type": "number"}},
        "required": ["city", "temp_c"],
    }
    text, (done, _) = generate(real_backend, schema, "What's the weather in Rome?", max_tokens=60)
    assert done.reason == "stop"
    jsonschema.validate(json.loads(text), schema)
