"""A remote engine gets the sampling knobs a response sets, under llama.cpp's / vLLM's names, and
none it does not set (an engine that knows none of them sees the plain OpenAI body)."""

from __future__ import annotations

from types import SimpleNamespace

from models.remote import RemoteJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig

MODEL = SimpleNamespace(engine_id="upstream", config=SimpleNamespace(extra_body={}))


def body(params: SamplingParams) -> dict:
    return RemoteJob(MODEL, [{"role": "user", "content": "hi"}], params, SchedulerConfig()).body()  # type: ignore[arg-type]


def test_unset_knobs_are_not_sent():
    b = body(SamplingParams())
    assert not {"top_k", "min_p", "frequency_penalty", "logit_bias", "dry_multiplier", "dry_base"} & set(b)


def test_set_knobs_are_forwarded():
    b = body(
        SamplingParams(
            frequency_penalty=1.0,
            presence_penalty=-0.5,
            repetition_penalty=1.2,
            top_k=40,
            min_p=0.05,
            logit_bias=((7, -100.0),),
            dry_multiplier=0.8,
        )
    )
    assert b["frequency_penalty"] == 1.0 and b["presence_penalty"] == -0.5 and b["repetition_penalty"] == 1.2
    assert b["top_k"] == 40 and b["min_p"] == 0.05 and b["logit_bias"] == {"7": -100.0}
    assert b["dry_multiplier"] == 0.8 and "dry_base" not in b  # DRY's other knobs only when not the defaults
    assert body(SamplingParams(dry_multiplier=0.8, dry_base=2.0))["dry_base"] == 2.0
    assert "dry_base" not in body(SamplingParams(dry_base=2.0))  # DRY off: its shape is not sent
