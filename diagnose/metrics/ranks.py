"""Cross-rank measurements: each rank's collectives, and what the ranks of one run say together.

Per rank (computed with the rest of a trace's metrics, in the reader's worker process):
time inside collectives per step and the part of it not hidden behind the rank's own
work. GPU runs measure NCCL/RCCL kernels; runs without them (gloo on CPU) measure the
host's collective spans (``gloo:all_reduce`` on the process group's worker threads,
``c10d::*`` ops), exposed where the main thread has nothing else to do.

Per run (from the per-rank metrics only, so rank 0 of a live run can compute them from
the small summaries it gathers): the spread of step time, GPU busy, DataLoader and
communication shares across ranks, and the straggler.

Finding the straggler. In synchronous data parallelism every rank waits for the slowest
one inside the next collective, so step times come out nearly equal and the slow rank's
peers show *inflated communication time* while the slow rank itself waits least. Each
rank's step is split into input (DataLoader wait), exposed communication, and compute
(the rest: kernels, host ops, launches). A rank's lag is the larger of

- **wait view**: how much longer the other ranks (their median) sit in collectives than
  it does: the time they spend waiting for it (needs collectives on every rank); and
- **work view**: how much longer its own work (step time minus exposed communication)
  takes than the other ranks' median: what a run without collectives shows.

The wait view also holds where the ranks' profiled windows are not aligned (one profiled
step, taken at slightly different moments on each rank): waiting is seen inside the
window even when the straggler's lateness began before it. The straggler is the rank
with the largest lag; its cause is the part (input, compute, communication) in which it
exceeds the other ranks' median the most.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Kind, Trace
from ..values import as_number
from . import communication
from .core import MetricSet, _Computer
from .names import ALL_REDUCE

_STEP = re.compile(r"^ProfilerStep#\d+$")
_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#")

RANK_CATALOG: dict[str, tuple[str, str]] = {
    "comm_ms_per_step": (
        "ms", "Time inside collectives per step, as a union, waiting for peers included "
              "(NCCL/RCCL kernels; without them, the host's gloo/MPI collective spans)"),
    "comm_exposed_ms_per_step": (
        "ms", "Collective time per step not hidden behind the rank's own work (device: "
              "compute kernels; host: main-thread ops and DataLoader waits)"),
    "comm_source": (
        "", "Where collectives were measured: device (NCCL/RCCL kernels) or host "
            "(gloo/MPI spans); None without collectives"),
}

RUN_CATALOG: dict[str, tuple[str, str]] = {
    "rank_step_time_min_ms": ("ms", "Shortest mean step time of any rank"),
    "rank_step_time_max_ms": ("ms", "Longest mean step time of any rank"),
    "rank_step_time_median_ms": ("ms", "Median over ranks of the mean step time"),
    "rank_step_time_spread": ("ratio", "(longest - shortest rank step time) / median"),
    "rank_gpu_busy_min": ("fraction", "Lowest GPU busy fraction of any rank"),
    "rank_gpu_busy_max": ("fraction", "Highest GPU busy fraction of any rank"),
    "rank_gpu_busy_min_rank": ("", "The rank with the lowest GPU busy fraction"),
    "rank_gpu_busy_max_rank": ("", "The rank with the highest GPU busy fraction"),
    "rank_comm_frac_min": ("fraction", "Lowest share of step time inside collectives"),
    "rank_comm_frac_max": ("fraction", "Highest share of step time inside collectives"),
    "rank_comm_frac_min_rank": ("", "The rank with the lowest communication share"),
    "rank_comm_frac_max_rank": ("", "The rank with the highest communication share"),
    "rank_comm_exposed_frac_min": ("fraction", "Lowest share of step time in exposed collectives"),
    "rank_comm_exposed_frac_max": ("fraction",
                                   "Highest share of step time in exposed collectives"),
    "rank_comm_exposed_frac_min_rank": ("", "The rank with the least exposed communication"),
    "rank_comm_exposed_frac_max_rank": ("", "The rank with the most exposed communication"),
    "rank_dataloader_share_min": ("fraction", "Lowest DataLoader share of any rank"),
    "rank_dataloader_share_max": ("fraction", "Highest DataLoader share of any rank"),
    "rank_dataloader_share_min_rank": ("", "The rank with the lowest DataLoader share"),
    "rank_dataloader_share_max_rank": ("", "The rank with the highest DataLoader share"),
    "straggler_rank": ("", "The rank that holds the others back the most (see straggler_lag_ms)"),
    "straggler_lag_ms": ("ms", "How much the straggler delays each step: the larger of its "
                               "peers' extra wait in collectives and its extra own work"),
    "straggler_lag_frac": ("fraction", "straggler_lag_ms / median rank step time"),
    "straggler_lag_noise_ms": ("ms", "The noise in straggler_lag_ms, in quadrature: the "
                                     "standard error from the ranks' step-to-step spread "
                                     "(the straggler's mean step's and its peers', std / "
                                     "sqrt(steps) each), and the median of the other "
                                     "ranks' waits for a CPU per step (a busy host's "
                                     "scheduling, which moves from rank to rank); None "
                                     "where neither is known"),
    "straggler_wait_ms": ("ms", "Median extra time the other ranks spend in collectives per step, "
                                "compared with the straggler (None without collectives)"),
    "straggler_work_ms": ("ms", "Straggler's own work per step (step minus exposed collectives) "
                                "minus the other ranks' median"),
    "straggler_cause": ("", "input, compute or communication: where the straggler exceeds the "
                            "other ranks' median most (unknown: nowhere in its profiled steps)"),
    "straggler_cause_ms": ("ms", "The straggler's excess per step in its cause"),
    "straggler_input_ms": ("ms", "Straggler's DataLoader wait per step"),
    "straggler_compute_ms": ("ms", "Straggler's compute per step (step minus input and exposed "
                                   "collectives: kernels, host ops, launches)"),
    "straggler_comm_ms": ("ms", "Straggler's exposed collective time per step"),
    "peer_input_ms": ("ms", "Median over the other ranks of the DataLoader wait per step"),
    "peer_compute_ms": ("ms", "Median over the other ranks of compute per step"),
    "peer_comm_ms": ("ms", "Median over the other ranks of exposed collective time per step"),
}

#: In a multi-rank run each finding also carries the cross-rank spread of what it is about.
SPREAD_EVIDENCE: dict[str, tuple[str, ...]] = {
    "communication": ("rank_comm_frac_min", "rank_comm_frac_max", "rank_comm_exposed_frac_min",
                      "rank_comm_exposed_frac_max", "rank_comm_exposed_frac_min_rank",
                      "rank_comm_exposed_frac_max_rank"),
    "input": ("rank_dataloader_share_min", "rank_dataloader_share_max",
              "rank_dataloader_share_min_rank", "rank_dataloader_share_max_rank"),
    "utilization": ("rank_gpu_busy_min", "rank_gpu_busy_max", "rank_gpu_busy_min_rank",
                    "rank_gpu_busy_max_rank"),
    "launch": ("rank_gpu_busy_min", "rank_gpu_busy_max"),
    "imbalance": ("rank_step_time_min_ms", "rank_step_time_max_ms", "rank_step_time_spread",
                  "rank_gpu_busy_min", "rank_gpu_busy_max", "rank_comm_frac_min",
                  "rank_comm_frac_max"),
}

CAUSES = ("input", "compute", "communication")


def _register_catalog() -> None:
    from . import CATALOG

    CATALOG.update(RANK_CATALOG)
    CATALOG.update(RUN_CATALOG)


_register_catalog()


# ------------------------------------------------------------------------------ per rank
def compute_rank(trace: Trace, max_steps: int | None = None, *,
                 grads_set_to_none: bool | None = None) -> MetricSet:
    """All trace metrics of one rank, with its collectives (``max_steps`` and
    ``grads_set_to_none``: see core.analyse)."""
    comp = _Computer(trace, max_steps, grads_set_to_none)
    ms = comp.run()
    ms.values.update(_collectives(comp, ms.values))
    return ms


def _main_tid(comp: _Computer) -> int | None:
    t = comp.t
    step = comp.host & t.name_mask(lambda n: bool(_STEP.match(n)))
    sel = step if step.any() else comp.host & (t.kind == Kind.CPU_OP)
    if not sel.any():
        return None
    return int(np.argmax(np.bincount(t.tid_id[sel], minlength=len(t.tids))))


def _collectives(comp: _Computer, v: Mapping[str, Any]) -> dict[str, Any]:
    t = comp.t
    out: dict[str, Any] = dict.fromkeys(RANK_CATALOG)
    n = comp.n_steps
    if comp.W <= 0 or n <= 0:
        return out
    if comp.has_gpu and comp._in_window(comp.comm_mask).any():
        total = comp.in_steps(comp.sets["communication"])
        exposed = (v.get("comm_exposed_frac") or 0.0) * comp.W
        out["comm_source"] = "device"
    else:
        backend, coll = communication.host_collectives(t, comp.host)
        if not comp._in_window(backend).any():
            return out
        comm = comp._sel(coll)
        tid = _main_tid(comp)
        busy_mask = comp.host & (t.tid_id == tid) & ~coll & (
            (t.kind == Kind.CPU_OP) | t.name_mask(lambda s: bool(_DATALOADER.match(s))))
        busy = comp._sel(busy_mask)
        total, exposed = communication.exposed(comp.in_steps, comm, busy)
        out["comm_source"] = "host"
        # the device's collective metrics, from the host's collectives (CM001 reads them)
        ar = comp._sel(backend & t.name_mask(lambda s: bool(ALL_REDUCE.search(s))))
        out.update(comm_frac=round(total / comp.W, 6),
                   comm_overlap_frac=round(1 - exposed / total, 6) if total > 0 else None,
                   comm_exposed_frac=round(max(exposed, 0.0) / comp.W, 6),
                   comm_exposed_allreduce_frac=round(max(communication.exposed(
                       comp.in_steps, ar, busy)[1], 0.0) / comp.W, 6))
    out["comm_ms_per_step"] = round(total / 1e3 / n, 4)
    out["comm_exposed_ms_per_step"] = round(max(exposed, 0.0) / 1e3 / n, 4)
    return out


# ------------------------------------------------------------------------------- per run
@dataclass(frozen=True)
class _Parts:
    """One rank's step split into input, exposed communication and compute (ms per step)."""

    step: float
    input: float
    comm: float  # exposed collectives (0 where not measured)
    compute: float
    comm_measured: bool
    comm_frac: float | None  # all collective time / step
    comm_exposed_frac: float | None

    @property
    def own(self) -> float:
        """The rank's own work: its step less the collectives it waited in."""
        return self.step - self.comm


