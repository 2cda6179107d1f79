"""A capture taken by the watch: a profiled window over the next few steps, written as a
run folder of its own, and analysed on a background thread.

:class:`Window` runs torch.profiler (:class:`~diagnose.capture.profiler.WindowProfiler`,
lean as ``diagnose``'s) over one warm-up step and ``steps`` recorded ones, driven from the
watch's step boundaries; the trace goes to ``<run>/captures/<label>/``. Beside it goes a
``context.json`` in ``diagnose``'s format: the run's context, and a step clock whose
unprofiled steps are those just before the window (since the change began, for an alarm),
so the capture's report leads with the unprofiled step time and the loader's share of it.

:class:`Analyst` analyses the folders in order on one daemon thread with the same code as
``torch-diagnose analyze`` (:func:`diagnose.api.analyze`), writes ``report.json`` beside
the trace and hands the Report on. The training thread only waits for the profiler's own
start, steps and trace export.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from diagnose.capture.profiler import WindowProfiler
from diagnose.capture.runinfo import optimizer_info
from diagnose.runfolder import trace_files, write_context

__all__ = ["Analyst", "Window"]


class Window:
    """One profiled window into ``folder``; :meth:`start`, then :meth:`step` at each
    boundary until it returns True (the trace is written), or :meth:`stop`."""

    def __init__(self, folder: Path, steps: int, *, label: str, first_step: int,
                 worker_name: str | None = None) -> None:
        self.folder, self.steps, self.label = folder, steps, label
        self.first_step = first_step  # the watch's step index of the window's first step
        self.worker_name = worker_name
        self.rows: list[tuple[str, float, float]] = []  # (phase, ms, wait ms) a step
        self.cost_s = 0.0  # the profiler's own time at the boundaries (start, export)
        self.started_at = 0.0
        self.done = False
        self.error: str | None = None
        self._prof: WindowProfiler | None = None

    def start(self) -> None:
        t0 = time.perf_counter()
        self.started_at = time.time()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._prof = WindowProfiler(self.folder, wait=0, warmup=1, active=self.steps,
                                    worker_name=self.worker_name)
        try:
            self._prof.start()
        except Exception as e:  # another profiler running, a broken install
            self.error = f"the profiler did not start: {type(e).__name__}: {e}"
            self.done = True
        self.cost_s += time.perf_counter() - t0

    def step(self, ms: float, wait_ms: float) -> bool:
        """The step just ended (its wall time and loader wait); True once the window is
        over and its trace written."""
        prof = self._prof
        if prof is None or self.done:
            return True
        t0 = time.perf_counter()
        self.rows.append((prof.phase, ms, wait_ms))
        try:
            prof.step()
        except Exception as e:
            self.error = f"the profiler failed: {type(e).__name__}: {e}"
            self.stop()
        self.cost_s += time.perf_counter() - t0
        self.done = self.done or prof.finished
        return self.done

    def stop(self) -> None:
        """End the window now (the loop ended inside it); keeps what was recorded."""
        if self._prof is not None and not self._prof.finished:
            try:
                self._prof.stop()
            except Exception as e:
                self.error = self.error or f"the profiler did not stop: {type(e).__name__}: {e}"
        self.done = True

    @property
    def complete(self) -> bool:
        return self._prof is not None and self._prof.window_complete

    @property
    def traces(self) -> list[str]:
        return [p.name for p in trace_files(self.folder)]

    def write_context(self, base: dict[str, Any], before_ms: Sequence[float],
                      before_wait: Sequence[float], *, optimizer: Any, notes: list[str],
                      watch: dict[str, Any]) -> None:
        """``context.json`` for the capture: ``base`` (the run's context), the optimizer,
        and a step clock of ``before_*`` (unprofiled, "wait") then the window's steps."""
        prof = self._prof
        phase = ["wait"] * len(before_ms) + [r[0] for r in self.rows]
        ms = [round(float(v), 4) for v in before_ms] + [round(r[1], 4) for r in self.rows]
        wait = [round(float(v), 4) for v in before_wait] + [round(r[2], 4) for r in self.rows]
        whole = sum(1 for r in self.rows if r[0] == "active")
        ctx = dict(base)
        ctx["optimizer"] = optimizer_info(optimizer)
        ctx["capture"] = {
            "run_dir": str(self.folder), "wait": 0, "warmup": 1, "active": self.steps,
            "activities": prof.activities if prof is not None else [],
            "step_mode": watch.get("step_mode"), "window_complete": self.complete,
            "whole_steps": self.steps if self.complete else whole,
            "step_clock": {"phase": phase, "ms": ms, "dataloader_ms": wait},
            "active_start": prof.active_start if prof is not None else None,
            "active_end": prof.active_end if prof is not None else None,
            "ended": time.time(), "trace_files": self.traces, "notes": list(notes),
            "watch": watch,
        }
        write_context(self.folder, ctx)


Done = Callable[[Any, str | None], None]


class Analyst:
    """Analyses capture folders in order on one daemon thread (started on first use)."""

    def __init__(self) -> None:
        self._todo: deque[tuple[Path, Done]] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._stop = False

    @property
    def busy(self) -> bool:
        """An analysis is queued or running."""
        return self._pending > 0

    def submit(self, folder: Path, done: Done) -> None:
        """Analyse ``folder``; then ``done(report, None)`` or ``done(None, why)`` runs on
        the analyst's thread."""
        with self._cond:
            self._todo.append((folder, done))
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="diagnose-watch-analyst",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._todo and not self._stop:
                    self._cond.wait()
                if not self._todo:
                    return
                folder, done = self._todo.popleft()
            report, why = analyse(folder)
            try:
                done(report, why)
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the queue to empty; True if it did."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self) -> None:
        """The thread ends once the queue is empty (it is a daemon: never waited for)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()


def analyse(folder: Path) -> tuple[Any, str | None]:
    """``analyze(folder)`` and its ``report.json``; (None, why) where it failed."""
    from diagnose.api import analyze

    try:
        report = analyze(folder)
    except Exception as e:
        return None, f"the analysis failed: {type(e).__name__}: {e}"
    with contextlib.suppress(OSError, TypeError, ValueError):  # the Report is what counts
        (folder / "report.json").write_text(json.dumps(report.to_json(), default=str),
                                            encoding="utf-8")
    return report, None
