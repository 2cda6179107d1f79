"""The probes a session runs once the ``with`` block has ended, into ``context.json``.

No step is on the clock by then, so the timings disturb nothing the report states. They
give the step model its measured inputs (diagnose.capture.probes): the model's work on
torch's threads and on one (``threads``), beside busy processes (``threads_busy``), after
each kind of fetch; a worker's hand-over, start, stop, batch and send cost, and the
in-process batch (under ``dataloader``); and the CPUs' capacity, timed five times seconds
apart (``cpu_capacity`` and the span of the timings). A run that raised gets none of them.
Each probe may fail alone: its problem goes to ``on_error`` and its value stays unset.
Before them, the step tracked in place during the loop becomes the ``memory`` section
(:func:`memory_after_loop`; a run that ran out of memory in that step gets it too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagnose.capture.probes import (
    ForwardTimer,
    holds_device_tensors,
    quieter_threads,
    time_batches_in_turn,
    time_cpu_capacity,
    time_inprocess_batch,
    time_threads,
    time_threads_beside_busy,
    time_work_after_fetches,
    time_worker_batches,
    time_worker_handover,
    time_worker_send,
)
from diagnose.memory.inplace import InPlaceStep
from diagnose.values import usable_cpus

OnError = Callable[[str, BaseException], None]


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
                    forward: ForwardTimer | None, batch: Any, on_error: OnError) -> None:
    """Run the probes in their order and write what they give into ``ctx``: ``forward``
    holds the first batch's inputs as the model got them, ``batch`` the loop's first batch
    as the loader gave it (None: the loader was not seen)."""
    loaded = batch is not None and isinstance(ctx.get("dataloader"), dict)
    caps: list[float] = []  # the CPUs' capacity, timed five times seconds apart
    if loaded:  # what the CPUs give at once, a second before it is timed again below
        _time_capacity(caps, on_error)
    if forward is not None:
        try:
            ctx["threads"] = time_threads(model, forward.inputs)
        except Exception as e:
            on_error("thread timing", e)
    if loaded and forward is not None:
        try:  # the ops after each kind of fetch, for the batched-fetch prediction
            ctx["dataloader"] = {**ctx["dataloader"], "work_after_fetch":
                                 time_work_after_fetches(model, forward.inputs, loader)}
        except Exception as e:
            on_error("timing the model's work after a fetch", e)
    if loaded:
        _time_capacity(caps, on_error)
        _time_workers(ctx, loader, batch, caps, on_error)
    if forward is not None and ctx.get("threads"):
        try:  # once more, seconds later: the quieter of the two (quieter_threads)
            ctx["threads"] = quieter_threads(ctx["threads"],
                                             time_threads(model, forward.inputs))
        except Exception as e:
            on_error("thread timing", e)
        if loaded:  # what busy workers cost torch's threads (the workers' predictions)
            _time_capacity(caps, on_error)
            try:
                ctx["threads_busy"] = time_threads_beside_busy(
                    model, forward.inputs, usable_cpus())
            except Exception as e:
                on_error("thread timing beside busy processes", e)
    if loaded:
        _time_capacity(caps, on_error)  # the last, seconds after the others
        _capacity_of(ctx, caps)


def _time_capacity(caps: list[float], on_error: OnError) -> None:
    """One more timing of the CPUs' capacity (:func:`time_cpu_capacity`) into ``caps``."""
    try:
        got = time_cpu_capacity(usable_cpus())
    except Exception as e:
        on_error("CPU capacity timing", e)
        return
    if got is not None:
        caps.append(got)


def _time_workers(ctx: dict[str, Any], loader: Any, batch: Any, caps: list[float],
                  on_error: OnError) -> None:
    """What a batch from a worker process costs this one, what a batch costs a worker and
    this process, and what the CPUs give both (a capacity timing into ``caps``). A batch
    the dataset makes on the GPU no worker can make (CUDA cannot start in a forked
    process): nothing of a worker is timed, and the worker fixes' predictions say why they
    have none."""
    if holds_device_tensors(batch):
        ctx["dataloader"] = {**ctx["dataloader"], "batches_on_device": True}
        return
    in_turn: tuple[float, float] | None = None
    try:
        timed = time_worker_handover(batch)
        ctx["dataloader"] = {**ctx["dataloader"],
                             "worker_handover_ms": timed and timed[0],
                             "worker_start_ms": timed and timed[1],
                             "worker_fork_ms": timed and timed[2],
                             "worker_stop_ms": timed and timed[3]}
        # what a batch costs a worker and this process, timed in turn: with workers, for
        # fewer; without, the pace of the timings after the loop against the loop's own
        # fetch and collate. Where a worker cannot be forked, the in-process batch alone
        in_turn = time_batches_in_turn(loader)
        ctx["dataloader"]["inprocess_batch_ms"] = (
            in_turn[1] if in_turn is not None else time_inprocess_batch(loader))
        # and what sending its batches costs a real worker, beside making them
        ctx["dataloader"]["worker_send_ms"] = (
            time_worker_send(loader) if in_turn is not None else None)
    except Exception as e:
        in_turn = None
        on_error("worker hand-over timing", e)
    try:  # what the CPUs give workers and this process (and a worker's batch)
        made = time_worker_batches(loader, usable_cpus())
        if made is not None:  # the one timed in turn with this process's
            ctx["dataloader"]["worker_batch_ms"] = made[0] if in_turn is None else in_turn[0]
            if made[1] is not None:
                caps.append(made[1])
    except Exception as e:
        on_error("CPU capacity timing", e)


def _capacity_of(ctx: dict[str, Any], caps: list[float]) -> None:
    """What the CPUs give: the most of the timings. A timing reads low where something else
    holds a CPU for a moment, and the job's split meets those moments in both of its arms
    alike; SMT siblings lower all of them. How far the timings lay apart goes with it: the
    predictions that move CPU work are made at the least as well (their range's slow end)."""
    ctx["cpu_capacity"] = round(max(caps), 3) if caps else None
    ctx["cpu_capacity_span"] = ([round(min(caps), 3), round(max(caps), 3)]
                                if len(caps) > 1 else None)