def _parts(m: Mapping[str, Any]) -> _Parts | None:
    step = as_number(m.get("step_time_mean_ms"))
    if step is None or step <= 0:
        return None
    inp = min(as_number(m.get("dataloader_wait_ms_per_step")) or 0.0, step)
    comm_total = as_number(m.get("comm_ms_per_step"))
    comm = as_number(m.get("comm_exposed_ms_per_step"))
    c = min(comm or 0.0, step - inp)
    return _Parts(step=step, input=inp, comm=c, compute=max(step - inp - c, 0.0),
                  comm_measured=comm is not None,
                  comm_frac=None if comm_total is None else min(comm_total / step, 1.0),
                  comm_exposed_frac=None if comm is None else c / step)


def _mean_error(m: Mapping[str, Any]) -> float | None:
    """A rank's mean step's standard error (ms): std / sqrt(steps) of its profiled steps."""
    step, cv, n = (as_number(m.get("step_time_mean_ms")), as_number(m.get("step_time_cv")),
                   as_number(m.get("step_count")))
    if step is None or cv is None or n is None or n < 2:
        return None
    return step * cv / math.sqrt(n)


def _cpu_wait_ms(m: Mapping[str, Any]) -> float | None:
    """The time a rank's training thread waited for a CPU per step (its unprofiled steps'
    share of such waits, whoever held the CPU, on its mean step): on a shared host that
    much of its step is the scheduler's, and which rank it hits moves step to step."""
    share, step = (as_number(m.get("step_cpu_wait_unprofiled_share")),
                   as_number(m.get("step_time_mean_ms")))
    return None if share is None or step is None else share * step


