"""LlamaCppBackend on the embedded SmolLM2 GGUF: greedy parity with llama-cpp-python, crop, slots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'stream-omni[llama]')")

from models.backend import Backend, KVState, sync_prefix  # noqa: E402
from models.decode import DecodeJob  # noqa: E402
from models.llama_cpp import LlamaCppBackend, LlamaCppConfig  # noqa: E402
from models.llm import embedded_gguf  # noqa: E402
from models.sampling import SamplingParams  # noqa: E402
from models.scheduler import SchedulerConfig  # noqa: E402

pytestmark = pytest.mark.real_model

N_CTX = 1024
PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ],
    [{"role": "user", "content": "Write a haiku about autumn leaves."}],
]


@pytest.fixture(scope="module")
def backend() -> Iterator[LlamaCppBackend]:
    # n_seq=2: three interleaved conversations must evict and re-sync
    b = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=N_CTX, n_batch=64, n_seq=2))
    yield b
    b.close()


@pytest.fixture(scope="module")
def reference(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[Any]:
    # the weight buffers our backend uses: no extra (AMX) buffers, which fault on this project's machines
    default = llama_cpp.llama_cpp.llama_model_default_params

    def params() -> Any:
        p = default()
        p.use_extra_bufts = False
        return p

    monkeypatch_module.setattr(llama_cpp.llama_cpp, "llama_model_default_params", params)
    ref = llama_cpp.Llama(  # same attention kernels as our backend's default
        str(embedded_gguf()), n_ctx=N_CTX, n_threads=2, n_threads_batch=2, flash_attn=True, verbose=False
    )
    yield ref
    ref.close()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def greedy_job(backend: Backend, prompt: list[int], state: KVState | None = None, n: int = 40) -> DecodeJob:
    return DecodeJob(
        backend,
        state or backend.new_state(),
        prompt,
        SamplingParams(temperature=0.0, max_tokens=n),
        SchedulerConfig(lookahead_tokens=0),
    )


def run(job: DecodeJob, release: bool = True) -> list[int]:
    while not job.finished:
        job.step()
    if release:  # leave no cached prefix behind: the next run starts cold (same batch shapes)
        job.backend.crop(job.state, 0)
    return list(job.generated)


def reference_greedy(ref: Any, prompt: list[int], eos: frozenset[int], n: int) -> list[int]:
    out: list[int] = []
    ref.reset()  # cold, like ours: no prefix reuse from the previous prompt
    for tok in ref.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        if tok in eos or len(out) == n:
            break
        out.append(int(tok))
    return out


def test_implements_backend_protocol(backend: LlamaCppBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.vocab_size == 49152
    assert backend.max_context == N_CTX
    assert backend.tokenize("<|im_end|>", special=True)[0] in backend.eos_ids


@pytest.mark.parametrize("messages", PROMPTS, ids=["capital", "system", "haiku"])
def test_greedy_decode_matches_llama_cpp_python(backend: LlamaCppBackend, reference: Any, messages) -> None:
    backend.reset()
    prompt = backend.chat_tokens(messages)
    ours = run(greedy_job(backend, prompt, n=40))
    theirs = reference_greedy(reference, prompt, backend.eos_ids, 40)
    assert len(ours) > 5
    assert ours == theirs


def test_chat_tokens_and_decode_match_transformers_tokenizer(backend: LlamaCppBackend, tokenizer_dir: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    convs = [
        *PROMPTS,
        [{"role": "user", "content": "Ünïcödé — 日本語 🙂 and  double  spaces\nnew line"}],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Count to 3."},
        ],
    ]
    for messages in convs:
        for gen in (True, False):
            hf = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, return_dict=False)
            if hasattr(hf, "keys"):
                hf = hf["input_ids"]
            ours = backend.chat_tokens(messages, add_generation_prompt=gen)
            assert ours == [int(i) for i in hf], messages
            assert backend.decode(ours) == tok.decode(ours, skip_special_tokens=True)
    ids = backend.chat_tokens(PROMPTS[0])
    assert "<|im_start|>" not in backend.decode(ids)  # special tokens skipped
    assert "capital of France" in backend.decode(ids)


def close(a: np.ndarray, b: np.ndarray) -> None:
    """Same logits up to llama.cpp's kernel-dependent rounding.

    llama.cpp's CPU results depend slightly on batch shape and KV-cell layout (measured: max
    |Δ| ≈ 0.6 on logits of scale ≈ 30, mean ≈ 0.03; the float model differs from both by ≈ 1).
    A cache that holds one wrong or stale token moves them by ≥ 7 max / ≥ 2.5 mean.
    """
    assert a.shape == b.shape
    diff = np.abs(a - b)
    assert float(diff.mean()) < 0.2, float(diff.mean())
    assert float(diff.max()) < 2.0, float(diff.max())
    assert (a.argmax(-1) == b.argmax(-1)).all()


def test_crop_then_reforward_equals_fresh_forward(backend: LlamaCppBackend) -> None:
    prompt = backend.chat_tokens(PROMPTS[1])
    cont = backend.tokenize(" The sky looks blue because of Rayleigh scattering")
    assert len(cont) >= 6
    state = backend.new_state()
    backend.forward(state, prompt, n_logits=1)
    rows = backend.forward(state, cont[:6], n_logits=6)  # a verify-style batch
    assert rows.shape == (6, backend.vocab_size) and rows.dtype == np.float32
    backend.crop(state, len(prompt) + 2)
    assert state.tokens == prompt + cont[:2]
    again = backend.forward(state, cont[2:6], n_logits=4)
    fresh = backend.forward(backend.new_state(), prompt + cont[:6], n_logits=4)
    close(again, fresh)
    close(rows[2:], fresh)
    # a different continuation after the crop point: the cache really dropped the old tokens
    backend.crop(state, len(prompt))
    other = backend.forward(state, cont[3:7], n_logits=4)
    fresh_other = backend.forward(backend.new_state(), prompt + cont[3:7], n_logits=4)
    close(other, fresh_other)
    # the check can fail: a cache still holding the cropped tokens gives far other logits
    stale = backend.new_state()
    backend.forward(stale, prompt + cont[:6])
    with pytest.raises(AssertionError):
        close(backend.forward(stale, cont[3:7], n_logits=4), fresh_other)


def test_n_logits_beyond_new_tokens_recomputes_cached_rows(backend: LlamaCppBackend) -> None:
    prompt = backend.chat_tokens(PROMPTS[0])
    state = backend.new_state()
    full = backend.forward(state, prompt, n_logits=3)
    state2 = backend.new_state()
    backend.forward(state2, prompt[:-1], n_logits=1)
    rows = backend.forward(state2, prompt[-1:], n_logits=3)
    assert state2.tokens == prompt
    close(rows, full)


def test_prefill_longer_than_n_batch_is_split(backend: LlamaCppBackend) -> None:
    # n_batch is 64 here: 130 tokens decode as 64 + 64 + 2, and 3 logit rows span two calls
    text = " ".join(f"item {i} is {'even' if i % 2 == 0 else 'odd'};" for i in range(40))
    ids = backend.chat_tokens([{"role": "user", "content": text}])[:130]
    assert len(ids) == 130 and backend.n_batch == 64
    whole = backend.forward(backend.new_state(), ids, n_logits=3)
    state = backend.new_state()
    backend.forward(state, ids[:-3])
    tail = backend.forward(state, ids[-3:], n_logits=3)
    assert state.tokens == ids
    close(whole, tail)


def test_interleaved_resident_conversations_decode_as_alone(backend: LlamaCppBackend) -> None:
    backend.reset()
    prompts = [backend.chat_tokens(m) for m in PROMPTS[:2]]  # two conversations, two sequences
    alone = [run(greedy_job(backend, p, n=24)) for p in prompts]
    jobs = [greedy_job(backend, p, n=24) for p in prompts]
    while not all(j.finished for j in jobs):
        for j in jobs:
            j.step()
    assert [j.generated for j in jobs] == alone
    assert alone[0] != alone[1]  # distinct answers, so mixing would show


def test_evicted_conversations_resync_from_their_tokens(backend: LlamaCppBackend) -> None:
    """Three conversations on two sequences: every step evicts one; logits stay each one's own."""
    backend.reset()
    states = [backend.new_state() for _ in PROMPTS]
    nexts = [int(backend.forward(s, backend.chat_tokens(m))[0].argmax()) for s, m in zip(states, PROMPTS, strict=True)]
    seen: list[list[np.ndarray]] = [[] for _ in states]
    for _ in range(10):
        for i, s in enumerate(states):
            row = backend.forward(s, [nexts[i]])[0]
            seen[i].append(row)
            nexts[i] = int(row.argmax())
    for s, rows in zip(states, seen, strict=True):
        fresh = backend.forward(backend.new_state(), list(s.tokens), n_logits=len(rows))
        close(np.stack(rows), fresh)
    assert len({tuple(s.tokens) for s in states}) == len(states)


