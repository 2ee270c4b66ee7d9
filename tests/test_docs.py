"""The docs against the code: every event, error code, close code, config key, module, endpoint and command
the code has is in the docs, and the generated blocks are current. Each failure says what to add, and where."""

from __future__ import annotations

import ast
import builtins
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docgen import BLOCKS, PACKAGES, ROOT, parsed, production_modules

PROTOCOL = ROOT / "docs" / "PROTOCOL.md"
README = ROOT / "README.md"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$|^[a-z]{4,}$")


def sources(*packages: str) -> Iterator[tuple[Path, ast.AST]]:
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT), parsed(path)


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def section(doc: Path, heading: str) -> str:
    """The text of the ``## …`` section whose heading contains ``heading``."""
    parts = re.split(r"^## ", doc.read_text(), flags=re.M)
    found = [p for p in parts if heading in p.split("\n", 1)[0]]
    assert found, f"{doc.relative_to(ROOT)} has no '## …{heading}…' section"
    return found[0]


def missing(names: dict[str, list[str]], text: str, pattern: str = r"`{}`") -> dict[str, list[str]]:
    """The names ``pattern`` (``{}``: the name) finds nowhere in ``text``, with where the code has them."""
    return {n: w for n, w in sorted(names.items()) if not re.search(pattern.format(re.escape(n)), text, re.M)}


def report(what: str, absent: dict[str, list[str]], where: str) -> str:
    lines = [f"{what} missing from the docs — {where}:"]
    lines += [f"  {name}   (from {', '.join(sorted(set(src))[:3])})" for name, src in absent.items()]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- Realtime events


def client_event_types() -> dict[str, list[str]]:
    """The ``type`` of every model in the ClientEvent union (gateway/realtime/protocol.py)."""
    from gateway.realtime import protocol

    union = typing.get_args(protocol.ClientEvent)[0]
    out: dict[str, list[str]] = {}
    for model in typing.get_args(union):
        for t in typing.get_args(model.model_fields["type"].annotation):
            out.setdefault(t, []).append(f"protocol.{model.__name__}")
    return out


def server_event_types() -> dict[str, list[str]]:
    """Every event type the gateway emits: the first argument of each ``_envelope("…", …)`` call, one in each
    builder of ``gateway/realtime/server_events.py`` (the only place server events are made)."""
    out: dict[str, list[str]] = {}
    for path, tree in sources("gateway"):
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and _callee(n) == "_envelope" and n.args and _str(n.args[0]):
                out.setdefault(_str(n.args[0]) or "", []).append(f"{path}:{n.lineno}")
    return out


def test_the_event_walks_see_the_events_every_session_has():
    assert {"session.update", "response.create", "response.cancel"} <= set(client_event_types())
    assert {"session.created", "response.done", "error", "response.output_text.delta"} <= set(server_event_types())


def test_every_client_event_type_is_documented():
    absent = missing(client_event_types(), section(PROTOCOL, "Client events"))
    assert not absent, report(
        "client event types", absent, "add a row for each to the table of docs/PROTOCOL.md §3 'Client events'"
    )


def test_every_server_event_type_is_documented():
    # a family may be documented in its own section (images: §10), so the whole document counts
    absent = missing(server_event_types(), PROTOCOL.read_text(), r"(?<![\w.]){}(?![\w.])")
    assert not absent, report(
        "server event types",
        absent,
        "add a row for each to the table of docs/PROTOCOL.md §4 'Server events' (fields and when it is sent)",
    )


# ---------------------------------------------------------------------------- error codes