def _median_without(values: list[float], i: int) -> float:
    return float(np.median(values[:i] + values[i + 1:]))


def _extremes(out: dict[str, Any], name: str, labels: list[int], vals: list[float | None]) -> None:
    pairs = [(v, r) for v, r in zip(vals, labels, strict=True) if v is not None]
    if not pairs:
        for suffix in ("min", "max", "min_rank", "max_rank"):
            if f"{name}_{suffix}" in RUN_CATALOG:
                out[f"{name}_{suffix}"] = None
        return
    lo = min(pairs, key=lambda p: (p[0], p[1]))
    hi = max(pairs, key=lambda p: (p[0], -p[1]))
    out[f"{name}_min"], out[f"{name}_max"] = round(lo[0], 6), round(hi[0], 6)
    if f"{name}_min_rank" in RUN_CATALOG:
        out[f"{name}_min_rank"], out[f"{name}_max_rank"] = lo[1], hi[1]


def run_metrics(ranks: Sequence[tuple[int | None, Mapping[str, Any]]]) -> dict[str, Any]:
    """Run-scope metrics from the per-rank metrics of two or more ranks.

    ``ranks`` holds (rank, metrics) pairs; a rank that is not known is numbered by its
    position. Every value is None where the ranks' metrics cannot give it.
    """
    out: dict[str, Any] = dict.fromkeys(RUN_CATALOG)
    labels = [r if r is not None else i for i, (r, _) in enumerate(ranks)]
    parts = [_parts(m) for _, m in ranks]
    _extremes(out, "rank_gpu_busy", labels, [as_number(m.get("gpu_busy_frac")) for _, m in ranks])
    _extremes(out, "rank_dataloader_share", labels,
              [as_number(m.get("dataloader_share")) for _, m in ranks])
    _extremes(out, "rank_comm_frac", labels, [p.comm_frac if p else None for p in parts])
    _extremes(out, "rank_comm_exposed_frac", labels,
              [p.comm_exposed_frac if p else None for p in parts])
    ok = [(lab, p) for lab, p in zip(labels, parts, strict=True) if p is not None]
    if len(ok) < 2:
        return out
    steps = [p.step for _, p in ok]
    med = float(np.median(steps))
    out["rank_step_time_min_ms"] = round(min(steps), 3)
    out["rank_step_time_max_ms"] = round(max(steps), 3)
    out["rank_step_time_median_ms"] = round(med, 3)
    out["rank_step_time_spread"] = round((max(steps) - min(steps)) / med, 4) if med > 0 else None

    own = [p.own for _, p in ok]
    comm = [p.comm for _, p in ok]
    wait_view = all(p.comm_measured for _, p in ok)
    best_lag, i = -np.inf, 0
    for j in range(len(ok)):
        work = own[j] - _median_without(own, j)
        lag = max(work, _median_without(comm, j) - comm[j]) if wait_view else work
        if lag > best_lag + 1e-9:
            best_lag, i = lag, j
    label, p = ok[i]
    peer = {k: _median_without([getattr(q, k) for _, q in ok], i)
            for k in ("input", "compute", "comm")}
    excess = {"input": p.input - peer["input"], "compute": p.compute - peer["compute"],
              "communication": p.comm - peer["comm"]}
    cause = max(CAUSES, key=lambda c: excess[c])
    lag = max(float(best_lag), 0.0)
    errs = [_mean_error(m) for _, m in ranks]
    noise = []
    if all(e is not None for e in errs):
        mine = errs[labels.index(label)] or 0.0
        peers = [e or 0.0 for lab, e in zip(labels, errs, strict=True) if lab != label]
        noise.append(math.hypot(mine, float(np.median(peers))))
    # the peers' waits, not the straggler's: a rank that alone waits for a CPU (another
    # process on its cores) is a straggler that stays put, its wait part of its lag
    waited = [_cpu_wait_ms(m) for lab, (_, m) in zip(labels, ranks, strict=True) if lab != label]
    if waited and all(w is not None for w in waited):
        noise.append(float(np.median([w or 0.0 for w in waited])))
    if noise:
        out["straggler_lag_noise_ms"] = round(math.hypot(*noise), 3)
    out["straggler_rank"] = label
    out["straggler_lag_ms"] = round(lag, 3)
    out["straggler_lag_frac"] = round(lag / med, 4) if med > 0 else None
    out["straggler_wait_ms"] = round(peer["comm"] - p.comm, 3) if wait_view else None
    out["straggler_work_ms"] = round(own[i] - _median_without(own, i), 3)
    out["straggler_cause"] = cause if excess[cause] > 0 else "unknown"
    out["straggler_cause_ms"] = round(max(excess[cause], 0.0), 3)
    out["straggler_input_ms"] = round(p.input, 3)
    out["straggler_compute_ms"] = round(p.compute, 3)
    out["straggler_comm_ms"] = round(p.comm, 3)
    out["peer_input_ms"] = round(peer["input"], 3)
    out["peer_compute_ms"] = round(peer["compute"], 3)
    out["peer_comm_ms"] = round(peer["comm"], 3)
    return out


def rank_row(m: Mapping[str, Any]) -> dict[str, float | None]:
    """The per-rank table's numbers: step time, GPU busy, DataLoader and communication
    shares, and how much of the communication overlaps the rank's own work."""
    p = _parts(m)
    comm_total = as_number(m.get("comm_ms_per_step"))
    exposed = as_number(m.get("comm_exposed_ms_per_step"))
    overlap = None
    if comm_total and exposed is not None:
        overlap = max(0.0, min(1.0, 1.0 - exposed / comm_total))
    return {
        "step_ms": as_number(m.get("step_time_median_ms")),
        "gpu_busy": as_number(m.get("gpu_busy_frac")),
        "dataloader": as_number(m.get("dataloader_share")),
        "comm": p.comm_frac if p else None,
        "overlap": overlap,
    }
