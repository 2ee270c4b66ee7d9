"""The JS Agents SDK for a browser page: tests/e2e/jsweb's pinned packages installed with ``npm ci`` (under a
file lock, once per lock file), and its entry bundled for the browser by the pinned esbuild."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

JSWEB = Path(__file__).resolve().parent / "jsweb"
NODE, NPM = shutil.which("node"), shutil.which("npm")
INSTALL_TIMEOUT_S = 600  # a cold npm cache downloads ≈ 25 MB
BUNDLE_TIMEOUT_S = 120
_STAMP = JSWEB / "node_modules" / ".stream-omni-lock-sha256"  # the package-lock.json it was installed from


class JsSetupError(Exception):
    pass


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    with open(JSWEB / ".npm-install.lock", "w") as f:
        deadline = time.monotonic() + INSTALL_TIMEOUT_S + 60
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise JsSetupError(f"another test run held {f.name} too long") from None
                time.sleep(0.5)  # polling a lock another process holds (flock has no timeout)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(cmd: list[str], timeout_s: int) -> None:
    try:
        done = subprocess.run(cmd, cwd=JSWEB, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise JsSetupError(f"`{' '.join(cmd)}` in {JSWEB} ran past {timeout_s} s") from None
    if done.returncode != 0:
        raise JsSetupError(f"`{' '.join(cmd)}` in {JSWEB} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def ensure_installed() -> None:
    """``npm ci`` unless node_modules already holds exactly package-lock.json (needs the npm registry or a
    warm npm cache the first time)."""
    if NODE is None or NPM is None:
        raise JsSetupError("node and npm are not installed (Debian: apt-get install nodejs npm)")
    want = hashlib.sha256((JSWEB / "package-lock.json").read_bytes()).hexdigest()
    with _install_lock():
        if _STAMP.is_file() and _STAMP.read_text() == want:
            return
        _run([NPM, "ci", "--no-audit", "--no-fund", "--loglevel=error"], INSTALL_TIMEOUT_S)
        _STAMP.write_text(want)


def bundle(entry: str, out_dir: Path) -> Path:
    """``entry`` (a file of tests/e2e/jsweb) and everything it imports, as one ES module for the browser."""
    ensure_installed()
    out = out_dir / (Path(entry).stem + ".js")
    esbuild = JSWEB / "node_modules" / ".bin" / "esbuild"
    _run([str(esbuild), entry, "--bundle", "--format=esm", "--platform=browser", f"--outfile={out}"], BUNDLE_TIMEOUT_S)
    return out
