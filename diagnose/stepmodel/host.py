"""The host's CPUs as a shared resource: what the transforms of CPU work have in common.

The training process's own work (its ops on torch's intra-op threads, its launches, its
in-process loading), the DataLoader's workers and the hand-over of each batch share the
usable CPUs. The model (DESIGN.md, "CPU is a resource too"):

- torch's threads are busy while the main thread is inside an op (all of them on a CPU
  model, one launching thread on a GPU); between ops they sleep;
- where busy workers and torch's threads fit the CPUs, each runs as fast as the CPUs'
  measured capacity allows (``cpu_capacity``: SMT siblings, a busy host);
- where they do not fit, torch's parallel ops wait for their descheduled threads and the
  workers double up with them: by the rule threads / (CPUs the workers leave), the
  threads' share of the CPUs left to them;
- no setting beats (all CPU work per step) / capacity (:func:`cpu_bound_ms`).

Every input is a measurement of the user's job and machine (:class:`~.facts.Facts`); the
few hand-set numbers are in :mod:`diagnose.stepmodel.calibration`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np

from .calibration import (
    FIXED_POINT_DAMPING,
    FIXED_POINT_ROUNDS,
    FIXED_POINT_TOL,
    THREADS_NOISE_MAX,
)
from .facts import Facts
from .graph import Graph, Tag, TaskKind


def per_step(g: Graph, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over tasks of ``mask``, per window step (main-thread tasks)."""
    m = mask & (g.step >= 0)
    return np.bincount(g.step[m], weights=values[m], minlength=g.n_steps)


def batch_bytes(g: Graph, facts: Facts) -> float | None:
    """Bytes of one batch: the capture's measurement, else the host-to-device copies of a
    step (the batch goes to the GPU once per step)."""
    if facts.input_batch_bytes is not None:
        return facts.input_batch_bytes
    h2d, steps = facts.memcpy_h2d_bytes, facts.step_count
    return h2d / steps if h2d and steps else None


def busy_threads(facts: Facts, t: int | None = None) -> int:
    """The CPUs the training process's own work keeps busy on ``t`` intra-op threads
    (default: torch's threads now): all of them where the model runs on the CPU (torch's
    parallel ops), one where it runs on a GPU (the launching thread; torch's CPU threads
    sleep)."""
    n = int(t or facts.torch_num_threads or 1)
    return 1 if facts.has_gpu is True else n


def thread_scale(facts: Facts, t: int, host_ms: float | None = None) -> float | None:
    """How much longer the main process's own work takes on ``t`` intra-op threads than on
    torch's threads now, from the model's forward and backward the session timed on both
    (Amdahl: the share that did not speed up with threads stays;
    ``threads_one_thread_ratio``). The optimizer (``optimizer_unprofiled_ms``) is taken to
    scale as the model's ops do; of the main thread's own work per step (``host_ms``, where
    known) the rest (the loop's Python) does not scale. Where one thread was timed faster
    (torch's threads waited for CPUs others held), one thread costs what was timed, but
    the main thread's work on it is never less than that work timed alone on one thread
    (``model_work_one_thread_ms``): a timing on torch's threads disturbed by another
    process cannot make one thread look faster than it is. Where the loop's own steps were
    run on one thread (``threads_loop_ratio``), the ratio is of the main thread's whole work
    per step, and holds for all of it. None where it was not timed."""
    r1, n = facts.threads_one_thread_ratio, facts.torch_num_threads
    if r1 is None or n is None or n < 2:
        return None
    if r1 < 1.0 and t <= 1:
        ratio = r1
    else:
        p = max(r1 - 1.0, 0.0) / (1.0 - 1.0 / n)  # the scaling part, in N-thread time units
        serial = max(1.0 - p / n, 0.0)
        ratio = max(serial + p / max(t, 1), 0.0)
    if facts.threads_loop_ratio is not None:
        return ratio
    work = facts.model_work_quiet_ms
    if work is not None:
        work += facts.optimizer_unprofiled_ms or 0.0
    if host_ms and work is not None:
        share = min(1.0, work / host_ms)
        ratio = 1.0 + share * (ratio - 1.0)
        one = facts.model_work_one_thread_ms
        if t <= 1 and r1 < 1.0 and one is not None and one > 0:
            ratio = max(ratio, one / host_ms)
    return ratio


