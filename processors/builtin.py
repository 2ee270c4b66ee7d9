"""The built-in processors of the registry (``processors.registry``): images and WAV audio.

They check and read files with the very functions inline data goes through
(``processors.image.decode_image``, ``processors.audio.decode_wav``), under the server's limits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .audio import AudioError, AudioLimits, decode_wav
from .image import MIME_TO_FORMAT, ImageError, ImageLimits, decode_image, to_data_url


class ImageProcessor:
    name: str = "image"
    mimes: tuple[str, ...] = tuple(MIME_TO_FORMAT)

    def __init__(self, limits: ImageLimits, describe: Callable[[str], str] | None):
        self.limits = limits
        self.describe = describe  # an image data URL → words (CLIP labels or a VLM caption); None: off

    def check(self, data: bytes, mime: str) -> None:
        decode_image(data, mime, self.limits)  # format, bombs, pixels: ImageError

    def to_text(self, data: bytes, mime: str) -> str:
        if self.describe is None:
            raise ImageError("unsupported_content", "image input is not enabled on this server (config: vision.mode)")
        return str(self.describe(to_data_url(data, mime)))


class WavProcessor:
    name: str = "audio"
    mimes: tuple[str, ...] = ("audio/wav", "audio/x-wav", "audio/wave")

    def __init__(self, limits: AudioLimits, transcribe: Callable[[np.ndarray], str] | None):
        self.limits = limits
        self.transcribe = transcribe  # float32 16 kHz clip → text (the gateway's shared queue); None: audio off

    def check(self, data: bytes, mime: str) -> None:
        decode_wav(data, self.limits)  # format, rate, seconds: AudioError

    def to_text(self, data: bytes, mime: str) -> str:
        if self.transcribe is None:
            raise AudioError("audio_disabled", "audio input is not enabled on this server")
        return self.transcribe(decode_wav(data, self.limits))
