"""The one builder of each response option: the chunk scheduler's (server ← session ← response, then what
the response needs) and the sampling's (defaults ← model card ← server config ← request). Pure."""

from __future__ import annotations

import types

import pytest

from gateway.core.config import SchedulerDefaults, load_config
from gateway.core.request_options import (
    SamplingKnobs,
    SchedulerOptions,
    ServerChunking,
    layered,
    sampling_params,
    scheduler_config,
)
from gateway.core.services import Services
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from tests.engine.test_engine_client import ManualEngine

SERVER = ServerChunking(base=SchedulerOptions(strategy="quality", min_chunk_tokens=5, max_chunk_tokens=40), lookahead=6)


def test_later_layers_win_field_by_field_and_unset_fields_keep_earlier_ones():
    session = SchedulerOptions(strategy="fast", max_chunk_tokens=9)
    response = SchedulerOptions(max_chunk_tokens=12, task_hint="code")
    got = layered(SERVER.base, session, None, response)
    assert got == SchedulerOptions(strategy="fast", min_chunk_tokens=5, max_chunk_tokens=12, task_hint="code")
    assert layered(response, session).max_chunk_tokens == 9  # the order is the precedence


def test_the_scheduler_config_is_the_servers_under_the_sessions_under_the_responses():
    cfg = scheduler_config(SERVER)
    assert (cfg.strategy, cfg.min_chunk_tokens, cfg.max_chunk_tokens, cfg.beam_width) == ("quality", 5, 40, 2)
    session = SchedulerOptions(strategy="fast", max_chunk_tokens=9)
    response = SchedulerOptions(max_chunk_tokens=12)
    cfg = scheduler_config(SERVER, session, response)
    assert (cfg.strategy, cfg.min_chunk_tokens, cfg.max_chunk_tokens, cfg.beam_width) == ("fast", 5, 12, 1)
    assert scheduler_config(SERVER, response, session).max_chunk_tokens == 9


def test_a_spoken_reply_never_has_an_eager_first_chunk_whoever_asks_for_one():
    eager = SchedulerOptions(eager_first=True)
    text = scheduler_config(SERVER, eager)
    assert (text.eager_first, text.first_chunk_tokens) == (True, 1)  # the first token alone, at once
    spoken = scheduler_config(SERVER, eager, eager, spoken=True)
    preset = SchedulerConfig.for_strategy("quality").first_chunk_tokens
    assert (spoken.eager_first, spoken.first_chunk_tokens) == (False, preset) and preset > 1
    plain = scheduler_config(ServerChunking(base=SchedulerOptions(eager_first=False)))
    assert plain.eager_first is False  # the server's own choice


def test_lookahead_is_the_drafters_unless_set_and_zero_when_nothing_drafts():
    assert scheduler_config(SERVER).lookahead_tokens == 6
    assert scheduler_config(SERVER, SchedulerOptions(lookahead_tokens=2)).lookahead_tokens == 2
    nothing = ServerChunking(base=SchedulerOptions(lookahead_tokens=4))
    assert scheduler_config(nothing, SchedulerOptions(lookahead_tokens=8)).lookahead_tokens == 0


def test_what_the_response_needs_is_carried_and_the_image_tags_are_the_servers():
    tags = ("<tool_call>", "</tool_call>")
    cfg = scheduler_config(ServerChunking(intercept=("<i>", "</i>")), stop=("END",), tool_intercept=tags)
    assert (cfg.stop, cfg.tool_intercept, cfg.intercept) == (("END",), tags, ("<i>", "</i>"))
    assert scheduler_config(SERVER).intercept is None


def test_every_server_default_is_a_knob_a_client_can_set():
    # the server's config is the first layer of the same type: a field of one the other lacked would be lost
    assert set(SchedulerDefaults.model_fields) == set(SchedulerOptions.model_fields)


def test_services_lay_the_scheduler_config_under_a_request():
    svc = services(**{"scheduler.strategy": "fast", "scheduler.max_chunk_tokens": 30, "speculative.drafter": "none"})
    cfg = svc.scheduler_config(SchedulerOptions(max_chunk_tokens=7))
    assert (cfg.strategy, cfg.max_chunk_tokens, cfg.lookahead_tokens) == ("fast", 7, 0)
    assert svc.scheduler_config().max_chunk_tokens == 30


def services(**overrides: object) -> Services:
    card = {"temperature": 0.2, "top_p": 0.9, "top_k": 40}
    backend = types.SimpleNamespace(name="m", max_context=64, sampling_defaults=card)
    return Services(load_config(None, **overrides), backend, ManualEngine(1, 1), None)  # type: ignore[arg-type]


def test_sampling_is_defaults_then_the_model_card_then_the_server_config_then_the_request():
    base = SamplingParams(temperature=0.5, top_p=0.5, top_k=3)
    card = {"temperature": 0.2, "top_p": 0.9}
    server = {"temperature": 0.7, "top_p": None}  # None: not set, the card's stays
    got = sampling_params(base, card, server, max_tokens=10)
    assert (got.temperature, got.top_p, got.top_k, got.max_tokens) == (0.7, 0.9, 3, 10)
    req = SamplingKnobs(top_k=-1)
    got = sampling_params(base, card, server, types.SimpleNamespace(temperature=0.0), req, max_tokens=10)
    assert (got.temperature, got.top_k) == (0.0, 0)  # the request's; -1 is vLLM's "all"
    assert sampling_params(base, server, card, max_tokens=10).temperature == 0.2  # the order is the precedence


@pytest.mark.parametrize(("overrides", "expected"), [({}, 0.2), ({"session.temperature": 0.7}, 0.7)])
def test_the_servers_sampling_defaults_are_the_card_under_the_session_config(overrides, expected):
    d = services(**overrides).sampling_defaults
    assert (d.temperature, d.top_p, d.top_k, d.max_tokens) == (expected, 0.9, 40, 512)
    assert services().sampling({"temperature": 0.0}, max_tokens=9999).max_tokens == 512  # never over the cap


def test_a_bare_value_is_refused_as_a_sampling_layer_not_read_as_nothing_set():
    with pytest.raises(TypeError, match="float"):
        services().sampling(0.0)  # meant as a temperature: it would have sampled at the default