def cpu_used(facts: Facts) -> float | None:
    """The CPUs' worth the job's processes used at once in the loop, by the host samples:
    the training process's CPU and each of its workers' (% of one core, summed); None where
    the training process was not sampled."""
    proc = facts.proc_cpu_mean_pct
    if proc is None:
        return None
    workers = (facts.workers_count or 0) * (facts.workers_cpu_mean_pct or 0.0)
    return (proc + workers) / 100


def cpu_capacity(facts: Facts) -> float | None:
    """The CPUs' worth of work the usable CPUs did at once (between 1 and ``cpu_count``): as
    the session timed it (``cpu_capacity``), and at least what the job's own processes used
    in the loop (:func:`cpu_used`: a timing made in a busy moment reads below what the
    loop had); None where it was not timed."""
    cap, cpus = facts.cpu_capacity, facts.cpu_count
    if cap is None or cpus is None:
        return None
    return min(float(cpus), max(1.0, cap, cpu_used(facts) or 0.0))


def shared(facts: Facts, demand: int, cpus: int) -> float:
    """How much longer CPU work takes when ``demand`` processes' worth of it runs at once
    on CPUs that gave only ``cpu_capacity`` of their count: the busy CPUs' count over the
    capacity, at least 1 (1 where it was not timed)."""
    cap = cpu_capacity(facts)
    if cap is None or demand < 2:
        return 1.0
    return max(1.0, min(demand, cpus) / cap)


def doubled(busy: float, threads: float, u: float, given: float) -> float:
    """How much longer busy workers' batches take beside torch's threads (busy a share
    ``u`` of the step) on ``given`` CPUs: the runnable threads beyond the CPUs each double
    up with one, and workers land beside torch's threads (one on each CPU, always runnable
    inside its ops), so that many of the busy workers run at half speed."""
    return 1.0 + max(0.0, min(busy, busy + threads * u - given)) / max(busy, 1.0)


def contended(busy: float, making: float, cpus: int, threads: int) -> float:
    """The share of the step in which more workers are busy than torch's threads leave
    CPUs (``making``: the share of the step each of ``busy`` workers makes a batch in):
    torch's parallel ops wait for their descheduled threads then, at most all the time."""
    return min(1.0, max(0.0, busy * making - max(0, cpus - threads)))


def worker_share(g: Graph, facts: Facts, slow: float, cost: float, hand_over: float,
                 side: float, k: int, busy: int, threads: int, cpus: int,
                 rest: bool = False, weigh: bool = True) -> tuple[float, float, float]:
    """How much longer a worker's batch, the main process's own work, and torch's ops take
    where busy workers and torch's threads oversubscribe the CPUs; returns (the workers'
    factor, the main process's, the ops'). Found as a damped fixed point with the step
    they give (the step sets u, the share in which the main process runs its ops, and m,
    the share in which a worker makes a batch):

    - many threads: the runnable threads beyond the CPUs double up with one each, landing
      beside torch's threads (:func:`doubled`);
    - one thread (no parallel ops to wait in): each side gets an equal part of the CPUs
      with the others runnable beside it: a worker's batch (1 + u + (busy - 1) m) / CPUs
      as long, the main thread's work (1 + busy m) / CPUs;
    - the step is the longer of the main process's own work (its ops ``slow`` x, its other
      host work too with ``rest``, its launches, receiving the batch) and a batch from the
      workers (``cost`` x the factor + their ``side`` of the hand-over, ``min(k, CPUs)`` at
      once);
    - with many threads, torch's ops wait only while more workers are busy than the threads
      leave CPUs: ``slow`` weighed by that share (:func:`contended`). Without ``weigh`` (a
      run oversubscribed now whose workers' busy share was not measured, freed by the whole
      rule in :func:`free_contention`) ``slow`` holds whole;
    - with many threads, torch's threads stay runnable past the main thread's work: an idle
      pool thread spins for the CPU time the session measured (``threads_spin_ms``) before
      it sleeps, and the main thread spins as long at an op's end in the share of the step
      its ops wait for a descheduled partner (:func:`contended`); the spin counts in u at
      the pace the CPUs are shared (x the workers' factor)."""
    main = g.res == g.main
    if g.n_steps:
        fb = model_ops(g)
        model = float(per_step(g, fb, g.dur).mean())
        other = float(per_step(g, main & g.is_kind(TaskKind.HOST) & ~fb, g.dur).mean())
        launch = float(per_step(g, main & g.is_kind(TaskKind.LAUNCH), g.dur).mean())
    else:
        model = other = launch = 0.0
    given = cpu_capacity(facts) or cpus
    at_once = max(1, min(k, cpus))
    spin = (facts.threads_spin_ms or 0.0) * 1e3 if threads > 1 else 0.0  # us
    u, share, mine, making, ops_slow = 1.0, 1.0, 1.0, 1.0, slow
    a, last = FIXED_POINT_DAMPING, -1.0
    for _ in range(FIXED_POINT_ROUNDS):  # a fixed point: the shares set the step, it u and m
        ops = model * ops_slow + other * (ops_slow if rest else 1.0)
        if threads == 1:
            share = max(1.0, (1.0 + u + (busy - 1) * making) / given)
            mine = max(1.0, (1 + busy * making) / given)
        else:
            share = doubled(busy, threads, u, given)
        step = max(ops + launch + hand_over + ops * (mine - 1.0),
                   (cost * share + side) / at_once)
        if step <= 0:
            break
        was = (u, making)
        # the pool's threads spin in the main thread's idle spells; the main thread too, in
        # the share of the step its ops wait for a descheduled partner
        spun = spin * share * (threads - 1 + contended(busy, making, cpus, threads)) / threads
        u = (1 - a) * u + a * min(1.0, (ops * mine + spun) / step)
        making = (1 - a) * making + a * min(1.0, (cost * share + side) / at_once / step)
        if threads > 1 and weigh:
            ops_slow = 1.0 + (slow - 1.0) * contended(busy, making, cpus, threads)
        # settled when the step and the shares it sets both hold (a step that holds while
        # the shares still move, as where the ops' slowdown sits at its most, is not)
        if (abs(step - last) <= FIXED_POINT_TOL * step
                and max(abs(u - was[0]), abs(making - was[1])) <= FIXED_POINT_TOL):
            break
        last = step
    return share, mine, ops_slow


