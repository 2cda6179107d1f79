"""What the machine did around an alarm: the training thread's own CPU time and its wait
for a CPU per step, and the other processes' CPU use, before and after the change began.

About once a second the training thread notes its CPU time (``time.thread_time``) and
the time it waited, runnable, for a CPU that others held (Linux schedstat, as the
session's clock reads it: :func:`diagnose.capture.others.cpu_wait_ns`), with the step
count; the host sampler's rows give the CPUs busy with other processes (all usable CPUs'
busy time less this process's and its loader workers'). A pace change whose extra time
is mostly waiting for a CPU while the others' use rose is the machine's neighbours, not
the job: the alarm says so (:func:`explain`). Bounded: the last ``keep`` seconds.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

from diagnose.capture.others import cpu_wait_ns
from diagnose.metrics.samples import JOB_CPU_COLUMNS

__all__ = ["HostContext", "explain", "neighbours"]

#: seconds of context kept either side of a change
SPAN = 10
#: the other processes' use "rose" by at least this many CPUs: above the host sampler's
#: row-to-row noise (a few hundredths of a CPU); less, the wait is not theirs
OTHERS_ROSE = 0.1


class HostContext:
    def __init__(self, keep: int = 3600) -> None:
        # (first step, last step, thread CPU s, CPU wait s or None, wall s) per interval
        self.ticks: deque[tuple[Any, ...]] = deque(maxlen=keep)
        self.others: deque[tuple[int, float]] = deque(maxlen=keep)  # (step, CPUs)
        self._last: tuple[int, float, int | None, float] | None = None
        self._held = False

    def tick(self, step: int, window: bool = False) -> None:
        """On the training thread, about once a second; in a profiled ``window`` (its steps
        are not the job's own pace, and its capture's work runs beside them) nothing is
        kept, and the next interval starts at the window's end."""
        if window:
            self.reset()
            return
        cpu, wait, now = time.thread_time(), cpu_wait_ns(), time.perf_counter()
        last, held, self._held = self._last, self._held, False
        if last is not None and step > last[0] and not held:
            s0, c0, w0, t0 = last
            self.ticks.append((s0, step, cpu - c0,
                               None if wait is None or w0 is None else (wait - w0) / 1e9,
                               now - t0))
        self._last = (step, cpu, wait, now)

    def reset(self) -> None:
        """The interval now running is not the job's own (a profiled window): dropped."""
        self._last = None

    def hold(self) -> None:
        """Other work of this process runs beside the steps now (a capture's analysis):
        the interval running is dropped at its tick."""
        self._held = True

    def sample(self, step: int, row: dict[str, Any]) -> None:
        """A host sample (sampler thread): the CPUs other processes kept busy."""
        pct = row.get("cpu_pct")
        if not isinstance(pct, list) or row.get("proc_cpu_pct") is None:
            return
        alive, read = row.get("workers_count") or 0, row.get("workers_cpu_n") or 0
        if alive > read:  # a worker just started has no CPU reading yet: its share of the
            return  # busy CPUs is not known, and would read as other processes'
        busy = sum(v for v in pct if isinstance(v, int | float)) / 100.0
        own = sum((row.get(k) or 0.0)
                  for k in ("proc_cpu_pct", *JOB_CPU_COLUMNS)) / 100.0
        # unclamped: the job's descendants' CPU arrives in lumps (as they are reaped), so a
        # tick may read below 0 and the next above; their mean over seconds is clamped
        self.others.append((step, busy - own))

    def around(self, start: int, now: int) -> dict[str, Any] | None:
        """Per step before ``start`` and from it to ``now`` (``step_ms``: the steps' own
        mean over those seconds, what the thread's CPU time and wait add up within); None
        until both sides have a second of ticks."""
        before = [t for t in self.ticks if t[1] <= start][-SPAN:]
        after = [t for t in self.ticks if t[0] >= start and t[1] <= now][:SPAN]
        if not before or not after:
            return None

        def per_step(ts: list[tuple[Any, ...]], i: int) -> float | None:
            # the median interval's: one interval that held other work on this thread (a
            # capture's analysis, the watch's own start) says nothing of the steps
            vals = [float(v) / (t[1] - t[0]) for t in ts
                    if t[1] > t[0] and len(t) > i and (v := t[i]) is not None]
            if len(vals) < len(ts) or not vals:
                return None
            return round(float(statistics.median(vals)) * 1e3, 4)

        ob = [c for s, c in self.others if s < start][-SPAN:]
        oa = [c for s, c in self.others if start <= s <= now][:SPAN]
        return {"step_ms": [per_step(before, 4), per_step(after, 4)],
                "cpu_ms_per_step": [per_step(before, 2), per_step(after, 2)],
                "cpu_wait_ms_per_step": [per_step(before, 3), per_step(after, 3)],
                "others_cpus": [round(max(sum(ob) / len(ob), 0.0), 3) if ob else None,
                                round(max(sum(oa) / len(oa), 0.0), 3) if oa else None]}


