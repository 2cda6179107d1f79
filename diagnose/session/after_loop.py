"""The probes a session runs once the ``with`` block has ended, into ``context.json``.

No step is on the clock by then, so the timings disturb nothing the report states. The
loader's workers a loop left alive are first left to fall idle (their batches in flight
made). The probes give the step model its measured inputs (diagnose.capture.probes): a
worker's batch against the in-process one (under ``dataloader``); the CPUs' capacity
(``cpu_capacity``, and the span of its rounds); a worker's hand-over, start and stop; the
model's work on torch's threads and on one (``threads``; two timings seconds apart where
the threads split reads them or the budget allows, a third where those two disagree, the
two that agree joined and all their ratios' span in ``threads_span``), only where the
loop has a DataLoader (the threads split, the one fix they serve, changes its workers) and
did not time one thread on its own steps; a worker's send cost; where the loop's forward
ran under CPU autocast, the model's work under it and in fp32 (``cpu_autocast``); where the
loader's workers fork every epoch, what the step's writes cost after a fork
(``dataloader.fork_copy``).
For an in-process loader whose batches one ``dataset[indices]`` call can fetch, the batched
fetch's inputs come first: that fetch against the loader's own, and the work after each.
They share a budget, a share of the capture's wall time so far
(:mod:`~diagnose.capture.probes.budget`), spent in that order, the order of what the
predictions need most; ``context["probes"]`` says what was skipped and why. A run that
raised gets none of them. Each probe may fail alone: its problem goes to ``on_error`` and
its value stays unset.
Before them, the step tracked in place during the loop becomes the ``memory`` section
(:func:`memory_after_loop`; a run that ran out of memory in that step gets it too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from diagnose.capture.loader_shim import unwrap
from diagnose.capture.probes import (
    ForwardTimer,
    agreeing_threads,
    holds_device_tensors,
    threads_ratio_span,
    time_batches_in_turn,
    time_cpu_capacity_span,
    time_fetches,
    time_inprocess_batch,
    time_spin,
    time_threads,
    time_work_after_fetches,
    time_worker_batches,
    time_worker_handover,
    time_worker_send,
    wait_workers_idle,
)
from diagnose.capture.probes.budget import ProbeBudget, threads_short, unneeded
from diagnose.capture.probes.common import charge
from diagnose.capture.probes.compute import AGAIN_NOISE, ModelCalls, on_cpu
from diagnose.capture.probes.fork_copy import start_method, time_fork_copy
from diagnose.capture.probes.optimizer_step import time_optimizers
from diagnose.capture.probes.precision import cpu_autocast, time_autocast
from diagnose.capture.runinfo import remade_loader, thread_pools
from diagnose.capture.steps import Steps
from diagnose.fixes.catalog.fetch import batch_indexable
from diagnose.memory.inplace import InPlaceStep
from diagnose.metrics.context.loop_fork import loop_fork
from diagnose.metrics.context.loop_threads import loop_threads
from diagnose.values import as_number, usable_cpus

OnError = Callable[[str, BaseException], None]
#: why the thread timings are not made for a loop without a DataLoader (whose torch threads
#: were not short of CPUs: :func:`~diagnose.capture.probes.budget.threads_short`)
NO_LOADER = ("no DataLoader was seen, and torch's threads were not seen short of CPUs: the "
             "fixes the thread timings serve change a DataLoader's workers or torch's "
             "thread count")


def one_thread_wanted(ctx: Mapping[str, Any], steps: Steps, forward: ForwardTimer | None
                      ) -> bool:
    """Whether the loop's own steps may run on one thread (``steps``: the session's
    :class:`~diagnose.capture.steps.Steps`, asked at the first one's turn): a lone CPU run
    (no device queue, no process group) whose model the forward timer holds on the CPU on
    2+ threads, beside an in-process DataLoader (workers would share the CPUs with the
    step: one thread beside them is another change), where the thread timing is needed by
    the clock so far (:func:`~diagnose.capture.probes.budget.unneeded`)."""
    dl = ctx.get("dataloader")
    threads = ctx.get("torch_num_threads")
    if (steps.sync is not None or not steps.extend or forward is None
            or not on_cpu(forward.model) or not isinstance(dl, Mapping)
            or dl.get("num_workers") != 0 or not isinstance(threads, int) or threads < 2):
        return False
    return "threads" not in unneeded(dict(ctx), steps.clock(), None, steps.loader_starts)


def in_loop_gates(steps: Steps, ctx: Mapping[str, Any],
                  forward: Callable[[], ForwardTimer | None], loader: Any) -> None:
    """The gates of the loop's own steps run changed after the window: on one thread
    (:func:`one_thread_wanted`), after a fork (:func:`fork_steps_wanted`); ``forward``
    gives the session's forward timer when asked."""
    steps.one_thread = lambda: one_thread_wanted(ctx, steps, forward())
    steps.forked.wanted = lambda: fork_steps_wanted(ctx, steps, forward(), loader)


