"""Fixes as transforms of the step graph (Daydream-style: select tasks, scale their time,
remove or insert tasks and edges), one function per kind of change.

Each fix unit (:mod:`diagnose.fixes.catalog`) names its transform: ``transform(graph,
change, facts)`` returns the graph the fix would give (to be replayed), or a sentence
saying why the model cannot tell. ``change`` is exactly the
TrainConfig change autofix would apply (``{"num_workers": 2}``); ``facts`` are the run's
metrics (trace, context, samples), read by name; a missing one means "cannot tell".
Constants below are documented where they come from; none is a guess at a number the
trace or the capture measures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..values import as_number
from .graph import DEVICE_TASKS, EdgeKind, Graph, ResKind, Resource, Tag, TaskKind

Facts = Mapping[str, Any]
Transform = Callable[[Graph, Mapping[str, Any], Facts], "Graph | str"]

# Hand-over of a batch from a worker process: the worker writes the batch's tensors into
# a new shared-memory segment and the main process maps and touches them. A live capture
# times it (input_worker_handover_ms); without that, this rate. Timed on the
# 2-core development VM (shared, so noisy): one worker returning fresh 2 MB tensors
# delivered one every ~11-12 ms, 12 MB ones every ~24-30 ms (in-process: under 1 ms), i.e.
# about 0.5 GB/s with the segment's setup included. A live capture's own measurement
# (facts["worker_transfer_gbps"]) wins; faster machines do better than this.
SHM_GBPS = 0.5
# Pinned host-to-device bandwidth by GPU generation (CUDA compute capability major): what
# a pinned copy reaches on the PCIe generation those parts ship with (about 80% of the
# link: PCIe 3 x16 ~12 GB/s for V100/T4, PCIe 4 ~24 GB/s for A100, PCIe 5 ~50 GB/s for H100).
PINNED_GBPS = {7: 12.0, 8: 24.0, 9: 50.0}
# A training process that kept less than this much of one core busy on average (% from
# the host samples) spent much of its step waiting, not computing: its loading is I/O (or
# sleep), which a worker overlaps without a core of its own.
IO_BOUND_PCT = 60.0
# A foreach/fused optimizer launches one multi-tensor kernel per ~this many parameters
# (torch's multi_tensor_apply chunks tensor lists by depth: 110/64/48/36 per launch).
FOREACH_PARAMS_PER_LAUNCH = 64

_GEMM = re.compile(r"gemm|gemv|cutlass|xmma|nvjet|cublas|scudnn|implicit_convolve|winograd|"
                   r"convolve|_fprop|wgrad|dgrad|conv2d|conv_|cudnn_.*(conv|infer|train)",
                   re.IGNORECASE)
_FP32_SIMT = re.compile(r"sgemm|scudnn|_simt_|<float, float|<float,\s*float|_ffma_|"
                        r"f32f32_f32f32_f32|winograd.*<float|engine<float", re.IGNORECASE)
_FP32_NAME = re.compile(r"\bfloat\b|<float|float>|f32", re.IGNORECASE)


def _num(facts: Facts, *names: str) -> float | None:
    """The first of ``names`` the facts hold as a finite number."""
    for n in names:
        v = as_number(facts.get(n))
        if v is not None:
            return v
    return None


def _per_step(g: Graph, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over tasks of ``mask``, per window step (main-thread tasks)."""
    m = mask & (g.step >= 0)
    return np.bincount(g.step[m], weights=values[m], minlength=g.n_steps)


# ---------------------------------------------------------------- input pipeline
def batch_bytes(g: Graph, facts: Facts) -> float | None:
    """Bytes of one batch: the capture's measurement, else the host-to-device copies of a
    step (the batch goes to the GPU once per step)."""
    b = _num(facts, "input_batch_bytes", "batch_bytes", "dataloader_batch_bytes")
    if b is not None:
        return b
    h2d = _num(facts, "memcpy_h2d_bytes")
    steps = _num(facts, "step_count")
    return h2d / steps if h2d and steps else None


def busy_threads(facts: Facts, t: int | None = None) -> int:
    """The CPUs the training process's own work keeps busy on ``t`` intra-op threads
    (default: torch's threads now): all of them where the model runs on the CPU (torch's
    parallel ops), one where it runs on a GPU: the thread that launches the kernels, while
    torch's CPU threads sleep. On an H200 machine (16 CPUs, torch on 16 threads), counting
    them all predicted 16 workers at 4.4x for a job they made 16x faster, and made any
    worker look like it oversubscribed the cores (benchmarks/results/autofix_gpu_h200.txt)."""
    n = int(t or _num(facts, "torch_num_threads", "intra_op_threads") or 1)
    return 1 if facts.get("has_gpu") is True else n


def cpus_for_workers(facts: Facts) -> int | None:
    c = _num(facts, "cpu_count")
    return int(c) if c else None


def thread_scale(facts: Facts, t: int, host_ms: float | None = None) -> float | None:
    """How much longer the main process's own work takes on ``t`` intra-op threads than on
    torch's threads now, from the model's forward and backward the session timed on both
    (Amdahl: the share that did not speed up with threads stays;
    ``threads_one_thread_ratio``). That timing covers the model's ops, and the optimizer
    (``optimizer_unprofiled_ms``) is taken to scale as they do; of the main thread's own
    work per step (``host_ms``, where known) the rest (the loop's Python) is taken not to
    scale. None where it was not timed."""
    r1 = _num(facts, "threads_one_thread_ratio")
    n = _num(facts, "torch_num_threads", "intra_op_threads")
    if r1 is None or n is None or n < 2:
        return None
    if r1 < 1.0 and t <= 1:
        # one thread was faster: torch's threads waited for CPUs others held (a busy host:
        # its parallel ops wait for their descheduled threads), and one thread is what
        # was timed. Beside one busy process on 2 CPUs the tokenizing job's forward and
        # backward took 0.69x as long on one thread, where Amdahl has no room below 1
        ratio = r1
    else:
        p = max(r1 - 1.0, 0.0) / (1.0 - 1.0 / n)  # the scaling part, in N-thread time units
        serial = max(1.0 - p / n, 0.0)
        ratio = max(serial + p / max(t, 1), 0.0)
    work = _num(facts, "model_work_quiet_ms")
    if work is not None:
        work += _num(facts, "optimizer_unprofiled_ms") or 0.0
    if host_ms and work is not None:
        share = min(1.0, work / host_ms)
        ratio = 1.0 + share * (ratio - 1.0)
    return ratio