def busy_ratio(j: int, cpus: int, threads: int) -> float:
    """How much longer torch's ops take on ``threads`` threads while ``j`` workers are busy
    at once: 1 where they fit the CPUs; else threads / (CPUs the workers leave), the
    threads' share of the CPUs left to them (each op waits for its descheduled thread)."""
    if threads + j <= cpus:
        return 1.0
    return threads / max(1, cpus - j)


def busy_mix(busy: int, making: float, cpus: int, threads: int) -> float:
    """How much longer torch's ops take beside ``busy`` workers, each making a batch a share
    ``making`` of the time, independently: j of them are busy at once for a binomial share
    of the time, in which the ops go at 1 / :func:`busy_ratio`; the ops' time is one over
    that mean pace (slow spells slow only the work that falls in them)."""
    m = min(1.0, max(0.0, making))
    pace = sum(math.comb(busy, j) * m ** j * (1.0 - m) ** (busy - j)
               / busy_ratio(j, cpus, threads) for j in range(busy + 1))
    return 1.0 / pace if pace > 0 else 1.0


def model_ops(g: Graph) -> np.ndarray:
    """The main thread's work in torch's parallel ops: the model's forward and backward,
    and the optimizer's step and zero_grad (on large tensors their ops split across torch's
    threads as the model's do)."""
    return ((g.res == g.main) & g.is_kind(TaskKind.HOST)
            & ((g.tag & int(Tag.FORWARD_BACKWARD | Tag.OPTIMIZER | Tag.ZERO_GRAD)) > 0))


def slowed(g: Graph, contend: float, share: float, rest: bool = False) -> Graph:
    """The main thread's work with the model's ops ``contend`` times as long (torch's
    threads oversubscribed), and with ``rest`` the rest of its own work too, and all of it
    ``share`` times as long (CPUs that gave less)."""
    if contend != 1.0:
        ops = model_ops(g)
        if rest:
            ops = ops | ((g.res == g.main) & g.is_kind(TaskKind.HOST))
        g = g.scale(ops, contend)
    if share != 1.0:
        g = g.scale((g.res == g.main) & g.is_kind(TaskKind.HOST), share)
    return g


def main_host_ms(g: Graph) -> float:
    """The main thread's own work per step (ms): its ops and launches, not the loading."""
    main = (g.res == g.main) & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH)
    return float(per_step(g, main, g.dur).mean()) / 1e3 if g.n_steps else 0.0


def contention(now_workers: int | None, threads: int, cpus: int) -> float:
    """How much the measured step's own work is slowed by busy workers sharing the cores
    with torch's threads, where the run oversubscribes them now: the rule of what
    oversubscribing costs (threads / (CPUs the busy workers leave)) read the other way."""
    if not now_workers or threads + min(now_workers, cpus) <= cpus:
        return 1.0
    return threads / max(1, cpus - min(now_workers, cpus))