def fork_steps_wanted(ctx: Mapping[str, Any], steps: Steps, forward: ForwardTimer | None,
                      loader: Any) -> bool:
    """Whether the loop's steps may be timed after a fork (``steps``: the session's
    :class:`~diagnose.capture.steps.Steps`, asked once its ``after`` block is over): a lone
    CPU run (no device queue, no process group) whose CPU model the forward timer holds,
    with a DataLoader whose workers would fork every epoch (none yet, or not persistent)
    from a process whose batches hold no device tensors, where the copies' timing is
    needed by the clock so far (:func:`~diagnose.capture.probes.budget.unneeded`)."""
    dl = remade_loader(ctx.get("dataloader"), steps.loaders_remade)
    if (steps.sync is not None or not steps.extend or forward is None
            or not on_cpu(forward.model) or not isinstance(dl, Mapping)
            or dl.get("persistent_workers") is True or steps.first_batch is None
            or holds_device_tensors(steps.first_batch)
            or start_method(unwrap(loader)[0]) not in (None, "fork")):
        return False
    return "fork_copy" not in unneeded({**ctx, "dataloader": dl}, steps.clock(), None,
                                       steps.loader_starts)


def memory_after_loop(ctx: dict[str, Any], memory: InPlaceStep | None, *, step_fn: Any,
                      loss_fn: Any, on_error: OnError, notes: list[str]) -> None:
    """``ctx["memory"]``: the section of the step tracked in place (its what-ifs re-run
    under FakeTensorMode where the step is known as a function); why none was tracked goes
    to ``notes``."""
    if memory is None:
        return
    if memory.why is not None and memory.model_given:
        notes.append(memory.why)
    try:
        sec = memory.section(step_fn=step_fn, loss_fn=loss_fn)
    except Exception as e:
        on_error("the memory section", e)
        return
    if sec is not None:
        ctx["memory"] = sec


