"""The parts of the docs written from the code: the config reference and the module map.

``python -m tests.docgen`` rewrites each generated block in place (between its two markers);
``tests/test_docs.py`` fails while a block differs from what this module writes.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import sys
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "models", "processors")


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per version of the file: the docs, layering and import-graph
    tests each walk the whole tree."""
    return _parse(path, path.stat().st_mtime_ns)


@functools.cache  # read only by its callers
def _parse(path: Path, _mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


class Block(typing.NamedTuple):
    doc: Path
    name: str  # in the markers: <!-- generated: NAME (python -m tests.docgen) --> … <!-- end: NAME -->
    render: typing.Callable[[], str]

    @property
    def start(self) -> str:
        return f"<!-- generated: {self.name} (python -m tests.docgen; do not edit by hand) -->"

    @property
    def end(self) -> str:
        return f"<!-- end: {self.name} -->"

    def current(self) -> str | None:
        """The block as the doc holds it now (None when its markers are missing)."""
        text = self.doc.read_text()
        i, j = text.find(self.start), text.find(self.end)
        if i < 0 or j < i:
            return None
        return text[i + len(self.start) : j].strip("\n")

    def write(self) -> bool:
        text = self.doc.read_text()
        i, j = text.find(self.start), text.find(self.end)
        if i < 0 or j < i:
            raise SystemExit(f"{self.doc.relative_to(ROOT)}: add the two marker lines first:\n{self.start}\n{self.end}")
        new = text[: i + len(self.start)] + "\n" + self.render() + "\n" + text[j:]
        if new != text:
            self.doc.write_text(new)
        return new != text


# ---------------------------------------------------------------------------- config reference


def _comments(source: str) -> dict[int, str]:
    """Line number → the text of the comment on that line."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


CONFIG_SOURCES = tuple(ROOT / "gateway" / "core" / f for f in ("config.py", "config_model.py", "config_calls.py"))


def field_comments(paths: tuple[Path, ...] = CONFIG_SOURCES) -> dict[tuple[str, str], str]:
    """(class name, field name) → its comment: the one after it on its line, else the comment lines
    right above it (the house rule of gateway/core/config.py and config_model.py: one comment per field)."""
    out: dict[tuple[str, str], str] = {}
    for path in paths:
        out.update(_field_comments(path))
    return out


def _field_comments(path: Path) -> dict[tuple[str, str], str]:
    source = path.read_text()
    lines = source.splitlines()
    comments = _comments(source)
    out: dict[tuple[str, str], str] = {}
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            text = comments.get(node.end_lineno or node.lineno, "")
            if not text:
                above: list[str] = []
                n = node.lineno - 1
                while n >= 1 and lines[n - 1].strip().startswith("#"):
                    above.insert(0, comments[n])
                    n -= 1
                text = " ".join(above)
            out[(cls.name, node.target.id)] = text
    return out


def _members(ann: Any) -> list[Any]:
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return list(typing.get_args(ann))
    return [ann]


def _base(ann: Any) -> Any:
    return typing.get_args(ann)[0] if typing.get_origin(ann) is typing.Annotated else ann


def _number(v: Any, in_bytes: bool = False) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        v = int(v)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if in_bytes and isinstance(v, int) and v >= size and v % size == 0:
            return f"{v // size} {unit}"
    return str(v)


def _allowed(info: Any, in_bytes: bool = False) -> str:
    """What a key accepts: its choices, its type, and its bounds."""
    metas = list(info.metadata)
    kinds: list[str] = []
    for m in _members(info.annotation):
        if typing.get_origin(m) is typing.Annotated:
            for a in m.__metadata__:
                metas += getattr(a, "metadata", [a])
        m = _base(m)
        if m is type(None):
            kinds.append("null")
        elif typing.get_origin(m) is typing.Literal:
            kinds.append(" | ".join(str(a) for a in typing.get_args(m)))
        elif typing.get_origin(m) is tuple:
            kinds.append("list of " + getattr(typing.get_args(m)[0], "__name__", "str"))
        elif typing.get_origin(m) is list:
            kinds.append("list of " + getattr(typing.get_args(m)[0], "__name__", "str"))
        elif typing.get_origin(m) is dict:
            kinds.append("mapping")
        else:
            kinds.append(getattr(m, "__name__", str(m)))
    lo = next((("≥", m.ge) for m in metas if hasattr(m, "ge")), None) or next(
        (("&gt;", m.gt) for m in metas if hasattr(m, "gt")), None
    )
    hi = next((("≤", m.le) for m in metas if hasattr(m, "le")), None) or next(
        (("&lt;", m.lt) for m in metas if hasattr(m, "lt")), None
    )
    bounds = ", ".join(f"{b[0]} {_number(b[1], in_bytes)}" for b in (lo, hi) if b)
    text = " or ".join(kinds)
    return f"{text}, {bounds}" if bounds else text


def _default(info: Any, in_bytes: bool = False) -> str:
    if info.is_required():
        return "required"
    v = info.default
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int | float):
        return _number(v, in_bytes)
    if isinstance(v, tuple | list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{}" if not v else str(v)
    return str(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _inherited(comments: dict[tuple[str, str], str], cls: type, name: str) -> str:
    """The comment of ``name`` where ``cls`` or the nearest base declaring it has it."""
    return next((comments[(k.__name__, name)] for k in cls.__mro__ if (k.__name__, name) in comments), "")


def model_reference(comments: dict[tuple[str, str], str]) -> list[str]:
    """The ``model:`` table: one class per backend, so each key also says which backends take it."""
    import gateway.core.config_model as cm

    doc = " ".join((cm.__doc__ or "").split("\n\n")[0].split())
    out = [f"**`model:`** {_cell(doc)}", ""]
    out += ["| key | backends | default | accepts | what it does |", "|---|---|---|---|---|"]
    every = tuple(cm.MODEL_SECTIONS)
    for name, backends in cm.model_keys().items():
        cls = cm.MODEL_SECTIONS[backends[0]]
        f = cls.model_fields[name]
        note = _inherited(comments, cls, name)
        if name == "backend":
            where, default, accepts = "all", "auto", " \\| ".join(every)
        else:
            where = "all" if backends == every else ", ".join(backends)
            default, accepts = _default(f), _cell(_allowed(f))
        out.append(f"| `model.{name}` | {where} | `{default}` | {accepts} | {_cell(note)} |")
    return [*out, ""]


def config_reference() -> str:
    """One table per config section: key, default, what it accepts, and its comment in gateway/core/config.py."""
    from pydantic import BaseModel

    from gateway.core.config import Config

    comments = field_comments()
    out: list[str] = []
    top: list[str] = []
    for section, info in Config.model_fields.items():
        if section == "model":  # a union on model.backend, not one class
            out += model_reference(comments)
            continue
        cls = _base(info.annotation)
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            note = comments.get(("Config", section), "")
            top.append(f"| `{section}` | `{_default(info)}` | {_cell(_allowed(info))} | {_cell(note)} |")
            continue
        doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split())
        out += [f"**`{section}:`** {_cell(doc)}".rstrip(), ""]
        out += ["| key | default | accepts | what it does |", "|---|---|---|---|"]
        for name, f in cls.model_fields.items():
            note = comments.get((cls.__name__, name), "")
            size = "bytes" in name
            out.append(f"| `{section}.{name}` | `{_default(f, size)}` | {_cell(_allowed(f, size))} | {_cell(note)} |")
        out.append("")
    if top:
        out += ["**Top level**", "", "| key | default | accepts | what it does |", "|---|---|---|---|", *top, ""]
    return "\n".join(out).rstrip()


# ---------------------------------------------------------------------------- module map


def production_modules() -> list[Path]:
    """Every module of the installed code (``__init__.py`` of a package counts when it has code)."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "__init__.py" and not ast.get_docstring(parsed(path)):
                continue
            out.append(path.relative_to(ROOT))
    return out


def summary(path: Path) -> str:
    """A module's docstring, first sentence (the house rule: every module opens with one)."""
    doc = ast.get_docstring(parsed(ROOT / path)) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    m = re.match(r"(.+?[.!?])(\s|$)", para)
    return m.group(1) if m else para


def module_map() -> str:
    """The table of where things live: every production module with the first sentence of its docstring."""
    out = ["| module | what it is (its docstring) |", "|---|---|"]
    for path in production_modules():
        out.append(f"| `{path.as_posix()}` | {_cell(summary(path))} |")
    return "\n".join(out)


BLOCKS = (
    Block(ROOT / "docs" / "OPERATING.md", "config reference", config_reference),
    Block(ROOT / "docs" / "ARCHITECTURE.md", "module map", module_map),
)


def main() -> int:
    for block in BLOCKS:
        changed = block.write()
        print(f"{block.doc.relative_to(ROOT)} ({block.name}): {'rewritten' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