def error_codes() -> dict[str, list[str]]:
    """Codes a client can receive, read from where errors are raised: ``SomethingError("code", …)``,
    ``ApiError(status, "code", …)``, ``error_event("code", …)`` / ``session.error("code", …)``,
    ``code="…"`` and ``{"code": "…"}``."""
    skip = set(dir(builtins))
    out: dict[str, list[str]] = {}
    for path, tree in sources(*PACKAGES):
        for n in ast.walk(tree):
            found: list[str] = []
            if isinstance(n, ast.Call) and _callee(n) not in skip:
                name = _callee(n)
                if re.search(r"(Error|Refused)$", name) or name in ("error_event", "error", "error_body"):
                    args = list(n.args)
                    if len(args) > 1 and isinstance(args[0], ast.Constant) and isinstance(args[0].value, int):
                        args = args[1:]  # ApiError(status, code, …)
                    code = _str(args[0]) if args else None
                    if code and SNAKE.match(code):
                        found.append(code)
                found += [c for kw in n.keywords if kw.arg in ("code", "error_code") and (c := _str(kw.value))]
            if isinstance(n, ast.Dict):
                pairs = zip(n.keys, n.values, strict=True)
                found += [c for k, v in pairs if k and _str(k) in ("code", "error_code") and (c := _str(v))]
            for c in found:
                out.setdefault(c, []).append(f"{path}:{getattr(n, 'lineno', 0)}")
    return out


def test_the_error_walk_sees_codes_of_each_kind():
    codes = set(error_codes())
    # a protocol error, an HTTP error, an input processor's, a Session.error, a model engine's
    assert {"invalid_event_type", "invalid_api_key", "invalid_base64", "response_cancel_not_active"} <= codes
    assert "engine_timeout" in codes


def test_every_error_code_is_documented():
    text = section(PROTOCOL, "Errors") + section(PROTOCOL, "HTTP API") + section(PROTOCOL, "How a response ends")
    absent = missing(error_codes(), text)
    assert not absent, report(
        "error codes",
        absent,
        "add each, in backticks, to docs/PROTOCOL.md: §12 'Errors' (a WebSocket error event), the HTTP errors "
        "table of §15 (with its status), or §7 (a response.done failure code)",
    )


def test_every_error_code_the_browser_has_words_for_is_one_the_server_sends():
    words = re.search(r"ERROR_WORDS = \{(.*?)\};", (ROOT / "web" / "views.js").read_text(), re.S)
    assert words
    keys = set(re.findall(r"^\s*([a-z_]+):", words.group(1), re.M))
    assert keys, "no ERROR_WORDS entries found in web/views.js"
    unknown = keys - set(error_codes())
    assert not unknown, f"web/views.js ERROR_WORDS names codes the server never sends: {sorted(unknown)}"


# ---------------------------------------------------------------------------- close codes