def time_after_loop(ctx: dict[str, Any], *, model: Any, loader: Any,
                    forward: ForwardTimer | None, batch: Any, on_error: OnError,
                    clock: Mapping[str, Any] | None = None,
                    budget: ProbeBudget | None = None,
                    worker_pids: Iterable[int] = (),
                    others: Sequence[tuple[Any, Any]] = (),
                    others_cpus: float | None = None, loader_starts: Any = None,
                    calls: Mapping[int, ModelCalls] | None = None,
                    optimizers: Sequence[Any] = ()) -> None:
    """Run the probes in their order within the budget and write what they give into
    ``ctx``: ``forward`` holds the first batch's inputs as the model got them, ``batch`` the
    loop's first batch as the loader gave it (None: the loader was not seen), ``clock`` the
    step clock (``capture.step_clock``: what the loop waited on, so what no prediction
    needs; None: every probe may be needed). ``budget``: by default
    :meth:`~diagnose.capture.probes.budget.ProbeBudget.of_capture`. The loader's workers
    still alive (``worker_pids``) are first left to fall idle (:func:`wait_workers_idle`).
    ``others``: the loop's other models with the first inputs each got, whose work the
    thread timing takes with the first model's. ``others_cpus``: the CPUs other processes
    held over the steps after the window (torch's threads short of CPUs: the thread timing
    alone serves CF008, with or without a DataLoader). ``loader_starts``: the clock's
    epoch starts (their workers), for an epoch start's share of the step. ``calls``: the
    loop's calls of each model (:meth:`~diagnose.capture.probes.ForwardTimer.calls`, all
    the timers'), for the quiet forward of the loop's mean call. ``optimizers``: those the
    loop stepped the models with, whose step is timed alone on copies where workers share
    the CPUs with a CPU model (the optimizer's own contention)."""
    loader = unwrap(loader)[0]  # a wrapper's DataLoader (Fabric's): the probes rebuild it
    pools = thread_pools()  # again: the loop may have loaded a library (numpy, scipy)
    if pools is not None:
        ctx["thread_pools"] = pools
    looped = loop_threads(clock)  # the loop's own steps on one thread: their cost
    if looped is not None and looped["steps"]:
        charge("threads_in_loop", looped["extra_ms"] / 1e3)
    forked = loop_fork(clock)  # the loop's own steps after a fork: the copies they paid
    if forked is not None:
        charge("fork_copy_in_loop", forked["ms"] / 1e3)
    if budget is None:
        budget = ProbeBudget.of_capture(ctx.get("probes_ms"), unneeded(ctx, clock, others_cpus,
                                                                          loader_starts))
    pids = list(worker_pids)
    if pids:
        _guard("waiting for the loader's workers", on_error,
               lambda: budget.run("workers_idle", lambda: wait_workers_idle(pids)))
    loaded = batch is not None and isinstance(ctx.get("dataloader"), dict)
    if loaded:  # the probes' keys go into a copy (the recorded context stays as it was)
        ctx["dataloader"] = dict(ctx["dataloader"])
    workers = loaded and not holds_device_tensors(batch)
    if loaded and not workers:  # no forked worker can make a batch on the GPU
        ctx["dataloader"] = {**ctx["dataloader"], "batches_on_device": True}
    if loaded and ctx["dataloader"].get("num_workers") == 0 and batch_indexable(loader):
        _time_fetches(ctx, model, forward, loader, budget, on_error)
    caps: list[Capacity] = []  # the capacity timings
    in_turn = _time_in_turn(ctx, loader, budget, on_error) if workers else None
    if loaded:
        _time_capacity(caps, budget, on_error, "after_loop")
    if workers:
        _time_handover(ctx, batch, budget, on_error)
    in_loop = looped is not None and looped["ratio"] is not None
    if forward is not None and loaded:  # a CPU model's (the threads split's, the workers'
        _time_threads(ctx, model, forward, budget, on_error, others, in_loop, calls)
        if on_cpu(model):  # torch's threads run a CPU model's ops alone
            ctx["threads_spin_ms"] = _guard("threads' spin timing", on_error,
                                            lambda: budget.run("threads_spin", time_spin))
    elif forward is not None and threads_short(ctx, clock, others_cpus):  # CF008's
        ctx["threads"] = _thread_timing(model, forward, others, budget, on_error, calls=calls)
    elif forward is not None:
        budget.skipped.setdefault("threads", NO_LOADER)
    if workers and forward is not None and optimizers:  # the optimizer's step alone
        ctx["optimizer_quiet"] = _guard(
            "optimizer timing", on_error,
            lambda: budget.run("optimizer_step", lambda: time_optimizers(optimizers)))
    if workers and forward is not None:  # the copies an epoch's forks cost the next step
        _time_fork_copy(ctx, model, forward, loader, others, budget, on_error,
                        work=forked is None)
    if workers:  # what sending its batches costs a real worker (where one can be forked)
        ctx["dataloader"]["worker_send_ms"] = None if in_turn is None else _guard(
            "worker hand-over timing", on_error,
            lambda: budget.run("worker_send", lambda: time_worker_send(loader)))
    if workers:  # a worker's batch (where not timed in turn) and the CPUs with its batches
        _time_worker_batches(ctx, loader, in_turn, caps, budget, on_error)
    # seconds later, while budget is left: the capacity again, and the threads, past the
    # budget where the threads split reads them (a loader) or their first timing was noisy
    # (AGAIN_NOISE): one timing's rounds share the host's moment, which a second moment
    # tells (benchmarks/threads_probe_spread.py); the two thread timings joined, or, where
    # their ratios lie further apart than AGAIN_NOISE, a third made and the two that agree
    if forward is not None and ctx.get("threads") and not in_loop:
        noisy = (as_number(ctx["threads"].get("noise")) or 0.0) >= AGAIN_NOISE
        timings = [ctx["threads"], _thread_timing(model, forward, others, budget, on_error,
                                                  again=not (noisy or loaded), calls=calls)]
        span = threads_ratio_span(*timings)
        if span is not None and span[0] > 0 and math.log(span[1] / span[0]) / 2 >= AGAIN_NOISE:
            timings.append(_thread_timing(model, forward, others, budget, on_error,
                                          calls=calls))
        ctx["threads_span"] = threads_ratio_span(*timings)
        ctx["threads"] = agreeing_threads(*timings)
    if forward is not None:  # PR002's: the loop's CPU autocast against fp32
        _time_autocast(ctx, model, forward, others, budget, on_error)
    if loaded and caps:
        _time_capacity(caps, budget, on_error, "again", again=True)
    # the timing seconds before these (runinfo.collect), where a fix needs the capacity
    on_enter = ctx.get("cpu_capacity_on_enter")
    got = [x for v in on_enter if (x := as_number(v)) is not None] \
        if isinstance(on_enter, list) and len(on_enter) == 3 else []
    if loaded and "cpu_capacity" not in budget.unneeded and len(got) == 3:
        caps.append(("on_enter", got[0], got[1], got[2]))
    if loaded:
        _capacity_of(ctx, caps)
    ctx["probes"] = budget.record()


