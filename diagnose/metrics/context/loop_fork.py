"""What an epoch's forks cost the loop's own steps, from steps of the loop timed right after
an idle child was forked (the clock's ``forked`` steps: diagnose.capture.fork_steps).

A step's work is its time less its wait for a batch and the garbage collector's pauses.
Each forked step's work is set beside the median work of the :data:`BASE` ``after`` steps
just before the fork (the host's pace drifts over seconds); the sum of the differences over
the forked steps is what the pages the loop writes cost once copied: every page a step
writes, on the first write after the fork, as the first steps after an epoch's ``iter()``
pay it. Its noise is the before steps' spread over that many steps (the standard deviation
times the square root of their number). No model stands between this and the copies a
new epoch's forks cause: it is a fork, made in the job's own loop.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from ...values import as_number

#: the clock's phase of the steps after the fork
PHASE = "forked"
#: the ``after`` steps before the fork the forked steps are set beside
BASE = 8

CATALOG: dict[str, tuple[str, str]] = {
    "input_worker_fork_copy_loop_ms": (
        "ms", "what the loop's own steps after an idle child was forked took beyond the "
        "steps before the fork, in all (less their waits for batches and the collector's "
        "pauses): the pages an epoch's forked workers make the training process copy"),
    "input_worker_fork_copy_loop_noise_rel": (
        "ratio", "the noise of input_worker_fork_copy_loop_ms over its value: the spread "
        "of the steps before the fork over as many steps as were timed after it"),
}


def _work(clock: Mapping[str, Any], i: int) -> float | None:
    """Step ``i``'s work (ms): its time less its wait and the collector's pauses."""
    def col(name: str) -> float:
        vals = clock.get(name) or []
        return (as_number(vals[i]) or 0.0) if i < len(vals) else 0.0
    ms = as_number((clock.get("ms") or [])[i])
    return None if ms is None else ms - col("dataloader_ms") - col("gc_ms")


def loop_fork(clock: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"ms", "noise_ms", "steps"}`` from a step clock (``capture.step_clock``): the
    forked steps' work beyond the steps before them (module doc); None where the clock has
    no forked step, too few steps before it, or an epoch started in the forked steps (its
    own start would be counted as copies)."""
    if not isinstance(clock, Mapping):
        return None
    phases = clock.get("phase") or []
    if PHASE not in phases or len(phases) != len(clock.get("ms") or []):
        return None
    first = phases.index(PHASE)
    forked = [i for i in range(first, len(phases)) if phases[i] == PHASE]
    starts = clock.get("loader_starts") or []
    if any((as_number(starts[i]) or 0) > 0 for i in forked if i < len(starts)):
        return None
    before = [w for i in range(first) if phases[i] == "after"
              and (w := _work(clock, i)) is not None][-BASE:]
    after = [w for i in forked if (w := _work(clock, i)) is not None]
    if len(before) < 3 or not after:
        return None
    base = statistics.median(before)
    noise = statistics.stdev(before) * math.sqrt(len(after))
    return {"ms": round(max(0.0, sum(after) - base * len(after)), 3),
            "noise_ms": round(noise, 3), "steps": len(after)}


def loop_fork_metrics(cap: Any) -> dict[str, object]:
    """The :data:`CATALOG` names from the context's ``capture`` section."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    got = loop_fork(cap.get("step_clock") if isinstance(cap, Mapping) else None)
    if got is not None:
        out["input_worker_fork_copy_loop_ms"] = got["ms"]
        if got["ms"] > 0:
            out["input_worker_fork_copy_loop_noise_rel"] = round(got["noise_ms"] / got["ms"], 4)
    return out
