"""The embedded default (SmolLM2-135M-Instruct via transformers, bf16): real weights, offline."""

from __future__ import annotations

import pytest

from tests.wsclient import RealtimeClient

pytestmark = pytest.mark.real_model


def test_embedded_model_loads_offline_with_chat_template(real_backend):
    assert real_backend.name == "SmolLM2-135M-Instruct"
    assert real_backend.has_chat_template
    ids = real_backend.chat_tokens([{"role": "user", "content": "hi"}])
    assert real_backend.decode(ids).rstrip().endswith("assistant")
    assert real_backend.eos_ids


# greedy, as these tests compare texts: the embedded model's own default samples (temperature 0.2)
GREEDY = {"session.temperature": 0.0}


async def test_real_model_answers_coherently_over_websocket(real_backend, server_factory):
    with server_factory(real_backend, **GREEDY) as addr:
        c = await RealtimeClient.connect(addr, query="model=SmolLM2-135M-Instruct")
        await c.until("session.created")
        done = await c.ask("What is the capital of France? Answer in one sentence.", max_output_tokens=40)
        text = c.text_of(done["response"]["id"])
        assert done["response"]["status"] == "completed"
        assert "Paris" in text
        # second turn reuses the cache: only the new user message is prefilled
        done2 = await c.ask("And of Italy?", max_output_tokens=40)
        m = done2["response"]["metrics"]
        assert m["cached_tokens"] > m["prompt_tokens"], m
        assert "Rome" in c.text_of(done2["response"]["id"])
        await c.close()


def test_missing_model_is_one_clear_line(tmp_path):
    from models.llm import LLMConfig, ModelLoadError, load_backend

    with pytest.raises(ModelLoadError) as info:
        load_backend(LLMConfig(model=str(tmp_path / "nope")))
    msg = str(info.value)
    assert "\n" not in msg and "nope" in msg and "Traceback" not in msg


def test_serve_with_a_missing_model_prints_one_line_and_exits_1(tmp_path, capsys):
    """`stream-omni serve` loads the model on the engine thread, before uvicorn starts; a failure
    is one clear line on stderr and exit status 1."""
    from gateway.wiring.cli import main as cli_main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model:\n  model: {tmp_path / 'nope.gguf'}\naudio:\n  enabled: false\n")
    assert cli_main(["serve", "--config", str(cfg), "--port", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("stream-omni: ") and "nope.gguf" in err[-1], err
    assert not any("Traceback" in line for line in err)


async def test_default_drafting_on_transformers_is_exact_over_websocket(real_backend, server_factory):
    """`model.backend: transformers` on the embedded GGUF: the default drafter (that GGUF through
    llama.cpp), at a fixed lookahead, has many drafts accepted, and the streamed text equals the
    undrafted server's."""
    pytest.importorskip("llama_cpp")
    prompt = "Write a short poem about the sea."
    texts, metrics = {}, {}
    # not adaptive: how many tokens a step drafts would follow the costs measured on this noisy box; a fixed
    # k_max makes the accepted count a fact of the two models
    for drafter in ("none", "auto"):
        fixed_k = {"speculative.adaptive": False} if drafter == "auto" else {}
        with server_factory(real_backend, **GREEDY, **{"speculative.drafter": drafter}, **fixed_k) as addr:
            c = await RealtimeClient.connect(addr, query="model=SmolLM2-135M-Instruct")
            await c.until("session.created")
            done = await c.ask(prompt, max_output_tokens=64)
            assert done["response"]["status"] in ("completed", "incomplete")  # incomplete: 64 tokens reached
            texts[drafter] = c.text_of(done["response"]["id"])
            metrics[drafter] = done["response"]["metrics"]
            await c.close()
    assert texts["auto"] == texts["none"] and len(texts["none"]) > 100
    assert metrics["none"]["draft_tokens"] == 0
    m = metrics["auto"]  # acceptance mixes the model's drafts with free prompt-lookup guesses: count
    assert m["draft_tokens"] * m["draft_acceptance"] >= 16, m  # accepted drafts (≈ 30 of 64 measured)
