"""``with diagnose(model, loader) as d:`` around a user's own, unchanged training loop.

Inside the block the loop runs as written. Step boundaries are found without
user code:

- **optimizer steps**: a global ``torch.optim`` step post-hook notices each
  ``opt.step()`` of the model's optimizer. The boundary itself is placed where
  a person would put ``prof.step()``: just before the loop pulls its next batch
  from ``loader`` (so the data wait belongs to the step that uses the batch and
  no profiler range is cut inside ``Optimizer.step``). A loop that does not
  iterate ``loader`` gets the boundary right after ``opt.step()``.
- **batches** (inference loops, and until the first ``opt.step()``): each
  batch pulled from ``loader`` after the first starts a new step.
- **``d.step()``**: a loop that marks its own steps; from the first call on,
  the automatic boundaries are off.

The profiler runs one wait/warmup/active cycle; when it is over, ``d.done``
becomes True (``if d.done: break`` ends a long loop early) and the loop goes
on without profiler or samplers. On exit, whatever happened, the hooks are
removed, the sampler thread is joined, ``context.json`` is written and the run
folder is analysed with the same code as ``torch-diagnose analyze``; the report
is printed and kept in ``d.report``. An exception from the block propagates
unchanged; an out-of-memory error is recorded in ``context.json`` (``oom``) so
the rule pack reports it as a ``memory`` finding.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

from diagnose.api import as_report
from diagnose.capture import context as ctxmod
from diagnose.capture import distributed
from diagnose.capture.profiler import WindowProfiler
from diagnose.capture.samplers import (
    DEFAULT_HZ,
    HostSampler,
    NvmlSampler,
    Sampler,
    SamplerThread,
    UnavailableSampler,
)
from diagnose.errors import CaptureError
from diagnose.runfolder import new_run_dir, trace_files, write_context

__all__ = ["Session", "autofix", "capture_baseline", "diagnose"]

_active_lock = threading.Lock()
_active: Session | None = None


def _run_analysis(run_dir: Path) -> Any:
    """Analyse a finished run folder exactly as ``torch-diagnose analyze RUN`` does
    (a run that failed before its active window has no trace; analyze() then evaluates
    the rules on the context and samples alone)."""
    from diagnose.api import analyze

    return analyze(run_dir)


class Session:
    """Profile a few steps of the training loop inside ``with`` and report what slows it.

    ``steps`` steps are recorded after ``wait`` untouched and ``warmup`` traced-but-
    discarded steps; then ``steps`` + 1 more run without the profiler, timed by the
    session's own clock (with the ``wait`` steps; the run's first step and the first after
    the window, which pays for the profiler's teardown, are left out): the step time the
    report leads with is theirs, what the job does without the profiler. ``d.done`` turns
    True after them.
    Capture is lean by default: ``record_shapes`` and ``profile_memory`` slow the profiled
    steps (1.4-2x on small ops) and no built-in rule needs shapes; on CUDA the peak memory
    of the window comes from ``torch.cuda.max_memory_*`` instead (``profile_memory=True``
    adds the allocator's ``[memory]`` events to the trace). ``out_dir`` is the folder the run folder is made in
    (default ``diagnose-runs/``; the run goes to ``<out_dir>/<stamp>/``).
    ``sample_hz`` is the host/GPU sampling rate (0 or None: no sampling).
    ``analyze=False`` skips the analysis on exit (e.g. for trials that only time steps).
    ``tensorboard`` (a log dir, or True for ``diagnose-tb/``) also writes the run there
    for TensorBoard: scalars, findings and a trace torch-tb-profiler reads correctly.
    ``optimizer`` with ``loss_fn(output, target)`` or ``step_fn(model, batch) -> loss``
    enable ``.autofix()`` (see :func:`diagnose.tune.autofix`).
    """

    def __init__(
        self,
        model: Any = None,
        loader: Any = None,
        *,
        steps: int = 5,
        warmup: int = 1,
        wait: int = 1,
        out_dir: str | os.PathLike[str] | None = None,
        sample_hz: float | None = DEFAULT_HZ,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        print_report: bool = True,
        analyze: bool = True,
        tensorboard: str | os.PathLike[str] | bool | None = None,
        optimizer: Any = None,
        loss_fn: Any = None,
        step_fn: Any = None,
    ) -> None:
        if steps < 1 or warmup < 0 or wait < 0:
            raise CaptureError(
                f"diagnose(): need steps >= 1, warmup >= 0, wait >= 0 "
                f"(got steps={steps}, warmup={warmup}, wait={wait})"
            )
        if sample_hz is not None and sample_hz < 0:
            raise CaptureError(f"diagnose(): sample_hz must be >= 0 (got {sample_hz})")
        self.model = model
        self.loader = loader
        self.steps = steps
        self.warmup = warmup
        self.wait = wait
        self.out_dir = out_dir
        self.sample_hz = sample_hz or None  # 0 -> no samplers
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.print_report = print_report
        self.analyze = analyze
        self.optimizer = optimizer  # for .autofix(): it drives the steps itself
        self.loss_fn = loss_fn
        self.step_fn = step_fn
        self.tensorboard = tensorboard  # a log dir (True: diagnose-tb) to write the run into
        self.tensorboard_dir: Path | None = None

        self.run_dir: Path | None = None
        self._dist: Any = None  # capture.distributed.DistributedCapture inside a process group
        self.report: Any = None
        self.notes: list[str] = []
        self.steps_seen = 0
        self.step_mode: str | None = None  # "optimizer" | "dataloader" | "manual"
        self._done = False
        self._entered = False
        self._closed = False
        self._t_enter = 0.0

        self._profiler: WindowProfiler | None = None
        self._sampler_thread: SamplerThread | None = None
        self._hook_handle: Any = None
        self._patched_next: Any = None  # the original _BaseDataLoaderIter.__next__
        self._iter_cls: Any = None
        self._index_sampler: Any = None
        self._param_ids: frozenset[int] = frozenset()
        self._opt_ref: weakref.ReferenceType[Any] | None = None
        self._opt_steps = 0
        self._batches = 0
        self._pending = False
        self._last_iter: weakref.ReferenceType[Any] | None = None
        self._worker_pids: set[int] = set()
        self._context: dict[str, Any] = {}
        # the step clock: every step's phase, length and DataLoader wait (time.perf_counter)
        self._clock: list[tuple[str, float, float]] = []
        self._step_t0: float | None = None
        self._step_dl = 0.0
        self._after = 0  # unprofiled steps timed after the window
        self._cuda_mem: dict[str, Any] | None = None

    # ------------------------------------------------------------------ public
    @property
    def done(self) -> bool:
        """True once the profiled window and the unprofiled steps after it are recorded (the
        loop may stop: ``if d.done: break``)."""
        return self._done

    def step(self) -> None:
        """Mark a step boundary yourself (call it once per step, at the end of the step).

        From the first call on, the automatic boundaries (optimizer / batches) are off.
        """
        if not self._entered or self._closed or self._done:
            return
        self.step_mode = "manual"
        self._pending = False
        self._advance()

    def autofix(self, **kwargs: Any) -> Any:
        """Apply the fixes the findings name in measured trials; keep what helps.

        Needs ``diagnose(model, loader, optimizer=opt, loss_fn=fn)`` (or ``step_fn=``).
        Uses this session's report when the ``with`` block already ran, else captures a
        baseline itself. Keyword arguments go to :func:`diagnose.tune.autofix`; returns its
        TuneReport (``.print()``, ``.loader``, ``.best``, ``.code``)."""
        kwargs.setdefault("report", self.report)
        return autofix(self.model, self.loader, self.optimizer, loss_fn=self.loss_fn,
                       step_fn=self.step_fn, **kwargs)

    @property
    def worker_pids(self) -> list[int]:
        """pids of the DataLoader worker processes seen so far."""
        return sorted(self._worker_pids)

    # ------------------------------------------------------------------ enter
    def __enter__(self) -> Session:
        global _active
        if self._entered:
            raise CaptureError("a diagnose() session can be used for one `with` block only")
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise CaptureError(
                "diagnose() needs PyTorch: install torch first (analysing saved traces does not)"
            ) from e
        with _active_lock:
            if _active is not None:
                raise CaptureError("diagnose(): another diagnose() block is already running")
            _active = self
        self._entered = True
        self._t_enter = time.time()
        try:
            try:
                self._dist = distributed.current()  # torch.distributed: one folder for all ranks
                self.run_dir = (self._dist.run_dir(self.out_dir) if self._dist is not None
                                else new_run_dir(self.out_dir))
            except OSError as e:
                raise CaptureError(f"cannot create a run folder under {self.out_dir!r}: {e}") from e
            self._context = ctxmod.collect(self.model, self.loader)
            self._fit_schedule()
            self._param_ids = (
                ctxmod.model_param_ids(self.model) if self.model is not None else frozenset()
            )
            self._install_hooks()
            if self.sample_hz:
                self._sampler_thread = SamplerThread(
                    self._make_samplers(), self.run_dir, self.sample_hz
                )
                if self._dist is not None:  # samples.rank<N>.jsonl
                    self._sampler_thread.path = self._dist.samples_path(self.run_dir)
                self._sampler_thread.start()
            self._profiler = WindowProfiler(
                self.run_dir,
                wait=self.wait,
                warmup=self.warmup,
                active=self.steps,
                record_shapes=self.record_shapes,
                profile_memory=self.profile_memory,
                with_stack=self.with_stack,
                on_mark=self._on_mark,
                worker_name=self._dist.worker_name if self._dist is not None else None,
            )
            self._profiler.start()
        except BaseException:
            self._teardown()
            raise
        self._step_t0 = time.perf_counter()
        return self

    def _fit_schedule(self) -> None:
        """Shorten the schedule up front when one pass over ``loader`` has fewer step
        boundaries than it needs (a batch starts each step but the first), so that the
        profiled window holds whole steps; say so in the notes."""
        try:
            n = len(self.loader) if self.loader is not None else None
        except TypeError:  # an IterableDataset without __len__
            n = None
        if not isinstance(n, int) or n - 1 >= self.wait + self.warmup + self.steps:
            return
        bounds = max(n - 1, 0)
        old = f"wait={self.wait}, warmup={self.warmup}, steps={self.steps}"
        self.wait = 0
        self.warmup = 1 if bounds >= 3 else 0
        self.steps = max(bounds - self.warmup, 1)
        self.notes.append(
            f"the DataLoader yields {n} batch{'es' if n != 1 else ''} per pass, fewer than the "
            f"schedule needs ({old}): profiling wait=0, warmup={self.warmup}, "
            f"steps={self.steps} so the window fits in one pass"
            + (" (a single batch gives no whole step: use more batches)" if bounds == 0 else ""))

    def _make_samplers(self) -> list[Sampler]:
        pids = (lambda: list(self._worker_pids)) if self._iter_cls is not None else None
        samplers: list[Sampler] = [HostSampler(worker_pids=pids)]
        dev = self._context.get("device") or {}
        if dev.get("type") == "cuda" and dev.get("index") is not None:
            samplers.append(
                NvmlSampler(
                    index=dev["index"], uuid=dev.get("uuid"), pci_bus_id=dev.get("pci_bus_id")
                )
            )
        else:
            samplers.append(UnavailableSampler("gpu", "no CUDA device visible to torch"))
        return samplers

    def _install_hooks(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook_handle = register_optimizer_step_post_hook(self._on_optimizer_step)
        try:
            from torch.utils.data import DataLoader
            from torch.utils.data.dataloader import _BaseDataLoaderIter
        except ImportError:  # pragma: no cover
            return
        if not isinstance(self.loader, DataLoader):
            return
        self._index_sampler = self.loader._index_sampler
        orig = _BaseDataLoaderIter.__next__
        session = self

        @functools.wraps(orig)
        def __next__(it: Any) -> Any:
            if getattr(it, "_index_sampler", None) is not session._index_sampler:
                return orig(it)
            session._on_next(it)
            t0 = time.perf_counter()
            try:
                return orig(it)
            finally:  # the loop waits for its batch: the step clock's DataLoader time
                session._step_dl += time.perf_counter() - t0

        _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign,assignment]
        self._iter_cls = _BaseDataLoaderIter
        self._patched_next = orig

    def _remove_hooks(self) -> None:
        if self._hook_handle is not None:
            self._hook_handle.remove()
            self._hook_handle = None
        if self._iter_cls is not None:
            self._iter_cls.__next__ = self._patched_next
            self._iter_cls = None
            self._patched_next = None

    # ------------------------------------------------------------------ hooks
    def _on_optimizer_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        try:
            if self._done or self._closed:
                return
            known = self._opt_ref() if self._opt_ref is not None else None
            if known is None:
                if not self._owns(opt):
                    return
                self._opt_ref = weakref.ref(opt)
            elif opt is not known:
                return
            self._opt_steps += 1
            if self.step_mode == "manual":
                return
            self.step_mode = "optimizer"
            if self._batches > 0:
                self._pending = True  # boundary just before the next batch is pulled
            else:
                self._advance()  # the loop does not iterate `loader`: boundary here
        except Exception as e:  # never break the user's step
            self._internal_error("optimizer hook", e)

    def _owns(self, opt: Any) -> bool:
        if not self._param_ids:
            return True
        try:
            return any(id(p) in self._param_ids for g in opt.param_groups for p in g["params"])
        except Exception:
            return False

    def _on_next(self, it: Any) -> None:
        try:
            last = self._last_iter() if self._last_iter is not None else None
            if last is not it:
                self._last_iter = weakref.ref(it)
                for w in getattr(it, "_workers", ()) or ():
                    pid = getattr(w, "pid", None)
                    if isinstance(pid, int):
                        self._worker_pids.add(pid)
            if self._done or self._closed:
                return
            self._batches += 1
            if self.step_mode == "manual":
                return
            if self.step_mode == "optimizer":
                if self._pending:
                    self._pending = False
                    self._advance()
            elif self._batches > 1:
                self.step_mode = "dataloader"
                self._advance()
        except Exception as e:
            self._internal_error("DataLoader hook", e)

    def _advance(self) -> None:
        now = time.perf_counter()
        prof = self._profiler
        phase = "after" if prof is None or prof.finished else prof.phase
        if phase != "after":
            self.steps_seen += 1  # boundaries the profiler's schedule saw
        if self._step_t0 is not None:  # the step that ends here, by the session's clock
            self._clock.append((phase, now - self._step_t0, self._step_dl))
        if phase == "after":
            self._after += 1
            if self._after > self.steps:  # the first one after the window is left out
                self._done = True  # the unprofiled steps after the window are timed too
        elif prof is not None:
            try:
                prof.step()
            except Exception as e:
                self._internal_error("profiler step", e)
                with contextlib.suppress(Exception):
                    prof.stop()
            if prof.finished:
                self._window_over()
        # the next step starts now: the profiler's own work at the boundary (the trace's
        # export after the last active step) belongs to no step
        self._step_t0 = time.perf_counter()
        self._step_dl = 0.0

    def _window_over(self) -> None:
        if self._sampler_thread is not None:
            self._sampler_thread.request_stop()
        if self._cuda_mem is None:
            self._cuda_mem = ctxmod.cuda_memory(self._context)

    def _on_mark(self, name: str, t: float) -> None:
        if self._sampler_thread is not None:
            self._sampler_thread.mark(name, t)

    def _internal_error(self, where: str, e: BaseException) -> None:
        self.notes.append(f"capture problem in {where}: {type(e).__name__}: {e}")

    # ------------------------------------------------------------------ exit
    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        oom: dict[str, Any] | None = None
        if exc is not None:
            try:
                if ctxmod.is_oom(exc):
                    model = self._context.get("model") or {}
                    oom = ctxmod.oom_info(exc, fallback_device=model.get("device"))
            except Exception as e:
                self._internal_error("OOM record", e)
        self._teardown()
        try:
            self._finish(exc, oom)
        except Exception as e:  # the user's own exception (if any) must come through untouched
            msg = f"torch-diagnose: could not finish the run in {self.run_dir}: {type(e).__name__}: {e}"
            self.notes.append(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        return None

    def _teardown(self) -> None:
        """Stop profiler, hooks and samplers; each step runs even if one before failed."""
        global _active
        try:
            if self._profiler is not None:
                try:
                    self._profiler.stop()
                except Exception as e:
                    self._internal_error("profiler stop", e)
        finally:
            try:
                self._remove_hooks()
            finally:
                try:
                    st = self._sampler_thread
                    if st is not None and not st.stop():
                        self.notes.append("sampler thread did not stop within 5 s (left as daemon)")
                finally:
                    self._closed = True
                    with _active_lock:
                        if _active is self:
                            _active = None

    def _finish(self, exc: BaseException | None, oom: dict[str, Any] | None) -> None:
        run_dir = self.run_dir
        if run_dir is None:
            return
        ctx = dict(self._context)
        opt = self._opt_ref() if self._opt_ref is not None else None
        ctx["optimizer"] = ctxmod.optimizer_info(opt)
        prof = self._profiler
        st = self._sampler_thread
        if prof is not None:
            self.notes.extend(prof.errors)
            if not prof.window_complete:
                need = prof.total_steps
                whole = max(prof.steps - self.wait - self.warmup, 0)
                self.notes.append(
                    f"the profiled window was cut short by the end of the loop: it ran "
                    f"{self.steps_seen} step boundaries, the schedule needs {need} (wait="
                    f"{self.wait}, warmup={self.warmup}, steps={self.steps}); "
                    + (f"only the {whole} whole step{'s' if whole != 1 else ''} are analysed"
                       if whole else "no whole step was profiled, so the trace is not analysed")
                    + ": use fewer wait/warmup/steps, or run the loop over more batches")
        if self._cuda_mem is None and prof is not None and prof.active_start is not None:
            self._cuda_mem = ctxmod.cuda_memory(self._context)  # the window ended early
        traces = [p.name for p in (self._dist.own_traces(run_dir) if self._dist is not None
                                   else trace_files(run_dir))]
        if not traces:
            self.notes.append("no trace was written: the loop ended before the active window")
        ctx["capture"] = {
            "run_dir": str(run_dir),
            "wait": self.wait,
            "warmup": self.warmup,
            "active": self.steps,
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "with_stack": self.with_stack,
            "sample_hz": self.sample_hz,
            "activities": prof.activities if prof is not None else [],
            "step_mode": self.step_mode,
            "steps_seen": self.steps_seen,
            "optimizer_steps": self._opt_steps,
            "batches": self._batches,
            "window_complete": bool(prof and prof.window_complete),
            "whole_steps": (None if prof is None else self.steps if prof.window_complete
                            else max(prof.steps - self.wait - self.warmup, 0)),
            "step_clock": {"phase": [c[0] for c in self._clock],
                           "ms": [round(c[1] * 1e3, 4) for c in self._clock],
                           "dataloader_ms": [round(c[2] * 1e3, 4) for c in self._clock]},
            "cuda_memory": self._cuda_mem,
            "active_start": prof.active_start if prof is not None else None,
            "active_end": prof.active_end if prof is not None else None,
            "started": self._t_enter,
            "ended": time.time(),
            "trace_files": traces,
            "worker_pids": self.worker_pids,
            "sampler_rows": st.rows if st is not None else 0,
            "notes": list(self.notes),
        }
        if exc is not None:
            ctx["exception"] = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        ctx["oom"] = oom
        if self._dist is not None:  # rank 0 writes context.json and reports on all ranks
            self.report = as_report(self._dist.finish(run_dir, ctx, analyze=self.analyze))
            if self._dist.rank != 0 or self.report is None:
                return
        else:
            write_context(run_dir, ctx)
        if not self.analyze:
            return
        try:
            self.report = self.report if self._dist is not None else _run_analysis(run_dir)
        except Exception as e:
            msg = f"torch-diagnose: analysis of {run_dir} failed: {type(e).__name__}: {e}"
            self.notes.append(msg)
            print(msg, file=sys.stderr)
            return
        if self.report is not None:
            try:  # the page people open: report.html next to the trace
                from diagnose.report.html import write_html

                write_html(self.report, run_dir / "report.html")
            except Exception as e:
                self.notes.append(f"could not write report.html: {type(e).__name__}: {e}")
        if self.print_report and self.report is not None:
            try:
                self.report.print()
            except Exception as e:
                print(f"torch-diagnose: could not print the report: {e}", file=sys.stderr)
            print(f"torch-diagnose: run folder {run_dir}", file=sys.stderr)
        if self.tensorboard and self.report is not None:
            try:  # the same run as a TensorBoard run (scalars, findings, adapted trace)
                from diagnose.report.tensorboard import write_session_logdir

                self.tensorboard_dir = write_session_logdir(self.report, run_dir, self.tensorboard)
                if self.print_report:
                    print(f"torch-diagnose: TensorBoard run {self.tensorboard_dir} "
                          f"(tensorboard --logdir {self.tensorboard_dir.parent})", file=sys.stderr)
            except Exception as e:
                msg = f"torch-diagnose: could not write TensorBoard logs: {type(e).__name__}: {e}"
                self.notes.append(msg)
                print(msg, file=sys.stderr)


def capture_baseline(w: Any, cfg: Any, *, steps: int = 5,
                     out_dir: str | os.PathLike[str] | None = None) -> Any:
    """Capture ``steps`` profiled steps of ``cfg`` with the Session a user would run, and
    return its Report (the same analysis as ``torch-diagnose analyze``). This is the
    ``capture`` that :meth:`Session.autofix` hands to :func:`diagnose.tune.autofix`."""
    from diagnose.tune.trial import Trial, TuneError, release_memory

    tmp = tempfile.mkdtemp(prefix="diagnose-autofix-") if out_dir is None else None
    trial = Trial(w, cfg)
    session = Session(w.model, trial.loader, steps=steps, warmup=1, wait=1,
                      out_dir=tmp if out_dir is None else out_dir, print_report=False)
    try:
        try:
            with session, trial:
                for _ in range(4 * (steps + 2) + 10):
                    trial.step()
                    if session.done:
                        break
        except Exception as e:
            if not ctxmod.is_oom(e):
                raise TuneError(f"the baseline step failed: {type(e).__name__}: {e}") from e
        else:
            return session.report
        release_memory(w)  # out of memory: recorded by the session (a `memory` finding)
        return session.report
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def autofix(model: Any, loader: Any, optimizer: Any, **kwargs: Any) -> Any:
    """:func:`diagnose.tune.autofix` with this module's baseline capture: findings come from
    ``report=`` when given, else from profiled steps of the baseline (see its arguments)."""
    from diagnose.tune import autofix as run

    kwargs.setdefault("capture", capture_baseline)
    return run(model, loader, optimizer, **kwargs)


# The public name: ``with diagnose(model, loader) as d:`` makes a Session. One class, one
# signature: every option is declared once, in Session.__init__.
diagnose = Session