def test_a_new_conversation_borrows_the_shared_prefix_of_a_live_one(backend: LlamaCppBackend, monkeypatch) -> None:
    """The system prompt + chat template cached by a conversation still in use is copied into a
    new conversation's empty sequence: only the rest is prefilled, and the logits are a cold run's."""
    from models.backend import common_prefix

    backend.reset()
    first, second = (backend.chat_tokens([{"role": "user", "content": q}]) for q in ("Name a river.", "Why?"))
    common = common_prefix(first, second)
    assert common >= 16  # the shared template
    live = backend.new_state()
    backend.forward(live, first)  # stays alive: its sequence is not free
    fed: list[int] = []
    original = backend._decode
    monkeypatch.setattr(backend, "_decode", lambda work: fed.extend(len(t) for _, t, _ in work) or original(work))
    state = backend.new_state()
    rows = backend.forward(state, second)
    assert state.cache.slot != live.cache.slot
    assert fed == [len(second) - common]
    monkeypatch.undo()
    del live
    backend.reset()
    close(rows, backend.forward(backend.new_state(), second))


def test_verify_block_rows_are_bitwise_the_one_token_logits(backend: LlamaCppBackend) -> None:
    """With flash attention (the default) llama.cpp is batch-invariant: what makes greedy output
    with drafting exactly plain greedy's."""
    backend.reset()
    prompt = backend.chat_tokens([{"role": "user", "content": "Name three rivers in Europe."}])
    ref = backend.new_state()
    last = backend.forward(ref, prompt)[0]
    seq, rows = [], []
    for _ in range(30):
        seq.append(int(last.argmax()))
        last = backend.forward(ref, [seq[-1]])[0]
        rows.append(last)
    del ref
    for k in (2, 5, 17):
        state = backend.new_state()
        backend.forward(state, prompt)
        got = []
        for j in range(0, len(seq), k):
            got.extend(backend.forward(state, seq[j : j + k], n_logits=len(seq[j : j + k])))
        assert all(np.array_equal(a, b) for a, b in zip(got, rows, strict=True)), k
        del state