def cpu_capacity(facts: Facts) -> float | None:
    """The CPUs' worth of work the usable CPUs did at once when the session timed it
    (``cpu_capacity``, between 1 and ``cpu_count``); None where it was not timed."""
    cap, cpus = _num(facts, "cpu_capacity"), cpus_for_workers(facts)
    if cap is None or cpus is None:
        return None
    return min(float(cpus), max(1.0, cap))


def _shared(facts: Facts, demand: int, cpus: int) -> float:
    """How much longer CPU work takes when ``demand`` processes' worth of it runs at once
    on CPUs that gave only ``cpu_capacity`` of their count (SMT siblings, a busy host): the
    busy CPUs' count over the capacity, at least 1 (1 where it was not timed)."""
    cap = cpu_capacity(facts)
    if cap is None or demand < 2:
        return 1.0
    return max(1.0, min(demand, cpus) / cap)


def _doubled(busy: float, threads: float, u: float, given: float) -> float:
    """How much longer busy workers' batches take beside torch's threads (busy a share
    ``u`` of the step) on ``given`` CPUs: the runnable threads beyond the CPUs each double
    up with one, and workers land beside torch's threads (one on each CPU, always runnable
    inside its ops), so that many of the busy workers run at half speed."""
    return 1.0 + max(0.0, min(busy, busy + threads * u - given)) / max(busy, 1.0)


def _contended(busy: float, making: float, cpus: int, threads: int) -> float:
    """The share of the step in which more workers are busy than torch's threads leave
    CPUs (``making``: the share of the step each of ``busy`` workers makes a batch in):
    torch's parallel ops wait for their descheduled threads then, at most all the time."""
    return min(1.0, max(0.0, busy * making - max(0, cpus - threads)))


def _worker_share(g: Graph, facts: Facts, slow: float, cost: float, hand_over: float,
                  side: float, k: int, busy: int, threads: int, cpus: int,
                  rest: bool = False, weigh: bool = True) -> tuple[float, float, float]:
    """How much longer a worker's batch, and the main process's own work, take when busy
    workers and torch's threads oversubscribe the CPUs. The runnable threads beyond the
    CPUs (busy workers + threads x u - CPUs, u being the share of the step in which the
    main process runs its ops: its threads are then runnable; between ops they sleep) each
    double up with one, and workers land beside torch's threads: that many of the busy
    workers run at half speed (where all of them do, (busy workers + threads x u) / CPUs,
    an equal part of the CPUs each). One worker beside torch's 2 threads on 2 CPUs made
    its batches 2.0x as slowly as alone in tokenizing's loop and 2.4x in masked_lm's
    (benchmarks/loop_parts.py), where an equal part said 1.5x. On one thread, which has
    no parallel ops to wait in, its work takes (1 + busy workers x m) / CPUs as long, m
    being the share of the step in which a worker is making a batch, and a worker's batch
    (1 + u + (busy workers - 1) x m) / CPUs as long: each side gets an equal part of the
    CPUs with the others that are runnable beside it, the main thread for the share u and
    each other busy worker for m. (Taken as always busy at once, as beside torch's
    threads, two workers of tokenizing and too_many_workers were made 1.41-1.44x as slow
    as one where their loops timed 1.07-1.2x, benchmarks/loop_parts.py: they keep the
    main thread fed, each busy about half the step. Two of them beside one thread were
    predicted 0.92-0.96x of one worker in 9 autofix trials where 1.04-1.12x was timed.)
    Found together with the step they give:
    the main process's own work (the model's ops ``slow`` times as long, its other work
    (as long too with ``rest``), its launches, receiving the batch) or a batch from the
    workers (``cost`` and their ``side`` of the hand-over each, ``min(k, CPUs)`` at once),
    whichever is longer. Timed in augment_cnn's loop on the 2-CPU VM
    (benchmarks/loop_parts.py), 2 workers beside 1 thread made their batches 1.51x as
    slowly as one made alone and the main thread's compute took 1.19x its time alone on
    one thread; this gives 1.4-1.5x and 1.2x. With more threads, torch's parallel ops
    wait for their descheduled threads (``slow``: the caller's rule for workers that are
    always busy) while the workers make batches: for the share of the step in which more
    of them are busy than torch's threads leave CPUs (the mean busy workers, W / step,
    less those CPUs; at most 1). A transformer whose workers made a batch in 6 ms of a
    107 ms step (benchmarks/jobs/masked_lm.py), beside torch's 2 threads on 2 CPUs, was
    predicted 0.53x for 2 workers with the ops always slowed; 0.93-1.0x was timed, its
    compute 1.12-1.16x as long. Without ``weigh`` (a run oversubscribed now, whose
    measured work :func:`free_contention` frees by the whole rule) the whole rule holds.
    Returns (the workers' factor, the main process's, the ops' factor)."""
    main = g.res == g.main
    if g.n_steps:
        fb = _model_ops(g)
        model = float(_per_step(g, fb, g.dur).mean())
        other = float(_per_step(g, main & g.is_kind(TaskKind.HOST) & ~fb, g.dur).mean())
        launch = float(_per_step(g, main & g.is_kind(TaskKind.LAUNCH), g.dur).mean())
    else:
        model = other = launch = 0.0
    given = cpu_capacity(facts) or cpus
    at_once = max(1, min(k, cpus))
    # the session timed torch's ops beside busy processes: the pace they keep with 0..busy
    # workers busy at once (:func:`_busy_mix`); else the CPUs' share, weighed by the share
    # of the step more workers are busy than the threads leave CPUs (:func:`_contended`)
    measured = _num(facts, "threads_busy_ratio_1") is not None
    u, share, mine, making, ops_slow = 1.0, 1.0, 1.0, 1.0, slow
    for _ in range(40):  # a fixed point, damped: the shares set the step, the step u and m
        ops = model * ops_slow + other * (ops_slow if rest else 1.0)
        if threads == 1:
            share = max(1.0, (1.0 + u + (busy - 1) * making) / given)
            mine = max(1.0, (1 + busy * making) / given)
        else:
            share = _doubled(busy, threads, u, given)
        step = max(ops + launch + hand_over + ops * (mine - 1.0),
                   (cost * share + side) / at_once)
        if step <= 0:
            break
        u = 0.5 * (u + min(1.0, ops * mine / step))
        making = 0.5 * (making + min(1.0, (cost * share + side) / at_once / step))
        if threads > 1 and weigh:
            ops_slow = (_busy_mix(facts, busy, making, cpus, threads) if measured else
                        1.0 + (slow - 1.0) * _contended(busy, making, cpus, threads))
    return share, mine, ops_slow