def _rise(host: dict[str, Any], key: str, before_ms: float | None,
          after_ms: float | None) -> float | None:
    """How much ``host[key]`` (ms a step) rose over a step-time rise (``before_ms`` ->
    ``after_ms``), as a share of that rise; None where either is not known or no rise."""
    v = host[key]
    if None in v or before_ms is None or after_ms is None or after_ms <= before_ms:
        return None
    return (v[1] - v[0]) / (after_ms - before_ms)


def _mostly(host: dict[str, Any], before_ms: float | None,
            after_ms: float | None) -> str | None:
    """What most of a step-time rise (``before_ms`` -> ``after_ms``) is: ``"waiting"``, the
    loop's wait for a CPU, which rose more than the thread's own CPU time did; ``"own"``,
    the thread's own CPU time, which rose at least as much as its wait (the job's work
    grew: a larger batch, heavier samples in the loop); None: neither is half of it."""
    wait = _rise(host, "cpu_wait_ms_per_step", before_ms, after_ms)
    own = _rise(host, "cpu_ms_per_step", before_ms, after_ms)
    if wait is not None and wait >= 0.5 and (own is None or own < wait):
        return "waiting"
    if own is not None and own >= 0.5 and (wait is None or own >= wait):
        return "own"
    return None


def _others_rose(host: dict[str, Any]) -> bool:
    oth = host["others_cpus"]
    return None not in oth and oth[1] - oth[0] >= OTHERS_ROSE


def neighbours(host: dict[str, Any], before_ms: float | None, after_ms: float | None) -> bool:
    """A step-time rise that is mostly waiting for CPUs the other processes took more of:
    the machine's neighbours, not the job (what :func:`explain` says of it)."""
    before_ms, after_ms = _ends(host, before_ms, after_ms)
    return _mostly(host, before_ms, after_ms) == "waiting" and _others_rose(host)


def _ends(host: dict[str, Any], before_ms: float | None, after_ms: float | None
          ) -> tuple[float | None, float | None]:
    """The step times the thread's figures are weighed against: the steps' own mean over
    the same seconds where the ticks timed them (the detector's levels are medians, which
    a loop of uneven steps leaves far under the mean), else the change's levels; none
    for a change of another signal (no levels given)."""
    own = host.get("step_ms") or [None, None]
    if None in own or before_ms is None or after_ms is None:
        return before_ms, after_ms
    return own[0], own[1]


def explain(host: dict[str, Any], before_ms: float | None, after_ms: float | None) -> str:
    """A line on the machine around a step-time change (``before_ms`` -> ``after_ms``)."""
    cw, cpu, oth = host["cpu_wait_ms_per_step"], host["cpu_ms_per_step"], host["others_cpus"]
    before_ms, after_ms = _ends(host, before_ms, after_ms)
    own = host.get("step_ms") or [None, None]
    parts = [f"the steps took {own[0]:.3g} -> {own[1]:.3g} ms on average in those seconds"
             ] if None not in own and before_ms is not None else []
    if None not in cw:
        parts.append(f"the loop waited for a CPU {cw[0]:.3g} -> {cw[1]:.3g} ms a step")
    if None not in cpu:
        parts.append(f"its thread's own CPU time {cpu[0]:.3g} -> {cpu[1]:.3g} ms a step")
    if None not in oth:
        parts.append(f"other processes kept {oth[0]:.2f} -> {oth[1]:.2f} CPUs busy")
    text = "the machine: " + ", ".join(parts) if parts else "the machine: not measured"
    mostly = _mostly(host, before_ms, after_ms)
    if mostly == "waiting":
        if _others_rose(host):
            text += " (most of the change is waiting for CPUs other processes held: the " \
                    "machine's neighbours, not the job)"
        else:  # the others did not take more: the job's own threads, or a slower host
            text += " (most of the change is waiting for a CPU, while other processes " \
                    "took no more: the job's own threads or processes, or CPUs that gave " \
                    "less)"
    elif mostly == "own":
        text += " (most of the change is the training thread's own work: the job's, not " \
                "the machine's)"
    return text
