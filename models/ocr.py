"""Text in images: PP-OCRv4 detection + recognition (Chinese and English) from the ``rapidocr-onnxruntime`` wheel.

RapidOCR runs the three ONNX models its wheel ships (text detection, 0/180° orientation,
recognition) on onnxruntime, one after another on the calling thread: each session gets one
intra-op thread and OpenCV's own pool is off, as a pass takes one core at most and runs at the
calling thread's priority (``models.local_vision``). Text lines are recognised one at a time: in a
batch each is padded to the widest, which on the web client's screenshot cost 1.6 s of CPU against
1.0 s, and the padding ran words together ("abouta**lighthouse**"). A detected quadrilateral
becomes its bounding box (``TextBox``); putting boxes in reading order is
``processors.vision_text``'s.
"""

from __future__ import annotations

import threading

import numpy as np
from PIL import Image

from processors.vision_text import TextBox


class TextReader:
    def __init__(self, max_side: int = 1280) -> None:
        import cv2
        from rapidocr_onnxruntime import RapidOCR

        # RapidOCR's crops and resizes would wake OpenCV's pool threads, at the process's priority
        # on the LLM's cores; only RapidOCR uses OpenCV in this process
        cv2.setNumThreads(1)
        # one thread per session; max_side_len bounds the detector's input on large screenshots
        self._ocr = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1, max_side_len=max_side, rec_batch_num=1)
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
