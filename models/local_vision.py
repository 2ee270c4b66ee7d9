"""Image understanding that ships offline: an ImageNet classifier and OCR on one image, on a thread that
yields the cores to decoding.

Every pass runs both models on one worker thread of its own, one pass at a time, so images never
take more than one core however many arrive together. That thread runs below the LLM's priority
(``models.cores.yield_to_decoding``) and lends it no core: a pass gets a whole core while nothing
decodes, and what the LLM's threads leave while a response streams. Lending a core the way a
Whisper pass does would put the LLM on one thread for as long as images keep coming: a text
session beside back-to-back photos kept 0.46× of its tokens/s that way (``bench vision``); a
listener waits on Whisper, an image only adds to a message.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from PIL import Image

from processors.vision_text import VisionReading, reading_order

from .cores import CORES, NICE, yield_to_decoding
from .image_classifier import ImageClassifier
from .ocr import TextReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VisionTimings:
    """Seconds each model took in one pass (``bench vision``, metrics)."""

    classify_s: float
    ocr_s: float


class LocalVision:
    def __init__(self, top_k: int = 5, ocr: bool = True, ocr_max_side: int = 1280, nice: int = NICE) -> None:
        self.top_k = top_k  # classes kept per image
        self.classifier = ImageClassifier()
        self.reader: TextReader | None = None
        if ocr:
            try:
                self.reader = TextReader(ocr_max_side)
            except (ImportError, OSError) as exc:  # OpenCV without libgl1 / libglib2.0-0: labels still work
                log.warning("image input reads no text: the OCR cannot load (%s); install libgl1 libglib2.0-0", exc)
        # one thread: one pass at a time, one core at most; niced for good, so it is this pool's alone.
        # nice 0: the pass runs at the LLM's priority and borrows a core from it, as a Whisper pass does
        self.nice = nice
        start = functools.partial(yield_to_decoding, nice)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="vision", initializer=start)
        self.last: VisionTimings | None = None  # the latest pass's timings

    def read(self, image: Image.Image) -> VisionReading:
        """Labels and text lines of an RGB image; blocks the caller (never the event loop) until its pass ran."""
        return self._worker.submit(self._pass, image).result()

    def _pass(self, image: Image.Image) -> VisionReading:
        with CORES.lend() if self.nice == 0 else contextlib.nullcontext():
            return self._models(image)

    def _models(self, image: Image.Image) -> VisionReading:
        t0 = time.perf_counter()
        labels = self.classifier.classify(image, self.top_k)
        t1 = time.perf_counter()
        lines = reading_order(self.reader.read(image)) if self.reader is not None else []
        self.last = VisionTimings(t1 - t0, time.perf_counter() - t1)
        return VisionReading(labels=labels, lines=tuple(lines))
