"""Python's garbage collector, timed on the training thread.

A per-sample pipeline allocates thousands of small objects a step (tensors, tuples); every
few hundred allocations the collector runs, and now and then a full (generation 2)
collection walks every object the process holds. In a process that imported torch that is
hundreds of thousands of objects, and the pause lands on whichever step allocated last:
a step that usually takes 20 ms takes 150. ``gc.callbacks`` says when a collection
starts and stops; the session sums the pauses of the thread that runs the loop into the
step clock's ``gc_ms`` column (other threads' collections are not on its clock).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any


class GcTimer:
    """Reports each collection on this thread as ``on_pause(seconds, generation)``."""

    def __init__(self, on_pause: Callable[[float, int], None]) -> None:
        self.on_pause = on_pause
        self.thread = threading.get_ident()
        self._t0: float | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.on_pause(time.perf_counter() - self._t0, int(info.get("generation", 0)))
            self._t0 = None

    def remove(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


def frozen_objects() -> int:
    """Objects ``gc.freeze()`` has moved out of the collector's reach (0: none)."""
    return gc.get_freeze_count()