def _time_fetches(ctx: dict[str, Any], model: Any, forward: ForwardTimer | None,
                  loader: Any, budget: ProbeBudget, on_error: OnError) -> None:
    """The batched fetch's inputs, for an in-process loader whose batches one
    ``dataset[indices]`` call can fetch (with workers the clock does not time the loader's
    fetch, and the fix is not predicted): one such fetch against the loader's own, and
    the model's work after each kind (``work_after_fetch``), in one probe; the fetches
    alone where the work cannot be timed (a GPU model, one thread)."""
    after = None if forward is None else _guard(
        "timing the model's work after a fetch", on_error, lambda: budget.run(
            "work_after_fetch", lambda: time_work_after_fetches(model, forward.inputs, loader)))
    if after is not None:
        after = dict(after)
        fetches = (after.pop("batched_fetch_ms"), after.pop("per_sample_fetch_ms"))
        ctx["dataloader"]["work_after_fetch"] = after
    elif "work_after_fetch" in budget.skipped:  # the fetches alone cost as much
        return
    else:
        fetches = _guard("fetch timing", on_error,
                         lambda: budget.run("fetches", lambda: time_fetches(loader)))
    if fetches is not None:
        ctx["dataloader"]["batched_fetch_ms"] = fetches[0]
        ctx["dataloader"]["batched_fetch_per_sample_ms"] = fetches[1]


def _time_threads(ctx: dict[str, Any], model: Any, forward: ForwardTimer,
                  budget: ProbeBudget, on_error: OnError,
                  others: Sequence[tuple[Any, Any]] = (), in_loop: bool = False,
                  calls: Mapping[int, ModelCalls] | None = None) -> None:
    """The model's work on torch's threads and on one (``threads``): the threads split's
    input, and the quiet work the workers' contention is read against. ``in_loop``: the
    loop's own steps timed one thread, and none is made here."""
    if in_loop:
        budget.skipped.setdefault("threads", "timed on the loop's own steps on one thread")
        return
    ctx["threads"] = _thread_timing(model, forward, others, budget, on_error, calls=calls)


