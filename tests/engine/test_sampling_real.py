"""The embedded model (SmolLM2 through llama.cpp, as served by default) under its repetition guard:
the README's Realtime example at temperature 0 answers in one line instead of looping to the limit,
and a penalty moves real output the way it says."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'stream-omni[llama]')")

from models.decode import DecodeJob  # noqa: E402
from models.llama_cpp import LlamaCppBackend, LlamaCppConfig  # noqa: E402
from models.sampling import SamplingParams  # noqa: E402
from models.scheduler import SchedulerConfig  # noqa: E402
from tests.wsclient import RealtimeClient  # noqa: E402

pytestmark = pytest.mark.real_model
README_QUESTION = "What is the capital of France?"
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def backend() -> Iterator[LlamaCppBackend]:
    b = LlamaCppBackend(LlamaCppConfig(threads=1, n_ctx=1024))  # one thread: steady on a loaded shared box
    yield b
    b.close()


def looped(ids: list[int], window: int = 48, n: int = 4, times: int = 3) -> bool:
    tail = ids[-window:]
    grams = Counter(tuple(tail[i : i + n]) for i in range(len(tail) - n + 1))
    return max(grams.values(), default=0) >= times


def answer(b: LlamaCppBackend, params: SamplingParams, question: str = README_QUESTION) -> DecodeJob:
    job = DecodeJob(b, b.new_state(), b.chat_tokens([{"role": "user", "content": question}]), params, SchedulerConfig())
    while not job.finished:
        job.step()
    return job


def test_the_embedded_model_recommends_its_card_sampling_and_a_guard(backend):
    d = replace(SamplingParams(), **backend.sampling_defaults)
    assert (d.temperature, d.top_p) == (0.2, 0.9)
    assert d.dry_multiplier > 0 and d.dry_allowed_length == 2 and d.frequency_penalty == 0.5


def test_a_sentence_shape_repeated_across_line_breaks_ends_under_the_default_guard(backend):
    """Asked to say goodbye in French, the model restarts "Je ne … pas." on each line until the limit under
    DRY alone (its runs stop at a line break); the default guard's frequency penalty ends it, on every
    seed tried."""
    defaults = replace(SamplingParams(max_tokens=64), **backend.sampling_defaults)
    dry_only = replace(defaults, frequency_penalty=0.0)
    question = "Say goodbye in French."

    def loops(params: SamplingParams) -> list[str]:
        out = []
        for seed in range(8):
            job = answer(backend, replace(params, seed=seed), question)
            if len(job.generated) == 64 and looped(job.generated):
                out.append(backend.decode(job.generated))
        return out

    assert loops(dry_only), "DRY alone no longer loops here: this test shows nothing"
    assert loops(defaults) == []


def test_greedy_loops_without_the_guard_and_ends_with_it(backend):
    guard = replace(SamplingParams(max_tokens=120), **{**backend.sampling_defaults, "temperature": 0.0})
    plain = answer(backend, SamplingParams(max_tokens=120))
    guarded = answer(backend, guard)
    assert len(plain.generated) == 120 and looped(plain.generated), backend.decode(plain.generated)
    text = backend.decode(guarded.generated)
    assert len(guarded.generated) < 120, text  # it ended by itself: a loop runs to the limit
    assert "\n" not in text.strip()


def test_frequency_penalty_cuts_real_repeats(backend):
    plain = answer(backend, SamplingParams(max_tokens=100))
    pen = answer(backend, SamplingParams(max_tokens=100, frequency_penalty=1.0))

    def repeats(ids: list[int]) -> int:
        return sum(c - 1 for c in Counter(zip(ids, ids[1:], ids[2:], strict=False)).values())

    assert repeats(pen.generated) < repeats(plain.generated) // 2, backend.decode(pen.generated)


async def test_readme_realtime_example_at_temperature_0_answers_in_one_line(backend, server_factory):
    """The README's example as written: the default config, the session's instructions, a user message,
    ``response.create`` with ``temperature: 0``: Paris, in one line. Without the instructions the reply
    still completes in one line (a loop would run to max_output_tokens: status incomplete)."""
    with server_factory(backend, **{"audio.enabled": False}) as addr:
        c = await RealtimeClient.connect(addr, query="model=SmolLM2-135M-Instruct")
        await c.until("session.created")
        bare = await c.ask(README_QUESTION, temperature=0)
        bare_text = c.text_of(bare["response"]["id"])
        await c.close()
        c = await RealtimeClient.connect(addr, query="model=SmolLM2-135M-Instruct")
        await c.until("session.created")
        await c.send(
            {"type": "session.update", "session": {"type": "realtime", "instructions": "You are a helpful assistant."}}
        )
        await c.until("session.updated")
        done = await c.ask(README_QUESTION, temperature=0)
        text = c.text_of(done["response"]["id"])
        await c.close()
    assert bare["response"]["status"] == "completed" and "\n" not in bare_text.strip(), bare_text
    assert done["response"]["status"] == "completed", text
    assert text.strip() == "The capital of France is Paris.", text


def readme_realtime_example() -> str:
    """The README's Realtime example, as printed there (the first Python block that connects)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(b for b in blocks if "client.realtime.connect(" in b)


async def test_the_readme_realtime_example_runs_as_written_and_prints_paris(backend, server_factory):
    """The README's code itself (only its address changed), through the unmodified ``openai`` SDK, against
    a served embedded model: one line that names Paris, ended by the model (a loop runs to the limit)."""
    code = readme_realtime_example()
    assert "http://127.0.0.1:8000/v1" in code and "asyncio.run(main())" in code
    printed: list[str] = []

    def capture(*args: object, end: str = "\n", **_: object) -> None:
        printed.append(" ".join(map(str, args)) + end)

    with server_factory(backend, **{"audio.enabled": False}) as addr:
        run = code.replace("http://127.0.0.1:8000/v1", f"http://{addr}/v1")
        # the example runs its own event loop (asyncio.run), so it gets a thread of its own
        await asyncio.wait_for(asyncio.to_thread(exec, run, {"__name__": "readme", "print": capture}), 120)
    text = "".join(printed)
    assert "Paris" in text, text
    assert "\n" not in text.strip() and len(text) < 200, text
    assert not looped(backend.tokenize(text)), text
