"""models.remote's sans-I/O core: an engine's SSE lines and text deltas in, JobEvents out (no sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from models.remote import EngineError, RemoteConfig, RemoteJob, RemoteModel, parse_sse_line
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "remote.yaml"


@pytest.fixture
def model() -> Iterator[RemoteModel]:
    m = RemoteModel(RemoteConfig(base_url="http://127.0.0.1:9/v1"), "engine-model")  # never connects
    yield m
    m.close()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.01
        return self.t


def job(model: RemoteModel, strategy: str = "fast", **sched: Any) -> RemoteJob:
    params = SamplingParams(temperature=0.7, top_p=0.9, seed=3, max_tokens=50)
    sched_cfg = SchedulerConfig.for_strategy(strategy, **sched)
    return RemoteJob(model, [{"role": "user", "content": "hi"}], params, sched_cfg, Clock())


def delta(text: str | None = None, finish: str | None = None, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": {} if text is None else {"content": text}, "finish_reason": finish}
    out: dict[str, Any] = {"object": "chat.completion.chunk", "choices": [choice] if text or finish else []}
    if usage is not None:
        out["usage"] = usage
    return out


def run(j: RemoteJob, pieces: list[str], finish: str = "stop", usage: dict[str, Any] | None = None) -> list[Any]:
    evs = [j.feed(delta(p)) for p in pieces]
    evs.append(j.feed(delta(finish=finish)))
    if usage is not None:
        evs.append(j.feed(delta(usage=usage)))
    evs.append(j.end())
    return evs


def text(evs: list[Any]) -> str:
    return "".join(c.text for e in evs for c in e.chunks)


def test_body_carries_the_conversation_sampling_and_asks_for_usage(model):
    b = job(model, stop=("END",)).body()
    assert b["model"] == "engine-model" and b["messages"] == [{"role": "user", "content": "hi"}]
    assert (b["temperature"], b["top_p"], b["seed"], b["max_tokens"]) == (0.7, 0.9, 3, 50)
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert b["stop"] == ["END"]


def test_deltas_come_out_as_whole_word_chunks_with_all_the_text(model):
    j = job(model, "balanced")
    pieces = ["Hello", ",", " world", ".", " How", " are", " you", " to", "day", "?", " Fine", "."]
    evs = run(j, pieces)
    chunks = [c for e in evs for c in e.chunks]
    assert "".join(c.text for c in chunks) == "".join(pieces)
    assert len(chunks) < len(pieces)  # cut at boundaries, not one per delta
    assert all(not c.text.endswith("to") for c in chunks)  # "to|day" is one word: never split
    assert evs[-1].done is not None and evs[-1].done.reason == "stop"


def test_eager_first_shows_the_first_delta_at_once_and_whole_words_after(model):
    j = job(model, eager_first=True)
    evs = [j.feed(delta(p)) for p in ["B", "oil", " the", " wa", "ter", " first", "."]]
    assert [c.text for c in evs[0].chunks] == ["B"]  # as the engine sent it: no wait for "oil"
    evs.append(j.end())
    texts = [c.text for e in evs for c in e.chunks]
    assert "".join(texts) == "Boil the water first." and not any(t.endswith("wa") for t in texts)  # "wa|ter"
    plain = job(model)
    assert plain.feed(delta("B")).chunks == [] and [c.text for c in plain.feed(delta("oil")).chunks] == []
    assert [c.text for c in plain.feed(delta(" the")).chunks] == ["Boil"]


def test_a_stop_sequence_is_held_back_and_never_shown(model):
    j = job(model, stop=("STOP",))
    evs = [j.feed(delta(p)) for p in ["one", " two", " ST", "OP", " three"]]
    assert "ST" not in text(evs) and "three" not in text(evs)
    assert text(evs).strip() == "one two"
    assert j.finished and evs[3].done is not None and evs[3].done.reason == "stop"
    assert j.feed(delta(" more")).chunks == []  # nothing after the end


def test_image_requests_are_intercepted(model):
    j = job(model, intercept=("<image>", "</image>"))
    evs = run(j, ["Here", " you", " go", ":", " <im", "age>a red", " fox</image>", " done", "."])
    assert [r for e in evs for r in e.requests] == ["a red fox"]
    assert "<image>" not in text(evs) and "fox" not in text(evs)
    assert text(evs) == "Here you go:  done."


def test_usage_comes_from_the_engine_when_it_sends_one(model):
    j = job(model)
    usage = {"prompt_tokens": 30, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 20}}
    evs = run(j, ["a", " b", " c"], usage=usage)
    m = evs[-1].done.metrics
    assert (m["tokens"], m["prompt_tokens"], m["cached_tokens"]) == (7, 10, 20)
    assert m["chunks"] == sum(len(e.chunks) for e in evs) and m["ttft_ms"] > 0


def test_without_usage_each_delta_counts_one_token(model):
    evs = run(job(model), ["a", " b", " c"])
    assert evs[-1].done.metrics["tokens"] == 3


def test_length_finish_is_incomplete(model):
    evs = run(job(model), ["a", " b"], finish="length")
    assert evs[-1].done.reason == "length"


def test_a_multi_word_delta_counts_as_words(model):
    j = job(model, "balanced")  # first chunk after 2 units: a 4-word delta from a chunking engine is enough
    ev = j.feed(delta("Hello there my friend and more"))
    assert ev.chunks and ev.chunks[0].text.startswith("Hello")


def test_cancel_ends_at_once_and_nothing_follows(model):
    j = job(model)
    first = j.feed(delta("Hello")).chunks + j.feed(delta(" world")).chunks
    done = j.cancel()
    assert done.done is not None and done.done.reason == "cancelled" and done.chunks == []
    assert j.feed(delta(" more")).chunks == [] and j.end().done is None and j.fail("x").done is None
    assert [c.text for c in first] == ["Hello"]


def test_fail_carries_the_error_code(model):
    j = job(model)
    j.feed(delta("partial"))
    ev = j.fail("engine_unavailable")
    assert ev.done is not None and ev.done.reason == "error"
    assert ev.done.metrics["error_code"] == "engine_unavailable"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", None),
        (": keep-alive", None),
        ("event: message", None),
        ("id: 3", None),
        ("data: [DONE]", "[DONE]"),
        ('data: {"choices": []}', {"choices": []}),
        ('data:{"choices": []}', {"choices": []}),
    ],
)
def test_sse_lines(line, expected):
    assert parse_sse_line(line) == expected


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("data: {nope", "engine_error"),
        ("data: [1]", "engine_error"),
        ('data: {"error": {"message": "boom"}}', "engine_error"),
        ('data: {"error": {"message": "slow down", "code": 429}}', "server_busy"),
    ],
)
def test_sse_errors(line, code):
    with pytest.raises(EngineError) as exc:
        parse_sse_line(line)
    assert exc.value.code == code


# ---------------------------------------------------------------------- config → RemoteConfig


def test_the_example_config_is_the_issue_shape_with_defaults():
    from gateway.core.config import load_config
    from gateway.core.config_model import RemoteModelConfig
    from gateway.wiring.loading import remote_config

    cfg = load_config(EXAMPLE)
    m = cfg.model
    assert isinstance(m, RemoteModelConfig)
    assert (m.backend, m.base_url, m.model, m.api_key_env) == ("openai", "http://127.0.0.1:8222/v1", "auto", None)
    rc = remote_config(cfg)
    assert (rc.model, rc.api_key, rc.connect_timeout_s, rc.read_timeout_s, rc.retries, rc.pool_size) == (
        "auto",
        None,
        5,
        30,
        2,
        16,
    )


def test_openai_backend_without_base_url_is_a_config_error():
    from gateway.core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="base_url"):
        load_config(None, **{"model.backend": "openai"})


def test_the_engine_key_comes_from_the_named_env_var(monkeypatch):
    from gateway.core.config import load_config
    from gateway.wiring.loading import remote_config
    from models.llm import ModelLoadError
    from models.remote import make_client

    cfg = load_config(EXAMPLE, **{"model.api_key_env": "ENGINE_KEY_FOR_TEST"})
    monkeypatch.delenv("ENGINE_KEY_FOR_TEST", raising=False)
    with pytest.raises(ModelLoadError, match="ENGINE_KEY_FOR_TEST"):
        remote_config(cfg)
    monkeypatch.setenv("ENGINE_KEY_FOR_TEST", "sk-engine")
    rc = remote_config(cfg)
    assert rc.api_key == "sk-engine"
    with make_client(rc) as client:
        assert client.headers["authorization"] == "Bearer sk-engine"


def test_extra_body_reaches_the_engine_but_never_overrides_the_stream_shape():
    m = RemoteModel(
        RemoteConfig(base_url="http://127.0.0.1:9/v1", extra_body={"cache_prompt": True, "stream": False}), "x"
    )
    try:
        b = job(m).body()
        assert b["cache_prompt"] is True and b["stream"] is True
    finally:
        m.close()


def test_eager_first_is_on_by_default_with_any_engine(model):
    from gateway.core.config import load_config
    from gateway.core.request_options import SchedulerOptions
    from gateway.core.services import Services
    from models.engine import Engine
    from models.remote_engine import RemoteEngine

    cfg = load_config(None)
    remote_engine, local_engine = RemoteEngine(max_running=1), Engine(max_running=1)
    try:
        for svc in (
            Services(cfg, model, remote_engine, None),  # type: ignore[arg-type]  # scheduler_config: no registry
            Services(cfg, object(), local_engine, None),  # type: ignore[arg-type]
        ):
            whole = SchedulerOptions(eager_first=False)
            assert svc.scheduler_config().eager_first is True
            assert svc.scheduler_config().first_chunk_tokens == 1  # the default preset's 2 would wait a step
            assert svc.scheduler_config(whole).first_chunk_tokens == 2  # whole words: the preset's
            assert svc.scheduler_config(whole).eager_first is False  # per session / request
        off = load_config(None, **{"scheduler.eager_first": False})  # server-wide
        assert Services(off, model, remote_engine, None).scheduler_config().eager_first is False  # type: ignore[arg-type]
        assert Services(off, object(), local_engine, None).scheduler_config().eager_first is False  # type: ignore[arg-type]
    finally:
        remote_engine.close()
        local_engine.close()
