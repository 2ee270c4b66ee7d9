"""Grammar-constrained decoding: a token mask from llguidance for JSON schemas and tool calls.

Why llguidance (1.9.1) and not xgrammar (0.2.8), both checked against torch 2.14.1 here: llguidance
is one Rust wheel with no Python dependencies that imports in ~0.25 s (xgrammar pulls
apache-tvm-ffi and imports torch, ~4 s), builds its tokenizer from either of our backends — the
llama.cpp vocab (``llguidance.llamacpp``, the same code llama.cpp's own ``--grammar`` /
llguidance support uses) or a transformers fast tokenizer — and has rollback and draft-token
validation, which speculative decoding needs. A JSON-schema mask over SmolLM2's 49,152 tokens
takes ~30 µs here.

The grammar is applied in our own decode loop (``models.decode``): the logits row a token is
chosen from is masked (``mask``), chosen tokens are fed back (``advance``), drafted tokens are cut
to the prefix the grammar allows (``valid_prefix``) and each verify row is masked with the state
after the drafts before it (``mask_rows``), so greedy output with drafting is exactly the
constrained greedy output without it. Shapes: a logits row is float32 ``[V]``, rows ``[k+1, V]``.

JSON is compact (no whitespace between tokens): a small model cannot then loop on blank lines.
"""

from __future__ import annotations

import json
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import schema_budget

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"  # Hermes-style tool-call markup (SmolLM2, Qwen…)

# compact JSON, no free whitespace; keywords llguidance does not implement are an error, not ignored
_JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


class GrammarError(ValueError):
    """A schema or grammar that cannot be compiled; the message names what is wrong."""


def _llg() -> Any:
    import llguidance

    return llguidance


# ----------------------------------------------------------------------------- grammars


_CACHE_SIZE = 256  # schemas (and grammars) remembered: a session repeating its tools compiles them once
_checked: OrderedDict[str, str | None] = OrderedDict()  # schema digest → why it is refused (None: fine)
_cache_lock = threading.Lock()  # checks and compiles run on worker threads


def _remember(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    with _cache_lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)


def check_schema(schema: Any, where: str = "schema") -> None:
    """Raise ``GrammarError`` unless ``schema`` is a JSON Schema (meta-schema) llguidance can compile.
    Remembered by the schema's hash: the same schema is checked once."""
    if not isinstance(schema, dict):
        raise GrammarError(f"{where} must be a JSON object")
    key = schema_budget.digest(schema)
    with _cache_lock:
        known = key in _checked
        why = _checked.get(key)
    if not known:
        why = _why_refused(schema)
        _remember(_checked, key, why)
    if why is not None:
        raise GrammarError(where + why)


def _why_refused(schema: dict[str, Any]) -> str | None:
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f" is not a valid JSON schema: {exc.message}"
    grammar = json_grammar(schema)
    is_error, msgs = _llg().LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        return f" cannot be enforced: {msgs[0].splitlines()[0][:300]}"
    return None


MAX_STRING, MAX_ITEMS, MAX_KEYS = 128, 32, 32  # bounds added where a schema sets none (see bounded)
SAFE_INT = 2**53 - 1


def bounded(schema: Any) -> Any:
    """``schema`` narrowed so that every answer ends: what validates against the result validates
    against ``schema``. A 135M model, masked or not, can repeat itself forever — a key after key in
    an open object, a character after character in a string — so objects with ``properties`` and no
    ``additionalProperties`` get ``false``, strings without a length, enum or pattern get
    ``maxLength`` 128, arrays ``maxItems`` 32, free-form objects ``maxProperties`` 32 and keys of at
    most 24 plain characters (``KEY_PATTERN``), integers within ±(2**53 - 1), numbers within ±1e15
    with at most 6 decimals. That bounds an answer's size, not to any ``max_tokens``:
    an answer cut by the token cap ends with ``length`` and is not valid JSON, as with OpenAI."""
    if isinstance(schema, list):
        return [bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded(v) if k in _SUBSCHEMAS else v for k, v in schema.items()}
    for key in ("properties", "patternProperties", "$defs", "definitions"):  # name → schema maps
        if isinstance(out.get(key), dict):
            out[key] = {k: bounded(v) for k, v in out[key].items()}
    if "properties" in out:
        out.setdefault("additionalProperties", False)
    kind = out.get("type")
    if kind == "string" and not {"enum", "const", "pattern", "format", "maxLength"} & out.keys():
        out["maxLength"] = max(MAX_STRING, int(out.get("minLength", 0)))
    if kind == "integer":  # digits too: the safe-integer range (what a double holds exactly)
        out.setdefault("minimum", -SAFE_INT)
        out.setdefault("maximum", SAFE_INT)
    if kind == "number":  # |x| <= 1e15 with at most 6 decimals (a small model writes 1.0000… forever)
        out.setdefault("minimum", -1e15)
        out.setdefault("maximum", 1e15)
        out.setdefault("multipleOf", 1e-6)
    if kind == "array" and "maxItems" not in out:
        out["maxItems"] = max(MAX_ITEMS, int(out.get("minItems", 0)))
    if kind == "object" and "properties" not in out and "maxProperties" not in out:
        out["maxProperties"] = max(MAX_KEYS, int(out.get("minProperties", 0)))
    free = out.get("additionalProperties", True)
    if kind == "object" and "patternProperties" not in out and free is not False and "properties" not in out:
        # keys are strings the model writes too: bounded names (llguidance has no propertyNames)
        out["patternProperties"] = {KEY_PATTERN: {} if free is True else free}
        out["additionalProperties"] = False
    return out