def _thread_timing(model: Any, forward: ForwardTimer, others: Sequence[tuple[Any, Any]],
                   budget: ProbeBudget, on_error: OnError, again: bool = False,
                   calls: Mapping[int, ModelCalls] | None = None) -> Any:
    """One :func:`time_threads` timing of the model's work on the first inputs its forward
    got, run by ``budget`` (``again``: only with budget left); None where it was not run
    or raised."""
    return _guard("thread timing", on_error, lambda: budget.run(
        "threads", lambda: time_threads(model, forward.inputs, others, calls), again=again))


def _time_fork_copy(ctx: dict[str, Any], model: Any, forward: ForwardTimer, loader: Any,
                    others: Sequence[tuple[Any, Any]], budget: ProbeBudget,
                    on_error: OnError, work: bool = True) -> None:
    """``dataloader.fork_copy``: what the pages the step writes cost after a fork
    (:func:`~diagnose.capture.probes.fork_copy.time_fork_copy`), where the loader's workers
    are not kept alive (persistent ones fork once); ``work`` False: the loop's own steps
    timed the copies, and only a MiB's prices are timed."""
    if ctx["dataloader"].get("persistent_workers") is True:
        budget.skipped.setdefault("fork_copy", "the workers are persistent: forked once")
        return
    threads = ctx.get("threads")  # the quiet work, timed just before on the same inputs
    quiet = as_number(threads.get("work_ms")) if isinstance(threads, dict) else None
    got = _guard("fork copy timing", on_error, lambda: budget.run(
        "fork_copy", lambda: time_fork_copy(model, forward.inputs, loader, others, quiet,
                                            work=work)))
    if got is not None:
        ctx["dataloader"]["fork_copy"] = got


def _time_autocast(ctx: dict[str, Any], model: Any, forward: ForwardTimer,
                   others: Sequence[tuple[Any, Any]], budget: ProbeBudget,
                   on_error: OnError) -> None:
    """``cpu_autocast``: the model's work under the loop's CPU autocast and in fp32, where
    its forward ran under one (:func:`~diagnose.capture.probes.precision.time_autocast`);
    nothing is set where it did not."""
    if cpu_autocast(model) is None:
        return
    got = _guard("autocast timing", on_error, lambda: budget.run(
        "cpu_autocast", lambda: time_autocast(model, forward.inputs, others)))
    if got is not None:
        ctx["cpu_autocast"] = got


def _guard(what: str, on_error: OnError, run: Callable[[], Any]) -> Any:
    """``run()``, or None where it raised (its problem to ``on_error`` as ``what``)."""
    try:
        return run()
    except Exception as e:
        on_error(what, e)
        return None


#: one timing of the CPUs' capacity: (when it was timed, its point, the first and third
#: quartiles of its rounds): "on_enter" (seconds before the loop), "after_loop" and
#: "again" (the probes' first and last), "worker_batches" (the job's own batches: no span)
Capacity = tuple[str, float, float, float]


def _time_capacity(caps: list[Capacity], budget: ProbeBudget, on_error: OnError,
                   when: str, again: bool = False) -> None:
    """One timing of the CPUs' capacity with its rounds' span
    (:func:`~diagnose.capture.probes.capacity.time_cpu_capacity_span`) into ``caps``."""
    got = _guard("CPU capacity timing", on_error, lambda: budget.run(
        "cpu_capacity", lambda: time_cpu_capacity_span(usable_cpus()), again=again))
    if got is not None:
        caps.append((when, *got))


