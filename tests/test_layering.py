"""The dependency rule, read from the source: gateway → models, processors, never back; pure cores
import no I/O framework; no import cycles inside gateway/ (type-only imports count too)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.docgen import PACKAGES, ROOT, parsed

# modules that are pure logic: fed events, token ids and a clock, tested with integers and fakes
PURE = (
    "gateway.realtime.protocol",
    "gateway.realtime.session",
    "gateway.realtime.actions",
    "gateway.realtime.inputs",
    "gateway.realtime.response_flow",
    "gateway.realtime.image_output",
    "gateway.realtime.conversation",
    "gateway.realtime.responses",
    "gateway.realtime.replay",
    "gateway.realtime.ratelimit",
    "gateway.voice.turntaking",
    "gateway.voice.asr_queue",
    "gateway.realtime.transcription",
    "gateway.http.transcript_formats",
    "gateway.cluster.snapshot",
    "gateway.core.ephemeral_keys",
    "gateway.core.keylimits",
    "gateway.realtime.fixed_fields",
    "gateway.webrtc.webrtc_sdp",
    "gateway.webrtc.track_pacing",
    "models.scheduler",
)
IO_FRAMEWORKS = ("asyncio", "starlette", "uvicorn", "websockets", "torch", "redis")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (inside functions and ``if TYPE_CHECKING`` too)."""
    return set(_imports(path, path.stat().st_mtime_ns))


@functools.cache  # several tests walk the whole tree: walk each file once per version of it
def _imports(path: Path, _mtime_ns: int) -> frozenset[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)  # `from . import protocol`
    return frozenset(found)


def graph() -> dict[str, set[str]]:
    return {module_name(f): imports(f) for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")}


def test_models_and_processors_never_import_the_gateway():
    bad = {m: sorted(i for i in deps if i.split(".")[0] == "gateway") for m, deps in graph().items()}
    assert {m: d for m, d in bad.items() if d and not m.startswith("gateway")} == {}


def test_models_never_import_asyncio():
    bad = {m: deps & {"asyncio"} for m, deps in graph().items() if m.startswith("models")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_pure_cores_import_no_io_framework():
    g = graph()
    bad = {m: sorted(i for i in g[m] if i.split(".")[0] in IO_FRAMEWORKS) for m in PURE}
    assert {m: d for m, d in bad.items() if d} == {}


def test_gateway_has_no_import_cycle():
    g = graph()
    mods = {m for m in g if m.startswith("gateway")}
    edges = {m: {d for d in g[m] if d in mods and d != m} for m in mods}
    # a package's __init__ is not an edge target by itself: `from . import x` names the submodule
    cycles = _cycles(edges)
    assert cycles == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_a_cycle_and_a_back_import():
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert "gateway.realtime.protocol" in imports(ROOT / "gateway" / "realtime" / "session.py")
