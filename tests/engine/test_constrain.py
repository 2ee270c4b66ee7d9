"""Grammar-constrained decoding (models.constrain) on a small fake byte vocabulary: fast and exhaustive.

A fake model over a byte-level vocabulary with seeded random logits is the harshest "model": it
has no idea of JSON, so every valid answer is the mask's doing. Speculative decoding must give the
same tokens as plain constrained greedy decoding, whatever the drafter proposes.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import constrain
from models.backend import KVState
from models.decode import DecodeJob
from models.sampling import SamplingParams
from models.scheduler import SchedulerConfig
from models.verify import accept_greedy
from tests.fuzzing import examples

# ids 0..255: single bytes; then a few multi-byte tokens (as BPE has); the last one is end-of-turn
_MULTI = [b'{"', b'":', b'",', b'"}', b"true", b"false", b"null", b"ab", b"name", b"12", b"<tool_call>"]
TOKENS = [bytes([i]) for i in range(256)] + _MULTI + [b""]
EOS = len(TOKENS) - 1
V = len(TOKENS)
_ENDERS = [TOKENS.index(t) for t in (b'"', b"}", b"]", b"0", b"1", b'"}', b",")]


class ByteBackend:
    """A model knowing nothing of JSON: logits are noise seeded by the context (deterministic),
    nudged towards tokens that close strings and objects so answers end within a few hundred bytes."""

    name = "bytes"
    vocab_size = V
    eos_ids = frozenset({EOS})
    max_context = 100_000

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.forwards = 0

    def new_state(self) -> KVState:
        return KVState()

    def _row(self, ctx: list[int]) -> np.ndarray:
        h = zlib.crc32(np.asarray(ctx[-8:], dtype=np.int32).tobytes(), self.seed + len(ctx))
        row = np.random.default_rng(h).standard_normal(V).astype(np.float32)
        row[_ENDERS] += 1.5
        return row

    def forward(self, state: KVState, tokens: list[int], n_logits: int = 1) -> np.ndarray:
        self.forwards += 1
        state.tokens.extend(tokens)
        n = len(state.tokens)
        return np.stack([self._row(state.tokens[: n - n_logits + i + 1]) for i in range(n_logits)])

    def crop(self, state: KVState, length: int) -> None:
        del state.tokens[length:]

    def chat_tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return list(json.dumps(messages).encode())

    def decode(self, ids: list[int]) -> str:
        return b"".join(TOKENS[i] for i in ids).decode("utf-8", errors="replace")


VOCAB = constrain.byte_vocab(TOKENS, EOS)


class OracleDrafter:
    """Drafts the plain constrained-greedy continuation (all accepted) with every third draft broken."""

    def __init__(self, reference: list[int], prompt_len: int, spoil: bool):
        self.ref, self.n0, self.spoil = reference, prompt_len, spoil

    def propose(self, context: list[int], k: int) -> list[int]:
        at = len(context) - self.n0
        out = list(self.ref[at : at + k])
        if self.spoil:
            out = [(t + 1) % V if (at + i) % 3 == 2 else t for i, t in enumerate(out)]
        return out


class GreedyVerifier:
    def lookahead(self, load: int = 0, left: int | None = None) -> int:
        return 4

    def accept(self, rows: np.ndarray, drafts: list[int], params: Any, rng: Any) -> tuple[list[int], int]:
        return accept_greedy(rows, drafts)

    def record(self, drafted: int, accepted: int, seconds: float) -> None:
        pass


def run(backend: Any, grammar: str, drafter: Any = None, max_tokens: int = 2000, prompt: str = "x") -> tuple[str, Any]:
    prompt_ids = backend.chat_tokens([{"role": "user", "content": prompt}])
    con = constrain.Constraint(VOCAB, grammar, V)
    job = DecodeJob(
        backend,
        backend.new_state(),
        prompt_ids,
        SamplingParams(max_tokens=max_tokens),
        SchedulerConfig(lookahead_tokens=4 if drafter else 0),
        drafter=drafter,
        verifier=GreedyVerifier() if drafter else None,
        constraint=con,
    )
    text, done = "", None
    for _ in range(10 * max_tokens):
        ev = job.step()
        text += "".join(c.text for c in ev.chunks)
        done = ev.done or done
        if job.finished:
            break
    return text, (done, job)


# ----------------------------------------------------------------------------- schemas

_names = st.sampled_from(["a", "b", "name", "city", "n", "items", "ok", "x_1"])
_leaf = st.one_of(
    st.just({"type": "string"}),
    st.just({"type": "integer"}),
    st.just({"type": "number"}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(
        lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
        st.integers(-50, 50),
        st.integers(0, 100),
    ),
    st.lists(st.text("abcxyz ", min_size=1, max_size=6), min_size=1, max_size=4, unique=True).map(
        lambda xs: {"type": "string", "enum": xs}
    ),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(1, 12)),
    st.just({"type": "string", "pattern": "^[a-z]{2,5}$"}),
)


def _obj(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def build(props: dict[str, Any], req_mask: list[bool], strict: bool) -> dict[str, Any]:
        names = list(props)
        required = names if strict else [n for n, r in zip(names, req_mask, strict=False) if r]
        out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if strict:
            out["additionalProperties"] = False
        return out

    return st.builds(
        build,
        st.dictionaries(_names, children, min_size=1, max_size=4),
        st.lists(st.booleans(), min_size=4, max_size=4),
        st.booleans(),
    )


SCHEMAS = st.recursive(
    _leaf,
    lambda children: st.one_of(
        _obj(children),
        st.builds(lambda it, hi: {"type": "array", "items": it, "maxItems": hi}, children, st.integers(0, 3)),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: {"anyOf": xs}),
    ),
    max_leaves=8,
)
TOP = st.one_of(_obj(SCHEMAS), SCHEMAS)


# ----------------------------------------------------------------------------- tests


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=TOP, seed=st.integers(0, 2**16))
def test_every_answer_parses_and_validates(schema: dict[str, Any], seed: int) -> None:
    text, (done, _) = run(ByteBackend(seed), constrain.json_grammar(schema))
    assert done.reason == "stop", (done.reason, text[:200])
    jsonschema.validate(json.loads(text), schema)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=TOP, seed=st.integers(0, 2**16), spoil=st.booleans())
def test_drafting_gives_exactly_the_constrained_greedy_output(schema: dict[str, Any], seed: int, spoil: bool) -> None:
    grammar = constrain.json_grammar(schema)
    plain, (_, job) = run(ByteBackend(seed), grammar)
    backend = ByteBackend(seed)
    prompt_len = len(backend.chat_tokens([{"role": "user", "content": "x"}]))
    drafted, (done, djob) = run(backend, grammar, OracleDrafter(job.generated, prompt_len, spoil))
    assert drafted == plain
    assert djob.generated == job.generated
    assert done.reason == "stop"


def test_drafted_greedy_takes_the_one_token_steps_choice_where_validate_and_bitmask_differ() -> None:
    # found by the property above: after `"name` the unmasked argmax `"` passes validate_tokens
    # but the bitmask offers only `":`; verifying drafts with the bitmask answered `":` there
    item = {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "string", "pattern": "^[a-z]{2,5}$"}]}
    city = {"type": "object", "properties": {k: {"type": "string"} for k in ("items", "ok", "a")}, "required": ["a"]}
    props = {
        "x_1": {"type": "array", "items": item, "maxItems": 3},
        "city": city,
        "name": {"type": "array", "items": {"type": "string"}, "maxItems": 0},
    }
    grammar = constrain.json_grammar({"type": "object", "properties": props, "required": ["x_1", "city"]})
    plain, (_, job) = run(ByteBackend(3059), grammar)
    backend = ByteBackend(3059)
    prompt_len = len(backend.chat_tokens([{"role": "user", "content": "x"}]))
    _, (_, djob) = run(backend, grammar, OracleDrafter(job.generated, prompt_len, False))
    assert djob.generated == job.generated
    assert djob.accepted == djob.drafted  # every oracle draft verified


def test_drafts_the_grammar_forbids_are_never_verified() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    grammar = constrain.json_grammar(schema)
    _, (_, ref) = run(ByteBackend(3), grammar)

    class Junk:
        def propose(self, context: list[int], k: int) -> list[int]:
            return [TOKENS.index(b"z")] * k  # never valid JSON here

    backend = ByteBackend(3)
    text, (_, job) = run(backend, grammar, Junk())
    assert job.generated == ref.generated
    assert job.drafted == 0  # every draft was cut before the forward
    jsonschema.validate(json.loads(text), schema)


def test_json_object_mode_gives_an_object() -> None:
    text, (done, _) = run(ByteBackend(1), constrain.json_grammar(None))
    assert done.reason == "stop"
    assert isinstance(json.loads(text), dict)


def test_forced_tool_call_grammar() -> None:
    tools = [
        constrain.ToolSpec(
            "get_weather",
            {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        ),
        constrain.ToolSpec(
            "add",
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        ),
    ]
    for seed in range(8):
        text, (done, _) = run(ByteBackend(seed), constrain.tool_call_grammar(tools, parallel=False))
        assert done.reason == "stop"
        assert text.startswith(constrain.TOOL_OPEN) and text.endswith(constrain.TOOL_CLOSE)
        call = json.loads(text[len(constrain.TOOL_OPEN) : -len(constrain.TOOL_CLOSE)])
        jsonschema.validate(call, constrain.call_schema(tools))


@pytest.mark.parametrize(
    "schema, fragment",
    [
        ({"type": "nonsense"}, "not a valid JSON schema"),
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "cannot be enforced"),
        ({"type": "string", "format": "no-such-format"}, "cannot be enforced"),
        ({"type": "object", "required": "a"}, "not a valid JSON schema"),
        ([], "must be a JSON object"),
    ],
)
def test_bad_schemas_are_refused_with_a_reason(schema: Any, fragment: str) -> None:
    with pytest.raises(constrain.GrammarError, match=fragment):
        constrain.check_schema(schema)


def test_mask_forbids_and_allows() -> None:
    con = constrain.Constraint(VOCAB, constrain.json_grammar({"type": "boolean"}), V)
    row = con.mask(np.zeros(V, dtype=np.float32))
    allowed = {TOKENS[i] for i in np.flatnonzero(np.isfinite(row))}
    assert allowed and all(b"true".startswith(t) or b"false".startswith(t) for t in allowed)
    assert EOS not in np.flatnonzero(np.isfinite(row))  # not complete yet: no end of turn
    con.advance([TOKENS.index(b"true")])
    assert con.complete
