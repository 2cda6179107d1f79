"""The watch's captures: when to take one, the profiled windows (one at a time), their
analysis, and handing each report to the alarms it serves.

The policy: an alarm shares a window of another alarm asked for, or under way or begun
within :data:`SHARE_STEPS` steps after its change began (a loader slowing shows as step
time and loader wait together); else it takes one, within ``max_captures`` a run and one per ``interval_s``
(unless its change is :data:`BIGGER` times the last capture's); a capture whose alarms the
machine explains as its neighbours', or whose window found the pace back (the change
passed: :attr:`Captures.passed`), does not count against ``interval_s``
(:meth:`Captures.release`); else its ``capture_why`` says which limit. The baseline window goes first and is not
counted; it waits while a change is under way (``defer``), and an alarm's window asked
meanwhile goes before it. A window starts at the next step boundary (:meth:`Captures.start`), records its
steps (:meth:`Captures.step`), then its folder gets a ``context.json`` whose unprofiled
steps are those since the change began (at most :data:`BEFORE_STEPS`), and is analysed
on the :class:`~.window.Analyst`'s thread; the alarms then get the report and what
changed against the baseline (:func:`~.changes.what_changed`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .alarm import Alarm
from .changes import PASSED, what_changed
from .window import Analyst, Window

__all__ = ["BEFORE_STEPS", "SHARE_STEPS", "Capture", "Captures"]

#: an alarm within this many steps of a capture's first step shares that capture
SHARE_STEPS = 100
#: unprofiled steps (at most) written beside a window as its "before" steps
BEFORE_STEPS = 64
#: within ``interval_s`` of the last capture, an alarm whose change (|ln after/before|) is
#: this many times the one that capture was taken for takes one anyway, so that a small
#: change does not leave a much larger one after it unprofiled
BIGGER = 3.0


def _size(alarm: Alarm) -> float:
    """How large the alarm's change is: |ln after/before| (0 where either is not known)."""
    a, b = alarm.after, alarm.before
    if not isinstance(a, int | float) or not isinstance(b, int | float) or a <= 0 or b <= 0:
        return 0.0
    return abs(math.log(a / b))


@dataclass
class Capture:
    """A capture: asked for, running, or analysed."""

    label: str
    baseline: bool
    alarms: list[Alarm] = field(default_factory=list)
    first_step: int = 0
    folder: Path | None = None
    report: Any = None
    why: str | None = "pending"
    changed: list[str] = field(default_factory=list)
    comparison: dict[str, Any] | None = None
    cost_s: float = 0.0
    steps_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "baseline": self.baseline, "first_step": self.first_step,
                "dir": str(self.folder) if self.folder else None,
                "alarms": [a.step for a in self.alarms], "analysed": self.report is not None,
                "why": self.why, "cost_s": round(self.cost_s, 4),
                "profiled_ms": [round(v, 3) for v in self.steps_ms]}


#: what a window's context needs from the watch: (base context, optimizer, step mode)
Context = Callable[[], tuple[dict[str, Any], Any, str | None]]
#: the unprofiled steps ``first`` .. ``stop - 1``: (ms, loader wait ms)
Before = Callable[[int, int], tuple[list[float], list[float]]]