def _busy_ratio(facts: Facts, j: int, cpus: int, threads: int) -> float:
    """How much longer torch's ops take on ``threads`` threads while ``j`` workers are busy
    at once: 1 where they fit the CPUs; else as the session timed the model's work beside
    busy processes, one or two more than the CPUs the threads leave
    (``threads_busy_ratio_1``, ``_2``; more than two taken as two); threads / CPUs left
    where it was not timed."""
    excess = threads + j - cpus
    if excess <= 0:
        return 1.0
    timed = _num(facts, f"threads_busy_ratio_{min(excess, 2)}")
    rule = threads / max(1, cpus - j)
    return max(timed, 1.0) if timed is not None else rule


def _busy_mix(facts: Facts, busy: int, making: float, cpus: int, threads: int) -> float:
    """How much longer torch's ops take beside ``busy`` workers, each making a batch a share
    ``making`` of the time, independently: j of them are busy at once for a binomial share
    of the time, in which the ops go at 1 / (their ratio beside j busy, :func:`_busy_ratio`);
    the ops' time is one over that mean pace. One busy worker beside 2 threads on 2 CPUs
    made four jobs' forward and backward 1.5-2.3x as long, two of them 2.2-10x (the
    session's timing; benchmarks/jobs); the mean pace, not the mean ratio, is what the
    ops' time follows: the spells at 7x slow only the work that falls in them."""
    m = min(1.0, max(0.0, making))
    pace = sum(math.comb(busy, j) * m ** j * (1.0 - m) ** (busy - j)
               / _busy_ratio(facts, j, cpus, threads) for j in range(busy + 1))
    return 1.0 / pace if pace > 0 else 1.0


def _model_ops(g: Graph) -> np.ndarray:
    """The main thread's work in torch's parallel ops: the model's forward and backward,
    and the optimizer's step and zero_grad (on large tensors its ops split across torch's
    threads as the model's do). Timed in the loop on the 2-vCPU development VM, the
    optimizer took 1.9x as long beside 6 busy workers (too_many_workers: the forward and
    backward 1.9x) and 1.25-1.38x on one thread (the forward and backward 1.28-1.33x)."""
    return ((g.res == g.main) & g.is_kind(TaskKind.HOST)
            & ((g.tag & int(Tag.FORWARD_BACKWARD | Tag.OPTIMIZER | Tag.ZERO_GRAD)) > 0))


def _slowed(g: Graph, contend: float, shared: float, rest: bool = False) -> Graph:
    """The main thread's work with the model's ops ``contend`` times as long (torch's
    threads oversubscribed), and with ``rest`` the rest of its own work too, and all of it
    ``shared`` times as long (CPUs that gave less)."""
    if contend != 1.0:
        ops = _model_ops(g)
        if rest:
            ops = ops | ((g.res == g.main) & g.is_kind(TaskKind.HOST))
        g = g.scale(ops, contend)
    if shared != 1.0:
        g = g.scale((g.res == g.main) & g.is_kind(TaskKind.HOST), shared)
    return g


def main_host_ms(g: Graph) -> float:
    """The main thread's own work per step (ms): its ops and launches, not the loading."""
    main = (g.res == g.main) & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH)
    return float(_per_step(g, main, g.dur).mean()) / 1e3 if g.n_steps else 0.0


def _contention(facts: Facts, now_workers: float | None, threads: int, cpus: int) -> float:
    """How much the measured step's own work is slowed by busy workers sharing the cores
    with torch's threads, where the run oversubscribes them: the same rule that says what
    oversubscribing costs (torch's parallel ops wait for their descheduled threads, so its
    work takes threads / (CPUs the busy workers leave) as long), read the other way. The
    session also times the loop's forward against the same forward alone
    (``forward_contention``, in the report), but on a shared 2-CPU machine that ratio
    swung from 1.1 to 2.8 between captures of one job while the rule's 2x matched what
    freeing the cores measured (benchmarks/results/autofix_jobs.txt)."""
    if not now_workers or threads + min(now_workers, cpus) <= cpus:
        return 1.0
    return threads / max(1, cpus - min(now_workers, cpus))


def free_contention(g: Graph, facts: Facts) -> Graph:
    """The step with torch's ops (the model's and the optimizer's: :func:`_model_ops`)
    freed of the contention the run has now (:func:`_contention`); the loop's other work
    stays as measured. Timed in the loop on the 2-CPU development VM
    (benchmarks/jobs/too_many_workers.py, 6 workers beside 2 threads against 0) the
    forward and backward took 1.9-2.0x as long, and so did the optimizer once the clock
    timed seconds of steps (2.5 s): a few tenths of a second of them caught the workers'
    busy spells at a random phase, 1.0-1.6x, and freeing the optimizer then predicted
    that job's splits 0.73-0.87 of what was timed. The whole rule, not weighed by the
    share of the step the workers are busy as a change's is (:func:`_worker_share`): the
    window's ops hold more than the loop's compute (too_many_workers: 15.4 ms of ops in a
    17.1 ms step, where the loop timed 12.0 ms of compute with its workers and 6.9-8.2 ms
    without them, benchmarks/loop_parts.py): halved they give that compute, weighed
    (1.68x) they predicted its 2 workers beside one thread at 1.29x where 1.4-1.56x was
    timed."""
    cpus = cpus_for_workers(facts)
    threads = busy_threads(facts)
    c = _contention(facts, _num(facts, "dataloader_num_workers"), threads, cpus or 1)
    if c == 1.0:
        return g
    return g.scale(_model_ops(g), 1.0 / c)


#: the loop's pace against the timings after it is taken within these bounds
PACE_BOUNDS = (0.67, 1.5)
#: below the bounds, the worker's batch timed in turn with the in-process one read at
#: least this share of it: both were slowed alike, and the pace is the host's
WORKER_AGREES = 0.95


