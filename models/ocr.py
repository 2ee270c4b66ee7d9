"""Text in images: PP-OCRv4 detection + recognition (Chinese and English) from the ``rapidocr-onnxruntime`` wheel.

RapidOCR runs the three ONNX models its wheel ships (text detection, 0/180° orientation,
recognition) on onnxruntime; each session here gets one intra-op thread, as the caller holds one
core (``models.cores``). A detected quadrilateral becomes its bounding box (``TextBox``); putting
boxes in reading order is ``processors.vision_text``'s.
"""

from __future__ import annotations

import threading

import numpy as np
from PIL import Image

from processors.vision_text import TextBox


class TextReader:
    def __init__(self, max_side: int = 1280) -> None:
        from rapidocr_onnxruntime import RapidOCR

        # one thread per session; max_side_len bounds the detector's input on large screenshots
        self._ocr = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1, max_side_len=max_side)
        self._lock = threading.Lock()  # one call at a time: the sessions are shared

    def read(self, image: Image.Image) -> list[TextBox]:
        """Every text box found in an RGB image, in the detector's order."""
        bgr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])  # [H, W, 3] as OpenCV reads
        with self._lock:
            found, _ = self._ocr(bgr)
        boxes = []
        for quad, text, score in found or ():
            xs = [float(p[0]) for p in quad]
            ys = [float(p[1]) for p in quad]
            boxes.append(TextBox(min(xs), min(ys), max(xs), max(ys), str(text), float(score)))
        return boxes