def workers_busy_now(facts: Facts) -> float | None:
    """The share of the time each of the run's workers is busy now: the CPU the host
    samples gave a worker (``workers_cpu_mean_pct``), or one batch a step among them (a
    worker's batch as timed, ``input_worker_batch_ms``, over the workers and the unprofiled
    step), the larger where both were measured; None where neither was."""
    now, step = facts.dataloader_num_workers, facts.step_time_unprofiled_mean_ms
    got = []
    if facts.workers_cpu_mean_pct is not None:
        got.append(facts.workers_cpu_mean_pct / 100)
    if facts.input_worker_batch_ms is not None and now and step:
        got.append(facts.input_worker_batch_ms / (now * step))
    return min(1.0, max(got)) if got else None


def loop_contention(g: Graph, facts: Facts, step_ms: float | None = None,
                    replay_ms: float | None = None) -> float | None:
    """How much longer the loop's torch work (forward and backward) ran than the same work
    alone after the loop; None where the work alone was not timed. Two measures of it,
    joined by their geometric mean where both exist (the clock's alone where the loop made
    several forward calls a step, or an optimizer stepped a model not given: the window's
    work is then not one of each timed model's, like for like with the quiet timing):
    the window's forward and backward (the window's share of its replayed step,
    ``replay_ms``, on the unprofiled step ``step_ms``: a window the calibration left as it
    was keeps its proportions, not its milliseconds) over ``model_work_quiet_ms``; and the
    clock's (every unprofiled step), which times the forward and the backward apart: each
    one's excess over the same alone is added to the work alone as milliseconds. A worker
    takes its next batch's indices as the step takes its batch, so its work lands beside
    the forward more than the backward: one ratio is not the other's
    (:func:`clock_work_contention`). None too where the quiet timing's rounds
    spread past :data:`THREADS_NOISE_MAX` (another process held a CPU while it ran: its
    quiet work is no more quiet than its one-thread ratio is read)."""
    quiet, noise = facts.model_work_quiet_ms, facts.threads_noise_rel
    if not quiet or not g.n_steps or (noise is not None and noise > THREADS_NOISE_MAX):
        return None
    if facts.forward_calls_unprofiled != 1 or facts.optimizer_values_outside_models:
        return clock_work_contention(facts)  # the window's work is not the timed models'
    fb = (g.res == g.main) & ((g.tag & int(Tag.FORWARD_BACKWARD)) > 0)
    loop = float(per_step(g, fb, g.dur).mean()) / 1e3
    if step_ms and replay_ms and replay_ms > 0:
        loop *= step_ms / replay_ms
    got = [r for r in (loop / quiet, clock_work_contention(facts)) if r is not None and r > 0]
    return statistics.geometric_mean(got) if got else None


def clock_work_contention(facts: Facts) -> float | None:
    """The clock's measure of the loop's forward and backward over the same work alone:
    (work alone + each one's excess in the loop over it alone) / work alone, from
    ``forward_contention`` and ``backward_contention`` and the quiet timing's forward and
    work (its backward: the work less the forward; taken as unslowed where the loop's was
    not read: a GPU model, several forward calls a step of changing shapes, a saved
    capture); None where the forward's is missing."""
    ratio, forward, quiet = (facts.forward_contention, facts.forward_quiet_ms,
                             facts.model_work_quiet_ms)
    if ratio is None or not forward or not quiet:
        return None
    back = facts.backward_contention
    extra = forward * (ratio - 1.0)
    if back is not None and quiet > forward:
        extra += (quiet - forward) * (back - 1.0)
    return (quiet + extra) / quiet


def free_contention(g: Graph, facts: Facts) -> Graph:
    """The step with torch's ops (:func:`model_ops`) freed of the contention the run has now,
    where the run oversubscribes its CPUs (the window's ops hold the loop's compute and
    more; the loop's other work stays as measured): the loop's own measure where it was
    taken (``loop_contention``, at least 1); else the ops' mean slowdown beside workers
    busy the share of the time measured now (:func:`workers_busy_now`, :func:`busy_mix`),
    or, where that was not measured either, as if they were busy all the time
    (:func:`contention`). The measure is not bounded by the workers' own CPU: torch's
    threads wait for one another at each op's end, so a worker that takes one's CPU stalls
    the op for its whole time slice, for more than its own time. The optimizer's ops are
    freed by their own measure where it was taken (:func:`optimizer_contention`)."""
    threads = busy_threads(facts)
    now, cpus = facts.dataloader_num_workers, facts.cpu_count or 1
    c = contention(now, threads, cpus)
    if c == 1.0:
        return g
    if facts.loop_contention is not None:  # measured: the rule's estimate is not needed
        c = max(1.0, facts.loop_contention)
    elif now and (busy := workers_busy_now(facts)) is not None:
        c = busy_mix(now, busy, cpus, threads)
    ops = model_ops(g)
    opt_c = optimizer_contention(facts)
    if opt_c is not None:  # the optimizer's own, measured: its ops freed by it alone
        opt = ops & ((g.tag & int(Tag.OPTIMIZER)) > 0)
        g, ops = g.scale(opt, 1.0 / opt_c), ops & ~opt
    return g if c == 1.0 else g.scale(ops, 1.0 / c)


