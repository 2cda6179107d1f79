"""torch.profiler set up for exactly one wait / warmup / active cycle.

``WindowProfiler`` owns one ``torch.profiler.profile`` whose schedule runs a
single cycle (``repeat=1``): ``wait`` steps untouched, ``warmup`` steps traced
and thrown away, ``active`` steps recorded. At the end of the active window the
trace is written as ``<host>_<pid>.<ns>.pt.trace.json.gz`` (the name torch's
``tensorboard_trace_handler`` gives it) into the run folder: exported as text, then
deflated in one call (ISA-L; torch's own gzip export writes it a line at a time, a
longer pause the loop waits through) and the profiler is shut down, so the steps after
it run with no profiler at all.

Stopping early (the loop ended, or raised) inside the active window still
writes the steps recorded so far (torch's exit transition calls the handler).
:meth:`WindowProfiler.restart_wait` starts the ``wait`` (or ``warmup``) steps over while
they run (the session found a better step signal). Every call into the profiler runs with the C-level
stderr caught (:func:`~diagnose.capture.quiet.quiet_stderr`): libkineto's ``USDT`` lines
on each start and stop are dropped, anything else comes through.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diagnose.capture.quiet import quiet_stderr


def profiler_activities() -> list[Any]:
    """CPU always; CUDA (or XPU) where this torch build and machine have it."""
    import torch
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    try:
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        elif hasattr(torch, "xpu") and torch.xpu.is_available():
            acts.append(ProfilerActivity.XPU)
    except Exception:
        pass
    return acts


def lean_config(activities: list[Any]) -> Any:
    """torch's experimental profiler config for a window of ``activities``: with the CPU
    alone, no external correlation (the id each op pushes so that a device's kernels can be
    tied to it: there is no device, no reader of the trace uses it, and the push is about a
    tenth of the profiler's cost per op). None (torch's defaults) with a device, or on a
    torch without the option."""
    from torch.profiler import ProfilerActivity

    if [a for a in activities if a != ProfilerActivity.CPU]:
        return None
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(disable_external_correlation=True)
    except (ImportError, TypeError):
        return None


def write_trace(prof: Any, run_dir: Path, worker_name: str | None) -> Path:
    """``prof``'s trace as ``<worker>.<ns>.pt.trace.json.gz`` in ``run_dir`` (worker: as
    torch names it, ``<host>_<pid>``): exported as text, deflated in one call, the text
    removed."""
    import socket

    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"{worker_name or f'{socket.gethostname()}_{os.getpid()}'}.{time.time_ns()}"
    plain = run_dir / f"{name}.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    try:
        out = plain.with_name(plain.name + ".gz")
        out.write_bytes(_gzip(plain.read_bytes()))
    finally:
        plain.unlink(missing_ok=True)
    return out


def _gzip(data: bytes) -> bytes:
    """One gzip member of ``data``: ISA-L's deflate where installed (a dependency), else
    zlib's at a fast level."""
    try:
        from isal import igzip
    except ImportError:  # pragma: no cover - a platform without an isal wheel
        import gzip

        return gzip.compress(data, compresslevel=1)
    return bytes(igzip.compress(data))


