"""Calibrating the replay to the job's own step: in a live capture the host's work is
scaled (within HOST_SCALE_MIN-HOST_SCALE_MAX) so that the replay gives the unprofiled step,
the profiler's per-op cost taken out; the loader's arrivals and waits are put at the run's
own pace first (:func:`calibrate`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .calibration import CALIBRATE_TOL, CALIBRATE_WITHIN, HOST_SCALE_MAX, HOST_SCALE_MIN
from .graph import DEVICE_TASKS, EdgeKind, Graph, Tag, TaskKind, replay


def busiest_ms(g: Graph) -> float:
    """Work per step of the busiest resource (ms): a host thread's or a stream's own time
    and spacing, the producer's over its workers. In steady state no step is shorter: a
    host that never waits for the device within the window still fills its queues."""
    # device work launched before the window belongs to the step before
    own = ~g.is_kind(*DEVICE_TASKS)
    own[g.edst[g.ekind == EdgeKind.START_AFTER_START]] = True
    per = np.bincount(g.res[own], weights=(g.dur + g.gap)[own], minlength=len(g.resources))
    caps = np.array([max(r.capacity, 1) for r in g.resources], float)
    return float((per / caps).max()) / max(g.n_steps, 1) / 1e3 if len(per) else 0.0


def replayed_step_ms(g: Graph) -> float:
    """The steady step of a replay: the median replayed step, and no less than the
    busiest resource's work per step (ms)."""
    return max(float(np.median(replay(g).step_ms)), busiest_ms(g))


def fed_step_ms(g: Graph) -> float:
    """The steady step of a replay with every batch ready when the loop asks for it: the
    workers' tasks and their edges gone, each wait for a batch only its own hand-over
    (ms). The steps at an epoch's start whose batches the workers made during it."""
    prod = g.is_kind(TaskKind.PRODUCER)
    if not prod.any():
        return replayed_step_ms(g)
    return replayed_step_ms(g.remove_edges(np.isin(g.esrc, np.flatnonzero(prod))).take(~prod))


def _arrivals_at(g: Graph, ratio: float) -> Graph:
    """The loader's workers at the run's own pace: batches arriving ``ratio`` x as far into
    the window as the trace says, and the waits for them ``ratio`` x as long (where every
    wait was alike the trace cannot tell an arrival from the hand-over: the wait holds
    both). A loader that sets the step delivers at the step the clock timed."""
    prod = g.is_kind(TaskKind.PRODUCER) & np.isfinite(g.release)
    wait = g.is_kind(TaskKind.DL_WAIT)
    if not (prod.any() or wait.any()) or ratio == 1.0:
        return g
    out = g.scale(wait, ratio)
    out.release[prod] = g.t0 + (g.release[prod] - g.t0) * ratio
    out.start0[prod] = out.release[prod]
    return out


def _waits_as_timed(g: Graph, per_step_ms: float) -> Graph:
    """The graph with the waits for batches from workers as long as the clock timed them
    (``per_step_ms`` a step, shared alike), the trace's arrivals gone: what the run waited
    for its batches without the profiler is measured, where the window's arrivals only say
    when the profiled loop asked for them (moved to the unprofiled pace, arrivals that came
    just as they were asked for would make the replay wait longer than the loop did, and
    the model's work would be shrunk to fit)."""
    prod = g.is_kind(TaskKind.PRODUCER)
    out = g.remove_edges(np.isin(g.esrc, np.flatnonzero(prod))).take(~prod) if prod.any() \
        else g.copy()
    wait = out.is_kind(TaskKind.DL_WAIT)
    out.dur[wait] = per_step_ms * 1e3 * out.n_steps / int(wait.sum())
    return out


def _fetch_as_timed(g: Graph, fetch: np.ndarray, per_step_ms: float) -> Graph:
    """The graph with each step's in-process fetch and collate (``fetch``) as long as the
    clock's mean (``per_step_ms``): the clock timed the loop's pace over more steps than
    the window holds, and how its pauses fell among the window's few steps is chance (the
    replay's step is its median, the target the clock's mean: a pause in one of a few
    window steps would otherwise squeeze the main thread's work to fit). Fetch tasks outside
    the steps scale as the steps' do."""
    inside = fetch & (g.step >= 0)
    now = float(g.dur[fetch].sum()) / g.n_steps
    if now <= 0:
        return g
    out = g.scale(fetch & ~inside, per_step_ms * 1e3 / now)
    per = np.bincount(g.step[inside], weights=g.dur[inside], minlength=g.n_steps)
    factor = np.where(per > 0, per_step_ms * 1e3 / np.where(per > 0, per, 1.0),
                      per_step_ms * 1e3 / now)
    out.dur[inside] = g.dur[inside] * factor[g.step[inside]]
    return out


