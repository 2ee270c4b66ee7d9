"""Image understanding that ships offline: an ImageNet classifier and OCR on one image, holding one core.

One pass runs both models on the calling thread (a worker, never the event loop) while it lends
a core away from the LLM (``models.cores``), as a Whisper pass does; passes run one at a time, so
images never take more than that one core however many arrive together.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from PIL import Image

from processors.vision_text import VisionReading, reading_order

from .cores import CORES
from .image_classifier import ImageClassifier
from .ocr import TextReader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VisionTimings:
    """Seconds each model took in one pass (``bench vision``, metrics)."""

    classify_s: float
    ocr_s: float


class LocalVision:
    def __init__(self, top_k: int = 5, ocr: bool = True, ocr_max_side: int = 1280) -> None:
        self.top_k = top_k  # classes kept per image
        self.classifier = ImageClassifier()
        self.reader: TextReader | None = None
        if ocr:
            try:
                self.reader = TextReader(ocr_max_side)
            except (ImportError, OSError) as exc:  # OpenCV without libgl1 / libglib2.0-0: labels still work
                log.warning("image input reads no text: the OCR cannot load (%s); install libgl1 libglib2.0-0", exc)
        self._pass = threading.Lock()  # one pass at a time: one core at most
        self.last: VisionTimings | None = None  # the latest pass's timings

    def read(self, image: Image.Image) -> VisionReading:
        with self._pass, CORES.lend():
            t0 = time.perf_counter()
            labels = self.classifier.classify(image, self.top_k)
            t1 = time.perf_counter()
            lines = reading_order(self.reader.read(image)) if self.reader is not None else []
            self.last = VisionTimings(t1 - t0, time.perf_counter() - t1)
        return VisionReading(labels=labels, lines=tuple(lines))