def _loop_pace(loop_us: float, facts: Facts) -> float:
    """How much longer the loop made a batch in process (``loop_us``, its fetch and collate
    a step by the clock) than the session did after the loop (``input_inprocess_batch_ms``,
    timed beside the worker's batch): a worker's batch timed after the loop is at the
    loop's pace times this, as the rest of the step is. On a shared 2-vCPU host the pace
    moves by 20-40% for seconds at a time (benchmarks/jobs/augment_cnn.py: plain loops of
    the same job 16.6-25.4 ms a step in one minute): a capture's step at one pace and its
    worker's batch at another predicted workers 1.46x where 1.23x was timed. 1 where the
    in-process batch was not timed, and where it took longer than the loop's by more than
    the bounds: that is not the host's pace but this process's timing held up on its own
    (torch's threads waiting for a CPU something else held: one busy process made
    augment_cnn's ops 1.8x as slow). Four captures of three jobs on the 2-vCPU VM read
    the batch in process 1.6-1.8x the loop's, while the worker's, timed in turn on one
    thread, read 0.62-0.90 of it (0.97-1.29 in the others): augment_cnn's split, its
    worker's batch at the bound's pace, was predicted 1.97x where 1.59x was timed; at its
    own timing, 1.54x.

    Where the worker's batch, timed in turn with it, was as slow (at least
    :data:`WORKER_AGREES` of the in-process one), both timings met the same slow host,
    and the pace is taken at the bound. Of ten captures below the bound in the
    benchmarks' runs of 2026-11-27, five read the worker's batch at 0.62-0.90 of the
    in-process one (held up on their own, as above) and five at 0.95-1.13: augment_cnn's loop made a batch
    in 20.8 ms, the session timed 32.0 in process and 36.1 in a worker after it; at the
    worker's own timing its split was predicted 1.07x, where 1.33x was timed (1.38x at
    the bound).

    The same holds within the bounds: an in-process batch slower than the loop's, where
    the worker's, timed in turn with it, was not (under :data:`WORKER_AGREES` of it), was
    held up on its own, and the worker's batch stands as timed. The demo's capture of
    2026-11-28 00:51 UTC (benchmarks/results/autofix_samples.txt): the loop made a batch
    in 17.8 ms, the session timed 22.6 in process and 16.6 in a worker; at the in-process
    pace (0.79) its split was predicted 2.22x where autofix measured 1.66x; as timed, 1.82x.
    Of 54 captures kept from the benchmark runs of 2026-11-27 and -28, four others change,
    none in its first fix, each 3-8% lower: tokenizing's 2 workers beside torch's threads
    (1.06x and 1.11x -> 1.03x) and tensor_rows' worker splits."""
    probe = _num(facts, "input_inprocess_batch_ms")
    if probe is None or probe <= 0 or loop_us <= 0:
        return 1.0
    lo, hi = PACE_BOUNDS
    pace = loop_us / (probe * 1e3)
    if pace >= 1.0:
        return min(hi, pace)
    worker = _num(facts, "input_worker_batch_ms")
    if worker is None:
        return pace if pace >= lo else 1.0
    return max(lo, pace) if worker >= WORKER_AGREES * probe else 1.0


