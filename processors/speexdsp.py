"""libspeexdsp's acoustic echo canceller (MDF adaptive filter + residual echo suppression), through ctypes.

libspeexdsp (Xiph, BSD-3-Clause) is the Debian package ``libspeexdsp1``; its C API has not changed since
2008, so a dozen ctypes declarations are the whole binding. The PyPI wrappers were no use: ``speexdsp``
is a 2018 sdist that needs swig, ``speexdsp-aec`` is the same ctypes calls under a proprietary licence,
``pyaec`` (a Rust port, no licence file in its wheel) cancelled less echo at twice the CPU here.

Shapes: ``cancel`` takes and returns int16 ``[frame]`` at the rate given to ``SpeexEcho``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import numpy as np

_SET_SAMPLING_RATE = 24  # SPEEX_ECHO_SET_SAMPLING_RATE
_PRE_SET_ECHO_STATE = 24  # SPEEX_PREPROCESS_SET_ECHO_STATE
_PRE_SET_DENOISE = 0  # SPEEX_PREPROCESS_SET_DENOISE
_PRE_SET_NOISE_SUPPRESS = 18  # SPEEX_PREPROCESS_SET_NOISE_SUPPRESS (dB, negative)
_I16P = ctypes.POINTER(ctypes.c_int16)


class SpeexUnavailable(RuntimeError):
    """libspeexdsp is not installed (Debian: ``apt-get install libspeexdsp1``)."""


@cache
def _lib() -> ctypes.CDLL:
    for name in ("libspeexdsp.so.1", ctypes.util.find_library("speexdsp")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        vp, i = ctypes.c_void_p, ctypes.c_int
        lib.speex_echo_state_init.restype = vp
        lib.speex_echo_state_init.argtypes = [i, i]
        lib.speex_echo_state_destroy.argtypes = [vp]
        lib.speex_echo_state_reset.argtypes = [vp]
        lib.speex_echo_ctl.argtypes = [vp, i, vp]
        lib.speex_echo_cancellation.argtypes = [vp, _I16P, _I16P, _I16P]
        lib.speex_preprocess_state_init.restype = vp
        lib.speex_preprocess_state_init.argtypes = [i, i]
        lib.speex_preprocess_state_destroy.argtypes = [vp]
        lib.speex_preprocess_ctl.argtypes = [vp, i, vp]
        lib.speex_preprocess_run.argtypes = [vp, _I16P]
        return lib
    raise SpeexUnavailable("libspeexdsp is not installed (Debian/Ubuntu: apt-get install libspeexdsp1)")


def available() -> bool:
    """Whether the echo canceller can run here."""
    try:
        _lib()
    except SpeexUnavailable:
        return False
    return True


class SpeexEcho:
    """One echo canceller: ``cancel(near, far)`` per frame, ``far`` being what was played ``near``'s time.

    The preprocessor runs behind the filter for its residual echo suppressor, which removes what the
    linear filter leaves while it converges (2-10 dB of cancellation in the first second of speech
    without it). Speex applies that suppression through its denoiser's gains, so the denoiser is on but
    capped at 1 dB: noise suppression proper is a separate stage.
    """

    def __init__(self, frame: int, tail: int, rate: int):
        lib = _lib()
        self.frame = frame
        self._lib = lib
        self._echo = lib.speex_echo_state_init(frame, tail)
        self._pre = lib.speex_preprocess_state_init(frame, rate)
        if not self._echo or not self._pre:
            self.close()
            raise SpeexUnavailable(f"speex could not make a canceller (frame {frame}, tail {tail}, rate {rate})")
        r = ctypes.c_int(rate)
        lib.speex_echo_ctl(self._echo, _SET_SAMPLING_RATE, ctypes.byref(r))
        on, cap = ctypes.c_int(1), ctypes.c_int(-1)
        lib.speex_preprocess_ctl(self._pre, _PRE_SET_DENOISE, ctypes.byref(on))
        lib.speex_preprocess_ctl(self._pre, _PRE_SET_NOISE_SUPPRESS, ctypes.byref(cap))
        lib.speex_preprocess_ctl(self._pre, _PRE_SET_ECHO_STATE, ctypes.c_void_p(self._echo))
        self._out: np.ndarray = np.empty(frame, dtype=np.int16)

    def cancel(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        """int16 ``[frame]`` microphone and reference → int16 ``[frame]`` with the echo removed (a copy)."""
        n = np.ascontiguousarray(near, dtype=np.int16)
        f = np.ascontiguousarray(far, dtype=np.int16)
        if len(n) != self.frame or len(f) != self.frame:
            raise ValueError(f"speex frames are {self.frame} samples, got {len(n)} and {len(f)}")
        out = self._out
        self._lib.speex_echo_cancellation(
            self._echo, n.ctypes.data_as(_I16P), f.ctypes.data_as(_I16P), out.ctypes.data_as(_I16P)
        )
        self._lib.speex_preprocess_run(self._pre, out.ctypes.data_as(_I16P))
        return out.copy()

    def reset(self) -> None:
        """Forget the learned echo path (the reference moved: a new delay)."""
        self._lib.speex_echo_state_reset(self._echo)

    def close(self) -> None:
        if getattr(self, "_pre", None):
            self._lib.speex_preprocess_state_destroy(self._pre)
            self._pre = None
        if getattr(self, "_echo", None):
            self._lib.speex_echo_state_destroy(self._echo)
            self._echo = None

    def __del__(self) -> None:
        self.close()