def _time_in_turn(ctx: dict[str, Any], loader: Any, budget: ProbeBudget,
                  on_error: OnError) -> tuple[float, float, float, float] | None:
    """What a batch costs a worker and this process, timed in turn: with workers, for
    fewer; without, the pace of the timings after the loop against the loop's own fetch
    and collate. Where a worker cannot be forked, the in-process batch alone (not where the
    budget left them out: it costs as much)."""
    in_turn = _guard("worker hand-over timing", on_error, lambda: budget.run(
        "batches_in_turn", lambda: time_batches_in_turn(loader)))
    if in_turn is not None:
        ctx["dataloader"]["worker_batch_ms"] = in_turn[0]
        ctx["dataloader"]["inprocess_batch_ms"] = in_turn[1]
        ctx["dataloader"]["worker_batch_cpu_ms"] = in_turn[2]
        ctx["dataloader"]["worker_batch_cpus"] = in_turn[3]
    elif "batches_in_turn" not in budget.skipped:  # not for want of budget: as costly
        ctx["dataloader"]["inprocess_batch_ms"] = _guard(
            "worker hand-over timing", on_error,
            lambda: budget.run("inprocess_batch", lambda: time_inprocess_batch(loader)))
    return in_turn


def _time_handover(ctx: dict[str, Any], batch: Any, budget: ProbeBudget,
                   on_error: OnError) -> None:
    """What a batch from a worker process costs this one, and a worker's start, fork and
    stop (for the epochs without persistent workers)."""
    timed = _guard("worker hand-over timing", on_error, lambda: budget.run(
        "worker_handover", lambda: time_worker_handover(batch)))
    if timed is not None:
        ctx["dataloader"] = {**ctx["dataloader"],
                             "worker_handover_ms": timed[0], "worker_start_ms": timed[1],
                             "worker_fork_ms": timed[2], "worker_stop_ms": timed[3]}


def _time_worker_batches(ctx: dict[str, Any], loader: Any,
                         in_turn: tuple[float, float, float, float] | None,
                         caps: list[Capacity], budget: ProbeBudget,
                         on_error: OnError) -> None:
    """A batch made by forked workers alone and one per CPU at once: the worker's batch
    where it was not timed in turn, and the CPUs' capacity with the job's own batches as
    the work (a timing into ``caps``, without a span of its own). A second capacity
    timing where one was made already: made only while budget is left."""
    made = _guard("CPU capacity timing", on_error, lambda: budget.run(
        "worker_batches", lambda: time_worker_batches(loader, usable_cpus()),
        again=in_turn is not None and bool(caps)))
    if made is None:
        return
    if in_turn is None:
        ctx["dataloader"]["worker_batch_ms"] = made[0]
    if made[1] is not None:
        caps.append(("worker_batches", made[1], made[1], made[1]))


def _capacity_of(ctx: dict[str, Any], caps: list[Capacity]) -> None:
    """What the CPUs give: the most of the timings, the one before the loop among them. A
    timing reads low where something else holds a CPU for a moment (on a shared host, for
    seconds: all the timings after the loop may fall in one such moment), and the job's
    split meets those moments in both of its arms alike; SMT siblings lower all of them.
    How far the timings and their rounds lay apart goes with it: the predictions that move
    CPU work are made at the least as well (their range's slow end), and a timing cut short
    by the budget has few rounds: its span is what the rounds it had say. Each timing is
    kept too (``cpu_capacity_timings``: when -> [point, q1, q3]), so that a low end can be
    told to a moment of the host or to one timing's noise."""
    ctx["cpu_capacity"] = round(max(c[1] for c in caps), 3) if caps else None
    lo = min((c[2] for c in caps), default=None)
    hi = max((c[3] for c in caps), default=None)
    ctx["cpu_capacity_timings"] = {when: [round(x, 3) for x in c] for when, *c in caps}
    ctx["cpu_capacity_span"] = ([round(lo, 3), round(hi, 3)]
                                if lo is not None and hi is not None
                                and (len(caps) > 1 or hi > lo) else None)
