"""Host-device copies: counts, bytes and bandwidth by direction and host memory kind, and
how long the host is blocked by pageable copies (and whether that hides a sync). The host
side needs the runtime calls that issued the copies: None where the trace has none."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace import Kind
from . import intervals as iv
from .declare import COPIES, COPY_BYTES, GPU, LINKS, RUNTIME, Metric, rnd
from .names import MEMCPY_API, copy_direction
from .window import StepWindow

# A pageable host-to-device copy needs at most its bytes at PAGEABLE_GBPS plus
# PAGEABLE_COPY_US per copy: a deliberately low rate (pageable copies run at several GB/s
# on PCIe 3 and newer) and a generous fixed cost, so that "blocked far longer than its
# bytes need" only holds when the host waited for something else: the queued GPU work a
# pageable copy must wait behind (a hidden synchronisation).
PAGEABLE_GBPS = 1.0
PAGEABLE_COPY_US = 20.0
HIDDEN_SYNC_RATIO = 5.0  # blocked at least this many times what the bytes need ...
HIDDEN_SYNC_GPU_BUSY = 0.5  # ... while the GPU ran other work at least this share of the time

_DIRECTIONS = ("h2d", "d2h", "d2d")


def _copy_decls(prefix: str, what: str, full: bool = True) -> list[Metric]:
    out = [Metric(f"{prefix}_count", "count", f"Number of {what} in the window", (GPU,))]
    if full:
        out += [
            Metric(f"{prefix}_per_step", "count", f"{what} per step", (GPU,)),
            Metric(f"{prefix}_ms", "ms", f"Device time of {what}", (GPU,)),
            Metric(f"{prefix}_bytes", "bytes", f"Bytes moved by {what}", (GPU, COPY_BYTES)),
            Metric(f"{prefix}_gbps", "GB/s", f"Achieved bandwidth of {what}",
                   (GPU, COPIES, COPY_BYTES)),
        ]
    return out


def _what(d: str, kind: str = "") -> str:
    return f"{d.upper().replace('2', '->')} copies{kind}"


def _copy_groups() -> list[tuple[str, str, str | None, bool]]:
    """(prefix, what, host memory kind, full) of each copy group, in order."""
    out: list[tuple[str, str, str | None, bool]] = []
    for d in _DIRECTIONS:
        out.append((f"memcpy_{d}", _what(d), None, True))
        if d != "d2d":
            out.append((f"memcpy_{d}_pageable", _what(d, " from/to pageable host memory"),
                        "Pageable", True))
            out.append((f"memcpy_{d}_pinned", _what(d, " from/to pinned host memory"),
                        "Pinned", False))
    return out


_GROUPS = _copy_groups()

# the host side of copies: the runtime calls that issued them, by correlation id
_HOST = (GPU, RUNTIME, LINKS)

METRICS = tuple(m for prefix, what, _k, full in _GROUPS for m in _copy_decls(prefix, what, full)) + (
    Metric("memcpy_api_host_frac", "fraction",
           "Host time inside cudaMemcpy*/hipMemcpy* API calls / window", (GPU, RUNTIME)),
    Metric("memcpy_pageable_host_frac", "fraction",
           "Host time blocked in the copy API calls that issued pageable host-to-device "
           "copies / window", _HOST),
    Metric("memcpy_pageable_host_ms_per_step", "ms",
           "Host time blocked issuing pageable host-to-device copies, per step", _HOST),
    Metric("memcpy_pageable_blocked_ms_per_step", "ms",
           "Host time blocked by pageable host-to-device copies per step: the copy call, "
           "widened to the aten::copy_ op that holds it (with the sync it issues)", _HOST),
    Metric("memcpy_pageable_expected_ms_per_step", "ms",
           f"What those copies' bytes need per step at a plausible {PAGEABLE_GBPS:g} GB/s "
           f"plus {PAGEABLE_COPY_US:g} us per copy", (GPU, COPY_BYTES)),
    Metric("memcpy_pageable_blocked_gpu_busy_frac", "fraction",
           "Share of that blocked host time during which the GPU ran other work "
           "(kernels, other copies)", _HOST),
    Metric("memcpy_pageable_hidden_sync", "bool",
           f"Pageable copies act as a hidden synchronisation: the host is blocked "
           f">= {HIDDEN_SYNC_RATIO:g}x what their bytes need while the GPU runs queued "
           f"work >= {HIDDEN_SYNC_GPU_BUSY:.0%} of that time", (*_HOST, COPY_BYTES)),
    Metric("memcpy_pinned_info", "bool",
           "Copy names say pageable vs pinned (NVIDIA); False on e.g. AMD traces", (GPU,)),
)


def pageable_h2d(w: StepWindow) -> np.ndarray:
    """Pageable host-to-device copies on the device (mask over all events)."""
    t = w.t
    if not len(t.names):
        return np.zeros(len(t), bool)
    pg = np.fromiter((("Pageable" in n) and copy_direction(n) == "h2d" for n in t.names),
                     bool, len(t.names))
    return w.dev & (t.kind == Kind.MEMCPY) & pg[t.name_id]


def pageable_blocked(w: StepWindow, pageable: np.ndarray) -> iv.Intervals:
    """Host time blocked issuing the pageable host-to-device copies ``pageable``.

    Each copy API call (found by the copy's correlation id) is widened to the
    ``aten::copy_`` op on its thread that holds it: current PyTorch follows a pageable
    copy with a stream synchronisation inside that op, older versions block inside
    ``cudaMemcpyAsync`` itself.
    """
    t = w.t
    rt = np.flatnonzero(w.host & (t.kind == Kind.RUNTIME)
                        & t.name_mask(lambda n: bool(MEMCPY_API.match(n))))
    corr = t.correlation[pageable]
    rt = rt[np.isin(t.correlation[rt], corr[~np.isnan(corr)])]
    lo, hi = t.ts[rt].copy(), t.end[rt].copy()
    ops = np.flatnonzero(w.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n == "aten::copy_"))
    if len(rt) and len(ops):
        ops = ops[np.argsort(t.ts[ops], kind="stable")]
        pos = np.searchsorted(t.ts[ops], t.ts[rt], side="right") - 1
        cand = ops[np.maximum(pos, 0)]
        ok = (pos >= 0) & (t.end[cand] >= t.end[rt]) & (t.tid_id[cand] == t.tid_id[rt])
        lo[ok], hi[ok] = t.ts[cand[ok]], t.end[cand[ok]]
    return iv.union(lo, hi)


def _copy_stats(w: StepWindow, prefix: str, m: np.ndarray, full: bool) -> dict[str, Any]:
    t = w.t
    n = int(m.sum())
    v: dict[str, Any] = {f"{prefix}_count": n}
    if not full:
        return v
    dur = t.dur[m]
    b = t.nbytes[m]
    known = np.isfinite(b)  # copies that carry their byte count
    kd = dur[known].sum()
    gbps = b[known].sum() / (kd * 1e3) if known.any() and kd > 0 else None
    v[f"{prefix}_per_step"] = rnd(n / w.n_steps, 2)
    v[f"{prefix}_ms"] = rnd(dur.sum() / 1e3, 3)
    v[f"{prefix}_bytes"] = int(b[known].sum()) if known.all() else None
    v[f"{prefix}_gbps"] = rnd(gbps, 3)
    return v


def transfer_metrics(w: StepWindow, pageable: np.ndarray, blocked: iv.Intervals
                     ) -> dict[str, Any]:
    """The METRICS above. ``pageable``: :func:`pageable_h2d`; ``blocked``:
    :func:`pageable_blocked`."""
    if not w.has_gpu:
        return dict.fromkeys(m.name for m in METRICS)
    t = w.t
    mc = w.within(w.dev & (t.kind == Kind.MEMCPY))
    names = t.names
    direction = [copy_direction(n) for n in names]
    by_kind = {k: np.fromiter((k in n for n in names), bool, len(names))
               for k in ("Pageable", "Pinned")}
    v: dict[str, Any] = {}
    mc_idx = np.flatnonzero(mc)  # the copies: each name-level mask is read at them only
    mc_name = t.name_id[mc_idx]
    for prefix, _what, kind, full in _GROUPS:
        d = prefix.split("_")[1]
        of_d = np.fromiter((x == d for x in direction), bool, len(names))
        m = mc
        if len(names):
            hit = of_d[mc_name]
            if kind is not None:
                hit &= by_kind[kind][mc_name]
            m = np.zeros(len(t), bool)
            m[mc_idx[hit]] = True
        v.update(_copy_stats(w, prefix, m, full))
    # host time blocked in the copy API calls that issued pageable copies
    rt_copy = w.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda n: bool(MEMCPY_API.match(n)))
    pageable_n = by_kind["Pageable"]
    # the host-to-device ones: a copy back to pageable memory (Device -> Pageable, a .cpu())
    # blocks too, but pinning the loader's batches does not touch it
    h2d_n = pageable_n & np.fromiter((x == "h2d" for x in direction), bool, len(names))
    pageable_corr = (t.correlation[mc_idx[h2d_n[mc_name]]] if len(names)
                     else np.zeros(0))
    rt_idx = np.flatnonzero(rt_copy)
    pg_rt = np.zeros(len(t), bool)
    pg_rt[rt_idx] = np.isin(t.correlation[rt_idx], pageable_corr[~np.isnan(pageable_corr)])
    v["memcpy_api_host_frac"] = rnd(w.frac(w.sel(rt_copy)))
    v["memcpy_pageable_host_frac"] = rnd(w.frac(w.sel(pg_rt)))
    v["memcpy_pageable_host_ms_per_step"] = rnd(w.in_steps(w.sel(pg_rt)) / 1e3 / w.n_steps, 3)
    v.update(_pageable_blocking(w, pageable, blocked))
    if not w.has_links:  # no copy call tied to its copy: how long the host was held is unknown
        v.update(dict.fromkeys(m.name for m in METRICS if m.needs[:3] == _HOST))
    if not w.has_runtime:
        v["memcpy_api_host_frac"] = None
    v["memcpy_pinned_info"] = (bool(np.any(pageable_n | by_kind["Pinned"]))
                               if len(names) else False)
    return v


def _pageable_blocking(w: StepWindow, pageable: np.ndarray, blocked: iv.Intervals
                       ) -> dict[str, Any]:
    """How long the host is blocked by pageable copies, and whether it waited for the copy
    or for the GPU work queued before it (a hidden synchronisation)."""
    t = w.t
    blocked_us = w.in_steps(blocked)
    copies = w.within(pageable)
    b = t.nbytes[copies]
    # what the bytes need: unknown where a copy carries no byte count
    expected_us = (float(b.sum()) / (PAGEABLE_GBPS * 1e3) + PAGEABLE_COPY_US * len(b)
                   if np.isfinite(b).all() else None)
    other_dev = w.sel(w.dev & ~pageable)
    busy_in = iv.overlap(iv.clip(blocked, w.lo, w.hi), other_dev)
    busy_frac = busy_in / blocked_us if blocked_us > 0 else None
    n = w.n_steps
    hidden = None if expected_us is None else bool(
        blocked_us > 0 and blocked_us >= HIDDEN_SYNC_RATIO * expected_us
        and (busy_frac or 0.0) >= HIDDEN_SYNC_GPU_BUSY)
    return {
        "memcpy_pageable_blocked_ms_per_step": rnd(blocked_us / 1e3 / n, 3),
        "memcpy_pageable_expected_ms_per_step": rnd(None if expected_us is None
                                                    else expected_us / 1e3 / n, 3),
        "memcpy_pageable_blocked_gpu_busy_frac": rnd(busy_frac),
        "memcpy_pageable_hidden_sync": hidden,
    }