KEY_PATTERN = r"^[A-Za-z0-9_ .-]{1,24}$"  # free-form object keys (json_object mode, schemas without properties)


_SUBSCHEMAS = {"items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"}


def any_json(depth: int = 3, width: int = 16) -> dict[str, Any]:
    """Any JSON value nested at most ``depth`` deep, ``width`` items/keys a level, strings of 64 chars."""
    scalars: list[dict[str, Any]] = [
        {"type": "string", "maxLength": 64},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
    ]
    if depth == 0:
        return {"anyOf": scalars}
    inner = any_json(depth - 1, width)
    return {
        "anyOf": [
            *scalars,
            {"type": "array", "items": inner, "maxItems": width},
            {
                "type": "object",
                "patternProperties": {KEY_PATTERN: inner},
                "additionalProperties": False,
                "maxProperties": width,
            },
        ]
    }


def json_grammar(schema: dict[str, Any] | None) -> str:
    """A grammar for one JSON value matching ``schema`` (None: any JSON object, ``json_object`` mode)."""
    if schema is None:  # json_object: an object of bounded values (see bounded: a small model loops)
        schema = {"type": "object", "additionalProperties": any_json(1, 4), "maxProperties": 8}  # keys: bounded()
    target = bounded(schema)
    return str(_llg().LLMatcher.grammar_from_json_schema(target, overrides=_JSON_OPTIONS))


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict[str, Any]  # a JSON schema of the arguments object


def call_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The schema of one call's JSON: ``{"name": <one of the tools>, "arguments": <its parameters>}``."""
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters or {"type": "object"}},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_call_grammar(tools: Sequence[ToolSpec], parallel: bool = True) -> str:
    """A grammar for forced calls: ``<tool_call>{json}</tool_call>``, once or (parallel) more, newline-separated."""
    if not tools:
        raise GrammarError("a forced tool call needs at least one tool")
    schema = bounded(call_schema(tools))
    schema["x-guidance"] = _JSON_OPTIONS
    more = ' ("\\n" call)*' if parallel else ""  # parallel: further calls, one per line
    lark = (
        f"start: call{more}\n"
        f"call: {json.dumps(TOOL_OPEN)} body {json.dumps(TOOL_CLOSE)}\n"
        f"body: %json {json.dumps(schema)}\n"
    )
    return str(_llg().LLMatcher.grammar_from_lark(lark))


# ----------------------------------------------------------------------------- vocabularies

_VOCABS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def grammar_vocab(backend: Any) -> Any:
    """The llguidance tokenizer of ``backend`` (built once, ~0.5 s; cached per backend).

    llama.cpp: from the model's vocab; transformers: from its fast tokenizer. The end-of-turn ids
    are the backend's ``eos_ids``, so the mask allows them exactly where the grammar is complete.
    """
    cached = _VOCABS.get(backend)
    if cached is not None:
        return cached
    eos = sorted(backend.eos_ids)
    vocab = getattr(backend, "_vocab", None)
    tokenizer = getattr(backend, "tokenizer", None)
    if vocab is not None:
        from llguidance.llamacpp import lltokenizer_from_vocab

        with warnings.catch_warnings():  # llguidance 1.9.1 calls llama_token_get_attr, deprecated in 0.3.36
            warnings.simplefilter("ignore", DeprecationWarning)
            tok = lltokenizer_from_vocab(vocab, n_vocab=backend.vocab_size, eos_token=eos)
    elif tokenizer is not None:
        from llguidance.hf import from_tokenizer

        tok = from_tokenizer(tokenizer, n_vocab=backend.vocab_size, eos_token=eos)
    else:
        raise GrammarError(f"the {type(backend).__name__} backend has no tokenizer a grammar can use")
    _VOCABS[backend] = tok
    return tok