class WindowProfiler:
    """One profiling window driven by ``step()`` calls from the session's step hooks.

    Lean by default, as :class:`~diagnose.session.Session` is: no shapes, no memory events
    (both slow the profiled steps and no built-in rule needs them), and on the CPU alone no
    external correlation (:func:`lean_config`).
    ``on_mark(name, unix_s)`` is told when the active window starts
    (``"active_start"``) and ends (``"active_end"``).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 5,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        on_mark: Callable[[str, float], None] | None = None,
        worker_name: str | None = None,
    ) -> None:
        if wait < 0 or warmup < 0 or active < 1:
            raise ValueError(
                f"need wait >= 0, warmup >= 0, steps >= 1; got wait={wait}, "
                f"warmup={warmup}, steps={active}"
            )
        self.run_dir = Path(run_dir)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self._on_mark = on_mark
        self._worker_name = worker_name
        self._prof: Any = None
        self.steps = 0  # step() calls since the wait steps (re)started
        self.offset = 0  # step() calls before that
        self._running: str | None = None  # the phase of the step running at a restart
        self.finished = False  # the profiler is shut down (window over, or stopped)
        self.window_complete = False  # all `active` steps were recorded
        self.active_start: float | None = None
        self.active_end: float | None = None
        self.errors: list[str] = []
        self.activities: list[str] = []
        # ms the loop waited as the window ended: the profiler's stop, its trace collected
        # and written (the step that ends the window, or stop())
        self.close_ms: float | None = None

    @property
    def total_steps(self) -> int:
        return self.wait + self.warmup + self.active

    def start(self) -> None:
        import warnings

        import torch.profiler as tp

        acts = profiler_activities()
        self.activities = [a.name for a in acts]
        def on_ready(prof: Any) -> None:
            try:
                write_trace(prof, Path(self.run_dir), self._worker_name)
            except Exception as e:  # never let an export problem break the user's loop
                self.errors.append(f"trace export failed: {type(e).__name__}: {e}")

        with warnings.catch_warnings():
            # warmup=0 is the user's explicit choice; torch warns about it every time
            warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
            cycle = tp.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)

        def sched(step: int) -> Any:  # the one cycle, from the wait's (re)start on
            return tp.ProfilerAction.NONE if step < self.offset else cycle(step - self.offset)

        self._prof = tp.profile(
            activities=acts,
            schedule=sched,
            on_trace_ready=on_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            experimental_config=lean_config(acts),
        )
        with quiet_stderr():
            self._prof.__enter__()
        if self.wait + self.warmup == 0:
            self._mark("active_start")

    def _mark(self, name: str) -> None:
        t = time.time()
        if name == "active_start":
            self.active_start = t
        else:
            self.active_end = t
        if self._on_mark is not None:
            with contextlib.suppress(Exception):
                self._on_mark(name, t)

    def step(self) -> None:
        """One step boundary. After the last active step the profiler is shut down."""
        if self.finished or self._prof is None:
            return
        t0 = time.perf_counter()
        with quiet_stderr():
            self._prof.step()  # saves the trace on the RECORD_AND_SAVE -> NONE transition
        self.steps += 1
        self._running = None
        if self.steps == self.wait + self.warmup:
            self._mark("active_start")
        if self.steps >= self.total_steps:
            self.window_complete = True
            self._mark("active_end")
            self._shutdown()
            self.close_ms = round((time.perf_counter() - t0) * 1e3, 1)

    def restart_wait(self) -> str | None:
        """Start the steps before the window over at the next :meth:`step`: the ``wait``
        steps (during them), or the ``warmup`` (during it: traced steps stay traced, the
        profiler has no way back to untraced). Returns the phase started over; None once
        the window records (nothing is done)."""
        if self.finished or self._prof is None or self.phase not in ("wait", "warmup"):
            return None
        phase = self.phase
        # the step now running is the last before it: the next step() starts it over
        keep = (0 if phase == "wait" else self.wait) - 1
        self.offset += self.steps - keep
        self.steps = keep
        self._running = phase
        return phase

    def stop(self) -> None:
        """End profiling now (loop over or raised); keeps what the active window recorded."""
        if self.finished or self._prof is None:
            self.finished = True
            return
        if self.active_start is not None and self.active_end is None:
            self._mark("active_end")
        t0 = time.perf_counter()
        self._shutdown()
        self.close_ms = round((time.perf_counter() - t0) * 1e3, 1)

    def _shutdown(self) -> None:
        prof, self._prof = self._prof, None
        self.finished = True
        if prof is not None:
            with quiet_stderr():
                prof.__exit__(None, None, None)
            del prof
            # The profiler's own leftovers (its parsed events hold reference cycles) are
            # collected here, at the boundary where its work belongs to no step; left to the
            # loop, they would lengthen its next full collection, a pause the job without the
            # profiler never has. A loop that turned the collector off is left as it is.
            if gc.isenabled():
                gc.collect()

    @property
    def phase(self) -> str:
        """'wait', 'warmup', 'active' or 'done' for the step now running."""
        if self.finished:
            return "done"
        if self._running is not None:
            return self._running
        if self.steps < self.wait:
            return "wait"
        if self.steps < self.wait + self.warmup:
            return "warmup"
        return "active"