@pytest.mark.parametrize("text", ["Write a short poem about the sea.", "Explain what a hash table is."])
def test_greedy_with_drafting_equals_plain_greedy(backend: LlamaCppBackend, text: str) -> None:
    from models.speculative import SpecConfig, Speculator

    backend.reset()
    prompt = backend.chat_tokens([{"role": "user", "content": text}])
    plain = run(greedy_job(backend, prompt, n=64))
    spec = Speculator(backend, SpecConfig(drafter="prompt_lookup", adaptive=False, k_max=4)).for_job()
    job = DecodeJob(
        backend,
        backend.new_state(),
        prompt,
        SamplingParams(temperature=0.0, max_tokens=64),
        SchedulerConfig(lookahead_tokens=4, draft_before_first_text=True),
        spec,
        spec,
    )
    assert run(job) == plain
    assert job.metrics()["draft_acceptance"] is not None  # it did draft


def test_second_turn_reuses_the_cached_prefix(backend: LlamaCppBackend) -> None:
    state = backend.new_state()
    first = backend.chat_tokens(PROMPTS[0])
    answer = run(greedy_job(backend, first, state, n=12), release=False)
    assert state.tokens[: len(first)] == first
    follow = backend.chat_tokens(
        [
            *PROMPTS[0],
            {"role": "assistant", "content": backend.decode(answer)},
            {"role": "user", "content": "Why?"},
        ]
    )
    to_feed = sync_prefix(backend, state, follow)
    assert len(to_feed) < len(follow) - len(first) // 2
    rows = backend.forward(state, to_feed)
    fresh = backend.forward(backend.new_state(), follow)
    close(rows, fresh)


def test_rejects_empty_and_overlong_input(backend: LlamaCppBackend) -> None:
    state = backend.new_state()
    with pytest.raises(ValueError, match="at least one token"):
        backend.forward(state, [])
    with pytest.raises(ValueError, match="exceed the context"):
        backend.forward(state, [backend.tokenize("a")[0]] * (N_CTX + 1))
    assert state.tokens == []