def calibrate(g: Graph, target_ms: float, fetch_share: float | None = None,
              optimizer_share: float | None = None, wait_share: float | None = None
              ) -> Graph:
    """Make the replay give ``target_ms``, the unprofiled mean step (the profiler's per-op
    cost out, pauses such as garbage collection in): the step the session's own
    measurements (a worker's batch, a hand-over) are on the scale of. The graph's few steps
    may hold one slower than the run's median (a pause, a busy moment); the target is the
    run's pace, not a ratio of them. What the session timed directly is set: the in-process
    fetch and collate, ``fetch_share`` of the unprofiled step by the clock's means, and the
    main thread's ``optimizer.step()``, ``optimizer_share`` of it (many small ops, each
    paying the profiler, vary most between the window and the loop);
    batches from workers arrive at the unprofiled pace, or where the clock timed the waits
    for them (``wait_share`` of the step), the waits are that long
    (:func:`_waits_as_timed`; a window whose replay lies beyond :data:`CALIBRATE_WITHIN`
    of the target is tried with those waits before it is left as it is). The host's other
    work is then fitted: the profiler's per-event cost taken out where the replay is longer, the work scaled up
    where it is shorter (:func:`_host_shaper`); the level is bracketed and found by false
    position (the replayed step grows with it), within :data:`HOST_SCALE_MIN` and
    :data:`HOST_SCALE_MAX`; a replay outside :data:`CALIBRATE_WITHIN` of the target is left
    as it is."""
    now = replayed_step_ms(g)
    target_ratio = target_ms / now if now > 0 else 0.0
    want = target_ms
    waits = wait_share if wait_share is not None and 0 <= wait_share < 1 and g.n_steps \
        and g.is_kind(TaskKind.DL_WAIT).any() else None
    if not CALIBRATE_WITHIN[0] < target_ratio < CALIBRATE_WITHIN[1]:
        # the window's few steps may fall on the short steps of workers that hand over
        # their batches in bursts: with the waits as the clock timed them the replay may
        # come within reach of the run's step; else it is left as it is
        if waits is None:
            return g
        waited = _waits_as_timed(g, waits * want)
        now = replayed_step_ms(waited)
        if not (now > 0 and CALIBRATE_WITHIN[0] < target_ms / now < CALIBRATE_WITHIN[1]):
            return g
        g = waited
    elif waits is not None:
        g = _waits_as_timed(g, waits * want)
    else:
        g = _arrivals_at(g, target_ratio)
    fetch = g.is_kind(TaskKind.FETCH)
    if fetch_share is not None and fetch.any() and g.n_steps and 0 <= fetch_share < 1:
        g = _fetch_as_timed(g, fetch, fetch_share * want)
        host = g.is_kind(TaskKind.HOST, TaskKind.LAUNCH)
    else:
        host = g.is_kind(TaskKind.HOST, TaskKind.LAUNCH, TaskKind.FETCH)
    opt = ((g.res == g.main) & g.is_kind(TaskKind.HOST, TaskKind.LAUNCH)
           & ((g.tag & int(Tag.OPTIMIZER)) > 0))
    if optimizer_share is not None and opt.any() and g.n_steps and 0 < optimizer_share < 1:
        now = float(g.dur[opt].sum()) / g.n_steps
        if now > 0:
            g = g.scale(opt, optimizer_share * want * 1e3 / now)
            host = host & ~opt

    shaped = _host_shaper(g, host)

    def at(f: float) -> float:
        return replayed_step_ms(shaped(f)) - want

    lo, hi = HOST_SCALE_MIN, 1.0
    v_hi = at(hi)
    if abs(v_hi) <= CALIBRATE_TOL * want:
        return g
    if v_hi < 0:  # longer: bracket it from above
        lo, v_lo = hi, v_hi
        while v_hi < 0 and hi < HOST_SCALE_MAX:
            lo, v_lo = hi, v_hi
            hi = min(2 * hi, HOST_SCALE_MAX)
            v_hi = at(hi)
        if v_hi < 0:
            return shaped(hi)
    else:
        v_lo = at(lo)
        if v_lo >= 0:
            # even the least host the profiler can account for does not get there: the
            # device (or the batches' arrival) sets the step, and the host's work stays
            # as measured but for the part that still shortens the replay
            return shaped(lo if v_lo <= CALIBRATE_TOL * want else max(
                (f for f in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5) if at(f) <= v_lo + CALIBRATE_TOL * want),
                default=lo))
    side = 0
    f = hi
    for _ in range(10):  # false position, Illinois: a side kept twice has its value halved
        f = hi - v_hi * (hi - lo) / (v_hi - v_lo) if v_hi != v_lo else 0.5 * (lo + hi)
        v = at(f)
        if abs(v) <= CALIBRATE_TOL * want:
            break
        if v > 0:
            hi, v_hi = f, v
            if side == 1:
                v_lo *= 0.5
            side = 1
        else:
            lo, v_lo = f, v
            if side == -1:
                v_hi *= 0.5
            side = -1
    return shaped(f)


def _host_shaper(g: Graph, host: np.ndarray) -> Callable[[float], Graph]:
    """The graph with the host's work at level ``f``: above 1, ``f`` x as long (pauses the
    window did not see); below 1, the profiler's cost taken out down to
    :data:`HOST_SCALE_MIN` (f = 1: as measured). That cost is per recorded event (an op at
    any depth, a runtime call): one cost c a event comes off each task, c growing as f
    falls, no task below HOST_SCALE_MIN of itself: a step of the optimizer's many small ops
    loses more than a forward of a few large ones. Where the graph counts no events (a
    transform's tasks), the host is scaled by ``f`` alike."""
    n = np.where(host, g.events, 0.0)
    has = n > 0
    c_max = float(np.max(g.dur[has] * (1 - HOST_SCALE_MIN) / n[has])) if has.any() else 0.0

    def shaped(f: float) -> Graph:
        if f >= 1.0 or c_max <= 0:
            return g.scale(host, f)
        c = (1.0 - f) / (1.0 - HOST_SCALE_MIN) * c_max
        out = g.copy()
        out.dur[has] = np.maximum(g.dur[has] - c * n[has], HOST_SCALE_MIN * g.dur[has])
        return out
    return shaped
