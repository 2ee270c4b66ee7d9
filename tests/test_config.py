"""The config schema: every shipped YAML loads, every numeric key is bounded, cross-key rules hold."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from gateway.core.config import Config, ConfigError, ServerConfig, load_config
from gateway.core.config_model import (
    MODEL_SECTIONS,
    AutoLocalModel,
    LlamaCppModel,
    RemoteModelConfig,
    TransformersModel,
    model_keys,
)
from gateway.core.request_options import SchedulerOptions

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
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        kinds = [base(a) for a in arms(info.annotation)]
        if kinds and all(isinstance(k, type) and issubclass(k, BaseModel) for k in kinds):
            for kind in kinds:  # a union of sections (model: one class per backend): the keys of each
                out |= {k: v for k, v in numeric_leaves(kind, f"{prefix}{name}.") if k not in out}
        elif any(k in (int, float) for k in kinds):
            out[prefix + name] = info
    return list(out.items())


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
    assert {"model.max_context", "model.n_batch", "model.threads", "model.pool_size", "model.read_timeout_s"} <= keys
    assert len(keys) >= 60


@pytest.mark.parametrize("key,info", numeric_leaves(Config), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_key_has_a_floor_and_a_ceiling(key: str, info: Any):
    lo, hi = bounds(info)
    assert lo is not None and hi is not None, f"{key} needs Field(ge=…/gt=…, le=…/lt=…) in gateway/core/config.py"


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
        ("model.n_batch", 0),
        ("model.threads", 0),
        ("replicas.lease_s", 0),
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
    from gateway.wiring.inprocess import StreamOmni

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
    assert load_config(None, **remote, **{"model.pool_size": 8, "engine.max_running": 8}).engine.max_running == 8
    # local backends hold no pool: no pool_size to compare, only max_running
    assert load_config(None, **{"engine.max_running": 64}).engine.max_running == 64


def test_a_validator_message_reads_without_pydantic_prefixes():
    with pytest.raises(ConfigError) as err:
        load_config(None, **{"server.host": "0.0.0.0"})
    assert "Value error" not in str(err.value) and str(err.value).startswith("invalid config at server:")


# ---------------------------------------------------------------------------- model: one class per backend

SECTIONS = {
    "auto": {"model": "embedded", "threads": 2, "n_batch": 256, "n_seq": 4, "dtype": "float32", "device": "cpu"},
    "llama_cpp": {"model": "m.gguf", "threads": 3, "n_batch": 128, "n_seq": 2, "flash_attn": False, "gguf_file": None},
    "transformers": {"model": "org/name", "dtype": "float16", "device": "cuda:0", "batch_generic": True, "threads": 1},
    "openai": {"base_url": "http://127.0.0.1:8222/v1", "api_key_env": "K", "retries": 0, "extra_body": {"a": 1}},
}


@pytest.mark.parametrize("backend", list(SECTIONS))
def test_each_backends_section_loads_from_flat_yaml(backend: str, tmp_path: Path):
    keys = {"backend": backend, **SECTIONS[backend], "max_context": 2048, "served_name": "x", "aliases": ["y"]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": keys}))
    m = load_config(path).model
    assert type(m) is MODEL_SECTIONS[backend] and m.backend == backend
    assert m.model_dump(include=set(keys)) == keys


def test_the_sections_are_the_four_backends():
    assert MODEL_SECTIONS == {
        "auto": AutoLocalModel,
        "llama_cpp": LlamaCppModel,
        "transformers": TransformersModel,
        "openai": RemoteModelConfig,
    }
    keys = model_keys()
    assert keys["n_batch"] == ("auto", "llama_cpp") and keys["dtype"] == ("auto", "transformers")
    assert keys["base_url"] == ("openai",) and keys["max_context"] == keys["backend"] == tuple(MODEL_SECTIONS)
    assert keys["threads"] == keys["gguf_file"] == ("auto", "llama_cpp", "transformers")


@pytest.mark.parametrize(
    "backend,key,value,owners",
    [
        ("llama_cpp", "base_url", "http://127.0.0.1:1/v1", "openai"),
        ("llama_cpp", "dtype", "float32", "auto or transformers"),
        ("transformers", "n_batch", 64, "auto or llama_cpp"),
        ("transformers", "pool_size", 4, "openai"),
        ("auto", "extra_body", {"a": 1}, "openai"),
        ("openai", "gguf_file", "x.gguf", "auto or llama_cpp or transformers"),
        ("openai", "flash_attn", False, "auto or llama_cpp"),
    ],
)
def test_a_key_of_another_backend_is_refused_naming_it(backend: str, key: str, value: Any, owners: str):
    section = {"model.backend": backend, f"model.{key}": value}
    if backend == "openai":
        section["model.base_url"] = "http://127.0.0.1:1/v1"
    with pytest.raises(ConfigError) as err:
        load_config(None, **section)
    assert str(err.value) == (
        f"invalid config at model: {key} is a key of backend: {owners}, not of backend: {backend}"
        f" (model.{key} has no effect there)"
    )


def test_a_section_built_in_code_refuses_another_backends_key_too():
    with pytest.raises(ValidationError, match="base_url is a key of backend: openai"):
        LlamaCppModel(base_url="http://127.0.0.1:1/v1")  # type: ignore[call-arg]


def test_an_unknown_model_key_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"invalid config at model\.n_batc: Extra inputs are not permitted"):
        load_config(None, **{"model.n_batc": 64})


def test_an_unknown_backend_is_refused():
    with pytest.raises(ConfigError, match="invalid config at model: backend must be one of auto, llama_cpp"):
        load_config(None, **{"model.backend": "vllm"})


def test_an_omitted_backend_is_auto(tmp_path: Path):
    assert Config().model == AutoLocalModel() and Config().model.backend == "auto"
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  model: some/model\n  dtype: float32\n  n_batch: 64\n")
    m = load_config(path).model
    assert isinstance(m, AutoLocalModel) and m.backend == "auto"
    assert (m.model, m.dtype, m.n_batch) == ("some/model", "float32", 64)


def test_openai_without_base_url_is_refused():
    for extra in ({}, {"model.base_url": None}, {"model.base_url": ""}):
        with pytest.raises(ConfigError, match="invalid config at model: backend: openai needs base_url"):
            load_config(None, **{"model.backend": "openai", **extra})


def test_an_override_merges_into_the_yamls_model_section(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  backend: llama_cpp\n  model: m.gguf\n  n_seq: 3\n")
    m = load_config(path, **{"model.n_batch": 32, "model.flash_attn": False}).model
    assert isinstance(m, LlamaCppModel) and (m.model, m.n_seq, m.n_batch, m.flash_attn) == ("m.gguf", 3, 32, False)
    # an override may switch the backend; the YAML's keys of the old one are then refused by name
    with pytest.raises(ConfigError, match="n_seq is a key of backend: auto or llama_cpp, not of backend: openai"):
        load_config(path, **{"model.backend": "openai", "model.base_url": "http://127.0.0.1:1/v1"})
    remote = load_config(CONFIGS[[p.name for p in CONFIGS].index("remote.yaml")], **{"model.read_timeout_s": 2.5})
    assert isinstance(remote.model, RemoteModelConfig) and remote.model.read_timeout_s == 2.5
    assert remote.model.base_url == "http://127.0.0.1:8222/v1"


def test_the_loopback_rule_holds_whatever_the_backend():
    remote = {"model.backend": "openai", "model.base_url": "http://127.0.0.1:1/v1"}
    for model in ({}, remote, {"model.backend": "llama_cpp"}):
        with pytest.raises(ConfigError, match="refusing to listen on 0.0.0.0 with no API keys"):
            load_config(None, **model, **{"server.host": "0.0.0.0"})
        cfg = load_config(None, **model, **{"server.host": "0.0.0.0", "server.api_keys": ["k"]})
        assert cfg.server.api_keys == ("k",)
