"""Renders the chart in deploy/helm without the helm binary: the subset of Helm's templates it uses.

Supported, as Helm means them: ``{{ .Values.a.b }}``, ``.Release.Name``, ``.Chart.*``; the pipes
``quote``, ``toYaml X | nindent N``; ``if X`` / ``if not X`` / ``else`` / ``end`` (nested); ``{{-`` and
``-}}`` trimming. Anything else is an error, so a template outside the subset fails the test instead
of rendering wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

TAG = re.compile(r"{{(-?)\s*(.*?)\s*(-?)}}", re.S)


def _lookup(path: str, ctx: dict[str, Any]) -> Any:
    if not path.startswith("."):
        raise ValueError(f"not a value reference: {path!r}")
    value: Any = ctx
    for part in path[1:].split("."):
        if not isinstance(value, dict) or part not in value:
            return None  # Helm renders a missing value as empty
        value = value[part]
    return value


def _truthy(v: Any) -> bool:
    return v not in (None, False, 0, "", [], {})


def _expr(expr: str, ctx: dict[str, Any]) -> str:
    stages = [s.strip() for s in expr.split("|")]
    head = stages[0]
    if head.startswith("toYaml "):
        value: Any = yaml.safe_dump(_lookup(head[7:].strip(), ctx), sort_keys=False).rstrip("\n")
    else:
        value = _lookup(head, ctx)
    for stage in stages[1:]:
        if stage == "quote":
            value = json.dumps("" if value is None else str(value))
        elif stage.startswith("nindent "):
            pad = " " * int(stage.split()[1])
            value = "\n" + "\n".join(pad + line if line else line for line in str(value).split("\n"))
        else:
            raise ValueError(f"unsupported pipe: {stage!r}")
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_text(text: str, ctx: dict[str, Any]) -> str:
    pieces: list[tuple[str, str]] = []  # ("text", s) | ("tag", expr)
    pos = 0
    for m in TAG.finditer(text):
        before = text[pos : m.start()]
        if m.group(1):
            before = before.rstrip()
        pieces.append(("text", before))
        pieces.append(("tag", m.group(2)))
        pos = m.end()
        if m.group(3):
            rest = text[pos:]
            pos += len(rest) - len(rest.lstrip())
    pieces.append(("text", text[pos:]))
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch emits, the enclosing block emits)
    emitting = True
    for kind, s in pieces:
        if kind == "text":
            if emitting:
                out.append(s)
            continue
        if s.startswith("if "):
            cond = s[3:].strip()
            neg = cond.startswith("not ")
            value = _truthy(_lookup(cond[4:].strip() if neg else cond, ctx))
            stack.append((value != neg, emitting))
            emitting = emitting and (value != neg)
        elif s == "else":
            branch, outer = stack[-1]
            stack[-1] = (not branch, outer)
            emitting = outer and not branch
        elif s == "end":
            _, emitting = stack.pop()
        elif s.startswith("#") or s.startswith("/*"):
            continue
        elif emitting:
            out.append(_expr(s, ctx))
    if stack:
        raise ValueError("an if without its end")
    return "".join(out)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render(chart: Path, release: str = "so", values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every manifest the chart renders with its values.yaml overlaid by ``values`` (as ``helm template``)."""
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    merged = _merge(yaml.safe_load((chart / "values.yaml").read_text()), values or {})
    ctx = {
        "Values": merged,
        "Release": {"Name": release, "Namespace": "default"},
        "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]},
    }
    docs = []
    for path in sorted((chart / "templates").glob("*.yaml")):
        for doc in yaml.safe_load_all(render_text(path.read_text(), ctx)):
            if doc:
                docs.append(doc)
    return docs
