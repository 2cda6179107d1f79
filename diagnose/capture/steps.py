"""The session's step clock, driven by the step boundaries the loop shows.

Boundaries are found by :class:`~diagnose.capture.boundaries.StepFinder` from the loop's
batches, model calls, backward and optimizer steps (or ``d.step()``, which turns the
others off); :class:`Steps` takes each to the profiler's schedule and to the clock. A
boundary of a stronger kind turning up during the ``wait`` steps starts them over (the
steps before it are kept as ``untold``, timed but never counted).

The clock times every step with ``time.perf_counter`` and its phase: ``wait`` (before the
profiled window), ``warmup``/``active`` (the window), ``settle`` (just after it, skewed by
prefetched batches and queued device work), ``after`` (timed without the profiler) and,
where the session asks, ``one_thread`` among them (:data:`ONE_THREAD_EVERY`) and
``forked`` after them (:mod:`~diagnose.capture.fork_steps`). The
profiler's own work at a boundary belongs to no step. Per step it also records the wait
for a CPU other processes held (Linux schedstat), the DataLoader wait, the dataset's reads
and collate time where batches are built in this process (:mod:`~diagnose.capture.loader_shim`),
the batches' bytes, the model calls and the loader iterators started (an epoch's start:
:data:`CLOCK_COLUMNS`).

On a GPU the host can run ahead of the device, so the ``after`` steps are one block as a
user's own timing would take it: the queue is drained (untimed) before the block and once
at its end, timed (:attr:`Steps.drain_ms`); no step in between is synchronised.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diagnose.capture import loader_shim
from diagnose.capture.batch_bytes import batch_nbytes
from diagnose.capture.boundaries import StepFinder
from diagnose.capture.fork_steps import ForkedSteps
from diagnose.capture.others import cpu_snapshot, cpu_wait_ns, cpus_since
from diagnose.metrics.context import UNRELIABLE_SPREAD
from diagnose.metrics.context.loop_fork import PHASE as FORKED

#: columns of ``context.json``'s ``capture.step_clock`` (one list per column, one entry a
#: step): phase, step ms, DataLoader wait ms, and where known (else null) the fetch (dataset
#: reads) ms, collate ms, batches pulled, the bytes of their tensors, the wait for a CPU and
#: the time in the model's forward calls, and the garbage collector's pauses (ms, how
#: many of them were full collections, and the ms of them that fell inside the loop's
#: wait for a batch: the loader's own allocations tripped them; then the full (generation
#: 2) collections' ms, all and inside the wait: gc.freeze() spares those, not the young),
#: the time in the run's optimizers' ``step()`` (their step hooks time it), and the
#: outermost calls of the models (null where no model is hooked), the loader iterators
#: started, and the time from an optimizer's ``step()`` returning, or a backward's end
#: with no optimizer step after it, to the next outermost model call (``between_ms``: the
#: loop's own work between steps and micro-batches, the DataLoader's wait inside it; null
#: until an optimizer step was counted), the collector's pauses in that time outside the
#: DataLoader's wait (``gc_between_ms``: CF006's, not the loop's own work), and the time
#: from a timed CPU model's output getting its gradient to the backward's end
#: (``backward_ms``: the models' backward; null where none began), and the loop's own work
#: in the step from the loader's last iterator running out to a new one's ``iter()``
#: (``epoch_gap_ms``: an evaluation between epochs)
CLOCK_COLUMNS = ("phase", "ms", "dataloader_ms", "fetch_ms", "collate_ms", "batches",
                 "batch_bytes", "cpu_wait_ms", "forward_ms", "gc_ms", "gc_full",
                 "gc_loader_ms", "gc_full_ms", "gc_full_loader_ms", "optimizer_ms",
                 "forwards", "loader_starts", "between_ms", "gc_between_ms", "backward_ms",
                 "epoch_gap_ms")

#: steps whose (p90 - p10) / median is above the bound the report calls unreliable are
#: timed longer, up to EXTEND times the planned number
EXTEND = 3
#: steps in which the garbage collector made a full collection (but fewer than GC_FULL_SEEN
#: of them after the window) are timed longer still: the collector's share of the mean is
#: its pause over the spacing between full collections (diagnose.metrics.context), which
#: GC_FULL_SEEN of them give to about one step in four spacings; up to GC_EXTEND times the
#: planned steps, and past EXTEND times only while the steps after the window took less
#: than GC_EXTEND_S seconds in all (a cheap wait: a 40 ms step paused every 6 steps needs
#: about 30 steps, 1.2 s)
GC_FULL_SEEN = 5
GC_EXTEND = 20
GC_EXTEND_S = 5.0
#: steps after the window are timed for at least this long (s), within MIN_AFTER_EXTEND
#: times the planned number: a host's pace drifts over seconds (workers' busy spells phase
#: against the steps), so a few short steps are a sample of one moment
MIN_AFTER_S = 2.5
MIN_AFTER_EXTEND = 30
#: with :attr:`Steps.one_thread` on, every ONE_THREAD_EVERY-th step after the window (the
#: settle steps past) is followed by one on one intra-op thread, up to ONE_THREAD_STEPS of
#: them: the thread-count change itself, made on the job's own steps, each beside steps on
#: torch's threads (diagnose.metrics.context.loop_threads). They are steps of their own
#: (phase ``one_thread``): the block's count, its end and every step time leave them out
ONE_THREAD_EVERY = 4
ONE_THREAD_STEPS = 12

@dataclass
class _Step:
    """What the step now running has accumulated."""

    t0: float
    wait0: int | None = None  # cpu_wait_ns() at the start
    dl: float = 0.0
    fetch: float | None = None
    collate: float | None = None
    batches: int = 0
    nbytes: int | None = None
    forward: float | None = None
    gc: float = 0.0
    gc_full: int = 0
    gc_loader: float = 0.0  # the pauses inside the wait for a batch
    gc_full_s: float = 0.0  # the full collections' pauses
    gc_full_loader: float = 0.0  # of those, inside the wait for a batch
    optimizer: float | None = None  # in the run's optimizer.step()
    forwards: int | None = None  # outermost model calls
    starts: int = 0  # new loader iterators whose first batch came in this step (epochs)
    gap: float = 0.0  # of it, from the last iterator running out to the new one's iter()
    between: float = 0.0  # from an optimizer step's return (or a backward's end) to the
    # next model call
    gc_between: float = 0.0  # the pauses in that time, outside the wait for a batch
    backward: float | None = None  # from a timed model's output gradient to the backward's end


def settle_steps(num_workers: Any, prefetch_factor: Any) -> int:
    """Steps left untimed right after the window: the first (the profiler's teardown) and
    as many as the workers can have prefetched while the trace was written."""
    nw = num_workers if isinstance(num_workers, int) and num_workers > 0 else 0
    pf = prefetch_factor if isinstance(prefetch_factor, int) and prefetch_factor > 0 else 2
    return 1 + min(nw * pf, 16)


class Steps:
    """Takes the step boundaries to the profiler's schedule, keeps the clock.

    ``profiler`` is a started :class:`~diagnose.capture.profiler.WindowProfiler` (or
    None); ``finder`` tells where the boundaries fall (a fresh
    :class:`~diagnose.capture.boundaries.StepFinder` by default: any optimizer counts).
    ``after`` steps are timed after the window once ``settle`` steps ran (up to
    :data:`EXTEND` times more while they vary widely, unless ``extend`` is False: ranks of
    a process group must agree on when they are done), then :attr:`done` turns True.
    ``on_window_over()`` runs once the window ends; ``on_error(where, exc)`` is told of any
    problem (the user's loop never sees one).
    """

    def __init__(self, profiler: Any, *, finder: StepFinder | None = None,
                 after: int = 8, settle: int = 1, extend: bool = True,
                 on_window_over: Callable[[], None] | None = None,
                 on_error: Callable[[str, BaseException], None] | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        self.profiler = profiler
        # the device's synchronize (None on a CPU run): once before the ``after`` block,
        # once at its end (the drain, timed)
        self.sync = sync
        self.drain_ms: float | None = None
        # what other processes and this one's workers took over the steps after the window
        # (the CPU waits' own; the host samples cover the window): snapshots at its ends
        self._cpu0: tuple[float, ...] | None = None
        self.after_others_cpus: float | None = None
        self.after_workers_cpus: float | None = None
        self.finder = finder if finder is not None else StepFinder()
        self.finder.on_change = self._on_change
        self.after, self.settle, self.extend = after, settle, extend
        self.on_window_over = on_window_over
        self.on_error = on_error
        self.seen = 0  # boundaries the profiler's schedule saw
        self.opt_steps = 0
        self._backward_t0: tuple[float, _Step] | None = None  # a backward timed now
        self.batches = 0
        self.done = False
        self.closed = False
        self.hook: loader_shim.LoaderHook | None = None
        self.loaders_remade = 0  # iterators of new DataLoaders made as the given one was
        self.worker_pids: set[int] = set()
        self.rows: list[tuple[Any, ...]] = []
        self.first_batch: Any = None
        self.gc_timed = False  # the session times the collector's pauses (gc_ms column)
        self.forwards_counted = False  # models are hooked (forwards column)
        self.on_boundary: Callable[[], None] | None = None  # told after each boundary
        self.changes: list[str] = []  # the boundaries' kind changed: what happened
        self._after = 0
        self._untold = False  # the step ending at the next boundary began under another kind
        self._last_iter: weakref.ReferenceType[Any] | None = None
        self._step: _Step | None = None
        self._loading = False  # inside the loader's __next__ (on_next .. on_batch)
        self.loader_starts: list[dict[str, Any]] = []  # capture.loader_starts (publish.py)
        self._started: tuple[float, float] | None = None  # the new iterator's iter(): when, s
        self._ended: float | None = None  # when the loader's last iterator ran out
        self._opt_t0: dict[int, float] = {}  # a counted optimizer.step() started then
        self._opt_end: float | None = None  # a counted optimizer.step() returned then
        self.between_timed = False  # a step's between_ms was timed (the column is known)
        # steps on one thread after the window (ONE_THREAD_EVERY): whether they may run
        # (the session's gate, asked once, at the first one's turn), torch's thread count
        # to put back (None: the step now runs on torch's threads), how many ran
        self.one_thread: Callable[[], bool] | None = None
        self._one_thread_ok: bool | None = None
        self._threads_back: int | None = None
        self.one_thread_steps = 0
        self.forked = ForkedSteps()  # steps after a fork, once the block is over (its gate)

    # ------------------------------------------------------------------ inputs
    def start(self) -> None:
        """The first step starts now."""
        self._step = _Step(time.perf_counter(), cpu_wait_ns())

    @property
    def mode(self) -> str | None:
        """The kind of boundary found so far (:data:`~diagnose.capture.boundaries.RANK`)."""
        return self.finder.mode

    @mode.setter
    def mode(self, mode: str | None) -> None:
        if mode == "manual":
            self.finder.manual()
        else:
            self.finder.mode = mode

    @property
    def optimizer(self) -> Any:
        """The first optimizer whose steps counted (None: none stepped)."""
        opts = self.finder.optimizer_list
        return opts[0] if opts else None

    def manual(self) -> None:
        if self.closed or self.done:
            return
        self.finder.manual()
        self.advance()

    def on_optimizer_start(self, opt: Any, args: Any = None, kwargs: Any = None) -> None:
        """An optimizer's ``step()`` begins (a global pre-hook): its start is kept, and the
        step's time counts at its end if the optimizer does (one look at its parameters a
        step, in :meth:`on_optimizer_step`)."""
        if not (self.done or self.closed):
            self._opt_t0[id(opt)] = time.perf_counter()
            self._opt_end = None  # the optimizer's own work is not the loop's

    def on_optimizer_step(self, opt: Any, args: Any = None, kwargs: Any = None) -> None:
        try:
            if self.done or self.closed:
                return
            now = time.perf_counter()
            t0 = self._opt_t0.pop(id(opt), None)
            st = self._step
            before = self.finder.totals["optimizer_steps"]
            boundary = self.finder.optimizer_step(opt)
            counted = self.finder.totals["optimizer_steps"] - before
            if counted and t0 is not None and st is not None:
                st.optimizer = (st.optimizer or 0.0) + now - t0
            if boundary:
                self.advance()
            if counted:
                self._opt_end = time.perf_counter()
            self.opt_steps += counted
        except Exception as e:  # never break the user's step
            self._error("optimizer hook", e)

    def on_model_call(self, grad_enabled: bool) -> None:
        """The loop called a model (its outermost call; the model hooks tell)."""
        try:
            if self.done or self.closed:
                return
            end, self._opt_end = self._opt_end, None
            if end is not None and self._step is not None:  # in the step it elapsed in
                self._step.between += time.perf_counter() - end
                self.between_timed = True
            if self.finder.forward(grad_enabled):
                self.advance()
            st = self._step
            if st is not None:
                st.forwards = (st.forwards or 0) + 1
        except Exception as e:
            self._error("model hook", e)

    def on_grad(self, param: Any) -> None:
        """A probe parameter's gradient was accumulated (a backward ran). Where the loop
        steps an optimizer, the backward's end (:meth:`on_backward_end`, queued to run as
        autograd finishes) starts the loop's own time too: a gradient accumulation's next
        micro-batch is made before its model call, with no optimizer step in between."""
        try:
            if not (self.done or self.closed):
                self.finder.watch_grad(param)
                if self.opt_steps:
                    from torch.autograd import Variable

                    Variable._execution_engine.queue_callback(self.on_backward_end)
        except Exception as e:
            self._error("backward hook", e)

    def on_backward_end(self) -> None:
        """A backward finished: the time to the next model call is the loop's own, unless
        an optimizer step comes first (:meth:`on_optimizer_start` drops it)."""
        if not (self.done or self.closed):
            self._opt_end = time.perf_counter()

    def on_backward_start(self) -> None:
        """A timed model's output got its gradient (a forward timer's hook): the models'
        backward runs from now to autograd's end (a callback queued for it), once for
        several timed models in one backward (one of an earlier step that never ended, its
        backward raised, is let go)."""
        try:
            st, open_ = self._step, self._backward_t0
            if self.done or self.closed or st is None or (open_ is not None and open_[1] is st):
                return
            from torch.autograd import Variable

            Variable._execution_engine.queue_callback(self._backward_done)
            self._backward_t0 = (time.perf_counter(), st)
        except Exception as e:
            self._error("backward timing", e)

    def _backward_done(self) -> None:
        got, self._backward_t0 = self._backward_t0, None
        if got is not None and got[1] is self._step and not (self.done or self.closed):
            got[1].backward = (got[1].backward or 0.0) + time.perf_counter() - got[0]

    def on_next(self, it: Any) -> None:
        """The loop asks the loader's iterator ``it`` for its next batch."""
        self._loading = True
        try:
            last = self._last_iter() if self._last_iter is not None else None
            if last is not it:
                self._last_iter = weakref.ref(it)
                self.worker_pids.update(loader_shim.worker_pids(it))
                if self.hook is not None and not self.closed:
                    self._started = self.hook.started.pop(it, None)
                    self.loaders_remade += it in self.hook.remade
            if self.hook is not None and not (self.done or self.closed):
                self.hook.time_fetcher(it)
            if self.done or self.closed:
                return
            self.batches += 1
            if self.finder.pull():
                self.advance()
        except Exception as e:
            self._error("DataLoader hook", e)

    def _on_change(self, old: str | None, new: str) -> None:
        """Boundaries of another kind from now on: before the window records, its wait (or
        warmup) starts over, and the steps timed so far are ``untold``; inside the window,
        a note says so."""
        prof = self.profiler
        if prof is not None and not prof.finished and prof.restart_wait() is not None:
            self.rows = [("untold", *r[1:]) if r[0] == "wait" else r for r in self.rows]
            self.seen = prof.steps
            self._untold = True
            return
        if prof is not None and not prof.finished and prof.phase in ("warmup", "active"):
            self.changes.append(
                f"steps were found from {old or 'nothing'} until the profiled window's "
                f"{prof.phase} steps, from {new} after: the window's first steps may not be "
                "whole ones (d.step() marks them for sure)")

    def on_batch(self, it: Any, seconds: float, batch: Any) -> None:
        """The batch came after the loop waited ``seconds`` for it."""
        self._loading = False
        try:
            started, self._started = self._started, None
            ended = None
            if started is not None:  # a new iterator's first batch
                ended, self._ended = self._ended, None
                self.loader_starts.append({
                    "iter_ms": round(started[1] * 1e3, 4),
                    "first_wait_ms": round(seconds * 1e3, 4),
                    "workers": len(loader_shim.worker_pids(it)),
                    # the loop's own work from the last epoch's end to this iter()
                    "gap_ms": None if ended is None or started[0] < ended
                    else round((started[0] - ended) * 1e3, 4)})
            if batch is None:  # the iterator ran out (or raised)
                self._ended = time.perf_counter()
            st = self._step
            if st is None or self.done or self.closed:
                return
            if started is not None and ended is not None:  # the gap's part in this step
                st.gap += max(started[0] - max(ended, st.t0), 0.0)
            st.starts += started is not None
            st.dl += seconds
            st.batches += 1
            if self.first_batch is None:  # for the hand-over timing after the loop
                self.first_batch = batch
            hook = self.hook
            if hook is not None and loader_shim.in_process(it):
                fetch, collate, _ = hook.fetch_times.take()
                st.fetch = (st.fetch or 0.0) + max(fetch - collate, 0.0)
                st.collate = (st.collate or 0.0) + collate
            nb = batch_nbytes(batch) if batch is not None else None
            if nb is not None:
                st.nbytes = (st.nbytes or 0) + nb
        except Exception as e:
            self._error("DataLoader timing", e)

    def on_gc(self, seconds: float, generation: int) -> None:
        """The garbage collector paused the training thread for ``seconds``."""
        st = self._step
        if st is not None and not (self.done or self.closed):
            st.gc += seconds
            full = generation == 2
            st.gc_full += full
            st.gc_full_s += seconds if full else 0.0
            if self._loading:
                st.gc_loader += seconds
                st.gc_full_loader += seconds if full else 0.0
            elif self._opt_end is not None:  # in the loop's own time between steps
                st.gc_between += seconds

    def on_forward(self, seconds: float) -> None:
        """The model's forward call took ``seconds`` (its hooks time it)."""
        st = self._step
        if st is not None and not (self.done or self.closed):
            st.forward = (st.forward or 0.0) + seconds

    # ------------------------------------------------------------------ boundary
    def advance(self) -> None:
        now = time.perf_counter()
        wait = cpu_wait_ns()
        prof = self.profiler
        phase = "after" if prof is None or prof.finished else prof.phase
        if phase != "after":
            self.seen += 1
        elif self._after < self.settle:
            phase = "settle"
        one = self._threads_back is not None  # the step ending here ran on one thread
        if one:
            self.restore_threads(fork=False)
        forked = self.forked.running  # the step ending here ran after a fork
        st = self._step
        if st is not None:  # the step that ends here, by the session's clock
            self.rows.append(self._row(st, "untold" if self._untold else "one_thread" if one
                                       else FORKED if forked else phase, now, wait))
        self._untold = False
        if one:
            pass  # a step of its own: the block's count and its end are the after steps'
        elif forked:
            self.done = self.forked.counted()
        elif phase in ("after", "settle"):
            self._after += 1
            if self._after >= self.settle + self.after and not self._keep_timing():
                self.drain_ms = self._drain()  # the queue the block's steps left behind
                self.after_others_cpus, self.after_workers_cpus = cpus_since(self._cpu0)
                self.done = not self.forked.begin(self._error)
            elif self._after == self.settle:
                self._drain()  # the block starts on an empty queue
            if self._after == max(self.settle, 1) and self._cpu0 is None and not self.done:
                self._cpu0 = cpu_snapshot()
            if phase == "after" and not self.done and not self.forked.running:
                self._one_thread_next()
        elif prof is not None:
            try:
                prof.step()
            except Exception as e:
                self._error("profiler step", e)
                with contextlib.suppress(Exception):
                    prof.stop()
            if prof.finished and self.on_window_over is not None:
                self.on_window_over()
        if self.on_boundary is not None:
            self.on_boundary()
        # the next step starts now: the profiler's own work at the boundary (the trace's
        # export after the last active step) belongs to no step
        if self.hook is not None:
            self.hook.fetch_times.take()
        self._step = _Step(time.perf_counter(), cpu_wait_ns())

    def _one_thread_next(self) -> None:
        """Run the next step on one intra-op thread where it is its turn
        (:data:`ONE_THREAD_EVERY`, :data:`ONE_THREAD_STEPS`) and the session's gate
        (:attr:`one_thread`, asked once, at the first turn) lets it."""
        past = self._after - self.settle
        if (self.one_thread is None or past <= 0 or past % ONE_THREAD_EVERY
                or self.one_thread_steps >= ONE_THREAD_STEPS):
            return
        try:
            if self._one_thread_ok is None:
                self._one_thread_ok = bool(self.one_thread())
            if not self._one_thread_ok:
                return
            import torch

            n = torch.get_num_threads()
            if n < 2:
                return
            torch.set_num_threads(1)
            self._threads_back = n
            self.one_thread_steps += 1
        except Exception as e:
            self._one_thread_ok = False
            self._error("one-thread step", e)

    def restore_threads(self, fork: bool = True) -> None:
        """Put torch's thread count back where a one-thread step set it (its end, the
        loop's end, the session's teardown), and let a forked child go (``fork``)."""
        if fork:
            self.forked.release()
        back, self._threads_back = self._threads_back, None
        if back is not None:
            import torch

            torch.set_num_threads(back)

    def _keep_timing(self) -> bool:
        """Steps that vary widely (a busy machine), that a rare full collection paused, or
        that took less than :data:`MIN_AFTER_S` in all get more of them timed
        (:data:`EXTEND`, :data:`GC_FULL_SEEN`, :data:`MIN_AFTER_EXTEND`): their median and
        mean, and the collector's share of the mean, then hold better."""
        if not self.extend:
            return False
        free = [r for i, r in enumerate(self.rows) if i > 0 and r[0] in ("wait", "after")]
        times = [r[1] for r in free]
        if len(times) < 3:
            return False
        plain = self._after < self.settle + EXTEND * self.after
        # full collections are rare and long: their share of the step is only known once
        # a few were seen, spaced apart after the window
        if any(r[10] for r in free):
            after = [r for r in self.rows if r[0] == "after"]
            seen = sum(r[10] or 0 for r in after)
            cheap = (self._after < self.settle + GC_EXTEND * self.after
                     and sum(r[1] for r in after) < GC_EXTEND_S * 1e3)
            if seen < GC_FULL_SEEN and (plain or cheap):
                return True
        if (self._after < self.settle + MIN_AFTER_EXTEND * self.after
                and sum(r[1] for r in self.rows if r[0] == "after") < MIN_AFTER_S * 1e3):
            return True
        if not plain:
            return False
        med = statistics.median(times)
        deciles = statistics.quantiles(times, n=10, method="inclusive")  # as the report's
        return med > 0 and (deciles[-1] - deciles[0]) / med > UNRELIABLE_SPREAD

    def _row(self, st: _Step, phase: str, now: float, wait: int | None) -> tuple[Any, ...]:
        """The clock's row (:data:`CLOCK_COLUMNS`) of step ``st``, ending at ``now``."""
        return (phase, (now - st.t0) * 1e3,
                None if self.hook is None else st.dl * 1e3,
                None if st.fetch is None else st.fetch * 1e3,
                None if st.collate is None else st.collate * 1e3,
                st.batches, st.nbytes,
                None if wait is None or st.wait0 is None else (wait - st.wait0) / 1e6,
                None if st.forward is None else st.forward * 1e3,
                st.gc * 1e3 if self.gc_timed else None,
                st.gc_full if self.gc_timed else None,
                st.gc_loader * 1e3 if self.gc_timed else None,
                st.gc_full_s * 1e3 if self.gc_timed else None,
                st.gc_full_loader * 1e3 if self.gc_timed else None,
                None if st.optimizer is None else st.optimizer * 1e3,
                (st.forwards or 0) if self.forwards_counted else None,
                st.starts if self.hook is not None else None,
                st.between * 1e3 if self.between_timed else None,
                st.gc_between * 1e3 if self.between_timed and self.gc_timed else None,
                None if st.backward is None else st.backward * 1e3,
                st.gap * 1e3 if self.hook is not None else None)

    def finish(self) -> None:
        """The loop ended before the clock was done (a short loader, a loop of a fixed
        length): on a GPU the ``after`` block still ends with its drain. The step in progress
        counts as one of the block where it took at least half the block's median step (the
        loop broke after a step's work); less is the loop's way out, left out. On a CPU
        the other processes' CPUs are read up to the loop's end."""
        self.restore_threads()  # a one-thread step the loop broke out of
        if self.done or self.drain_ms is not None:
            return
        if self.sync is None:
            if self.after_others_cpus is None:
                self.after_others_cpus, self.after_workers_cpus = cpus_since(self._cpu0)
            return
        after = [r[1] for r in self.rows if r[0] == "after"]
        if not after:
            return
        st, now = self._step, time.perf_counter()
        if st is not None and (now - st.t0) * 1e3 >= 0.5 * statistics.median(after):
            self.rows.append(self._row(st, "after", now, cpu_wait_ns()))
            self._step = None
        self.drain_ms = self._drain()
        self.after_others_cpus, self.after_workers_cpus = cpus_since(self._cpu0)

    def _drain(self) -> float | None:
        """Wait for the device's queued work; the ms it took (None without a device)."""
        if self.sync is None:
            return None
        t0 = time.perf_counter()
        try:
            self.sync()
        except Exception as e:
            self._error("device synchronize", e)
            return None
        return (time.perf_counter() - t0) * 1e3

    def clock(self) -> dict[str, list[Any]]:
        """The clock as ``context.json`` stores it: one list per :data:`CLOCK_COLUMNS`."""
        cols: dict[str, list[Any]] = {c: [] for c in CLOCK_COLUMNS}
        for row in self.rows:
            for c, v in zip(CLOCK_COLUMNS, row, strict=True):
                cols[c].append(round(v, 4) if isinstance(v, float) else v)
        return cols

    def _error(self, where: str, e: BaseException) -> None:
        if self.on_error is not None:
            self.on_error(where, e)
