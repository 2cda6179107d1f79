"""The loop's own work between its steps, by the session's clock: the time from an
optimizer's ``step()`` returning, or a backward's end where no optimizer step follows it
(a gradient accumulation's micro-batches), to the next outermost model call
(``between_ms``), less the DataLoader's wait inside it and the collector's pauses outside
that wait (``gc_between_ms``: CF006's, which gc.freeze takes off, not moving the work).
Without a DataLoader that is where a loop makes its batches (a generator, slicing and
tokenising in the loop body) on the training thread; with one, the work a loop does on
each batch before its forward."""

from __future__ import annotations

from typing import Any

from ...values import as_number
from .step_clock import free_rows

CATALOG: dict[str, tuple[str, str]] = {
    "loop_own_work_unprofiled_share": (
        "fraction", "the share of the unprofiled steps between an optimizer step's return "
        "(or a backward's end with no optimizer step after it) and the next model call, "
        "the DataLoader's wait and the collector's pauses left out: the loop's own work on "
        "the training thread between steps (its batch making without a DataLoader)"),
    "loop_own_work_unprofiled_ms": (
        "ms", "that work per unprofiled step (the mean)"),
}


def loop_work_metrics(cap: Any) -> dict[str, object]:
    """The :data:`CATALOG` names from the context's ``capture`` section; None where the
    clock did not time the work between steps (no optimizer step counted, an older
    capture)."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    rows = free_rows(cap)
    own, total = [], 0.0
    for r in rows:
        between, ms = as_number(r.get("between_ms")), as_number(r.get("ms"))
        if between is None or ms is None:
            return out
        wait = as_number(r.get("dataloader_ms")) or 0.0
        paused = as_number(r.get("gc_between_ms")) or 0.0  # CF006's (an older capture: 0)
        own.append(min(max(between - wait - paused, 0.0), ms))
        total += ms
    if own and total > 0:
        out["loop_own_work_unprofiled_share"] = round(sum(own) / total, 4)
        out["loop_own_work_unprofiled_ms"] = round(sum(own) / len(own), 3)
    return out
