"""The events of one image being generated (``models.image_gen``), as typed records. Pure.

They map 1:1 onto the ``response.image_generation_call.*`` events (docs/PROTOCOL.md); ``kind`` names
each as that protocol does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class InProgress:
    kind: ClassVar[str] = "in_progress"


@dataclass(frozen=True)
class Generating:
    total_steps: int
    kind: ClassVar[str] = "generating"


@dataclass(frozen=True)
class PartialImage:
    index: int  # 0, 1, … in the order they were made
    step: int
    total_steps: int
    png_b64: str
    kind: ClassVar[str] = "partial_image"


@dataclass(frozen=True)
class ImageCompleted:
    png_b64: str
    width: int
    height: int
    kind: ClassVar[str] = "completed"


@dataclass(frozen=True)
class Cancelled:
    step: int  # the steps run before the cancel was seen
    kind: ClassVar[str] = "cancelled"


@dataclass(frozen=True)
class Failed:
    message: str
    kind: ClassVar[str] = "failed"


ImageEvent = InProgress | Generating | PartialImage | ImageCompleted | Cancelled | Failed
TERMINAL = (ImageCompleted, Cancelled, Failed)  # exactly one of these ends every generation
