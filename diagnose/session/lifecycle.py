"""The session's lifecycle: ``__enter__`` sets up, the loop runs, ``__exit__`` tears down
and finishes.

On enter: torch's warnings shown once each (:mod:`diagnose.capture.quiet`), the run
folder, the run's context (:mod:`diagnose.capture.runinfo`), the profiler's one
wait/warmup/active cycle, the step hooks (:mod:`.hooks`) and the sampler thread. Inside the block the loop runs as written;
:class:`~diagnose.capture.steps.Steps` drives the profiler from the step boundaries and
times the unprofiled steps. On exit, whatever happened: teardown (profiler, hooks,
samplers, each step even if one before failed), then :meth:`Session._finish` in named
steps: the recorded context, the probes after the loop (:mod:`.after_loop`), the window's
notes, the capture section, the clock's note, the run's outcome, and publishing
(:mod:`.publish`). An exception from the block propagates unchanged; a problem of the
session's own becomes a note.
"""

from __future__ import annotations

import functools
import gc
import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from diagnose.capture import distributed
from diagnose.capture import runinfo as ctxmod
from diagnose.capture.boundaries import (
    StepFinder,
    as_models,
    model_names,
    unknown_options,
    wrong_arguments,
    wrong_counts,
)
from diagnose.capture.gcpause import frozen_objects
from diagnose.capture.names import loader_names
from diagnose.capture.profiler import WindowProfiler
from diagnose.capture.quiet import WarningsOnce
from diagnose.capture.samplers import (
    DEFAULT_HZ,
    HostSampler,
    NvmlSampler,
    Sampler,
    SamplerThread,
    UnavailableSampler,
)
from diagnose.capture.steps import EXTEND, Steps, settle_steps
from diagnose.errors import CaptureError, OptionError
from diagnose.memory.inplace import InPlaceStep
from diagnose.metrics.context import clock_note, context_metrics, load_shift_note
from diagnose.metrics.samples import samples_metrics
from diagnose.runfolder import load_samples, new_run_dir
from diagnose.session.after_loop import in_loop_gates, memory_after_loop, time_after_loop
from diagnose.session.hooks import Hooks
from diagnose.session.publish import capture_section, own_traces, publish, window_notes
from diagnose.session.step_notes import others_note, untold_note