class Captures:
    """The capture policy and the windows of one watch (``record(type, **fields)``: the
    timeline's writer, or None)."""

    def __init__(self, *, steps: int, max_captures: int, interval_s: float,
                 rank: int | None, worker_name: str | None, context: Context,
                 before: Before, record: Callable[..., None] | None,
                 defer: Callable[[], bool] = lambda: False) -> None:
        self.steps, self.max_captures, self.interval_s = steps, max_captures, interval_s
        self.defer = defer  # True: a change is under way, the baseline window waits
        self.rank, self.worker_name = rank, worker_name
        self._context, self._before, self._record = context, before, record
        self.jobs: list[Capture] = []  # started, in order
        self.baseline: Any = None  # the baseline window's Report
        self.analyst = Analyst()
        self.window: Window | None = None
        self._job: Capture | None = None  # the window's
        self._queue: list[Capture] = []  # asked for, not started
        self._last: Capture | None = None  # the last alarm's capture started
        self._taken = 0  # captures taken for alarms (the baseline not counted)
        # (time taken, change |ln after/before|, capture) of each capture the interval
        # counts, in order: the last one spaces the next
        self._spaced: list[tuple[float, float, Capture]] = []
        self._labels = 0
        self._lock = threading.RLock()
        #: alarms whose window found the pace back, for the watch to take (its reference)
        self.passed: list[Alarm] = []

    @property
    def due(self) -> bool:
        """A capture is asked for and none is running: start it at this boundary (the
        baseline window not while ``defer()`` says a change is under way: it would
        profile the new pace as the old)."""
        q = self._queue
        return bool(q) and self.window is None and not (q[0].baseline and self.defer())

    @property
    def quiet(self) -> bool:
        """A window or an analysis runs: the detectors rest."""
        return self.window is not None or self.analyst.busy

    def ask_baseline(self) -> None:
        with self._lock:
            self._queue.insert(0, Capture(self._label("baseline"), baseline=True))

    def want(self, alarm: Alarm) -> None:
        """The policy (see the module's docstring) for a new alarm."""
        with self._lock:
            began = alarm.start if alarm.start is not None else alarm.step
            running = [self._job] if self.window is not None and self._job is not None else []
            # a window shows this change where it began after the change did (a queued one
            # has not begun yet)
            near = [j for j in running if not j.baseline and j.first_step >= began]
            near += [j for j in self._queue if not j.baseline]
            last = self._last
            if not near and last is not None and last.first_step >= began and \
                    alarm.step - last.first_step <= SHARE_STEPS:
                near = [last]
            if near:
                near[0].alarms.append(alarm)
                _apply(near[0], [alarm])
                return
            last_t, last_size = self._spaced[-1][:2] if self._spaced else (-math.inf, 0.0)
            ago = time.time() - last_t
            size = _size(alarm)
            if self._taken >= self.max_captures:
                alarm.capture_why = (f"no capture: the run's {self.max_captures} captures "
                                     "are taken")
            elif ago < self.interval_s and size < BIGGER * last_size:
                alarm.capture_why = (f"no capture: at most one every {self.interval_s:.0f} s "
                                     f"(the last began {ago:.0f} s before)")
            else:
                job = Capture(self._label(f"step{alarm.step}-{alarm.signal}"), baseline=False,
                              alarms=[alarm], first_step=alarm.step)
                _apply(job, [alarm])
                # before a baseline window still waiting: that one would profile this
                # change's pace, the alarm's window would compare with it as the old
                wait = [i for i, j in enumerate(self._queue) if j.baseline]
                self._queue.insert(wait[0] if wait else len(self._queue), job)
                self._taken += 1
                self._spaced.append((time.time(), size, job))

    def release(self, alarm: Alarm) -> None:
        """``alarm``'s change was not the job's lasting one (the machine's neighbours, or
        it passed: its flag is set): where each alarm its capture serves is such, that
        capture no longer spaces the next one (``interval_s``), so that a change of the
        job's own after it is profiled; it still counts within ``max_captures``."""
        with self._lock:
            for i, (_, _, job) in enumerate(self._spaced):
                if any(a is alarm for a in job.alarms) and all(a.neighbours or a.passed
                                                               for a in job.alarms):
                    del self._spaced[i]
                    return

    def take_passed(self) -> list[Alarm]:
        """The alarms :attr:`passed` since the last call."""
        with self._lock:
            out, self.passed = self.passed, []
        return out

    def _label(self, what: str) -> str:
        self._labels += 1
        tag = f"-rank{self.rank}" if self.rank is not None else ""
        return f"{self._labels:03d}-{what}{tag}"

    # ------------------------------------------------------------------ windows
    def start(self, step: int, run_dir: Path) -> None:
        """Start the first capture asked for; its window's first step begins now."""
        with self._lock:
            job = self._queue.pop(0) if self._queue else None
            if job is None:
                return
            job.first_step = step
            job.folder = run_dir / "captures" / job.label
            self.jobs.append(job)
            win = Window(job.folder, self.steps, label=job.label, first_step=step,
                         worker_name=self.worker_name)
            win.start()
            job.cost_s = win.cost_s
            if win.error is not None:
                self._finish(job, None, win.error)
            else:
                self.window, self._job = win, job

    def step(self, ms: float, wait: float) -> bool:
        """The window's step just ended; True once the window is over (and handed on)."""
        win, job = self.window, self._job
        assert win is not None and job is not None
        job.steps_ms.append(ms)
        if not win.step(ms, wait):
            return False
        self._end(win, job)
        return True

    def stop(self) -> None:
        """The loop ended: a window under way keeps what it recorded; the rest is dropped."""
        win, job = self.window, self._job
        if win is not None and job is not None:
            win.stop()
            self._end(win, job)
        with self._lock:
            queued, self._queue = self._queue, []
        for j in queued:
            self._finish(j, None, "no capture: the loop ended first")

    def _end(self, win: Window, job: Capture) -> None:
        """The window's trace is written: its context, its record, its analysis."""
        with self._lock:
            self.window, self._job = None, None
            if not job.baseline:
                self._last = job
        job.cost_s = win.cost_s
        start = min((a.start for a in job.alarms if a.start is not None), default=None)
        lo = win.first_step - BEFORE_STEPS
        ms, wait = self._before(lo if start is None else max(start, lo), win.first_step)
        try:
            base, optimizer, mode = self._context()
            win.write_context(base, ms, wait, optimizer=optimizer,
                              notes=[win.error] if win.error else [],
                              watch={"label": job.label, "baseline": job.baseline,
                                     "first_step": win.first_step,
                                     "alarms": [a.to_json() for a in job.alarms],
                                     "step_mode": mode})
        except Exception as e:
            self._finish(job, None, f"the capture's context was not written: {e}")
            return
        if self._record is not None:
            self._record("capture", **job.to_json(), traces=win.traces)
        if not win.traces:
            self._finish(job, None, win.error or "the profiler wrote no trace")
            return
        self.analyst.submit(win.folder, lambda rep, why: self._finish(job, rep, why))

    def _finish(self, job: Capture, report: Any, why: str | None) -> None:
        """The analysis is done (any thread): hand the report to the job's alarms."""
        with self._lock:
            job.report, job.why = report, why
            if job.baseline:
                self.baseline = report
            elif report is not None:
                try:
                    job.changed, job.comparison = what_changed(self.baseline, report,
                                                              job.alarms)
                except Exception as e:
                    job.changed = [f"the comparison with the baseline failed: "
                                   f"{type(e).__name__}: {e}"]
            _apply(job, job.alarms)
            passed = not job.baseline and bool(job.changed) and job.changed[0].startswith(
                PASSED)
            for a in job.alarms if passed else []:
                a.passed = True
                self.passed.append(a)
                self.release(a)
            if self._record is not None:
                self._record("capture", **job.to_json(), changed=job.changed, passed=passed)

    def wait(self, timeout: float) -> bool:
        """Wait for the analyses; True if they all ended."""
        ok = self.analyst.wait(timeout)
        self.analyst.stop()
        return ok


def _apply(job: Capture, alarms: list[Alarm]) -> None:
    for a in alarms:
        a.capture_dir = str(job.folder) if job.folder else None
        a.capture, a.capture_why = job.report, job.why
        a.changed, a.comparison = list(job.changed), job.comparison
