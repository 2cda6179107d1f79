"""Worker fixes: the DataLoader's worker processes: how many, kept alive, how deep a queue.

The model (DESIGN.md, "Transforms"): k workers are a producer of batches on min(k, CPUs)
cores (k for loading that waits), each batch costing what the run measured for one (its
in-process fetch and collate at the loop's pace, a batch timed as a worker makes it, or
the workers' own CPU); the main process receives each batch (the hand-over) instead of
making it, and the CPU sharing of :mod:`diagnose.stepmodel.host` slows both sides where
busy workers and torch's threads oversubscribe the cores. An epoch's start and end (forking
and joining workers that are not persistent) are paid outside the profiled window, per
epoch; the transform declares them. A trial realises the three fields as the rebuilt
DataLoader's keyword arguments (torch takes persistent_workers and prefetch_factor only
with worker processes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...stepmodel.calibration import (
    BURST_FLOOR_MS,
    BURST_RATIO,
    BURST_WAIT_MS,
    EPOCH_LONG_S,
    GC_PAUSE_SHARE_MAX,
    IO_BOUND_PCT,
    LOADER_BOUND_WAIT,
    PACE_BOUNDS,
    SHM_GBPS,
    WORKER_AGREES,
)
from ...stepmodel.epochs import (
    epoch_end_ms,
    epoch_start_ms,
    mean_batch_share,
    restart_saving,
)
from ...stepmodel.graph import EdgeKind, Graph, ResKind, Resource, TaskKind
from ...stepmodel.host import (
    batch_bytes,
    busy_threads,
    free_contention,
    loading_ms,
    per_step,
    shared,
    slowed,
    worker_share,
    workers_busy_now,
)
from ...stepmodel.transforms import AT_MOST, transform
from ..code import AFFINITY, SOME_WORKERS, Setup, loader_change, some_workers
from ..config import TrainConfig
from ..loop_code import made_once
from ..realise import Kwargs, Realisation
from ..unit import HOST_CPUS, Facts, Fix, cannot_tell
from ..worker_search import WorkerSearch, most_workers, workers_oversubscribed


def _workers(metrics: Mapping[str, Any]) -> tuple[int | None, int | None]:
    f = Facts.from_metrics(metrics)
    return f.dataloader_num_workers, f.cpu_count


def _workers_title(title: str, change: Mapping[str, Any] | None, cap: bool = False) -> str:
    """A worker count's title for the count a prediction lands on: none says the batches
    load in the training process; a cap keeps its own title, with the count."""
    n = (change or {}).get("num_workers")
    if not isinstance(n, int) or isinstance(n, bool):
        return title
    if n == 0:
        return "Load batches in the training process (DataLoader num_workers=0)"
    if cap:
        return f"{title} (DataLoader num_workers={n})"
    return f"Load batches in {n} worker process{'es' if n > 1 else ''} (DataLoader num_workers={n})"


class NumWorkers(WorkerSearch):
    def title_for(self, change: Mapping[str, Any] | None) -> str:
        # the search may go down as well as up: the title says where it lands
        return _workers_title(self.title, change)

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        top = most_workers(facts)
        return top is not None and facts.iterable_dataset is not True and (
            config.num_workers < top or workers_oversubscribed(config, facts))

    def unknown(self, facts: Facts) -> str | None:
        return HOST_CPUS if facts.cpu_count is None else None

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        nw, n = _workers(metrics)
        if nw is None or n is None or nw != some_workers(n):
            return None
        f = Facts.from_metrics(metrics)
        top = most_workers(f)
        if top is not None and top > n:  # loading that waits: more than the CPUs help
            return None
        if workers_oversubscribed(TrainConfig(num_workers=nw), f):
            return None  # beside torch's threads past the CPUs: fewer workers are searched
        if n == 1:
            return "1 CPU: no core to spare for a worker process"
        return f"num_workers={nw} already: min(8, CPUs - 1) on {n} CPUs"

    def render(self, setup: Setup | None) -> str:
        return loader_change(setup, "", "workers prepare batches in parallel with the "
                             "training step", lambda c: c, generic=TrainConfig(),
                             override={"num_workers": SOME_WORKERS})

    @staticmethod
    def render_more() -> str:
        """The change for a loader known to have workers, their count not known (a saved
        trace of a multi-process DataLoader): more of them, up to the usable CPUs."""
        return "\n".join([
            "# before: the loader has worker processes (the trace shows them), too few to "
            "keep up",
            "loader = DataLoader(dataset, ..., num_workers=n)",
            "# after: more workers, up to the CPUs this process may use (if n is below it)",
            f"loader = DataLoader(dataset, ..., num_workers={SOME_WORKERS})"])


class NumWorkersCap(WorkerSearch):
    def title_for(self, change: Mapping[str, Any] | None) -> str:
        # a cap that lands on no workers is no cap: its title says so
        return _workers_title(self.title, change, cap=True)

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        top = most_workers(facts)
        return (top is not None and config.num_workers > top
                and facts.iterable_dataset is not True)

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        nw, n = _workers(metrics)
        if nw is None or n is None or nw > max(0, n - 1):
            return None
        if nw == 0:
            return "num_workers=0: no worker processes to cap"
        return f"num_workers={nw} already leaves a CPU of {n} to the training process"

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        if spec is not None and not spec.num_workers:
            setup = spec = None  # no workers to cap: the generic example
        n = spec.num_workers if spec is not None else 32
        return loader_change(setup, "workers fight for the CPUs (and with the training "
                             "process)", "at most the CPUs; fewer (even 0) can be faster: "
                             "measure", lambda c: c, generic=TrainConfig(num_workers=32),
                             override={"num_workers": f"min({n}, {AFFINITY} - 1)"})


class PersistentWorkers(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return config.num_workers > 0 and not config.persistent_workers

    def predict(self, predictor: Any, config: TrainConfig, facts: Facts) -> Any:
        """Each epoch starts its workers again: the loop waits for ``iter()`` and the first
        batch (the clock's step that held an epoch's start beyond a steady one, its end
        included: :attr:`~diagnose.stepmodel.facts.Facts.epoch_boundary_per_step_ms`; else
        ``dataloader_start_ms``, as the session saw an epoch start with the run's
        workers; for another worker count, or where none was seen, one worker started
        after the loop, ``input_worker_start_ms``), where live workers would make
        only that batch (as a worker makes it, ``input_worker_batch_ms``; else one made
        in the loop's process, else the trace's fetch and collate per batch). The
        difference, once per epoch (``dataloader_epoch_batches`` steps), comes off the
        mean step, with the epoch's
        end (the workers shut down and joined: :func:`epoch_end_ms`) and, where the clock
        timed the start and the workers are no more than the CPUs, the steps after it
        beyond steady ones (``dataloader_epoch_after_ms``). Where the workers
        share the CPUs with torch's threads, the clock's start holds batches made ahead:
        :func:`restart_saving`. The profiled window holds no epoch start, so this is not a
        replay of the graph."""
        if not self.applies(config, facts):
            return self.why_not(config, facts) or "nothing left to change"
        # the loop's own epoch start where it had these workers; else one worker's
        # (processes start one after another in iter(): fewer workers start sooner)
        same = facts.dataloader_num_workers == config.num_workers
        start = facts.dataloader_start_ms if same else None
        if start is None:
            start = facts.input_worker_start_ms
        n = facts.dataloader_epoch_batches
        # the batch live workers make: as a worker makes it, else in process, else the
        # trace's loading
        batch = facts.input_worker_batch_ms
        if batch is None:
            batch = facts.input_inprocess_batch_ms
        if batch is None:
            batch = loading_ms(facts)
        step = facts.step_time_unprofiled_mean_ms or facts.step_time_median_ms
        if start is None and n and step and n * step / 1e3 >= EPOCH_LONG_S:
            return (f"{AT_MOST} 1.00x: an epoch of {n:,} batches lasts {n * step / 864e5:,.0f} "
                    "days at this step, and its workers start once in it")
        if start is None:
            return cannot_tell("no worker start was timed (a live capture times one)")
        if not n or n <= 0:
            return cannot_tell("the batches of an epoch are not known (len(loader))")
        if batch is None:
            return cannot_tell("what one batch costs a worker was not timed (a live "
                    "capture with workers times it)")
        end = epoch_end_ms(facts, config.num_workers)
        clock = facts.epoch_boundary_per_step_ms if same else None
        n_cpus = facts.cpu_count or 1
        shared_cpus = busy_threads(facts) + min(config.num_workers, n_cpus) > n_cpus
        # the steps after a start the clock timed, beyond steady ones: the new processes'
        # start-up and the fork's copy-on-write faults, which live workers do not pay.
        # More workers than CPUs queue for them at every start, live or new, and those
        # steps hold that refill too: not counted there
        after = ((facts.dataloader_epoch_after_ms or 0.0) / n
                 if clock is not None and config.num_workers <= n_cpus else 0.0)
        if clock is None:
            saved = (start + end - batch) / n
        elif shared_cpus:
            saved = restart_saving(facts, config.num_workers, clock * n, batch) / n + after
        else:
            saved = clock - batch / n + after
        # workers that share the CPUs with torch's threads start up beside the training:
        # what the restart costs the steps after the epoch's first (new processes warming
        # up, or batches made ahead during its wait) is the error of a change of CPU work
        p = predictor.per_step_saving({"persistent_workers": True}, saved,
                                      moves_cpu=shared_cpus)
        if isinstance(p, str):
            return p
        return dataclasses.replace(p, candidates=(((("persistent_workers", True),),
                                                   p.speedup),))

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        if Facts.from_metrics(metrics).dataloader_persistent_workers is True:
            return "persistent_workers=True already"
        return None

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        if spec is not None and spec.remade:
            return made_once(spec)
        return loader_change(setup, "", "no worker start-up stall at every epoch",
                             lambda c: c.replace(persistent_workers=True),
                             generic=TrainConfig(num_workers=4), needs_workers=True)



def _more_prefetch(c: TrainConfig) -> TrainConfig:
    return c.replace(prefetch_factor=max(4, 2 * (c.prefetch_factor or 2)))


class PrefetchFactor(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return config.num_workers > 0

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [_more_prefetch(config)]

    def render(self, setup: Setup | None) -> str:
        def more(c: TrainConfig) -> TrainConfig:
            return _more_prefetch(c.replace(num_workers=c.num_workers or 1))

        spec = setup.loader if setup is not None else None
        n = more(spec.config() if spec is not None else TrainConfig()).prefetch_factor
        return loader_change(setup, "", f"each worker keeps {n} batches ready, absorbing "
                             "slow samples", more, generic=TrainConfig(num_workers=4),
                             needs_workers=True)


# ---------------------------------------------------------------------- an epoch's start
def epoch_costs(facts: Facts, change: Mapping[str, Any]
                ) -> tuple[float, float] | None:
    """A change of workers predicts the mean step over an epoch: its start and end per
    step before and after (:func:`epoch_start_ms`; before: 0, after: the difference,
    where the clock's mean holds the run's own); None where it keeps the workers or either
    is not known."""
    if "num_workers" not in change:
        return None
    now, then = epoch_start_ms(facts), epoch_start_ms(facts, change)
    if now is None or then is None:
        return None
    # the clock's mean holds the run's own starts already: only the difference is added
    return (0.0, then - now) if facts.epoch_in_clock else (now, then)


def epoch_left_out(facts: Facts, change: Mapping[str, Any]) -> str | None:
    """Where :func:`epoch_costs` cannot tell a change of workers' epoch starts, what the
    prediction then leaves out (it adds the run's own on both sides): the changed loader's
    starts (a slower step than predicted), or the run's own that the change ends."""
    if "num_workers" not in change or epoch_costs(facts, change) is not None:
        return None
    why = ("the batches of an epoch are not known (len(loader))"
           if not facts.dataloader_epoch_batches else "a worker's start and its batch "
           "were not both timed (a live capture times them where a finding may warn)")
    if epoch_start_ms(facts, change) is None:
        return f"the workers' start at each epoch is left out: {why}"
    if epoch_start_ms(facts) is None:
        if facts.epoch_in_clock:  # held by the measured mean step: kept after the change
            return (f"the run's own workers' start at each epoch, in the measured mean step, "
                    f"is kept in the predicted one: {why}")
        return f"the run's own workers' start at each epoch is left out: {why}"
    return None


# ---------------------------------------------------------------------- the transforms
def _loop_pace(loop_us: float, facts: Facts) -> float:
    """How much longer the loop made a batch in process (``loop_us``, its fetch and collate
    a step by the clock) than the session did after the loop (``input_inprocess_batch_ms``,
    timed beside the worker's batch): a worker's batch timed after the loop is put at the
    loop's pace by this, as the rest of the step is (a shared host's pace moves for seconds
    at a time). Within :data:`PACE_BOUNDS`:

    - loop slower than the timing: the pace, at most the upper bound;
    - loop faster, no worker's batch timed: the pace, 1 below the lower bound;
    - loop faster, the worker's batch timed in turn at least :data:`WORKER_AGREES` of the
      in-process one: both met the same slow host, the pace (at least the lower bound);
    - else the in-process timing was held up on its own (torch's threads waiting for a CPU
      something else held): 1, the worker's batch as timed.

    1 where the in-process batch was not timed."""
    probe = facts.input_inprocess_batch_ms
    if probe is None or probe <= 0 or loop_us <= 0:
        return 1.0
    lo, hi = PACE_BOUNDS
    pace = loop_us / (probe * 1e3)
    if pace >= 1.0:
        return min(hi, pace)
    worker = facts.input_worker_batch_ms
    if worker is None:
        return pace if pace >= lo else 1.0
    return max(lo, pace) if worker >= WORKER_AGREES * probe else 1.0


#: what the workers' model assumes where a live capture's timing is missing
WORKER_ASSUMES = {
    "input_worker_batch_ms": "a worker's batch costs what the trace's loading cost",
    "input_worker_handover_ms": "a batch hands over from a worker in the trace's shortest "
                                f"wait for one, else at {SHM_GBPS} GB/s",
    "cpu_capacity": "every CPU the process may use is free",
    "input_worker_send_ms": "a worker spends nothing beyond its batch sending it",
    "input_inprocess_batch_ms": "the loop made its batches at the pace the timings after "
                                "it were made at",
    "input_worker_fork_copy_ms|input_worker_fork_copy_loop_ms":
        "the step's memory is not copied after an epoch's forks (copy-on-write)",
}


@transform(sets={"num_workers": ("dataloader_num_workers",)},
           moves_cpu=frozenset({"num_workers"}), outside=epoch_costs, assumes=WORKER_ASSUMES,
           outside_left=epoch_left_out)
def num_workers(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Batches made by k worker processes: the producer runs on min(k, CPUs) cores (k for
    loading that waits), each batch costing what the main process spent fetching and
    collating it (in-process loader; a batch timed as a worker makes it puts it at the
    loop's pace, :func:`_loop_pace`), what one batch took made alone after the loop, the
    CPU time the workers' samples show per batch, or (without samples) what the measured
    rate says of loader-bound workers; the main process pays the hand-over of each batch
    instead, and its own work slows where the busy workers and torch's threads
    oversubscribe the cores (:func:`~diagnose.stepmodel.host.worker_share`). A run that
    oversubscribes now has its work freed of that contention first. k = 0: the batches are
    made in the training process. The CPU bound is the Predictor's (``moves_cpu``)."""
    k = int(change["num_workers"])
    if k > 0 and facts.dataloader_batches_on_device is True:
        return ("does not apply: the dataset makes its batches on the GPU, which no worker "
                "process can (CUDA does not start in a forked one)")
    n_cpus = facts.cpu_count
    if n_cpus is None:
        return cannot_tell("the number of CPUs is not known (a live capture records it)")
    now = facts.dataloader_num_workers
    threads_now = busy_threads(facts)
    # workers whose loading waits hold no CPU: they oversubscribe nothing now
    over_now = (bool(now) and not facts.worker_batch_waits
                and threads_now + min(now or 0, n_cpus) > n_cpus)
    fetch = g.is_kind(TaskKind.FETCH)
    wait = g.is_kind(TaskKind.DL_WAIT)
    step = float(g.steps_measured.mean()) if g.n_steps else 0.0
    worker = facts.input_worker_batch_ms
    # whether the cost holds the worker's side of the hand-over: a batch timed as a worker
    # makes it (default_collate writing it into shared memory) or the workers' own CPU
    sent = False
    paused = 0.0  # of a batch's cost, the collector's pauses (CPU work, whatever waits)
    # what a worker's other threads spend sending each batch (pickling it, handing over
    # its tensors' file descriptors), not in a batch timed as a worker makes it
    send = facts.input_worker_send_ms or 0.0
    extra = 0.0
    if fetch.any():
        cost = per_step(g, fetch, g.dur)
        mean_cost = float(cost.mean())
        if worker is not None and k > 0:  # a worker makes it on one intra-op thread
            # the collector's pauses inside the loop's loading: a worker makes the same
            # objects (its collections walk the same heap, forked), and the batch timed
            # after the loop met none: they are added to its batch, not put at the pace
            paused = (facts.gc_pause_loader_ms or 0.0) * 1e3
            paused = min(paused, GC_PAUSE_SHARE_MAX * mean_cost)
            pace = _loop_pace(mean_cost - paused, facts)
            mean_cost = worker * 1e3 * pace + paused
            extra = send * 1e3 * pace
            sent = True
    elif wait.any():
        waited = float(per_step(g, wait, g.dur).mean())
        per_worker, alive = facts.workers_cpu_mean_pct, facts.workers_count
        # a batch made alone after the loop, by the session: in the training process
        # (for k = 0) or as a worker makes it (one intra-op thread)
        first, then = ((facts.input_inprocess_batch_ms, worker) if k == 0
                       else (worker, facts.input_inprocess_batch_ms))
        alone = first if first is not None else then
        if alone is not None:  # a full batch timed: the epoch's mean one (a short last),
            # at the window's pace (timed outside it: the replay's ratio takes that off)
            scale = mean_batch_share(facts) * (facts.window_pace or 1.0)
            mean_cost = alone * 1e3 * scale
            sent = k > 0 and worker is not None
            extra = send * 1e3 * scale if sent else 0.0
        elif per_worker is not None and alive:
            # a batch costs the CPU time the workers spent per step (one batch a step)
            mean_cost = per_worker / 100 * alive * step
            sent = True
        elif now is not None and now > n_cpus:
            return cannot_tell("what a batch costs the workers is not measured, and more "
                    "workers than CPUs share them in ways the trace does not show (a live "
                    "capture with host sampling measures it)")
        elif now is not None and now >= 1 and waited >= LOADER_BOUND_WAIT * step:
            # loader-bound: the workers deliver a batch per step, min(k, CPUs) at a time
            mean_cost = step * min(now, n_cpus)
        else:
            return cannot_tell("the workers keep up (or their number is unknown), so "
                    "their per-batch cost is hidden behind the step")
    else:
        return cannot_tell("no DataLoader in the profiled steps")
    if k == 0:
        if fetch.any():
            return cannot_tell("nothing changes (the batches are made in process already)")
        if mean_cost <= 0:
            return cannot_tell("the in-process cost of a batch is not measured with workers")
    b = batch_bytes(g, facts)
    if b is None:
        return cannot_tell("the batch's size in bytes is not known: this run measured no "
                           "batch (`with diagnose(model, loader)` measures the loader's)")
    # receiving a batch: as the session timed it (at the window's pace); else, with workers
    # now, the shortest wait of the window (a batch that was ready); else the bytes at a
    # shared-memory rate
    timed = facts.input_worker_handover_ms
    if timed is not None:
        timed *= facts.window_pace or 1.0
    rate = facts.worker_transfer_gbps or SHM_GBPS
    seen = float(g.dur[wait].min()) if wait.any() and now else None
    hand_over = (0.0 if k == 0 else timed * 1e3 if timed is not None else seen
                 if seen is not None else b / (rate * 1e3))
    side = extra if sent else hand_over  # the worker's side of it, where not in its cost
    threads = busy_threads(facts, change.get("intra_op_threads"))
    # loading that waits (files, network, sleep) needs no core: a worker's batch timed
    # with its CPU time tells, else the training process's measured CPU. CPU loading on k
    # workers beside torch's threads oversubscribes the cores when threads + k > CPUs:
    # torch's ops then take threads / (CPUs left) as long
    pct = facts.proc_cpu_mean_pct
    timed_cpu = facts.worker_batch_on_cpu
    io = (facts.worker_batch_waits if timed_cpu is not None
          else pct is not None and pct < IO_BOUND_PCT and fetch.any())
    # the share of a worker's batch that holds a CPU, which the CPU bound counts: as timed
    # where it waits, else all of it (one call: CPU work, or loading that waits)
    on_cpu = timed_cpu if timed_cpu is not None and io else 1.0
    busy = 0 if io else min(k, n_cpus)
    over = threads + busy > n_cpus and k > 0
    if over and pct is None and timed_cpu is None and fetch.any():
        return cannot_tell("whether the loading is CPU work or waiting (I/O) is not known "
                "(a capture with host sampling measures it)")
    # oversubscribed now: the work is freed of the contention the run has and takes the
    # one the change has, both weighed by how busy the workers are where the capture
    # measured it (now) and the replay gives it (then), else both by the whole rule
    contend = threads / max(1, n_cpus - busy) if over else 1.0
    weigh = not over_now or workers_busy_now(facts) is not None
    if over_now:
        g = free_contention(g, facts)
    # a change that oversubscribes a run that is not slows the loop's other work as well;
    # a run oversubscribed now has that rest measured as it is
    rest = over and not over_now
    # fitting the CPUs, both sides take as much longer as the CPUs gave less than their
    # count; not fitting, they share the CPUs while torch's threads run the ops
    if over:
        share, main_shared, contend = worker_share(g, facts, contend, mean_cost, hand_over,
                                                   side, k, busy, threads, n_cpus, rest,
                                                   weigh=weigh)
    else:
        share = main_shared = shared(facts, threads + busy, n_cpus) if busy else 1.0
    out = g.copy()
    host = fetch | wait
    if k == 0:  # the batches are made in the training process: the fetch is on its thread
        out.kind[host] = TaskKind.FETCH
        out.dur[host] = mean_cost
        out = out.remove_edges(np.isin(out.edst, np.flatnonzero(host))
                               & (out.ekind == EdgeKind.END_AFTER_END))
        prod = out.kind == TaskKind.PRODUCER
        out = out.take(~prod) if prod.any() else out
        return slowed(out, contend, main_shared, rest)
    free = k if io else n_cpus
    cap = max(1, min(k, free))
    # a worker makes the batch and puts it into shared memory (its side of the hand-over,
    # counted once): one batch every per_batch us once the pipeline is full
    made = mean_cost * share + side
    per_batch = made / cap
    # the main process now waits for the batch and receives it
    out.kind[host] = TaskKind.DL_WAIT
    out.dur[host] = hand_over
    r = len(out.resources)
    out.resources.append(Resource("DataLoader workers", ResKind.PRODUCER, cap, -np.inf))
    ids = np.flatnonzero(host)
    n = len(ids)
    # batch i is ready per_batch after batch i-1 (steady state: the workers are staggered),
    # the first as the window starts (workers that keep up filled the queue before it)
    ready = g.t0 + per_batch * np.arange(n) - made
    out = out.remove_edges(np.isin(out.edst, ids) & (out.ekind == EdgeKind.END_AFTER_END))
    prod = (out.kind == TaskKind.PRODUCER)
    out = out.take(~prod) if prod.any() else out
    # ids shift when old producer tasks go (they were appended after the host tasks)
    ids = np.flatnonzero(out.kind == TaskKind.DL_WAIT)
    out, p = out.add_tasks(kind=np.full(n, int(TaskKind.PRODUCER), np.int8),
                           res=np.full(n, r, np.int32), dur=np.full(n, made),
                           release=ready, start0=ready)
    out = out.add_edges(p, ids, EdgeKind.END_AFTER_END, hand_over)
    # the CPU it holds (the collector's pauses are CPU work); it may take longer
    out.producer_cpu = (mean_cost - paused) * on_cpu + paused + side
    out.producer_period = per_batch
    return slowed(out, contend, main_shared, rest)


@transform()
def deeper_queue(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """``prefetch_factor``: each worker keeps more batches ready. The model runs the
    workers at their mean rate: a queue that stays full gains nothing from more depth, and
    workers slower than the step are not made faster by it, so the step stays. Where the
    waits came in bursts (:data:`BURST_WAIT_MS`, :data:`BURST_RATIO`), a deeper queue may
    absorb slow batches, which a mean rate does not show: cannot tell."""
    now = facts.dataloader_num_workers
    if now is None:
        return cannot_tell("the loader's workers are not known")
    if now == 0 and not change.get("num_workers"):
        return "does not apply: no worker processes (prefetch_factor needs num_workers > 0)"
    top, mid = facts.dataloader_wait_max_ms, facts.dataloader_wait_median_ms
    if top is None or mid is None:
        if not math.isnan(g.producer_period):
            # workers the model made for a change before this one: they deliver at their
            # mean rate, and the depth of their queue changes nothing
            return g
        return cannot_tell("the waits for batches were not measured")
    if top >= BURST_WAIT_MS and top >= BURST_RATIO * (mid + BURST_FLOOR_MS):
        return cannot_tell("the waits came in bursts (one step waited "
                f"{top:.0f} ms, the median {mid:.1f} ms); a deeper queue may absorb slow "
                "batches, which the model's mean rate does not show")
    return g


# ---------------------------------------------------------------------- the units
NUM_WORKERS = NumWorkers(
    "num_workers", "Load batches in worker processes (DataLoader num_workers)",
    category="input", auto=True, search_key="num_workers", transform=num_workers,
    fields=("num_workers",), instead=("threads", "faster_input"),
    needs="a map-style dataset (an IterableDataset must shard itself across workers) and "
          "a count to move to: fewer workers than the CPUs are searched upward; more, "
          "saturated CPUs, or as many as the CPUs with torch's threads beside them, "
          "downward")

NUM_WORKERS_CAP = NumWorkersCap(
    "num_workers_cap", "No more DataLoader workers than CPUs", category="input", auto=True,
    search_key="num_workers", transform=num_workers, fields=("num_workers",),
    needs="more workers than the CPUs this process may use, and a map-style dataset")

PERSISTENT_WORKERS = PersistentWorkers(
    "persistent_workers", "Keep DataLoader workers alive between epochs", category="input",
    auto=True, change={"persistent_workers": True}, needs="worker processes (num_workers > 0)")

PREFETCH_FACTOR = PrefetchFactor(
    "prefetch_factor", "Queue more batches ahead (DataLoader prefetch_factor)",
    category="input", auto=True, needs="worker processes (num_workers > 0)",
    transform=deeper_queue, fields=("prefetch_factor",))

#: The registered units of this module (a test checks that each one declared is here).
FIXES = (NUM_WORKERS, NUM_WORKERS_CAP, PERSISTENT_WORKERS, PREFETCH_FACTOR)


# ---------------------------------------------------------------------- in a trial
def _num_workers(cfg: TrainConfig, kw: Kwargs) -> None:
    kw["num_workers"] = cfg.num_workers


def _persistent_workers(cfg: TrainConfig, kw: Kwargs) -> None:
    if cfg.num_workers > 0:
        kw["persistent_workers"] = cfg.persistent_workers


def _prefetch_factor(cfg: TrainConfig, kw: Kwargs) -> None:
    if cfg.num_workers > 0:
        kw["prefetch_factor"] = cfg.prefetch_factor or 2  # torch's default


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("num_workers",), loader=_num_workers),
                Realisation(("persistent_workers",), loader=_persistent_workers),
                Realisation(("prefetch_factor",), loader=_prefetch_factor))