def byte_vocab(tokens: Sequence[bytes], eos: int) -> Any:
    """A tokenizer over explicit token byte strings (tests: a small fake vocabulary)."""
    llg = _llg()

    class _Plain:
        def __init__(self) -> None:
            self.tokens = list(tokens)
            self.eos_token_id = eos
            self.bos_token_id = None
            self.special_token_ids = [eos]
            by_len = sorted(range(len(tokens)), key=lambda i: -len(tokens[i]))
            self._order = [i for i in by_len if i != eos and tokens[i]]

        def __call__(self, s: bytes | str) -> list[int]:  # greedy longest match
            data = s.encode() if isinstance(s, str) else s
            out, pos = [], 0
            while pos < len(data):
                tid = next(i for i in self._order if data.startswith(self.tokens[i], pos))
                out.append(tid)
                pos += len(self.tokens[tid])
            return out

    return llg.LLTokenizer(llg.TokenizerWrapper(_Plain()), slices=[])


# ----------------------------------------------------------------------------- the per-response mask


class Constraint:
    """One response's grammar state. Methods run on the engine's thread (no locking)."""

    def __init__(self, vocab: Any, grammar: str, vocab_size: int):
        llg = _llg()
        self._m = llg.LLMatcher(vocab, grammar, log_level=0)
        if self._m.is_error():
            raise GrammarError(self._m.get_error().splitlines()[0][:300])
        self.vocab_size = vocab_size  # the model's V (logits width), may exceed the tokenizer's

    @classmethod
    def of(cls, matcher: Any, vocab_size: int) -> Constraint:
        """A constraint on an already compiled matcher (a copy of a cached one)."""
        out = cls.__new__(cls)
        out._m, out.vocab_size = matcher, vocab_size
        return out

    def _allowed(self) -> np.ndarray:
        """bool ``[V]``: the tokens the grammar allows next."""
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little").astype(bool)
        if allowed.size >= self.vocab_size:
            return allowed[: self.vocab_size]
        return np.concatenate([allowed, np.zeros(self.vocab_size - allowed.size, dtype=bool)])

    def mask(self, row: np.ndarray, greedy: bool = False) -> np.ndarray:
        """``row [V]`` with every token the grammar forbids at -inf (a copy).

        ``greedy``: only the argmax will be read. When the unmasked argmax is allowed — most steps, the
        model mostly wants what the grammar allows — it is the masked argmax too, and checking that one
        token costs a fraction of a full mask (~1 ms a token here, measured in bench/constrained.py).
        """
        if greedy:
            top = int(np.argmax(row))
            if self._m.validate_tokens([top]) == 1:
                out = np.full_like(row, -np.inf, dtype=np.float32)
                out[top] = row[top]
                return out
        out = np.where(self._allowed(), row, -np.inf).astype(np.float32, copy=False)
        if not np.isfinite(out).any():  # the grammar allows nothing: a library error, not a model one
            raise RuntimeError(f"grammar allows no token: {self._m.get_error() or 'dead end'}")
        return out

    def mask_rows(self, rows: np.ndarray, drafts: list[int], greedy: bool = False) -> None:
        """Mask ``rows [len(drafts)+1, V]`` in place: row ``i`` with the state after ``drafts[:i]``.

        ``drafts`` must be allowed (``valid_prefix``); the state is left where it was. ``greedy``
        as in ``mask``, and it must be what the one-token steps use: llguidance's
        ``validate_tokens`` can allow a token its bitmask leaves out (seen: ``"`` then ``:``
        where the mask offers only ``":``), so the two ways may choose differently.
        """
        done = 0
        try:
            for i in range(len(drafts) + 1):
                rows[i] = self.mask(rows[i], greedy=greedy)
                if i < len(drafts):
                    if not self._m.consume_token(drafts[i]):
                        raise RuntimeError(f"draft {drafts[i]} not allowed: call valid_prefix first")
                    done += 1
        finally:
            if done:
                self._m.rollback(done)

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of ``tokens`` (in order) the grammar allows from here."""
        return int(self._m.validate_tokens(tokens)) if tokens else 0

    def advance(self, tokens: list[int]) -> None:
        """Tokens chosen (masked): move the grammar past them."""
        if tokens and not self._m.consume_tokens(tokens):
            raise RuntimeError(f"grammar rejected chosen tokens: {self._m.get_error()}")

    @property
    def complete(self) -> bool:
        """Nothing but end-of-turn may follow: the response is over."""
        return bool(self._m.is_stopped())

    @property
    def accepting(self) -> bool:
        return bool(self._m.is_accepting())


_compiled: OrderedDict[str, Any] = OrderedDict()  # (vocab, grammar) digest → a fresh matcher to copy


def constraint_for(backend: Any, grammar: str) -> Constraint:
    """A new response's constraint. The grammar is compiled once per vocabulary (cached by its
    hash); each response gets a copy of the compiled matcher in its start state."""
    vocab = grammar_vocab(backend)
    key = schema_budget.digest([id(vocab), grammar])
    with _cache_lock:
        pristine = _compiled.get(key)
    if pristine is None:
        first = Constraint(vocab, grammar, backend.vocab_size)
        _remember(_compiled, key, first._m.deep_copy())
        return first
    return Constraint.of(pristine.deep_copy(), backend.vocab_size)
