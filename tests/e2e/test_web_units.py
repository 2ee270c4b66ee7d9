"""Unit tests of web/'s ES modules, run in real headless Chromium (Debian's, driven by Playwright).

Each suite is ``web/tests/<suite>.test.js``; ``web/tests/index.html?suite=<suite>`` runs it with
the small harness in ``web/tests/harness.js`` and leaves the results in ``window.__unit``. Every JS
case is one pytest test here (its name read from the suite's source), so a failed JS assertion
fails exactly that test with the assertion's message. The page is served by Playwright's request
routing straight from web/ (no server, no port); a person can also open it from any server that
serves web/, e.g. http://127.0.0.1:8000/tests/index.html?suite=markdown.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.browser_fixtures import CHROMIUM, CHROMIUM_ARGS, requires_browser

pytestmark = requires_browser

WEB = Path(__file__).resolve().parents[2] / "web"
ORIGIN = "http://web.test"  # never resolved: every request to it is answered from web/ below
SUITES = ("markdown", "protocol", "voice")
# test("name", ...) at the start of a line. A name with a quote or backslash in it would be
# misread: test_suite_runs_every_case_cleanly then fails, naming it.
_CASE = re.compile(r'^test\(\s*"([^"\\]*)"', re.MULTILINE)


def js_case_names(source: str) -> list[str]:
    return _CASE.findall(source)


def suite_cases(suite: str) -> list[str]:
    return js_case_names((WEB / "tests" / f"{suite}.test.js").read_text(encoding="utf-8"))


@dataclass
class SuiteRun:
    results: dict[str, dict[str, Any]]  # case name → {name, ok, message}
    order: list[str]
    error: str | None  # the suite could not load or run at all
    page_errors: list[str]
    console_errors: list[str]


def _serve_web(extra: dict[str, str]) -> Callable[[Any], None]:
    """A Playwright route handler answering ORIGIN/<path> with web/<path> (or ``extra[path]``)."""

    def handle(route: Any) -> None:
        path = urlsplit(route.request.url).path.lstrip("/")
        if path in extra:
            route.fulfill(status=200, body=extra[path], content_type="text/javascript")
            return
        file = (WEB / path).resolve()
        if not file.is_relative_to(WEB) or not file.is_file():
            route.fulfill(status=404, body="not found")
            return
        kind = "text/javascript" if file.suffix == ".js" else mimetypes.guess_type(file.name)[0]
        route.fulfill(status=200, body=file.read_bytes(), content_type=kind or "application/octet-stream")

    return handle


def run_suite(browser: Any, suite: str, extra: dict[str, str] | None = None) -> SuiteRun:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page_errors: list[str] = []
        console_errors: list[str] = []
        page.on("pageerror", lambda e: page_errors.append(str(e)))
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        page.route(f"{ORIGIN}/**", _serve_web(extra or {}))
        page.goto(f"{ORIGIN}/tests/index.html?suite={suite}")
        try:
            # the harness bounds each case (5 s by default); this bounds a page that never starts
            page.wait_for_function("window.__unit && window.__unit.done", timeout=60_000)
        except Exception as e:  # a timeout: every case of the suite fails with this, not a hang
            return SuiteRun({}, [], f"the suite did not finish: {e}", page_errors, console_errors)
        unit = page.evaluate("window.__unit")
        results = {r["name"]: r for r in unit["results"]}
        return SuiteRun(results, [r["name"] for r in unit["results"]], unit["error"], page_errors, console_errors)
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def suite_run(browser: Any) -> Callable[[str], SuiteRun]:
    """suite_run(name) → that suite's results; each suite runs once per module."""
    runs: dict[str, SuiteRun] = {}

    def get(suite: str) -> SuiteRun:
        if suite not in runs:
            runs[suite] = run_suite(browser, suite)
        return runs[suite]

    return get


@pytest.mark.parametrize(
    ("suite", "case"),
    [pytest.param(s, c, id=f"{s}: {c}") for s in SUITES for c in suite_cases(s)],
)
def test_js(suite_run: Callable[[str], SuiteRun], suite: str, case: str) -> None:
    run = suite_run(suite)
    assert run.error is None, f"web/tests/{suite}.test.js did not run: {run.error}"
    assert case in run.results, f"{case!r} was not reported by the page (reported: {run.order})"
    result = run.results[case]
    assert result["ok"], f"web/tests/{suite}.test.js: {case}\n{result['message']}"


@pytest.mark.parametrize("suite", SUITES)
def test_suite_runs_every_case_cleanly(suite_run: Callable[[str], SuiteRun], suite: str) -> None:
    """The page ran exactly the cases pytest expected (none skipped, none unknown to pytest), and
    nothing threw outside a case."""
    run = suite_run(suite)
    assert run.error is None, run.error
    assert run.order == suite_cases(suite)
    assert run.page_errors == []
    assert run.console_errors == []


HARNESS_CHECK = """
import { assert, equal, test } from "./harness.js";
test("passes", () => equal({ a: [1, 2] }, { a: [1, 2] }));
test("fails on inequality", () => equal([1, 2], [1, 3], "the list"));
test("fails on a falsy assert", () => assert(0 === 1, "zero is not one"));
test("fails when an async case rejects", async () => { await null; throw new Error("late"); });
test("fails when a case never ends", () => new Promise(() => {}), 200);
test("objects with other keys differ", () => equal({ a: 1 }, { a: 1, b: undefined }));
"""


def test_harness_reports_each_failure_with_its_message(browser: Any) -> None:
    """The harness itself: a failing assertion, a rejection and a stall each fail their case."""
    assert js_case_names(HARNESS_CHECK) == [
        "passes",
        "fails on inequality",
        "fails on a falsy assert",
        "fails when an async case rejects",
        "fails when a case never ends",
        "objects with other keys differ",
    ]
    run = run_suite(browser, "harness-check", extra={"tests/harness-check.test.js": HARNESS_CHECK})
    assert run.error is None, run.error
    ok = {name: r["ok"] for name, r in run.results.items()}
    assert ok == {
        "passes": True,
        "fails on inequality": False,
        "fails on a falsy assert": False,
        "fails when an async case rejects": False,
        "fails when a case never ends": False,
        "objects with other keys differ": False,
    }
    message = {name: r["message"] for name, r in run.results.items()}
    assert "the list: expected [1,3], got [1,2]" in message["fails on inequality"]
    assert "zero is not one" in message["fails on a falsy assert"]
    assert "Error: late" in message["fails when an async case rejects"]
    assert "still running after 200 ms" in message["fails when a case never ends"]
    assert '{"a":1,"b":"<undefined>"}' in message["objects with other keys differ"]


def test_a_suite_that_cannot_load_is_an_error_not_a_pass(browser: Any) -> None:
    run = run_suite(browser, "no-such-suite")
    assert run.results == {}
    assert run.error is not None and "no-such-suite.test.js" in run.error
