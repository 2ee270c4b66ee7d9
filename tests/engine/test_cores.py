"""Cores lent between compute threads: the count, and the llama.cpp backend stepping on fewer threads
while one is lent (the real embedded model; its thread count read back from llama.cpp itself)."""

from __future__ import annotations

import threading

import pytest

from models.cores import CORES, Cores


def test_lending_counts_up_and_back_down_even_when_the_block_raises():
    cores = Cores()
    with cores.lend():
        assert cores.lent == 1
        with cores.lend(2):
            assert cores.lent == 3
        assert cores.lent == 1
    with pytest.raises(RuntimeError), cores.lend():
        raise RuntimeError("a Whisper pass failed")
    assert cores.lent == 0


def test_lending_from_many_threads_at_once_adds_up():
    cores = Cores()
    start = threading.Barrier(8)

    def borrow() -> None:
        start.wait()
        for _ in range(2000):
            with cores.lend():
                pass

    threads = [threading.Thread(target=borrow) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert cores.lent == 0


@pytest.mark.real_model
def test_the_llama_cpp_backend_steps_on_fewer_threads_while_a_core_is_lent():
    from models.llama_cpp import LlamaCppBackend, LlamaCppConfig

    backend = LlamaCppBackend(LlamaCppConfig(threads=2, n_ctx=512, n_batch=64, n_seq=1))
    try:
        lc, ctx = backend._lc, backend._ctx
        prompt = backend.chat_tokens([{"role": "user", "content": "Hi"}])
        state = backend.new_state()
        backend.forward(state, prompt)
        assert lc.llama_n_threads(ctx) == 2
        with CORES.lend():
            token = int(backend.forward(state, [prompt[-1]])[-1].argmax())
            assert lc.llama_n_threads(ctx) == 1  # while a Whisper pass runs
        backend.forward(state, [token])
        assert lc.llama_n_threads(ctx) == 2  # and all of them again after it
    finally:
        backend.close()
