"""A session's image generation jobs: started on the generator's worker thread, their progress posted to
the session's model queue, stopped with their response (denoising stops within one step)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from models.image_events import TERMINAL, ImageEvent

from ..core.engine_events import Inbox
from .actions import StartImage
from .image_output import ImageProgress


class ImageJobs:
    def __init__(self, generator: Any, inbox: Inbox[tuple[str, ImageProgress]]):
        self.generator = generator  # models.image_gen.ImageGenerator, or None when image output is off
        self.inbox = inbox  # the session's model queue, on the loop's thread
        self.cancels: dict[str, list[threading.Event]] = {}  # response id → its running jobs' stop flags

    def start(self, action: StartImage) -> bool:
        """Start ``action``'s image; False when this server generates none."""
        if self.generator is None:
            return False
        rid, item_id = action.response_id, action.item_id
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        self.cancels.setdefault(rid, []).append(cancel)

        def on_event(ev: ImageEvent) -> None:  # from the generator's worker thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.inbox.put_nowait, (rid, ImageProgress(item_id, ev)))

        self.generator.submit(action.prompt, None, on_event, cancel)
        return True

    def cancel(self, response_id: str) -> None:
        for flag in self.cancels.pop(response_id, []):
            flag.set()

    def ended(self, response_id: str, ev: ImageEvent) -> None:
        """One of the response's jobs reported ``ev``: a terminal one no longer needs its stop flag."""
        flags = self.cancels.get(response_id, [])
        if isinstance(ev, TERMINAL) and flags:
            flags.pop(0)
