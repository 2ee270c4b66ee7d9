"""A complexity budget for client JSON schemas, checked before any grammar is compiled. Pure.

Compiling a schema into a grammar (llguidance) costs time that grows with the schema: 100 tools of
8-deep nested ``anyOf`` took 31 s, one object of 20,000 properties 4.3 s. So the tools and
``response_format`` of one request are measured first, in one walk that stops as soon as any
bound is passed (its own cost is bounded by the budget, not by the input): the JSON size of all
schemas together, their nesting depth, the alternatives of one ``anyOf`` / ``oneOf`` /
``allOf``, the properties of all of them together, and the number of tools. Past a bound,
``TooComplex`` names the field, as a client error.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_ALTERNATIVES = ("anyOf", "oneOf", "allOf")


@dataclass(frozen=True)
class SchemaBudget:
    max_bytes: int = 64 * 1024  # JSON text of all schemas of one request (or session) together
    max_depth: int = 16  # JSON nesting of one schema
    max_alternatives: int = 16  # entries of one anyOf / oneOf / allOf
    max_properties: int = 512  # property names (and patternProperties) of all schemas together
    max_tools: int = 64  # tools in one request or session


class TooComplex(ValueError):
    """A schema (or the set of them) past the budget; ``param`` is the field, ``limit`` the config key."""

    def __init__(self, message: str, param: str, limit: str):
        super().__init__(message)
        self.message, self.param, self.limit = message, param, limit


def _scalar_bytes(v: Any) -> int:
    if isinstance(v, str):
        return len(v) + 2
    return 5  # numbers, booleans, null: a few characters each


def check(schemas: Sequence[tuple[str, Any]], budget: SchemaBudget, tools: int = 0, tools_param: str = "tools") -> None:
    """Raise ``TooComplex`` unless ``schemas`` (``(field, schema)`` pairs) and ``tools`` fit ``budget``."""
    if tools > budget.max_tools:
        raise TooComplex(f"{tools} tools exceed the limit of {budget.max_tools}", tools_param, "max_tools")
    size = props = 0
    for where, schema in schemas:
        stack: list[tuple[Any, int]] = [(schema, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > budget.max_depth:
                raise TooComplex(
                    f"{where} is nested deeper than the limit of {budget.max_depth} levels", where, "max_depth"
                )
            if isinstance(node, dict):
                size += 2 + len(node)
                for k, v in node.items():
                    size += len(k) + 3
                    if k in _ALTERNATIVES and isinstance(v, list) and len(v) > budget.max_alternatives:
                        raise TooComplex(
                            f"{where} has a {k} of {len(v)} alternatives, over the limit of {budget.max_alternatives}",
                            where,
                            "max_alternatives",
                        )
                    if k in ("properties", "patternProperties") and isinstance(v, dict):
                        props += len(v)
                        if props > budget.max_properties:
                            raise TooComplex(
                                f"the schemas have more than {budget.max_properties} properties in all",
                                where,
                                "max_properties",
                            )
                    if isinstance(v, dict | list):
                        stack.append((v, depth + 1))
                    else:
                        size += _scalar_bytes(v)
            elif isinstance(node, list):
                size += 2 + len(node)
                for v in node:
                    if isinstance(v, dict | list):
                        stack.append((v, depth + 1))
                    else:
                        size += _scalar_bytes(v)
            else:
                size += _scalar_bytes(node)
            if size > budget.max_bytes:
                raise TooComplex(
                    f"the schemas exceed the limit of {budget.max_bytes} bytes of JSON in all", where, "max_bytes"
                )


def digest(value: Any) -> str:
    """A stable hash of a JSON value (key order ignored): what compiled grammars are cached by."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
