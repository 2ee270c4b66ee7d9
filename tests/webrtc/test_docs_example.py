"""The Python example in docs/WEBRTC.md runs as written against a real server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "WEBRTC.md"


def test_the_documented_python_client_gets_a_reply(tiny_backend, server_factory):
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    with server_factory(tiny_backend, **{"audio.enabled": False, "session.max_output_tokens": 8}) as addr:
        script = code.group(1).replace("127.0.0.1:8000", addr)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert re.search(r"\[response\.done\] (completed|incomplete)", run.stdout), run.stdout
