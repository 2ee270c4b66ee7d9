"""Node.js for the JS client tests: the pinned packages of tests/e2e/js, installed once with ``npm ci``
(under a file lock, so parallel test runs share one install), and scenario scripts run with a timeout."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"
NODE, NPM = shutil.which("node"), shutil.which("npm")
MIN_NODE = 18  # passes on Debian bookworm's 18.20 and on 20.20 (openai 7 declares >=22: docs/COMPATIBILITY.md)
INSTALL_TIMEOUT_S = 600  # a cold npm cache downloads ≈ 25 MB
LOCK_TIMEOUT_S = INSTALL_TIMEOUT_S + 60  # another run's install, then ours


class NodeSetupError(Exception):
    pass


@contextlib.contextmanager
def _install_lock(folder: Path) -> Iterator[None]:
    with open(folder / ".npm-install.lock", "w") as f:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeSetupError(f"another test run held {f.name} for {LOCK_TIMEOUT_S} s") from None
                time.sleep(0.5)  # polling a lock another process holds (flock has no timeout)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def npm_ci(folder: Path) -> None:
    """``npm ci`` in ``folder`` unless its node_modules already holds exactly its package-lock.json (under a file
    lock, so parallel test runs share one install; needs the npm registry or a warm npm cache the first time)."""
    if NODE is None or NPM is None:
        raise NodeSetupError("node and npm are not installed (Debian: apt-get install nodejs npm)")
    want = hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()
    stamp = folder / "node_modules" / ".stream-omni-lock-sha256"  # the package-lock.json it was installed from
    with _install_lock(folder):
        if stamp.is_file() and stamp.read_text() == want:
            return
        cmd = [NPM, "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        try:
            done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise NodeSetupError(f"`{' '.join(cmd)}` in {folder} ran past {INSTALL_TIMEOUT_S} s") from None
        if done.returncode != 0:
            raise NodeSetupError(
                f"`{' '.join(cmd)}` in {folder} failed ({done.returncode}): it needs the npm registry "
                f"(or a warm npm cache):\n{done.stderr[-3000:]}"
            )
        stamp.write_text(want)


def node_major() -> int:
    assert NODE is not None
    out = subprocess.run([NODE, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    match = re.match(r"v(\d+)\.", out.strip())
    if not match:
        raise NodeSetupError(f"cannot read the version of {NODE}: {out!r}")
    return int(match.group(1))


def ensure_installed() -> Path:
    """tests/e2e/js with its pinned packages installed (``npm_ci``), on a Node new enough for them."""
    if NODE is not None and (major := node_major()) < MIN_NODE:
        raise NodeSetupError(f"{NODE} is Node {major}; the JS client tests need Node >= {MIN_NODE}")
    npm_ci(JS_DIR)
    return JS_DIR


def run_scenario(
    script: str, *args: str, timeout_s: float = 120, env: dict[str, str] | None = None, ok: bool = True
) -> Any:
    """Run ``node js/<script> <args>`` and return the JSON report it prints; fail on a crash or a hang,
    and (unless ``ok`` is false: a scenario expected to fail) on a report that says it failed."""
    assert NODE is not None
    # the script ends itself (with a report) a little before the hard limit
    full_env = {**os.environ, "SCENARIO_TIMEOUT_MS": str(int((timeout_s - 10) * 1000)), **(env or {})}
    try:
        done = subprocess.run(
            [NODE, script, *args], cwd=JS_DIR, capture_output=True, text=True, timeout=timeout_s, env=full_env
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr or b""
        tail = (err.decode(errors="replace") if isinstance(err, bytes) else err)[-3000:]
        raise AssertionError(f"node {script} {' '.join(args)} hung past {timeout_s} s; stderr:\n{tail}") from None
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(
            f"node {script} exited {done.returncode} without a report:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        ) from None
    if ok:
        assert done.returncode == 0 and "failure" not in report, (report.get("failure"), report, done.stderr[-3000:])
    return report


@pytest.fixture(scope="session")
def js_clients() -> Path:
    """tests/e2e/js with its pinned node_modules; skipped without node/npm locally, a failure in CI."""
    try:
        return ensure_installed()
    except NodeSetupError as exc:
        if NODE is None or NPM is None:
            if not os.environ.get("CI"):
                pytest.skip(str(exc))
        pytest.fail(str(exc), pytrace=False)
