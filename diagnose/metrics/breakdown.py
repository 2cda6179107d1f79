"""Where each step's time goes: kernels, copies, memsets, communication, runtime calls,
the DataLoader and CPU ops, each claiming only time no category before it claimed.

A run whose collectives are the host's (gloo, MPI: no NCCL/RCCL kernel in the window) has
them as its communication, claimed last: the time they take that the host's own work does
not (as the device's collectives claim what compute kernels leave).
A category the trace did not record (no runtime calls, no host operators: a trace of
device activity alone) has no share, and neither has the rest ("other"), which would
hold its time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Kind
from . import intervals as iv
from .communication import host_collectives
from .declare import GPU, HOST_OPS, RUNTIME, Metric, Need, per_step_ms, rnd
from .names import COMM_KERNEL, DATALOADER, OTHER_LOADER, STEP
from .window import CHUNK, StepWindow

#: The categories, highest first (a category claims only time no higher one claimed).
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")
#: the categories whose sets only :func:`breakdown_metrics` reads (the analysis drops them
#: after it: on a large trace the host's calls and operators are its largest sets)
CLAIMED_ONLY = ("memcpy", "memset", "runtime", "cpu_exec")
_DEVICE_ONLY = frozenset({"kernel", "memcpy", "memset", "communication", "runtime"})
_HOST_OPS = frozenset({"dataloader", "cpu_exec"})  # read from the host's operators


def _needs(cat: str) -> tuple[Need, ...]:
    if cat == "runtime":
        return (GPU, RUNTIME)
    return (GPU,) if cat in _DEVICE_ONLY else (HOST_OPS,) if cat in _HOST_OPS else ()


_HOST_COMM_DOC = ("; on a run without NCCL/RCCL kernels, the host's gloo/MPI collective "
                  "spans, claimed after the host's own work")

METRICS = tuple(
    Metric(f"share_{cat}", "fraction",
           f"Share of step time attributed to {cat.replace('_', ' ')} "
           "(each category claims only time no higher category claimed)"
           + (_HOST_COMM_DOC if cat == "communication" else ""), _needs(cat))
    for cat in CATEGORIES
) + (Metric("share_other", "fraction", "Share of step time in no category above",
          (HOST_OPS, RUNTIME)),)


def _recorded(w: StepWindow, cat: str, host_comm: bool = False) -> bool:
    """Whether the trace recorded what category ``cat`` is made of (``host_comm``: the
    run's collectives are the host's)."""
    if cat == "communication" and host_comm:
        return True
    if cat in _DEVICE_ONLY:
        return w.has_gpu and (cat != "runtime" or w.has_runtime)
    return w.has_ops if cat in _HOST_OPS else True


@dataclass(frozen=True)
class Categories:
    """Each category's events as an interval set (``sets``; those of :data:`CLAIMED_ONLY`
    are dropped once the breakdown is made: :func:`~.core.analyse`), and the masks other
    areas use: ``comm``: NCCL/RCCL kernels; ``compute``: the other kernels; ``dataloader``:
    the host's ``enumerate(DataLoader)`` spans; ``host_comm``: whether
    ``sets["communication"]`` holds the host's collective spans (a run without device
    collectives) rather than NCCL/RCCL kernels."""

    comm: np.ndarray
    compute: np.ndarray
    dataloader: np.ndarray
    sets: dict[str, iv.Intervals]
    host_comm: bool = False


def inside_spans(t: Any, events: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """The ``events`` (a mask) that start inside one of the ``spans`` events (a mask of
    non-overlapping spans, such as a live session's marks around another loader's batch)."""
    out = np.zeros(len(events), dtype=bool)
    if not spans.any() or not events.any():
        return out
    idx = np.flatnonzero(spans)
    order = np.argsort(t.ts[idx])
    lo, hi = t.ts[idx][order], t.end[idx][order]
    ev = np.flatnonzero(events)
    k = np.searchsorted(lo, t.ts[ev], side="right") - 1
    ok = k >= 0
    out[ev[ok]] = t.ts[ev[ok]] < hi[k[ok]]
    return out


def other_loaders(t: Any, loaders: np.ndarray, host: np.ndarray) -> np.ndarray:
    """Of the DataLoader events ``loaders``, those of a loader other than the training one:
    inside a live session's :data:`~.names.OTHER_LOADER` spans (a saved trace has none)."""
    return inside_spans(t, loaders, host & t.name_mask(lambda n: n == OTHER_LOADER))