def close_codes() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(codes, reasons): the ``CLOSE_*`` constants of the gateway and the literals given to ``close``
    and ``kick`` (or to a ``Close`` decision, ``gateway.realtime.framegate``), and the literal reasons
    those calls send."""
    codes: dict[str, list[str]] = {}
    reasons: dict[str, list[str]] = {}
    for path, tree in sources("gateway"):
        consts: dict[str, int] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, int):
                for t in n.targets:
                    if isinstance(t, ast.Name) and t.id.startswith("CLOSE_"):
                        consts[t.id] = n.value.value
                        codes.setdefault(str(n.value.value), []).append(f"{path}:{n.lineno}")
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and _callee(n) in ("close", "kick", "Close") and len(n.args) >= 1:
                first = n.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, int) and first.value >= 1000:
                    codes.setdefault(str(first.value), []).append(f"{path}:{n.lineno}")
                is_code = (
                    isinstance(first, ast.Name)
                    and first.id.startswith("CLOSE_")
                    or (isinstance(first, ast.Constant) and isinstance(first.value, int))
                )
                if is_code and len(n.args) > 1 and (reason := _str(n.args[1])):
                    reasons.setdefault(reason, []).append(f"{path}:{n.lineno}")
    return codes, reasons


def test_the_close_walk_sees_the_codes_and_reasons_of_the_socket_loop():
    codes, reasons = close_codes()
    assert {"1000", "1008", "1009", "1013", "4009"} <= set(codes)
    assert {"message flood", "model not found"} <= set(reasons)


def test_every_close_code_and_reason_is_documented():
    table = section(PROTOCOL, "Close codes")
    codes, reasons = close_codes()
    absent = missing(codes, table, r"^\| {} \|") | missing(reasons, table)
    assert not absent, report(
        "close codes / reasons",
        absent,
        "add each to the table of docs/PROTOCOL.md §13 'Close codes' (a code as its row, a reason in backticks)",
    )


# ---------------------------------------------------------------------------- generated blocks


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_generated_blocks_are_current(block):
    now = block.current()
    assert now is not None, f"{block.doc.relative_to(ROOT)} lost its markers:\n{block.start}\n{block.end}"
    assert now == block.render(), (
        f"{block.doc.relative_to(ROOT)} ({block.name}) differs from the code: run `python -m tests.docgen` "
        "and commit the result"
    )


def test_every_config_key_is_in_the_operating_guide():
    from pydantic import BaseModel

    from gateway.core.config import Config
    from gateway.core.config_model import model_keys

    keys = []
    for section_name, info in Config.model_fields.items():
        cls = info.annotation
        if section_name == "model":  # one class per backend: every key of each
            keys += [f"model.{k}" for k in model_keys()]
        elif isinstance(cls, type) and issubclass(cls, BaseModel):
            keys += [f"{section_name}.{f}" for f in cls.model_fields]
        else:
            keys.append(section_name)
    where = ["gateway/core/config.py or gateway/core/config_model.py"]
    absent = missing({k: where for k in keys}, (ROOT / "docs" / "OPERATING.md").read_text())
    assert not absent, report("config keys", absent, "run `python -m tests.docgen` (docs/OPERATING.md reference)")


# ---------------------------------------------------------------------------- module maps


def layout_sections(text: str) -> dict[str, str]:
    """README "Layout" code block → {"gateway/realtime/": the text of its lines, …}. A line that starts
    with a path opens a section (``  realtime/`` indented under ``gateway/`` is gateway/realtime/);
    lines that start with spaces and no path continue it."""
    out: dict[str, str] = {}
    top = current = ""
    for line in text.splitlines():
        m = re.match(r"^(\s*)([\w.-]+/)([\w.]*)", line)
        if m and m.group(1) == "":
            top = current = m.group(2)
        elif m and not m.group(3):
            current = top + m.group(2)
        out[current] = out.get(current, "") + "\n" + line
    return out


def test_every_production_module_is_in_the_readme_layout():
    block = re.search(r"## Layout\n+```\n(.*?)```", README.read_text(), re.S)
    assert block, "README.md has no ## Layout code block"
    sections = layout_sections(block.group(1))
    absent = {}
    for path in production_modules():
        if path.name == "__init__.py":
            continue
        folder, stem = path.parent.as_posix() + "/", path.stem
        if not re.search(rf"(?<![\w/]){re.escape(stem)}(\.py)?(?![\w])", sections.get(folder, "")):
            absent[path.as_posix()] = [f"the `{folder}` lines"]
    assert not absent, report(
        "modules", absent, "README.md ## Layout: add each module's name to the lines of its folder (named in brackets)"
    )


def test_the_layout_reader_finds_a_name_only_in_its_own_folder():
    text = "gateway/    app.py · cli.py\n  realtime/ session · live\n            turns\nmodels/     engine.py"
    s = layout_sections(text)
    assert "turns" in s["gateway/realtime/"] and "app.py" in s["gateway/"] and "engine" not in s["gateway/"]


def test_every_production_module_has_a_docstring():
    bare = [str(p) for p in production_modules() if not ast.get_docstring(parsed(ROOT / p))]
    assert not bare, f"these modules need a one-line docstring saying what they are: {bare}"


_DOTTED = re.compile(r"``((?:gateway|models|processors|testkit|bench)(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")
_FOLDERS = "gateway|models|processors|testkit|bench|web|docs|configs|tests"
_PATHS = re.compile(rf"`((?:{_FOLDERS})/[\w/.-]+\.(?:py|js|md|yaml))`")


def dangling_names(doc: str) -> list[str]:
    """The ``gateway.x.y``-style names and `folder/file.py` paths a docstring cites that do not exist."""
    import importlib

    out = []
    for name in _DOTTED.findall(doc):
        parts, obj = name.split("."), None
        for i in range(len(parts), 0, -1):
            try:
                obj, rest = importlib.import_module(".".join(parts[:i])), parts[i:]
                break
            except ImportError:
                continue
        for attr in rest if obj is not None else []:
            obj = getattr(obj, attr, None)
        if obj is None:
            out.append(name)
    return out + [p for p in _PATHS.findall(doc) if not (ROOT / p).exists()]


def test_every_name_a_module_docstring_cites_exists():
    dangling = {}
    for path in production_modules():
        names = dangling_names(ast.get_docstring(parsed(ROOT / path)) or "")
        if names:
            dangling[path.as_posix()] = names
    assert not dangling, report("docstrings", dangling, "a module's docstring names what no longer exists there")


def test_the_docstring_check_tells_a_real_name_from_a_gone_one():
    doc = (
        "See ``gateway.realtime.replay.ReplayBuffer``, ``gateway.replay``, `gateway/wiring/app.py`, `gateway/gone.py`."
    )
    assert dangling_names(doc) == ["gateway.replay", "gateway/gone.py"]


# ---------------------------------------------------------------------------- endpoints and commands


def routes() -> list[tuple[str, set[str]]]:
    """(path pattern, methods) of every route of the app; a WebSocket route has method "WS"."""
    from starlette.routing import Mount, Route, WebSocketRoute

    from gateway.core.config import Config
    from gateway.wiring.app import create_app

    out: list[tuple[str, set[str]]] = []
    for r in create_app(Config()).routes:
        if isinstance(r, Route):
            out.append((r.path, set(r.methods or ())))
        elif isinstance(r, WebSocketRoute):
            out.append((r.path, {"WS", "GET"}))
        elif isinstance(r, Mount) and r.path == "":
            out.append(("/", {"GET"}))  # the browser client (web/); its own files are not endpoints
    return out


def _matches(pattern: str, path: str) -> bool:
    rx = "^" + re.sub(r"\\\{[^}]*\\\}", r"[^/]+", re.escape(pattern)) + "$"
    return re.match(rx, path) is not None


def readme_endpoints() -> set[tuple[str, str]]:
    """("GET", "/v1/models")-style pairs the README names; a path with no method is checked as any."""
    text = README.read_text()
    found = {(m, p) for m, p in re.findall(r"\b(GET|POST|DELETE|PUT|PATCH) (/[\w/{}<>.-]*)", text)}
    found |= {("", p) for p in re.findall(r"`(/v1/[\w/{}<>.-]*)(?:\?[^`]*)?`", text)}
    return {(m, re.sub(r"<[^>]*>|\{[^}]*\}", "x", p).rstrip(".")) for m, p in found}


def test_every_endpoint_the_readme_names_exists():
    table, named = routes(), readme_endpoints()
    assert any(p == "/v1/realtime" for p, _ in table)
    assert {("GET", "/v1/models"), ("POST", "/v1/chat/completions")} <= named  # the reader reads the README
    wrong = sorted(
        f"{m or '(any)'} {p}"
        for m, p in named
        if not any(_matches(pat, p) and (not m or m in methods) for pat, methods in table)
    )
    assert not wrong, f"README.md names endpoints the app does not serve (gateway/wiring/app.py routes): {wrong}"


def test_the_endpoint_matcher_tells_a_real_path_from_a_made_up_one():
    assert _matches("/v1/files/{file_id}/content", "/v1/files/x/content")
    assert not _matches("/v1/files/{file_id}/content", "/v1/files/x/bytes")


def test_every_stream_omni_command_in_the_docs_exists():
    from gateway.wiring.cli import bench_module, commands

    assert {"serve", "bench"} <= set(commands())
    wrong = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for cmd, arg in re.findall(r"`stream-omni (\w+)(?: ([\w-]+))?", doc.read_text()):
            if cmd not in commands():
                wrong.append(f"{doc.name}: stream-omni {cmd}")
            elif cmd == "bench" and arg and not (ROOT / (bench_module(arg).replace(".", "/") + ".py")).exists():
                wrong.append(f"{doc.name}: stream-omni bench {arg} (no bench/{arg}.py)")
    assert not wrong, f"commands the CLI does not have (gateway/wiring/cli.py commands(), bench/*.py): {wrong}"
