"""What an MCP server's tool listing may offer a session, pure: names, ``allowed_tools``, the schema budget.

A server's listing is as untrusted as a client's tools: its names end up in the model's tool-call markup and
its schemas are compiled into grammars. So every tool the entry allows must carry a function name
(``NAME``: nothing that could close the markup) and a schema within ``models.schema_budget`` (a bounded walk:
a schema nested 150 deep is refused here, before jsonschema's recursion could fail on it), checked
before anything compiles; a listing that breaks either rule fails, naming the tool. Tools the entry's
``allowed_tools`` leaves out are dropped first: neither listed nor checked. ``admit`` compiles schemas
(``models.constrain.check_schema``), so callers run it off the event loop (``gateway.core.grammars``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from models import constrain, schema_budget

from . import policy

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # the function-name rule of OpenAI's tools
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class ListingRefused(Exception):
    """A listing the session will not offer; ``message`` names the tool (fit for the client)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ListingLimits:
    max_tools: int = 64  # tools kept from one listing (tools.mcp_max_tools), after allowed_tools
    budget: schema_budget.SchemaBudget = schema_budget.SchemaBudget()  # the same budget as a client's tools


def _shown(name: Any) -> str:
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def admit(listed: list[dict[str, Any]], allowed: Any, limits: ListingLimits) -> list[dict[str, Any]]:
    """The tools of ``listed`` (as ``Connection.list_tools`` gives them) that a session may offer: those
    ``allowed`` (GA ``allowed_tools``), at most ``limits.max_tools``, each schema one a grammar can follow
    (one that cannot is left out, as before). Raises ``ListingRefused`` naming the first bad tool."""
    kept: list[dict[str, Any]] = []
    for t in listed:
        name = t.get("name")
        if not policy.tool_allowed(allowed, str(name)):
            continue
        if not isinstance(name, str) or not NAME.match(name):
            raise ListingRefused(f"tool {_shown(name)} has a name that is not ^[a-zA-Z0-9_-]{{1,64}}$")
        if any(k["name"] == name for k in kept):
            raise ListingRefused(f"tool {name!r} is listed twice")
        kept.append(t)
        if len(kept) == limits.max_tools:
            break
    schemas = [(f"tool {t['name']!r}", t.get("input_schema") or NO_PARAMETERS) for t in kept]
    try:  # one walk of them all, which stops at the first bound passed: its cost is the budget's, not the input's
        schema_budget.check(schemas, limits.budget)
    except schema_budget.TooComplex as exc:
        named = exc.message if exc.param in exc.message else f"{exc.message} (at {exc.param})"
        raise ListingRefused(f"{named} (input_schema)") from None
    out: list[dict[str, Any]] = []
    for t, (where, schema) in zip(kept, schemas, strict=True):
        try:
            constrain.check_schema(schema, where)
        except constrain.GrammarError:
            continue  # a schema that cannot constrain a call is not offered
        except RecursionError:  # within the depth budget this cannot happen; a listing still never poisons
            raise ListingRefused(f"{where} has a schema too deeply nested to check") from None
        out.append(t)
    return out