def categories(w: StepWindow) -> Categories:
    """Each category's events as an interval set, and the masks other areas read
    (:class:`Categories`). Each mask made only to make another is dropped once used, and
    the host's operators (the largest set) come last: on a large trace each mask is as
    long as the trace, and the set's temporaries sit on the ones still held."""
    t = w.t
    comm_name = t.name_mask(lambda n: bool(COMM_KERNEL.search(n)))
    kern = (t.kind == Kind.KERNEL) & w.dev
    comm = kern & comm_name
    compute = kern & ~comm_name
    del kern, comm_name
    loaders = w.host & t.name_mask(lambda n: bool(DATALOADER.match(n)))
    dl = loaders & ~other_loaders(t, loaders, w.host)
    cpu = w.host & (t.kind == Kind.CPU_OP)
    cpu &= ~loaders
    del loaders
    cpu &= ~t.name_mask(lambda n: bool(STEP.match(n)))
    host_comm = False
    communication = comm  # NCCL/RCCL kernels, else the host's collective spans
    if not w.within(comm).any():
        backend, coll = host_collectives(t, w.host)
        host_comm = bool(w.within(backend).any())
        del backend
        if host_comm:
            cpu &= ~coll
            communication = coll
        del coll
    sets = {
        "kernel": w.sel(compute),
        "memcpy": w.sel(w.dev & (t.kind == Kind.MEMCPY)),
        "memset": w.sel(w.dev & (t.kind == Kind.MEMSET)),
        "communication": w.sel(communication),
        "runtime": w.sel(w.host & (t.kind == Kind.RUNTIME)),
        "dataloader": w.sel(dl),
    }
    del communication
    sets["cpu_exec"] = w.sel(cpu)
    return Categories(comm, compute, dl, sets, host_comm)


def breakdown_metrics(w: StepWindow, cats: Categories
                      ) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """The METRICS above, and the per-step series ``<category>_ms`` and ``other_ms``."""
    v: dict[str, Any] = {}
    series: dict[str, list[float]] = {}
    step_len = w.step_hi - w.step_lo
    total = float(step_len.sum())
    order = CATEGORIES if not cats.host_comm else tuple(
        c for c in CATEGORIES if c != "communication") + ("communication",)
    claimed = {cat: np.zeros(w.n_steps) for cat in order}
    prev = np.zeros(w.n_steps)
    # a group of steps at a time (the steps are disjoint: each one's claims need only the
    # intervals that reach into it), so that the merged sets of a large trace stay about a
    # chunk of intervals
    held = sum(len(cats.sets[cat][0]) for cat in order)
    per = max(1, w.n_steps * CHUNK // max(held, 1))
    for a in range(0, w.n_steps, per):
        lo, hi = w.step_lo[a:a + per], w.step_hi[a:a + per]
        acc, before = iv.EMPTY, np.zeros(len(lo))
        for cat in order:
            acc = iv.merge(acc, iv.reaching(cats.sets[cat], float(lo[0]), float(hi[-1])))
            now = iv.measure_between(acc, lo, hi)
            claimed[cat][a:a + per] = now - before
            before = now
        prev[a:a + per] = before
    for cat in order:
        series[f"{cat}_ms"] = per_step_ms(claimed[cat])
        v[f"share_{cat}"] = rnd(claimed[cat].sum() / total) if total > 0 and _recorded(
            w, cat, cats.host_comm) else None
    other = step_len - prev
    series["other_ms"] = per_step_ms(other)
    known = w.has_ops and (w.has_runtime or not w.has_gpu)
    v["share_other"] = rnd(other.sum() / total) if total > 0 and known else None
    return v, series
