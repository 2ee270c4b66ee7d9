"""The shells reach the sans-I/O ``Session`` through its one door (``handle``) and read-only queries only.

An AST scan of every shell module: no attribute of the session outside the allowed set, no ``_private``
member of the session or of the ``LiveSession`` the tools runner and the calls drive. The scan is tested
on sources that break the rule, so a scanner that finds nothing fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELLS = [
    "gateway/realtime/live_session.py",
    "gateway/realtime/connection.py",
    "gateway/realtime/media.py",
    "gateway/realtime/spoken_turns.py",
    "gateway/realtime/key_binding.py",
    "gateway/realtime/timing.py",
    "gateway/tools/runner.py",
    "gateway/cluster/snapshot.py",  # restoring a snapshot is an input too (Restored)
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gateway/webrtc").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gateway/telephony").glob("*.py")),
]
# the door, and what a shell may read (reads only: nothing of the session is assigned from outside)
QUERIES = {"id", "options", "response", "session_view", "preview_response", "mcp", "has_item", "audio_track"}
QUERIES |= {"locked", "conversation"}  # what a cluster snapshot reads (its writes go through the door: Restored)
# the turn-latency record joins response.done's metrics through this hook, set once when the session is wired
HOOKS = {"finish_hook"}
LIVE = {"live", "host"}  # names a shell gives the LiveSession it drives


def _is_session(node: ast.expr, typed: set[str]) -> bool:
    """``self.session``, ``live.session``, ``self.live.session``, or a parameter annotated ``Session``."""
    if isinstance(node, ast.Name):
        return node.id in typed
    if not (isinstance(node, ast.Attribute) and node.attr == "session"):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id in {"self", *LIVE}) or (
        isinstance(owner, ast.Attribute) and owner.attr in LIVE
    )


def _is_live(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in LIVE) or (
        isinstance(node, ast.Attribute) and node.attr in LIVE and isinstance(node.value, ast.Name)
    )


def violations(source: str, where: str = "<src>") -> list[str]:
    """Every use of the session outside the door and its queries, and every private member touched."""
    tree = ast.parse(source)
    found: list[str] = []
    stored = {id(t) for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AugAssign) for t in _targets(n)}
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)] or [tree]:
        typed = {
            a.arg
            for a in (fn.args.args + fn.args.kwonlyargs if not isinstance(fn, ast.Module) else [])
            if isinstance(a.annotation, ast.Name) and a.annotation.id == "Session"
        }
        for node in ast.walk(fn):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            private = name.startswith("_") and not name.startswith("__")
            if _is_session(node.value, typed):
                writes = id(node) in stored and name not in HOOKS
                if private or writes or name not in {"handle", *QUERIES, *HOOKS}:
                    found.append(f"{where}:{node.lineno} session.{name}")
            elif private and _is_live(node.value):
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return sorted(set(found))


def _targets(node: ast.Assign | ast.AugAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def test_the_shells_use_only_the_door_and_read_only_queries():
    found = [v for path in SHELLS for v in violations((ROOT / path).read_text(), path)]
    assert found == []


def test_the_scan_sees_the_shells_use_the_door():
    doors = 0
    for path in SHELLS:
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "handle" and _is_session(node.value, set()):
                doors += 1
    assert doors >= 30  # live_session, media, the calls and the runner all go through it


@pytest.mark.parametrize(
    "source",
    [
        "def f(self):\n    self.session._held = None\n",
        "def f(self):\n    self.live.session.on_chunk('r', 'x')\n",
        "def f(live):\n    live.send(live.session.truncate_heard('i', 5))\n",
        "def f(self):\n    self.host._create_response(None)\n",
        "def f(s: Session):\n    s.limiter = None\n",
        "def f(live):\n    live.session.audio_track = True\n",
        "def f(self):\n    self.session.options = None\n",
    ],
)
def test_the_scan_catches_a_window_into_the_core(source):
    assert violations(source) != []


def test_the_scan_lets_the_door_and_queries_through():
    source = (
        "def f(self, live):\n"
        "    self.send(self.session.handle(x))\n"
        "    r = live.session.response\n"
        "    v = self.live.session.session_view()\n"
        "    ev.session.model_fields_set\n"  # a session.update's options: not the session
    )
    assert violations(source) == []
