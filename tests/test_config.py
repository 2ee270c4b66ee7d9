"""The config schema: every shipped YAML loads, every numeric key is bounded, cross-key rules hold."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

from gateway.config import Config, ConfigError, ServerConfig, load_config
from gateway.options import SchedulerOptions

CONFIGS = sorted((Path(__file__).resolve().parent.parent / "configs").glob("*.yaml"))


def arms(ann: Any) -> list[Any]:
    """The non-None members of an annotation (``int | None`` → ``[int]``)."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(ann) if a is not type(None)]
    return [ann]


def base(arm: Any) -> Any:
    return typing.get_args(arm)[0] if typing.get_origin(arm) is typing.Annotated else arm


def numeric_leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, FieldInfo) of every int/float field under ``model``, walking nested sections."""
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        kinds = [base(a) for a in arms(info.annotation)]
        if len(kinds) == 1 and isinstance(kinds[0], type) and issubclass(kinds[0], BaseModel):
            out += numeric_leaves(kinds[0], f"{prefix}{name}.")
        elif any(k in (int, float) for k in kinds):
            out.append((prefix + name, info))
    return out


def bounds(info: Any) -> tuple[Any, Any]:
    """(floor, ceiling) constraints of a field, whether set by Field(...) or an Annotated alias."""
    metas = list(info.metadata)
    for arm in arms(info.annotation):
        if typing.get_origin(arm) is typing.Annotated:
            for m in arm.__metadata__:
                metas += getattr(m, "metadata", [m])
    lo = next((m for m in metas if isinstance(m, annotated_types.Ge | annotated_types.Gt)), None)
    hi = next((m for m in metas if isinstance(m, annotated_types.Le | annotated_types.Lt)), None)
    return lo, hi


def test_the_walk_sees_the_numeric_keys_of_every_section():
    keys = {k for k, _ in numeric_leaves(Config)}
    assert {"server.port", "limits.messages_burst", "session.temperature", "scheduler.min_chunk_tokens"} <= keys
    assert len(keys) >= 60


@pytest.mark.parametrize("key,info", numeric_leaves(Config), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_key_has_a_floor_and_a_ceiling(key: str, info: Any):
    lo, hi = bounds(info)
    assert lo is not None and hi is not None, f"{key} needs Field(ge=…/gt=…, le=…/lt=…) in gateway/config.py"


@pytest.mark.parametrize(
    "key,value",
    [
        ("limits.messages_burst", 0),
        ("session.temperature", 7),
        ("session.top_p", 0),
        ("session.max_output_tokens", 0),
        ("limits.max_sessions", -1),
        ("server.port", -5),
        ("server.port", 70000),
        ("engine.max_running", 0),
        ("scheduler.min_chunk_tokens", 0),
        ("scheduler.lookahead_tokens", 33),
        ("model.max_context", 10**12),
        ("sessions.lease_s", 0),
    ],
)
def test_an_out_of_range_value_is_refused_naming_its_key(key: str, value: Any):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, **{key: value})


@pytest.mark.parametrize("name", list(SchedulerOptions.model_fields))
def test_scheduler_defaults_keep_the_bounds_a_client_request_has(name: str):
    wire = SchedulerOptions.model_fields[name]
    default = Config.model_fields["scheduler"].annotation.model_fields[name]  # type: ignore[union-attr]
    assert bounds(default) == bounds(wire)
    # the same type, and the same choices for the literal-typed ones (strategy, task_hint)
    assert [base(a) for a in arms(default.annotation)] == [base(a) for a in arms(wire.annotation)]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path: Path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)


def test_the_shipped_configs_are_all_there():
    assert {p.name for p in CONFIGS} >= {"default.yaml", "remote.yaml", "replicas.yaml"}


def test_default_yaml_is_what_no_config_gives():
    """It pins today's defaults for readers: a default changed in code must be changed there too."""
    assert load_config(CONFIGS[[p.name for p in CONFIGS].index("default.yaml")]) == Config()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_a_public_bind_with_no_keys_is_refused_by_the_config_itself(host: str):
    with pytest.raises(ConfigError, match="refusing to listen on .* with no API keys"):
        load_config(None, **{"server.host": host})
    with pytest.raises(ValueError, match="allow_remote_without_keys"):
        ServerConfig(host=host)  # a Config built in code (create_app, StreamOmni) is checked too


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_loopback_needs_no_keys(host: str):
    assert load_config(None, **{"server.host": host}).server.host == host


def test_a_public_bind_is_allowed_with_keys_or_the_explicit_opt_in():
    assert load_config(None, **{"server.host": "0.0.0.0", "server.api_keys": ["k"]}).server.api_keys == ("k",)
    cfg = load_config(None, **{"server.host": "0.0.0.0", "server.allow_remote_without_keys": True})
    assert cfg.server.host == "0.0.0.0"


def test_stream_omni_refuses_a_public_bind_with_no_keys_before_loading_anything():
    from gateway.inprocess import StreamOmni

    with pytest.raises(ConfigError, match="no API keys"):
        StreamOmni(**{"server.host": "0.0.0.0"})


def test_scheduler_min_chunk_above_max_chunk_is_refused():
    with pytest.raises(ConfigError, match="min_chunk_tokens 64 is above scheduler.max_chunk_tokens 16"):
        load_config(None, **{"scheduler.min_chunk_tokens": 64, "scheduler.max_chunk_tokens": 16})
    cfg = load_config(None, **{"scheduler.min_chunk_tokens": 16, "scheduler.max_chunk_tokens": 16})
    assert cfg.scheduler.min_chunk_tokens == cfg.scheduler.max_chunk_tokens == 16


def test_a_file_limit_above_the_quota_is_refused():
    with pytest.raises(ConfigError, match="max_file_bytes"):
        load_config(None, **{"files.max_file_bytes": 2000, "files.quota_bytes_per_key": 1000})


def test_a_remote_pool_smaller_than_the_running_responses_is_refused():
    remote = {"model.backend": "openai", "model.base_url": "http://127.0.0.1:1/v1"}
    with pytest.raises(ConfigError, match="pool_size 4 is below engine.max_running 8"):
        load_config(None, **remote, **{"model.pool_size": 4, "engine.max_running": 8})
    # local backends hold no pool: the same numbers are fine there
    assert load_config(None, **{"model.pool_size": 4, "engine.max_running": 8}).engine.max_running == 8


def test_a_validator_message_reads_without_pydantic_prefixes():
    with pytest.raises(ConfigError) as err:
        load_config(None, **{"server.host": "0.0.0.0"})
    assert "Value error" not in str(err.value) and str(err.value).startswith("invalid config at server:")
