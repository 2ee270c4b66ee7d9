"""The JS Agents SDK for a browser page: tests/e2e/jsweb's pinned packages installed with ``npm ci`` (under a
file lock, once per lock file), and its entry bundled for the browser by the pinned esbuild."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.node_clients import NodeSetupError, npm_ci

JSWEB = Path(__file__).resolve().parent / "jsweb"
BUNDLE_TIMEOUT_S = 120


class JsSetupError(Exception):
    pass


def _run(cmd: list[str], timeout_s: int) -> None:
    try:
        done = subprocess.run(cmd, cwd=JSWEB, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise JsSetupError(f"`{' '.join(cmd)}` in {JSWEB} ran past {timeout_s} s") from None
    if done.returncode != 0:
        raise JsSetupError(f"`{' '.join(cmd)}` in {JSWEB} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def ensure_installed() -> None:
    """tests/e2e/jsweb's pinned packages (``tests.e2e.node_clients.npm_ci``)."""
    try:
        npm_ci(JSWEB)
    except NodeSetupError as exc:
        raise JsSetupError(str(exc)) from None


def bundle(entry: str, out_dir: Path) -> Path:
    """``entry`` (a file of tests/e2e/jsweb) and everything it imports, as one ES module for the browser."""
    ensure_installed()
    out = out_dir / (Path(entry).stem + ".js")
    esbuild = JSWEB / "node_modules" / ".bin" / "esbuild"
    _run([str(esbuild), entry, "--bundle", "--format=esm", "--platform=browser", f"--outfile={out}"], BUNDLE_TIMEOUT_S)
    return out
