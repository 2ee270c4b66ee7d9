"""G.711 µ-law and A-law codecs on numpy arrays (the telephone formats audio/pcmu and audio/pcma). Pure.

The same integer arithmetic as the ITU/Sun reference code that ``audioop`` used (removed from
Python 3.13): one byte per sample, 8 kHz on the wire. Vectorised so that a second of audio is a
handful of numpy operations, not 8000 Python calls.

Shapes: linear audio is int16 ``[n]``; encoded audio is uint8 ``[n]`` (or ``bytes`` of length n).
"""

from __future__ import annotations

import numpy as np

G711_RATE = 8_000  # both laws are defined at 8 kHz

_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # in the reference's 14-bit units
_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def ulaw_encode(pcm: np.ndarray) -> bytes:
    """int16 ``[n]`` → µ-law bytes (length n)."""
    x = np.asarray(pcm, dtype=np.int32) >> 2  # [n] 14-bit
    mask = np.where(x < 0, 0x7F, 0xFF)
    x = np.minimum(np.abs(x), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, x)  # [n] first segment whose end ≥ x
    mant = (x >> (np.minimum(seg, 7) + 1)) & 0x0F
    code = np.where(seg >= 8, 0x7F, (seg << 4) | mant) ^ mask
    return bytes(code.astype(np.uint8).tobytes())


def ulaw_decode(data: bytes) -> np.ndarray:
    """µ-law bytes → int16 ``[len(data)]``."""
    u = ~np.frombuffer(data, dtype=np.uint8).astype(np.int32) & 0xFF  # [n]
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    out: np.ndarray = np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)
    return out


def alaw_encode(pcm: np.ndarray) -> bytes:
    """int16 ``[n]`` → A-law bytes (length n)."""
    x = np.asarray(pcm, dtype=np.int32) >> 3  # [n] 13-bit
    neg = x < 0
    mask = np.where(neg, 0x55, 0xD5)
    x = np.where(neg, -x - 1, x)
    seg = np.searchsorted(_ALAW_SEG_END, x)  # [n]
    shift = np.where(seg < 2, 1, np.minimum(seg, 7))
    code = np.where(seg >= 8, 0x7F, (seg << 4) | ((x >> shift) & 0x0F)) ^ mask
    return bytes(code.astype(np.uint8).tobytes())


def alaw_decode(data: bytes) -> np.ndarray:
    """A-law bytes → int16 ``[len(data)]``."""
    a = np.frombuffer(data, dtype=np.uint8).astype(np.int32) ^ 0x55  # [n]
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    t = np.where(seg == 0, t + 8, t + 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    out: np.ndarray = np.where(a & 0x80, t, -t).astype(np.int16)
    return out
