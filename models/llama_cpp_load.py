"""Opening llama.cpp: the GGUF file a config names, the library's import, and its log routed to ``logging``."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

from .llm import EMBEDDED_ID, ModelLoadError, embedded_gguf

log = logging.getLogger("models.llama_cpp")


def resolve_gguf(model: str, served_name: str | None) -> tuple[Path, str]:
    """(GGUF path, served name) of ``model``: "embedded" or a path to a .gguf file."""
    if model == "embedded":
        return embedded_gguf(), served_name or EMBEDDED_ID
    path = Path(model)
    if path.suffix != ".gguf" or not path.is_file():
        raise ModelLoadError(f"llama.cpp backend needs a .gguf file; not found: {model}")
    return path, served_name or path.stem


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelLoadError(f"llama.cpp backend unavailable ({exc}): `pip install llama-cpp-python==0.3.36`") from None
    return llama_cpp


_LOG_LEVELS = {3: logging.WARNING, 4: logging.ERROR}  # ggml: 1 debug, 2 info, 3 warn, 4 error
_log_callback: Any = None  # kept alive: llama.cpp holds the pointer


def quiet_llama_log(lc: Any) -> None:
    """Route llama.cpp's log to ``logging`` (warnings and errors only) instead of stderr."""
    global _log_callback
    if _log_callback is not None:
        return

    @lc.llama_log_callback
    def _cb(level: int, text: bytes, _user: Any) -> None:
        if level in _LOG_LEVELS:
            log.log(_LOG_LEVELS[level], "llama.cpp: %s", text.decode("utf-8", "replace").rstrip())

    _log_callback = _cb
    lc.llama_log_set(_cb, ctypes.c_void_p(0))
