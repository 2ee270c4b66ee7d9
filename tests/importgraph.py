"""The import graph by layer: which layer imports which, any cycle, and every import that runs back up.

``python -m tests.importgraph`` prints the summary; ``tests/test_import_graph.py`` holds the rules.
"""

from __future__ import annotations

import sys
from collections import Counter

from tests.test_layering import _cycles, graph

# bottom to top: a module may import its own layer and the layers below it, never one above
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("processors", ("processors",)),
    ("models", ("models",)),
    (
        "gateway core",  # what every gateway room may use: settings, data holders, transport guards
        (
            "gateway.core",
            "gateway.voice.tts_queue",
            "gateway.voice.speech_budget",
            "gateway.tools.seats",  # counts open MCP connections per key: Services holds one
        ),
    ),
    # the voice pipeline (Whisper's queue, turn-taking, synthesis, pacing) serves Realtime, WebRTC, phones, HTTP
    ("gateway.voice", ("gateway.voice",)),
    # server-side tools (MCP) are part of the Realtime session they run in; their Chat Completions use sits with HTTP
    ("gateway.realtime", ("gateway.realtime", "gateway.tools")),
    ("gateway.http", ("gateway.http", "gateway.tools.chat")),
    ("gateway.cluster", ("gateway.cluster",)),
    ("wiring", ("gateway.wiring", "gateway")),  # gateway/wiring/ and the package's StreamOmni re-export
)


def layer_of(module: str) -> int:
    """Index in LAYERS of the most specific prefix that names ``module``."""
    best, best_len = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def edges() -> dict[str, set[str]]:
    """Module → the project modules it imports (at any depth, type-only imports included)."""
    g = graph()
    mods = set(g)
    return {m: {d for d in deps if d in mods and d != m} for m, deps in g.items()}


def back_up(e: dict[str, set[str]] | None = None) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a lower layer imports a higher one."""
    e = edges() if e is None else e
    return sorted((m, d) for m, deps in e.items() for d in deps if layer_of(d) > layer_of(m))


def summary() -> str:
    e = edges()
    names = [n for n, _ in LAYERS]
    count = Counter((layer_of(m), layer_of(d)) for m, deps in e.items() for d in deps)
    mods = Counter(layer_of(m) for m in e)
    lines = [f"{sum(mods.values())} modules, {sum(count.values())} imports between them", ""]
    lines.append("layer (bottom first)      modules   imports into: " + " · ".join(names))
    for i, n in enumerate(names):
        row = " · ".join(str(count.get((i, j), 0)) for j in range(len(names)))
        lines.append(f"{n:26}{mods.get(i, 0):7}   {row}")
    cycles = _cycles(e)
    lines += ["", f"cycles: {cycles or 'none'}"]
    up = back_up(e)
    lines.append(f"imports that run back up a layer: {len(up)}")
    lines += [f"  {m} ({names[layer_of(m)]}) → {d} ({names[layer_of(d)]})" for m, d in up]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(summary() + "\n")