def num_workers(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Batches made by k worker processes: the producer runs on min(k, CPUs) cores (k for
    loading that waits), each batch costing what the main process spent fetching and
    collating it (in-process loader), what one batch took made alone after the loop (the
    session times it), the CPU time the workers' samples show per batch, or
    (without samples) what the measured rate says of loader-bound workers; the main process
    pays the hand-over of each batch from shared memory instead, and its own work slows
    where the busy workers and torch's threads oversubscribe the cores (below). A run that
    oversubscribes now has its work freed of that contention first (:func:`_contention`).
    The CPU bound (all CPU work per step / cores) is applied by the caller (cpu_bound_ms)."""
    k = int(change["num_workers"])
    if k > 0 and facts.get("dataloader_batches_on_device") is True:
        return ("does not apply: the dataset makes its batches on the GPU, which no worker "
                "process can (CUDA does not start in a forked one)")
    cpus = cpus_for_workers(facts)
    if cpus is None:
        return "cannot tell: the number of CPUs is not known (a live capture records it)"
    now = _num(facts, "dataloader_num_workers")
    threads_now = busy_threads(facts)
    over_now = bool(now) and threads_now + min(now or 0, cpus) > cpus
    fetch = g.is_kind(TaskKind.FETCH)
    wait = g.is_kind(TaskKind.DL_WAIT)
    step = float(g.steps_measured.mean()) if g.n_steps else 0.0
    worker = _num(facts, "input_worker_batch_ms")
    # whether the cost holds the worker's side of the hand-over: a batch timed as a worker
    # makes it (default_collate writing it into shared memory) or the workers' own CPU
    sent = False
    # what a worker's other threads spend sending each batch (pickling it, handing over
    # its tensors' file descriptors), where the cost is a batch timed as a worker makes
    # it, which holds none of it (the workers' own CPU does): tokenizing's real worker
    # spent 2.5-2.9 ms a batch so beside 13-16 ms making it, and its one worker was
    # predicted 18.4 ms a step where 19.9-21.8 ms was timed
    send = _num(facts, "input_worker_send_ms") or 0.0
    extra = 0.0
    if fetch.any():
        cost = _per_step(g, fetch, g.dur)
        mean_cost = float(cost.mean())
        if worker is not None and k > 0:  # a worker makes it on one intra-op thread
            # the garbage collector's pauses inside the loop's loading: the fetch's own
            # objects set them off, and a worker makes the same objects (its full
            # collections walk the same heap, forked). The batch timed after the loop
            # met none, so they are not the loop's pace: they are added to the worker's
            # batch instead (tensor_rows, 20 of its 40 ms a step in full collections:
            # one worker predicted 1.3-1.9x, 0.8x timed)
            paused = (_num(facts, "gc_pause_loader_ms") or 0.0) * 1e3
            paused = min(paused, 0.9 * mean_cost)
            pace = _loop_pace(mean_cost - paused, facts)
            mean_cost = worker * 1e3 * pace + paused
            extra = send * 1e3 * pace
            sent = True
    elif wait.any():
        waited = float(_per_step(g, wait, g.dur).mean())
        per_worker, alive = _num(facts, "workers_cpu_mean_pct"), _num(facts, "workers_count")
        # a batch made alone after the loop, by the session: in the training process
        # (for k = 0) or as a worker makes it (one intra-op thread)
        made_in = ("input_inprocess_batch_ms", "input_worker_batch_ms")
        alone = _num(facts, *(made_in if k == 0 else made_in[::-1]))
        if alone is not None:
            mean_cost = alone * 1e3
            sent = k > 0 and worker is not None
            extra = send * 1e3 if sent else 0.0
        elif per_worker is not None and alive:
            # a batch costs the CPU time the workers spent per step (one batch a step)
            mean_cost = per_worker / 100 * alive * step
            sent = True
        elif now is not None and now > cpus:
            return ("cannot tell: what a batch costs the workers is not measured, and more "
                    "workers than CPUs share them in ways the trace does not show (a live "
                    "capture with host sampling measures it)")
        elif now is not None and now >= 1 and waited >= 0.05 * step:
            # loader-bound: the workers deliver a batch per step, min(k, CPUs) at a time
            mean_cost = step * min(now, cpus)
        else:
            return ("cannot tell: the workers keep up (or their number is unknown), so "
                    "their per-batch cost is hidden behind the step")
    else:
        return "cannot tell: no DataLoader in the profiled steps"
    if k == 0:
        if fetch.any():
            return "cannot tell: nothing changes (the batches are made in process already)"
        if mean_cost <= 0:
            return "cannot tell: the in-process cost of a batch is not measured with workers"
    b = batch_bytes(g, facts)
    if b is None:
        return "cannot tell: the batch's size in bytes is not known (a live capture measures it)"
    # receiving a batch: as the session timed it; else, with workers now, the shortest
    # wait of the window (a batch that was ready: the graph's wait tasks hold it); else
    # the batch's bytes at a shared-memory rate
    timed = _num(facts, "input_worker_handover_ms")
    rate = _num(facts, "worker_transfer_gbps") or SHM_GBPS
    seen = float(g.dur[wait].min()) if wait.any() and now else None
    hand_over = (0.0 if k == 0 else timed * 1e3 if timed is not None else seen
                 if seen is not None else b / (rate * 1e3))
    side = extra if sent else hand_over  # the worker's side of it, where not in its cost
    threads = busy_threads(facts, change.get("intra_op_threads"))
    # Loading that waits (files, network, sleep) needs no core: the training process's
    # measured CPU tells (about a core or more the whole time is CPU-bound loading). CPU
    # loading on k workers beside torch's threads oversubscribes the cores when
    # threads + k > CPUs: torch's parallel ops then wait for their descheduled threads, so
    # the main process's own work takes threads / (CPUs left by the busy workers) as long.
    pct = _num(facts, "proc_cpu_mean_pct")
    io = pct is not None and pct < IO_BOUND_PCT and fetch.any()
    busy = 0 if io else min(k, cpus)
    over = threads + busy > cpus and k > 0
    if over and pct is None and fetch.any():
        return ("cannot tell: whether the loading is CPU work or waiting (I/O) is not known "
                "(a capture with host sampling measures it)")
    # Oversubscribed now: the work is freed of the contention the run has (the same
    # formula, read the other way) and takes the one the change has: a change that stays
    # as oversubscribed keeps it, one on fewer threads or workers sheds part of it.
    contend = threads / max(1, cpus - busy) if over else 1.0
    if over_now:
        g = free_contention(g, facts)
    # torch's ops (the model's and the optimizer's) wait for descheduled threads: the
    # tokenizing job with one worker beside 2 threads on 2 CPUs took 1.9x as long in its
    # optimizer (1.5 -> 2.8 ms) and 2.0x in its forward and backward. A change that
    # oversubscribes a run that is not slows the loop's other work as well (slowing
    # torch's ops alone predicted tokenizing's 1 and 2 workers beside 2 threads
    # 0.89-0.97x where 0.79-0.89x was timed, 4 captures; with the rest 0.76-0.86x); a run
    # oversubscribed now has that rest measured as it is
    rest = over and not over_now
    # torch's threads and busy workers that fit the CPUs run at once: where the CPUs gave
    # less than their count (cpu_capacity), both sides take that much longer. Where they
    # do not fit, the workers share the CPUs with torch's threads while those run the
    # main process's ops: each runnable thread gets an equal part of the CPUs.
    if over:
        shared, main_shared, contend = _worker_share(g, facts, contend, mean_cost, hand_over,
                                                     side, k, busy, threads, cpus, rest,
                                                     weigh=not over_now)
    else:
        shared = main_shared = _shared(facts, threads + busy, cpus) if busy else 1.0
    out = g.copy()
    host = fetch | wait
    if k == 0:  # the batches are made in the training process: the fetch is on its thread
        out.kind[host] = TaskKind.FETCH
        out.dur[host] = mean_cost
        out = out.remove_edges(np.isin(out.edst, np.flatnonzero(host))
                               & (out.ekind == EdgeKind.END_AFTER_END))
        prod = out.kind == TaskKind.PRODUCER
        out = out.take(~prod) if prod.any() else out
        return _slowed(out, contend, main_shared, rest)
    free = k if io else cpus
    cap = max(1, min(k, free))
    # a worker makes the batch and puts it into shared memory (its side of the hand-over:
    # in the cost where that was timed as a worker makes it; else taken as long as the
    # receiving side): one batch every per_batch us once the pipeline is full. Counted
    # twice, augment_cnn's one worker (13.5 ms a batch, 1.7 ms a hand-over) was predicted
    # 1.08-1.17x where 1.27-1.36x was timed
    made = mean_cost * shared + side
    per_batch = made / cap
    # the main process now waits for the batch and receives it
    out.kind[host] = TaskKind.DL_WAIT
    out.dur[host] = hand_over
    r = len(out.resources)
    out.resources.append(Resource("DataLoader workers", ResKind.PRODUCER, cap, -np.inf))
    ids = np.flatnonzero(host)
    n = len(ids)
    # batch i is ready per_batch after batch i-1 (steady state: the workers are staggered),
    # the first as the window starts: workers that keep up have filled the queue during the
    # steps before it, and workers that do not set the step by their spacing alone. (Made
    # from an empty queue, the window's first step waited for a whole batch: with 3 steps
    # that start-up moved the median step, too_many_workers' 1 worker and 1 thread 12.6 ms
    # where its main thread's work was 10.4 ms a step and 10.7 ms was timed.)
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
    out.producer_cpu = mean_cost + side  # the CPU it holds; its duration may be longer
    out.producer_period = per_batch
    return _slowed(out, contend, main_shared, rest)


def deeper_queue(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """``prefetch_factor``: each worker keeps more batches ready. The model runs the
    workers at their mean rate: a queue that stays full gains nothing from more depth, and
    workers slower than the step are not made faster by it, so the step stays. Where the
    waits came in bursts (one step waited 5x the median or more, 20 ms at least: IN003's
    measure), a deeper queue may absorb slow batches, which a mean rate does not show."""
    now = _num(facts, "dataloader_num_workers")
    if now is None:
        return "cannot tell: the loader's workers are not known"
    if now == 0 and not change.get("num_workers"):
        return "does not apply: no worker processes (prefetch_factor needs num_workers > 0)"
    top, mid = _num(facts, "dataloader_wait_max_ms"), _num(facts, "dataloader_wait_median_ms")
    if top is None or mid is None:
        if not math.isnan(g.producer_period):
            # workers the model made for a change before this one (autofix's kept split
            # of a run that had none): they deliver at their mean rate, and the depth
            # of their queue changes nothing (tokenizing's prefetch after its kept split
            # went without a prediction)
            return g
        return "cannot tell: the waits for batches were not measured"
    if top >= 20 and top >= 5 * (mid + 0.1):
        return ("cannot tell: the waits came in bursts (one step waited "
                f"{top:.0f} ms, the median {mid:.1f} ms); a deeper queue may absorb slow "
                "batches, which the model's mean rate does not show")
    return g


def cpu_bound_ms(base: Graph, g: Graph, change: Mapping[str, Any], facts: Facts
                 ) -> float | None:
    """No setting beats (all CPU work per step) / cores: the main process's own work on its
    intra-op threads (``base``: the unchanged step, freed of the contention measured now;
    on a new thread count, that work as the forward's scaling says, on those threads), every
    batch's fetch and collate and both sides of its hand-over (``g``: the changed step)."""
    cpus = cpus_for_workers(facts)
    if cpus is None:
        return None
    threads = busy_threads(facts)
    base = free_contention(base, facts)
    main = (base.res == base.main) & base.is_kind(TaskKind.HOST, TaskKind.LAUNCH)
    busy = float(_per_step(base, main, base.dur).mean())
    t = change.get("intra_op_threads")
    scale = thread_scale(facts, t, busy / 1e3) if isinstance(t, int) else None
    cpu_main = (busy * scale * min(busy_threads(facts, t), cpus) if isinstance(t, int) and scale
                else busy * min(threads, cpus))
    prod = g.is_kind(TaskKind.PRODUCER)
    made = (float(g.dur[prod].sum()) if math.isnan(g.producer_cpu)
            else g.producer_cpu * int(prod.sum()))  # CPU work, not time slowed by sharing
    work = (float(g.dur[g.is_kind(TaskKind.FETCH)].sum()) + made) / max(g.n_steps, 1)
    hand = float(_per_step(g, g.is_kind(TaskKind.DL_WAIT), g.dur).mean()) if change.get(
        "num_workers") else 0.0
    # the producer's tasks hold the worker's side; the CPUs do what they gave at once
    return (cpu_main + work + hand) / (cpu_capacity(facts) or cpus) / 1e3


# ---------------------------------------------------------------- transfers
def pin_memory(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Pinned, non-blocking copies: a pageable host-to-device copy stops blocking the host
    (its wait and the stream sync that followed it go) and runs at pinned bandwidth."""
    pg = (g.tag & int(Tag.PAGEABLE)) > 0
    copies = pg & g.is_kind(TaskKind.MEMCPY)
    if not copies.any():
        return "no pageable host-to-device copies in the profiled steps"
    cc = _num(facts, "device_cc_major")
    rate = _num(facts, "memcpy_h2d_pinned_gbps") or (PINNED_GBPS.get(int(cc)) if cc else None)
    out = g.copy()
    if rate is not None:
        b = out.nbytes[copies]
        fast = np.where(np.isfinite(b), b / (rate * 1e3), out.dur[copies])
        out.dur[copies] = np.minimum(out.dur[copies], fast)
    waits = pg & g.is_kind(TaskKind.COPY_WAIT, TaskKind.SYNC)
    out.dur[waits] = 0.0
    return out.remove_edges(np.isin(out.edst, np.flatnonzero(waits))
                            & (out.ekind == EdgeKind.END_AFTER_END))


def remove_sync(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """The host stops waiting for the device in .item(), synchronize and blocking copies of
    results to the host (their own time stays): those edges go."""
    waits = g.is_kind(TaskKind.SYNC, TaskKind.COPY_WAIT) & ((g.tag & int(Tag.PAGEABLE)) == 0)
    if not waits.any():
        return "no synchronising calls in the profiled steps"
    return g.remove_edges(np.isin(g.edst, np.flatnonzero(waits))
                          & (g.ekind == EdgeKind.END_AFTER_END))


# ---------------------------------------------------------------- device work
def amp(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """fp32 GEMM/convolution kernels run tensor_core_speedup x faster (metrics: half the
    datasheet peak ratio of this GPU, at most 4x); other fp32 kernels outside the optimizer
    are memory-bound and move half the bytes in bf16/fp16 (2x)."""
    tc = _num(facts, "tensor_core_speedup")
    if tc is None:
        return "cannot tell: no tensor-core speedup is known for this device"
    kern = g.is_kind(TaskKind.KERNEL)
    simt = kern & g.name_mask(lambda n: bool(_GEMM.search(n)) and bool(_FP32_SIMT.search(n)))
    if not simt.any():
        return "no fp32 GEMM/convolution kernels in the profiled steps"
    other = (kern & ~g.name_mask(lambda n: bool(_GEMM.search(n)))
             & g.name_mask(lambda n: bool(_FP32_NAME.search(n)))
             & ((g.tag & int(Tag.OPTIMIZER)) == 0))
    out = g.scale(simt, 1 / tc)
    out.dur[other] *= 0.5
    return out


def foreach_optimizer(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Per-parameter launches collapse into a few multi-tensor ones: the optimizer's host
    work shrinks by launches-after / launches-before; its kernels' total time stays."""
    opt = (g.tag & int(Tag.OPTIMIZER)) > 0
    launches = opt & g.is_kind(TaskKind.LAUNCH)
    n = float(_per_step(g, launches, np.ones(len(g))).mean())
    if n < 2 * FOREACH_PARAMS_PER_LAUNCH / 8:
        return "the optimizer already launches few kernels"
    kernels_per_param = 5.0  # Adam: mul_, lerp_/add_, addcmul_, sqrt, addcdiv_ per parameter
    params = n / kernels_per_param
    after = max(4.0, math.ceil(params / FOREACH_PARAMS_PER_LAUNCH) * kernels_per_param)
    if after >= n:
        return "the optimizer already launches few kernels"
    host = opt & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH) & (g.res == g.main)
    return g.scale(host, after / n)


def set_to_none(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """zero_grad(set_to_none=True): the fills go, host and device."""
    zero = (g.tag & int(Tag.ZERO_GRAD)) > 0
    work = zero & g.is_kind(TaskKind.LAUNCH, *DEVICE_TASKS)
    if not work.any():
        return "optimizer.zero_grad() launches no fills"
    out = g.copy()
    out.dur[zero & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH)] = 0.0
    return out.remove_tasks(zero & g.is_kind(*DEVICE_TASKS))


def cuda_graphs(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """One graph launch per step instead of one launch per kernel: the launch calls' host
    time per step becomes that of one launch (the median one); op dispatch stays."""
    launch = g.is_kind(TaskKind.LAUNCH) & ((g.tag & int(Tag.PAGEABLE)) == 0) & (g.step >= 0)
    if launch.sum() < 2 * g.n_steps:
        return "few launches per step: nothing for a graph to save"
    if _num(facts, "graph_launches_per_step"):
        return "CUDA graphs are already in use"
    out = g.copy()
    per = np.bincount(g.step[launch], minlength=g.n_steps).astype(float)
    one = float(np.median(g.dur[launch]))
    out.dur[launch] = one / per[g.step[launch]]
    return out


def larger_batch(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """Twice the micro-batch, half the accumulation steps (the effective batch kept): a
    step's kernels and its input take twice as long, its launches and host work stay; the
    replayed step is then halved (the same samples as before per step)."""
    acc = _num(facts, "grad_accum_steps")
    if acc is None or acc < 2:
        return "a larger batch changes training unless it replaces gradient accumulation"
    out = g.scale(g.is_kind(*DEVICE_TASKS, TaskKind.FETCH, TaskKind.PRODUCER), 2.0)
    out.steps_measured = g.steps_measured * 2  # two of the old steps' work per step
    return out


#: the most the model's ops are taken to gain from a batched fetch's shorter load (the
#: session's timing of them after each kind of fetch, input_batched_fetch_work_ratio):
#: tensor_rows' timings read 0.99-1.32 where its loops gave 1.10-1.25, and timings of nine
#: rounds up to 1.85 (benchmarks/results/work_after_fetch.txt)
WAKE_RATIO_MAX = 1.35


def batched_fetch(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """One ``dataset[indices]`` call per batch instead of a ``__getitem__`` per sample and
    ``default_collate`` stacking the rows: the in-process fetch takes what a batch took
    from a loader fetching so when the capture timed it before the loop
    (``input_batched_fetch_ms``) instead of
    the fetch and collate the clock measured per batch (``input_fetch_ms`` +
    ``input_collate_ms``), less the loader's own work per batch outside them (the loop's
    wait for a batch, ``dataloader_wait_unprofiled_share`` of the step, beyond its fetch
    and collate), which the timing holds too and the step keeps. That timing is put on the
    loop's pace by the same batches fetched as the loop does, timed in turn with it
    (``input_batched_fetch_per_sample_ms``), against the loop's own median fetch and
    collate of a batch (``input_loading_median_ms``): the host's pace before the loop is
    not the loop's. One tensor_rows capture fetched the batches a sample at a time in
    37.8 ms before the loop and in 26.1 ms in it; its batched fetch, timed at 4.17 ms,
    is 2.88 ms at the loop's pace, and the change was predicted 4.97x where 5.59x was
    timed without the profiler (4.49x as timed). Where the two paces agree (25.6 and
    24.8 ms in another) the prediction hardly moves (5.23x to 5.26x).

    The ops after the loading change too: a long single-threaded load leaves torch's
    thread pool asleep, and the model's work that follows pays for waking it. The session
    timed that work right after each kind of fetch, in turn
    (``input_batched_fetch_work_ratio``); the model's ops (:func:`_model_ops`) are that
    much shorter, at most :data:`WAKE_RATIO_MAX` (never longer: a batched fetch does not
    make the pool sleep longer, and a ratio under 1 is the timing's noise). Three kept
    tensor_rows captures, whose changed loops ran 6.10x and 6.31x faster in autofix's
    trials and 5.47x in separate processes, were predicted 4.76-5.20x without it; with it,
    three captures (timed 1.13-1.18) were predicted 5.70x (5.57x measured in autofix's
    trials), 5.78x (5.29x in separate processes) and 6.33x (4.78x: the changed loop timed
    11.67 ms a step there, where autofix's trial measured 10.37 ms minutes before), in
    benchmarks/results (autofix_jobs.txt, predict_vs_measured.txt)."""
    if facts.get("dataloader_dataset_tensor_indexable") is False:
        return "does not apply: the dataset cannot hand over a batch in one indexing call"
    one = _num(facts, "input_batched_fetch_ms")
    fetch_ms = _num(facts, "input_fetch_ms")
    collate_ms = _num(facts, "input_collate_ms")
    if one is None or fetch_ms is None or collate_ms is None:
        return ("cannot tell: one batched fetch and the loader's fetch and collate were not "
                "timed (a live capture times them)")
    fetch = g.is_kind(TaskKind.FETCH)
    if not fetch.any():
        return "cannot tell: the batches are not made in the training process"
    per_step = fetch_ms + collate_ms  # per unprofiled step: one batch a step
    if per_step <= 0:
        return "cannot tell: no time in the loader's fetch or collate"
    # the timing went through a loader's next(), whose own work (the sampler's indices,
    # the fetcher) the step keeps outside the fetch and collate: it is not counted twice
    # (tensor_rows: 0.4 ms a batch of 4096 rows, of a 1.6-2.5 ms timing)
    share, mean = _num(facts, "dataloader_wait_unprofiled_share"), _num(
        facts, "step_time_unprofiled_mean_ms")
    own = max(0.0, share * mean - per_step) if share is not None and mean else 0.0
    each, loop = _num(facts, "input_batched_fetch_per_sample_ms"), _num(
        facts, "input_loading_median_ms")
    if each and loop and each > 0 and loop > 0:
        one *= loop / each
    one = max(one - own, 0.5 * one)
    # the fetch's tasks hold the loading the clock measured, less the collector's pauses a
    # gc.freeze applied before this took out of it
    held = 1.0 - (1.0 - g.loading_gc) * (_loading_pauses(facts) or 0.0) / per_step
    out = g.scale(fetch, min(1.0, one / per_step) / max(held, 1e-3))
    # the collector's pauses inside the loading went with it: they count in the fetch
    # the clock measured, the batched fetch was timed as one call that allocates a few
    # objects where the per-sample fetch made thousands (full collections come with
    # allocations, wherever they land): a gc.freeze after it has none of them to remove
    out.loading_gc = 0.0
    wake = _num(facts, "input_batched_fetch_work_ratio")
    if wake is not None and wake > 1.0:
        out = out.scale(_model_ops(out), 1.0 / min(wake, WAKE_RATIO_MAX))
    return out


def threads(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """torch on ``intra_op_threads`` threads beside ``num_workers`` workers. The workers'
    side is :func:`num_workers`. The main process's own work takes as much longer as the
    forward and backward the session timed on one thread and on torch's threads says
    (:func:`thread_scale`). Without that timing, the training process's measured CPU
    (``proc_cpu_mean_pct``) less its in-process loading gives the threads its ops kept
    busy, each op taken to scale with them: an idle-spinning thread pool counts as busy,
    so this errs toward "the split costs more" (the prediction is then a bound). The CPU
    bound (caller) counts the threads' time."""
    now = _num(facts, "intra_op_threads", "torch_num_threads")
    t = change.get("intra_op_threads")
    if now is None or not isinstance(t, int):
        return "cannot tell: torch's thread count is not known (a live capture records it)"
    # the share of the main thread's work the timed forward and backward stand for, of
    # that work freed of the contention the run has now (the timing was made alone, as
    # cpu_bound_ms frees it): against the contended work, too_many_workers' share came
    # out 0.63 where it is all of it, and one thread was taken to cost 1.29x where the
    # loop took 1.38x (its splits predicted 8.0-9.4 ms a step where 10.5 was timed)
    scale = thread_scale(facts, t, main_host_ms(free_contention(g, facts)))
    if scale is None:
        used = now
        pct = _num(facts, "proc_cpu_mean_pct")
        step = float(g.steps_measured.mean()) if g.n_steps else 0.0
        if pct is not None and step > 0:
            loading = float(_per_step(g, g.is_kind(TaskKind.FETCH), g.dur).mean()) / step
            if loading < 0.95:
                used = min(now, max(1.0, (pct / 100 - loading) / (1 - loading)))
        scale = max(1.0, used / t)
    # the main thread's work on its new threads first: the workers' side then shares the
    # CPUs with it as it will run (num_workers: the share of the step each side runs)
    out = g.scale((g.res == g.main) & g.is_kind(TaskKind.HOST), scale)
    if "num_workers" in change:
        made = num_workers(out, change, facts)
        if isinstance(made, str) and not made.startswith("cannot tell: nothing changes"):
            return made
        out = out if isinstance(made, str) else made
    return out


# ---------------------------------------------------------------- the host's pauses
def _loading_ms(facts: Facts) -> float | None:
    """The in-process loading per unprofiled step the clock measured: fetch and collate."""
    parts = [_num(facts, n) for n in ("input_fetch_ms", "input_collate_ms")]
    return None if None in parts else sum(x for x in parts if x is not None)


def _loading_pauses(facts: Facts) -> float | None:
    """Of the collector's pauses per step (the full collections' where they were told
    apart), those that fell inside the in-process loading (ms; in its measured time)."""
    full = _num(facts, "gc_pause_full_ms")
    pause = full if full is not None else _num(facts, "gc_pause_ms")
    inside = _num(facts, "gc_pause_full_loader_ms" if full is not None
                  else "gc_pause_loader_ms")
    made = _loading_ms(facts)
    if pause is None or inside is None or made is None:
        return None
    return max(0.0, min(inside, pause, made))


def remove_gc_pauses(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """``gc.freeze()``: the full (generation 2) collections' pauses on the training thread
    go. A full collection walks every object the collector tracks, and after the freeze
    those are out of its reach; a young collection walks only the objects made since the
    last one, which the freeze does not change, so its pauses stay (tensor_rows, timed
    without the profiler: 22-23 ms a step of full collections fell to 0.3 ms, the young
    ones' 1.2-2.1 ms stayed, and the step went from 44-48 ms to 20-25 ms).
    The session timed the pauses per step (``gc_pause_full_ms``, a mean over the
    unprofiled steps; ``gc_pause_ms`` for all of them where a capture did not split them)
    and which of them fell inside the loop's wait for a batch (``gc_pause_full_loader_ms``,
    ``gc_pause_loader_ms``). Those come off the in-process loading, the share of it the
    clock measured them to be (they are in it), and the loading then holds none
    (``Graph.loading_gc``). After a batched fetch it holds none already
    (:func:`batched_fetch`): tensor_rows' gc.freeze after its batched fetch was predicted
    1.17x with them, and measured 1.01x [0.94, 1.07] (benchmarks/results/autofix_jobs.txt,
    2026-11-28 00:39). The others come off the main thread's own work (ops, launches), in
    proportion (a pause lands on whichever allocation trips it, and the allocations
    outside the loading stay as they were)."""
    full = _num(facts, "gc_pause_full_ms")
    pause = full if full is not None else _num(facts, "gc_pause_ms")
    if pause is None:
        return ("cannot tell: the collector's pauses were not timed (a live capture times "
                "them)")
    if pause <= 0:
        return ("the collector made no full collection on the training thread"
                if full is not None else "the collector did not pause the training thread")
    main = g.res == g.main
    fetch = main & g.is_kind(TaskKind.FETCH)
    out, rest = g, pause
    own_kinds: tuple[TaskKind, ...] = (TaskKind.HOST, TaskKind.LAUNCH, TaskKind.FETCH)
    inside = _loading_pauses(facts)
    if inside is not None and fetch.any():
        made = _loading_ms(facts) or 0.0
        if made > 0 and inside > 0 and g.loading_gc > 0:
            out = out.scale(fetch, 1.0 - g.loading_gc * inside / made)
            out.loading_gc = 0.0
        rest, own_kinds = pause - inside, (TaskKind.HOST, TaskKind.LAUNCH)
    host = main & out.is_kind(*own_kinds)
    own = float(_per_step(out, host, out.dur).mean()) / 1e3 if out.n_steps else 0.0
    if rest > 0 and own > 0:
        out = out.scale(host, max(0.0, own - rest) / own)
    return out


def cannot(why: str) -> Transform:
    """The transform of a fix whose effect the trace cannot show: its reason."""
    return lambda g, change, facts: why