def optimizer_contention(facts: Facts) -> float | None:
    """How much longer the loop's ``optimizer.step()`` ran than the same step alone after
    the loop (``optimizer_unprofiled_ms`` / ``optimizer_quiet_ms``), at least 1: a worker's
    batch lands wherever in the step it starts, the optimizer's ops too, which the
    forward's measure does not see. None where either was not measured, or where an
    optimizer stepped a model not given (``optimizer_values_outside_models``): the window's
    optimizer work then holds steps neither the clock nor the quiet timing counted."""
    loop, quiet = facts.optimizer_unprofiled_ms, facts.optimizer_quiet_ms
    if loop is None or quiet is None or quiet <= 0 or facts.optimizer_values_outside_models:
        return None
    return max(1.0, loop / quiet)


def cpu_bound_ms(base: Graph, g: Graph, change: Mapping[str, Any], facts: Facts
                 ) -> float | None:
    """No setting beats (all CPU work per step) / capacity: the main process's own work on
    its intra-op threads (``base``: the unchanged step, freed of the contention measured
    now; on a new thread count, that work as the forward's scaling says, on those threads),
    every batch's fetch and collate and both sides of its hand-over (``g``: the changed
    step). ms; None where the CPUs are not known."""
    cpus = facts.cpu_count
    if cpus is None:
        return None
    threads = busy_threads(facts)
    base = free_contention(base, facts)
    main = (base.res == base.main) & base.is_kind(TaskKind.HOST, TaskKind.LAUNCH)
    busy = float(per_step(base, main, base.dur).mean())
    t = change.get("intra_op_threads")
    scale = thread_scale(facts, t, busy / 1e3) if isinstance(t, int) else None
    cpu_main = (busy * scale * min(busy_threads(facts, t), cpus) if isinstance(t, int) and scale
                else busy * min(threads, cpus))
    prod = g.is_kind(TaskKind.PRODUCER)
    made = (float(g.dur[prod].sum()) if math.isnan(g.producer_cpu)
            else g.producer_cpu * int(prod.sum()))  # CPU work, not time slowed by sharing
    work = (float(g.dur[g.is_kind(TaskKind.FETCH)].sum()) + made) / max(g.n_steps, 1)
    hand = float(per_step(g, g.is_kind(TaskKind.DL_WAIT), g.dur).mean()) if change.get(
        "num_workers") else 0.0
    # the producer's tasks hold the worker's side; the CPUs do what they gave at once
    return (cpu_main + work + hand) / (cpu_capacity(facts) or cpus) / 1e3


# ---------------------------------------------------------------- the loading's pauses
def loading_ms(facts: Facts) -> float | None:
    """The in-process loading per unprofiled step the clock measured: fetch and collate."""
    fetch, collate = facts.input_fetch_ms, facts.input_collate_ms
    return None if fetch is None or collate is None else fetch + collate


def loading_pauses(facts: Facts) -> float | None:
    """Of the collector's pauses per step (the full collections' where they were told
    apart), those that fell inside the in-process loading (ms; in its measured time)."""
    full = facts.gc_pause_full_ms
    pause = full if full is not None else facts.gc_pause_ms
    inside = facts.gc_pause_full_loader_ms if full is not None else facts.gc_pause_loader_ms
    made = loading_ms(facts)
    if pause is None or inside is None or made is None:
        return None
    return max(0.0, min(inside, pause, made))


__all__ = ["Facts", "batch_bytes", "busy_mix", "busy_ratio", "busy_threads",
           "clock_work_contention", "contended", "contention", "cpu_bound_ms", "cpu_capacity",
           "cpu_used", "doubled", "free_contention", "loop_contention", "optimizer_contention",
           "workers_busy_now",
           "loading_ms", "loading_pauses", "main_host_ms", "model_ops", "per_step", "shared",
           "slowed", "thread_scale", "worker_share"]
