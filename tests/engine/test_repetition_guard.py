"""The embedded model's repetition guard as served: on by default, every part of it dropped by
``session.repetition_guard: off``, a request's own value winning over it. Pure: a fake backend and engine."""

from __future__ import annotations

import types

from gateway.core.config import load_config
from gateway.core.request_options import SamplingKnobs
from gateway.core.services import Services
from models.llm import generation_defaults
from models.sampling import REPETITION_GUARD_KEYS, SamplingParams
from tests.engine.test_engine_client import ManualEngine


def services(**overrides: object) -> Services:
    backend = types.SimpleNamespace(name="m", max_context=64, sampling_defaults=generation_defaults("embedded"))
    return Services(load_config(None, **overrides), backend, ManualEngine(1, 1), None)  # type: ignore[arg-type]


def test_the_guard_is_dry_and_a_frequency_penalty_and_off_drops_every_part():
    on = services().sampling_defaults
    assert (on.dry_multiplier, on.frequency_penalty) == (0.8, 0.5)
    off = services(**{"session.repetition_guard": "off"}).sampling_defaults
    plain = SamplingParams()
    assert all(getattr(off, key) == getattr(plain, key) for key in REPETITION_GUARD_KEYS)
    assert (off.temperature, off.top_p) == (0.2, 0.9)  # the card's sampling stays


def test_a_request_value_wins_over_the_guard():
    svc = services()
    assert svc.sampling(SamplingKnobs(frequency_penalty=0.0)).frequency_penalty == 0.0
    assert svc.sampling(SamplingKnobs(dry_multiplier=0.0)).dry_multiplier == 0.0
    assert svc.sampling(SamplingKnobs()).frequency_penalty == 0.5
