"""Every module and every class has a name of its own: a newcomer who reads a name knows which one it is.

Module names are compared across the whole tree (tests included: pytest and an editor's search show the
file name alone); class names across the packages the product ships (``gateway``, ``models``,
``processors``, ``testkit``, ``bench``). ``__init__.py`` and ``conftest.py`` are the names Python and
pytest fix.
"""

from __future__ import annotations

import ast
import subprocess
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXED = {"__init__.py", "conftest.py"}
SHIPPED = ("gateway/", "models/", "processors/", "testkit/", "bench/")


def python_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split() if (ROOT / f).is_file()]


def same_module_names(paths: list[str]) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for p in paths:
        if Path(p).name not in FIXED:
            by_name[Path(p).name].append(p)
    return {n: ps for n, ps in by_name.items() if len(ps) > 1}


def same_class_names(sources: dict[str, str]) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path, src in sources.items():
        for node in ast.parse(src).body:
            if isinstance(node, ast.ClassDef):
                by_name[node.name].append(path)
    return {n: ps for n, ps in by_name.items() if len(ps) > 1}


def test_every_module_name_is_unique() -> None:
    files = python_files()
    assert len(files) > 300  # the scan sees the tree
    assert same_module_names(files) == {}


def test_every_shipped_class_name_is_unique() -> None:
    shipped = [f for f in python_files() if f.startswith(SHIPPED)]
    assert same_class_names({f: (ROOT / f).read_text() for f in shipped}) == {}


def test_the_scans_find_a_collision() -> None:
    assert same_module_names(["a/pacing.py", "b/pacing.py", "a/__init__.py", "b/__init__.py"]) == {
        "pacing.py": ["a/pacing.py", "b/pacing.py"]
    }
    srcs = {"a.py": "class Speculator:\n    pass\n", "b.py": "class Speculator: ...\nclass Other: ..."}
    assert same_class_names(srcs) == {"Speculator": ["a.py", "b.py"]}
