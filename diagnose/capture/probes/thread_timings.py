"""Thread timings made seconds apart, as one: :func:`~.compute.time_threads` run again
after the other probes where the first was noisy, joined by their geometric mean, the
odd one out of three outvoted, and the span their one-thread ratios cover."""

from __future__ import annotations

import itertools
import math
from typing import Any


def joined_threads(first: dict[str, Any] | None, second: dict[str, Any] | None
                   ) -> dict[str, Any] | None:
    """Two :func:`time_threads` timings made seconds apart, as one: each median the
    geometric mean of the two (so the one-thread ratio is their ratios' geometric mean),
    their rounds together, and a noise that holds both their own and their disagreement
    (half the log of their ratios' ratio: two estimates' difference is their standard
    error times two). A shared host's pace drifts over seconds: the rounds of one timing
    share its moment, so a second moment halves the error where more rounds of the first
    do little (benchmarks/threads_probe_spread.py). A missing one gives the other."""
    if not first or not second:
        return first or second
    r1, r2 = _one_thread_ratio(first), _one_thread_ratio(second)
    if r1 is None or r2 is None or r1 <= 0 or r2 <= 0:
        return first if r1 is not None else second
    out = dict(first)
    for key in ("work_ms", "work_1thread_ms", "forward_ms", "forward_per_call_ms",
                "backward_per_call_ms"):
        a, b = first.get(key), second.get(key)
        if isinstance(a, int | float) and isinstance(b, int | float) and a > 0 and b > 0:
            out[key] = round(math.sqrt(a * b), 4)
    out["rounds"] = int(first.get("rounds") or 0) + int(second.get("rounds") or 0)
    own = [float(n) for n in (first.get("noise"), second.get("noise"))
           if isinstance(n, int | float)]
    spread = abs(math.log(r1 / r2)) / 2
    out["noise"] = round(max(math.hypot(*own) / 2 if own else 0.0, spread), 4)
    return out


def agreeing_threads(*timings: dict[str, Any] | None) -> dict[str, Any] | None:
    """Thread timings made seconds apart, as one (:func:`joined_threads`): of three, the
    two whose one-thread ratios lie closest, joined. A moment that slowed one timing alone
    (another process, a worker's late batch) is outvoted, not averaged in; its ratio still
    sets an end of the span (:func:`threads_ratio_span`). Two with a ratio: those two
    joined; fewer: the first two timings given, joined."""
    rated = [(t, r) for t in timings if t is not None
             and (r := _one_thread_ratio(t)) is not None and r > 0]
    if len(rated) < 2:
        return joined_threads(*(list(timings) + [None, None])[:2])
    (a, _), (b, _) = min(itertools.combinations(rated, 2),
                         key=lambda pair: abs(math.log(pair[0][1] / pair[1][1])))
    return joined_threads(a, b)


def _one_thread_ratio(t: dict[str, Any] | None) -> float | None:
    """What one thread cost against torch's threads in a :func:`time_threads` timing
    (``work_1thread_ms / work_ms``); None where it has none."""
    if not t or not t.get("work_ms") or t.get("work_1thread_ms") is None:
        return None
    return float(t["work_1thread_ms"]) / float(t["work_ms"])


def threads_ratio_span(*timings: dict[str, Any] | None) -> list[float] | None:
    """The least and the most of what one thread cost against torch's threads
    (``work_1thread_ms / work_ms``) over :func:`time_threads` timings made seconds apart:
    their geometric mean is the point (:func:`joined_threads`); a busier moment's lower
    ratio is how the ops ran while something else held a CPU, which the job may meet too.
    None with fewer than two timings."""
    got = [r for t in timings if (r := _one_thread_ratio(t)) is not None]
    return [round(min(got), 4), round(max(got), 4)] if len(got) >= 2 else None