__all__ = ["BASELINE_MAX_STEPS", "Session", "autofix", "capture_baseline", "diagnose"]

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

    ``model`` is the model, a list or dict of them (a GAN's ``[netG, netD]``) or None; ``loader``
    the DataLoader the loop iterates, or None. Steps are found from what the loop does
    (:mod:`diagnose.capture.boundaries`: batches, optimizer steps, the models' calls and
    backward), or from ``d.step()`` where the loop calls it; where nothing tells them
    apart and the loop calls no ``d.step()``, the report says so in its first line.
    ``steps`` steps are recorded after ``wait`` untouched and ``warmup`` traced-but-
    discarded steps. The step time the report leads with is what the job does without the
    profiler: ``clock_steps`` steps timed by the session's own clock, the ``wait`` steps
    (but the run's first, with its one-time costs) and the rest after the window, once the
    trace is written and the steps just after it (the loader's prefetched batches, the
    profiler's teardown) have run; steps that vary widely (a busy machine) are timed longer,
    up to 3x (not across the ranks of a process group, which must stop together); a lone
    CPU run may add a few steps on one thread among them (the thread timing:
    :mod:`diagnose.capture.steps`). ``d.done`` turns True after them. The median comes with
    its p10-p90 spread; one too wide to trust is said in the notes, with how to do better.
    Capture is lean by default, here and in :class:`~diagnose.capture.profiler.
    WindowProfiler`: ``record_shapes`` and ``profile_memory`` slow the profiled steps
    (most on small ops) and no built-in rule needs shapes; on CUDA the peak memory of the
    window comes from ``torch.cuda.max_memory_*`` instead (``profile_memory=True`` adds the
    allocator's ``[memory]`` events to the trace). ``out_dir`` is the folder the run folder
    is made in (default ``diagnose-runs/``; the run goes to ``<out_dir>/<stamp>/``).
    ``sample_hz`` is the host/GPU sampling rate (0 or None: no sampling).
    ``analyze=False`` skips the analysis on exit (e.g. for trials that only time steps).
    ``tensorboard`` (a log dir, or True for ``diagnose-tb/``) also writes the run there
    for TensorBoard: scalars, findings and a trace torch-tb-profiler reads correctly.
    ``optimizer`` with ``loss_fn(output, target)`` or ``step_fn(model, batch) -> loss``
    enable ``.autofix()`` (see :func:`diagnose.autofix.autofix`). ``memory`` tracks the
    untimed step after the window by kind and module (:mod:`diagnose.memory.inplace`).
    """

    def __init__(
        self,
        model: Any = None,
        loader: Any = None,
        *,
        steps: int = 5,
        warmup: int = 1,
        wait: int = 3,
        clock_steps: int = 10,
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
        memory: bool = True,
        **unknown: Any,
    ) -> None:
        if why := unknown_options("diagnose", unknown, Session.__init__):
            raise OptionError(why)
        why = (wrong_counts(steps=steps, warmup=warmup, wait=wait, clock_steps=clock_steps)
               or wrong_arguments(model, loader, sample_hz=sample_hz, optimizer=optimizer,
                                  loss_fn=loss_fn, step_fn=step_fn))
        if why is not None:
            raise CaptureError(why)
        self.model = model
        self.models = as_models(model)  # one model, several (a GAN's), or none
        self.loader = loader
        self.steps, self.warmup, self.wait, self.clock_steps = steps, warmup, wait, clock_steps
        self.out_dir = out_dir
        self.sample_hz = sample_hz or None  # 0 -> no samplers
        self.record_shapes, self.profile_memory, self.with_stack = (
            record_shapes, profile_memory, with_stack)
        self.print_report = print_report
        self.analyze = analyze
        self.optimizer = optimizer  # for .autofix(): it drives the steps itself
        self.loss_fn = loss_fn
        self.step_fn = step_fn
        self.memory = memory
        self.tensorboard = tensorboard  # a log dir (True: diagnose-tb) to write the run into
        self.tensorboard_dir: Path | None = None
        self.trainer: str | None = None  # the trainer whose callback drives it ("transformers")
        self.run_dir: Path | None = None
        self._dist: Any = None  # capture.distributed.DistributedCapture inside a process group
        self.report: Any = None
        self.notes: list[str] = []
        self._entered = False
        self._closed = False
        self._t_enter = 0.0

        self._profiler: WindowProfiler | None = None
        self._sampler_thread: SamplerThread | None = None
        self._hooks: Hooks | None = None
        self._loader_hooked = False  # the loader's batches were hooked (see loader_shim)
        self._warnings: WarningsOnce | None = None
        self.untold: str | None = None  # the report's first line: steps could not be told
        self._steps = Steps(None)  # replaced on enter, with the profiler and the schedule
        self._context: dict[str, Any] = {}
        self._cuda_mem: dict[str, Any] | None = None

    # ------------------------------------------------------------------ public
    @property
    def done(self) -> bool:
        """True once the profiled window and the unprofiled steps after it are recorded (the
        loop may stop: ``if d.done: break``)."""
        return self._steps.done

    @property
    def step_mode(self) -> str | None:
        """How steps are found: "optimizer", "dataloader", "manual" (None: none yet)."""
        return self._steps.mode

    @step_mode.setter
    def step_mode(self, mode: str | None) -> None:
        """"manual": only ``d.step()`` marks boundaries (trainer callbacks set it)."""
        self._steps.mode = mode

    @property
    def steps_seen(self) -> int:
        """Step boundaries the profiler's schedule saw."""
        return self._steps.seen

    def step(self) -> None:
        """Mark a step boundary yourself, once per step at its end; from the first call on,
        the automatic boundaries (optimizers, batches, model calls) are off."""
        if not self._entered:
            warnings.warn("d.step() before `with diagnose(...) as d:` marks nothing: the "
                          "session times the loop inside the with block", RuntimeWarning, 2)
        elif not self._closed:
            (self._hooks.manual if self._hooks is not None else self._steps.manual)()

    def autofix(self, **kwargs: Any) -> Any:
        """Apply the fixes the findings name in measured trials; keep what helps.

        Needs ``diagnose(model, loader, optimizer=opt, loss_fn=fn)`` (or ``step_fn=``), or
        the same keywords here.
        Uses this session's report when the ``with`` block already ran, else captures a
        baseline itself (its run folder under this session's ``out_dir`` where one was given). Keyword arguments go to :func:`diagnose.autofix.autofix`; returns its
        AutofixReport (``.print()``, ``.loader``, ``.best``, ``.code``)."""
        kwargs.setdefault("report", self.report)
        if self.out_dir is not None:  # a baseline it captures goes where this session's would
            kwargs.setdefault("capture", functools.partial(capture_baseline,
                                                           out_dir=self.out_dir))
        # the optimizer and the loss given here, else diagnose()'s
        opt, loss, step = (kwargs.pop(k, getattr(self, k)) for k in ("optimizer", "loss_fn",
                                                                     "step_fn"))
        return autofix(self.model, self.loader, opt, loss_fn=loss, step_fn=step, **kwargs)

    @property
    def worker_pids(self) -> list[int]:
        """pids of the DataLoader worker processes seen so far."""
        return sorted(self._steps.worker_pids)

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
        self._warnings = WarningsOnce().install()  # until the end of __exit__
        try:
            try:
                self._dist = distributed.current()  # torch.distributed: one folder for all ranks
                self.run_dir = (self._dist.run_dir(self.out_dir) if self._dist is not None
                                else new_run_dir(self.out_dir))
            except OSError as e:
                raise CaptureError(f"cannot create a run folder under {self.out_dir!r}: {e}") from e
            self._context = ctxmod.collect(self.models, self.loader, capacity=not self._dist)
            if isinstance(self._context.get("dataloader"), dict):  # the user's own names
                self._context["dataloader"].update(loader_names(self.loader))
            self._fit_schedule()
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
            dl = self._context.get("dataloader") or {}
            before = max(self.wait - 1, 0)  # the run's first step is not timed
            self._steps = Steps(
                self._profiler,
                finder=StepFinder(self.models),
                # ranks must agree on d.done: a fixed plan, at the most a lone run's
                # steps that vary would get (ranks that share CPUs jitter)
                after=max(self.clock_steps - before, 1) * (EXTEND if self._dist else 1),
                settle=settle_steps(dl.get("num_workers"), dl.get("prefetch_factor")),
                extend=self._dist is None,  # ranks must agree on d.done: a fixed plan
                on_window_over=self._window_over, on_error=self._internal_error,
                sync=self._device_sync())
            self._install_hooks()
            in_loop_gates(self._steps, self._context, lambda: self._hooks.forward
                          if self._hooks else None, self.loader)
            if self.sample_hz:
                self._sampler_thread = SamplerThread(
                    self._make_samplers(), self.run_dir, self.sample_hz
                )
                if self._dist is not None:  # samples.rank<N>.jsonl
                    self._sampler_thread.path = self._dist.samples_path(self.run_dir)
                self._sampler_thread.start()
            self._profiler.start()
        except BaseException:
            self._teardown()
            self._quiet_off()
            raise
        self._steps.start()
        return self

    def _fit_schedule(self) -> None:
        """Shorten the schedule up front when one pass over ``loader`` has fewer step
        boundaries than it needs (a batch starts each step but the first), so that the
        profiled window holds whole steps; say so in the notes."""
        try:  # a loader, not a range or a tensor the loop slices (runinfo.dataloader_info)
            n = len(self.loader) if self._context.get("dataloader") is not None else None
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

    def _device_sync(self) -> Any:
        """The model's CUDA device's synchronize for the step clock (None off a GPU)."""
        dev = self._context.get("device") or {}
        if dev.get("type") != "cuda" or dev.get("index") is None:
            return None
        import torch

        index = int(dev["index"])
        return lambda: torch.cuda.synchronize(index)

    def _make_samplers(self) -> list[Sampler]:
        pids = (lambda: list(self._steps.worker_pids)) if self._loader_hooked else None
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
        self._hooks = Hooks(self._steps, self.models, self.loader, self.notes,
                            InPlaceStep() if self.memory else None,
                            names=model_names(self.model))
        self._loader_hooked = self._hooks.loader_hooked

    def _remove_hooks(self) -> None:
        if self._hooks is not None:
            self._hooks.remove()

    def _quiet_off(self) -> None:
        """torch's warnings as they were before the session (:class:`WarningsOnce`)."""
        if self._warnings is not None:
            self._warnings.remove()
            self._warnings = None

    # ------------------------------------------------------------------ hooks
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
        if exc is None:
            self._steps.finish()  # a GPU's queue behind the steps; the others' CPUs to here
        self._teardown()
        try:
            self._finish(exc, oom)
        except Exception as e:  # the user's own exception (if any) must come through untouched
            msg = f"torch-diagnose: could not finish the run in {self.run_dir}: {type(e).__name__}: {e}"
            self.notes.append(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        finally:
            self._quiet_off()
            # the analysis' leftovers are collected here, before the user's code runs on
            # (as the profiler's are when its window ends), so that the loop's next full
            # collections do not walk them; a loop that turned the collector off is left so
            if gc.isenabled():
                gc.collect()
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
                    self._steps.closed = True
                    self._steps.restore_threads()  # a one-thread step the block raised in
                    with _active_lock:
                        if _active is self:
                            _active = None

    def _load_metrics(self, run_dir: Path) -> dict[str, Any]:
        """What the host samples say of the CPUs' load beside the run (the other processes'
        work, the workers alive): {} where nothing was sampled."""
        if self._sampler_thread is None:
            return {}
        try:
            m = samples_metrics(load_samples(run_dir, self._dist.rank if self._dist else None))
        except Exception as e:  # the note goes without it
            self._internal_error("host samples", e)
            return {}
        return {k: m.get(k) for k in ("host_cpu_others_cpus", "workers_count")}

    def _finish(self, exc: BaseException | None, oom: dict[str, Any] | None) -> None:
        """Assemble ``context.json`` from what was recorded and hand it to
        :func:`~diagnose.session.publish.publish`: the recorded context, the probes after
        the loop, the window's notes, the capture section, the clock's note, the outcome."""
        run_dir = self.run_dir
        if run_dir is None:
            return
        ctx = self._recorded_context()
        self._time_after_loop(ctx, exc)
        traces = self._note_window(run_dir, exc)
        ctx["capture"] = self._capture_section(run_dir, traces)
        self._note_clock(ctx, run_dir)
        if exc is not None:
            ctx["exception"] = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        ctx["oom"] = oom
        out = publish(run_dir, ctx, dist=self._dist, analyze=self.analyze,
                      run_analysis=_run_analysis, print_report=self.print_report,
                      tensorboard=self.tensorboard)
        self.report, self.tensorboard_dir = out.report, out.tensorboard_dir
        self.notes.extend(out.notes)

    def _recorded_context(self) -> dict[str, Any]:
        """The context collected on enter, with what the loop showed: the optimizers that
        stepped the models, the models it called (where none was given), a DataLoader made
        again each epoch, and the objects ``gc.freeze()`` had moved."""
        ctx = dict(self._context)
        ctx["dataloader"] = ctxmod.remade_loader(ctx.get("dataloader"), self._steps.loaders_remade)
        opts = self._steps.finder.optimizer_list
        ctx["optimizer"] = ctxmod.optimizer_info(opts[0] if opts else None)
        ctx["optimizers"] = [ctxmod.optimizer_info(o) for o in opts]
        found = self._hooks.found_models() if self._hooks is not None else []
        if not self.models and found:
            info = ctxmod.models_info(found)
            ctx["model"] = None if info is None else {**info, "found": True}
        ctx["gc_frozen_objects"] = frozen_objects()
        ctx["trainer"] = self.trainer
        return ctx

    def _time_after_loop(self, ctx: dict[str, Any], exc: BaseException | None) -> None:
        """The probes after the loop (:func:`~.after_loop.time_after_loop`), on a run that
        did not raise; the forward's inputs and the first batch are let go either way."""
        hooks = self._hooks
        fwd = hooks.forward if hooks is not None else None
        # what the loop called of each model (the model, else its parts): the first is timed
        works, calls = hooks.take_works() if hooks is not None else ([], {})
        batch, self._steps.first_batch = self._steps.first_batch, None
        memory_after_loop(ctx, hooks.memory if hooks is not None else None, step_fn=self.step_fn,
                          loss_fn=self.loss_fn, on_error=self._internal_error, notes=self.notes)
        if exc is None:
            first = works[0][0] if works else fwd.model if fwd is not None else self.model
            st = self._steps
            time_after_loop(ctx, model=first, loader=self.loader, forward=fwd, batch=batch,
                            on_error=self._internal_error, clock=st.clock(), others=works[1:],
                            worker_pids=self.worker_pids, others_cpus=st.after_others_cpus,
                            loader_starts=st.loader_starts, calls=calls,
                            optimizers=st.finder.optimizer_list)

    def _note_window(self, run_dir: Path, exc: BaseException | None) -> list[str]:
        """The profiler's problems and a window cut short (by the loop's end or by
        ``exc``) into the notes; the device's peak memory where the window ended early.
        Returns this rank's trace files (none: a note says so)."""
        prof = self._profiler
        self.untold = untold_note(self._steps.finder, ended_early=exc is not None)
        if self.untold is not None:  # the one true reason, first
            self.notes.insert(0, self.untold)
        elif prof is not None:
            self.notes.extend(window_notes(prof, self._steps, self._schedule, exc))
        self.notes.extend(self._steps.changes)
        note = others_note(self._steps.finder, self._steps.clock(), len(self.models))
        if note is not None:
            self.notes.append(note)
        if self._cuda_mem is None and prof is not None and prof.active_start is not None:
            self._cuda_mem = ctxmod.cuda_memory(self._context)  # the window ended early
        traces = own_traces(run_dir, self._dist)
        if not traces and self.untold is None:
            ended = "ended" if exc is None else f"raised {type(exc).__name__}"
            self.notes.append(f"no trace was written: the loop {ended} before the active "
                              "window")
        return traces

    @property
    def _schedule(self) -> tuple[int, int, int]:
        return (self.wait, self.warmup, self.steps)

    def _capture_section(self, run_dir: Path, traces: list[str]) -> dict[str, Any]:
        """``context.json``'s ``capture`` part (:func:`~.publish.capture_section`) with the
        session's own keys: settings, memory, hooks, workers, samples, notes so far."""
        st = self._sampler_thread
        return capture_section(
            run_dir=run_dir, prof=self._profiler, steps=self._steps, schedule=self._schedule,
            settings={"clock_steps": self.clock_steps, "record_shapes": self.record_shapes,
                      "profile_memory": self.profile_memory, "with_stack": self.with_stack,
                      "sample_hz": self.sample_hz},
            traces=traces,
            extra={"cuda_memory": self._cuda_mem, "started": self._t_enter,
                   "dataloader_hooks": self._loader_hooked,
                   "loader_given_other": getattr(self._hooks, "loader_given_other", None),
                   "step_signals": self._steps.finder.signals(),
                   "steps_untold": self.untold,
                   "worker_pids": self.worker_pids,
                   "sampler_rows": st.rows if st is not None else 0,
                   "notes": list(self.notes)})

    def _note_clock(self, ctx: dict[str, Any], run_dir: Path) -> None:
        """An unprofiled figure too noisy to trust, into the notes (the session's and the
        capture section's); who held the CPUs its steps waited for (the run's own workers,
        or other work) comes from the samples."""
        m = {**context_metrics(ctx), **self._load_metrics(run_dir)}
        for note in (clock_note(m, rank=getattr(self._dist, "rank", None)), load_shift_note(m)):
            if note is not None:
                self.notes.append(note)
                ctx["capture"]["notes"].append(note)


#: a bound on the baseline capture's steps, past what the session's own plan can ask
#: (its window, then at most 30x its clock's steps after it: diagnose.capture.steps)
BASELINE_MAX_STEPS = 2000


def capture_baseline(w: Any, cfg: Any, *, steps: int = 5,
                     out_dir: str | os.PathLike[str] | None = None) -> Any:
    """Capture ``steps`` profiled steps of ``cfg`` with the Session a user would run, and
    return its Report (the same analysis as ``torch-diagnose analyze``). This is the
    ``capture`` that :meth:`Session.autofix` hands to :func:`diagnose.autofix.autofix`."""
    from diagnose.autofix.trial import Trial, TuneError, release_memory

    tmp = tempfile.mkdtemp(prefix="diagnose-autofix-") if out_dir is None else None
    trial = Trial(w, cfg)
    session = Session(w.model, trial.loader, steps=steps, warmup=1, wait=1,
                      out_dir=tmp if out_dir is None else out_dir, print_report=False)
    try:
        try:
            with session, trial:
                # until the session is done: its clock times seconds of steps after the window,
                # as in a user's loop (fewer steps after it widen the predictions' spread)
                for _ in range(BASELINE_MAX_STEPS):
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
    """:func:`diagnose.autofix.autofix` with this module's baseline capture: findings come from
    ``report=`` when given, else from profiled steps of the baseline (see its arguments)."""
    from diagnose.autofix import autofix as run

    kwargs.setdefault("capture", capture_baseline)
    return run(model, loader, optimizer, **kwargs)


# The public name: ``with diagnose(model, loader) as d:`` makes a Session. One class, one
# signature: every option is declared once, in Session.__init__.
diagnose = Session
