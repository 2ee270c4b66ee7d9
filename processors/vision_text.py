"""What a text-only LLM reads of an image: a classifier's top labels and the text read in it, in reading order.

Pure: the models (``models.image_classifier``, ``models.ocr``) hand over labels with probabilities
and text boxes; this module words them. The wording says the labels are a classifier's guesses
(an ImageNet-1k classifier only ever picks among its 1,000 classes, so a photo of something else
still gets labels), and the text as lines top to bottom, each line's boxes left to right.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TextBox:
    """One piece of text a detector found: its axis-aligned box in pixels and what was read in it."""

    x0: float  # left
    y0: float  # top
    x1: float  # right
    y1: float  # bottom
    text: str  # the recognised text
    score: float  # the recogniser's confidence, 0..1


@dataclass(frozen=True)
class VisionReading:
    """Everything the local models saw in one image."""

    labels: tuple[tuple[str, float], ...]  # (label, probability), best first
    lines: tuple[str, ...]  # text lines in reading order


def label_name(description: str) -> str:
    """One name for an ImageNet class from its synonyms (``"tabby, tabby cat"`` → ``"tabby cat"``):
    the first synonym, or a later one that spells it out (contains it and is longer)."""
    names = [n.strip() for n in description.split(",") if n.strip()]
    if not names:
        return description.strip()
    first = names[0]
    for later in names[1:]:
        if first.lower() in later.lower() and len(later) > len(first):
            return later
    return first


def reading_order(boxes: Sequence[TextBox], min_score: float = 0.5) -> list[str]:
    """Boxes → lines: a box joins the line whose vertical span overlaps at least half its own
    height (words of one row that the detector split), lines top to bottom, boxes left to right."""
    kept = sorted((b for b in boxes if b.text.strip() and b.score >= min_score), key=lambda b: (b.y0 + b.y1) / 2)
    rows: list[list[TextBox]] = []
    spans: list[tuple[float, float]] = []
    for box in kept:
        height = max(box.y1 - box.y0, 1e-6)
        for i, (top, bottom) in enumerate(spans):
            if min(bottom, box.y1) - max(top, box.y0) >= 0.5 * min(height, bottom - top):
                rows[i].append(box)
                spans[i] = (min(top, box.y0), max(bottom, box.y1))
                break
        else:
            rows.append([box])
            spans.append((box.y0, box.y1))
    order = sorted(range(len(rows)), key=lambda i: spans[i][0])
    return [" ".join(b.text.strip() for b in sorted(rows[i], key=lambda b: b.x0)) for i in order]


def describe(reading: VisionReading, top_k: int = 3, min_score: float = 0.05, max_text_chars: int = 1500) -> str:
    """The compact text put in the prompt in the image's place: the text read in it (when there is
    any) before the labels, the labels alone otherwise.

    Labels: the best ``top_k`` of at least ``min_score``, with their percentage.
    Text: every line, cut at ``max_text_chars`` (marked ``…``) so a page of text cannot flood the context.
    """
    kept = [(n, p) for n, p in reading.labels[:top_k] if p >= min_score]
    guesses = ", ".join(f"{name} ({round(p * 100)}%)" for name, p in kept)
    # a page of text still gets 1,000-way probabilities: a 2 % "nematode" is noise, said as such
    labels = f"a photo classifier's guesses at what it shows: {guesses}." if kept else ""
    if not kept and reading.labels:
        labels = "a photo classifier recognised none of its classes in it."
    text = "\n".join(reading.lines)
    if len(text) > max_text_chars:
        text = text[:max_text_chars].rstrip() + "…"
    if not text:  # a photo: its labels are all there is (said first, so a small model repeats them)
        return f"[image: {labels} No text in it.]" if labels else "[image: no text in it.]"
    # text first: asked what an image says, a small model quotes what comes first
    tail = f"\n{labels}" if labels else ""
    return f'[image: the text in it reads:\n"""\n{text}\n"""{tail}]'


__all__ = ["TextBox", "VisionReading", "describe", "label_name", "reading_order"]
