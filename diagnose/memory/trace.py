"""What a trace's ``[memory]`` events say of a step's memory, without the live objects.

The profiler (``profile_memory=True``) writes an instant after every allocation and free
with the allocator's running total. Per profiled step: the total when it starts (held
across steps: on a GPU, the model states and whatever else stays), its peak, the growth
up to the first backward operator (activations, saved for backward) and beyond it at the
peak (temporaries). A GPU's totals are the caching allocator's, absolute; a CPU's count
only what was allocated since profiling began, so its start is not known and only the
growth is given. The step with the highest peak is reported; its timeline is kept as at
most :data:`~.profile.TIMELINE_POINTS` maxima over equal stretches of time.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..metrics.names import STEP
from ..trace import Kind, Trace
from .profile import TIMELINE_POINTS

_BACKWARD = re.compile(r"^autograd::engine::evaluate_function")
_OPT_STEP = re.compile(r"^Optimizer\.step#")
_GPU, _CPU = 1, 0


def _spans(t: Trace, pattern: re.Pattern[str]) -> tuple[np.ndarray, np.ndarray]:
    sel = np.flatnonzero(t.name_mask(lambda n: bool(pattern.match(n))) & np.isin(
        t.kind, [int(Kind.ANNOTATION), int(Kind.CPU_OP)]))
    sel = sel[np.argsort(t.ts[sel], kind="stable")]
    return t.ts[sel], t.ts[sel] + t.dur[sel]


def trace_memory(t: Trace, max_steps: int | None = None) -> dict[str, Any] | None:
    """The memory section a trace gives (None: no ``[memory]`` events with totals)."""
    mem = t.mem_allocated.idx
    if not len(mem):
        return None
    mem = mem[t.kind[mem] == Kind.MEMORY]
    dtype = t.mem_device_type[mem]
    device = _GPU if (dtype == _GPU).any() else _CPU
    mem = mem[dtype == device]
    alloc = t.mem_allocated[mem]
    keep = np.isfinite(alloc)
    mem, alloc = mem[keep], alloc[keep]
    if not len(mem):
        return None
    order = np.argsort(t.ts[mem], kind="stable")
    mem, alloc = mem[order], alloc[order]
    ts = t.ts[mem]
    delta = np.nan_to_num(t.mem_delta[mem], nan=0.0)
    lo, hi = _spans(t, STEP)
    if max_steps is not None:
        lo, hi = lo[:max_steps], hi[:max_steps]
    if not len(lo):
        lo, hi = ts[:1], ts[-1:] + 1
    bwd = _spans(t, _BACKWARD)[0]
    opt_lo, opt_hi = _spans(t, _OPT_STEP)
    best: dict[str, Any] | None = None
    for a, b in zip(lo, hi, strict=True):
        i, j = np.searchsorted(ts, a), np.searchsorted(ts, b, side="right")
        if j <= i:
            continue
        step = _step(ts[i:j] - a, alloc[i:j], delta[i],
                     bwd[(bwd >= a) & (bwd <= b)] - a,
                     [(x - a, y - a) for x, y in zip(opt_lo, opt_hi, strict=True) if a <= x <= b])
        if best is None or step["peak"] > best["peak"]:
            best = step
    if best is None:
        return None
    absolute = device == _GPU
    start, peak = best["start"], best["peak"]
    return {
        "source": "trace", "device": "cuda" if absolute else "cpu",
        "peak_bytes": int(peak) if absolute else None,
        "growth_bytes": int(peak - start),
        "held_at_step_start": int(start) if absolute else None,
        "by_kind": {"parameters": None, "gradients": None, "optimizer_state": None,
                    "activations": best["activations"], "temporaries": best["temporaries"],
                    "other": None},
        "peak_phase": best["phase"], "top_modules": [],
        "timeline": {"unit": "us", "points": best["points"],
                     "relative": not absolute},
        "steps": len(lo),
    }


def _step(rel: np.ndarray, alloc: np.ndarray, first_delta: float, bwd: np.ndarray,
          opt: list[tuple[float, float]]) -> dict[str, Any]:
    start = float(alloc[0] - first_delta)
    k = int(np.argmax(alloc))
    peak = float(alloc[k])
    b0 = float(bwd.min()) if len(bwd) else None
    in_opt = np.zeros(len(rel), bool)
    for x, y in opt:
        in_opt |= (rel >= x) & (rel <= y)
    phase = np.where(in_opt, 2, np.where(rel >= b0, 1, 0) if b0 is not None else 0)
    acts = temps = None
    if b0 is not None:
        before = alloc[rel < b0]
        at_bwd = float(before[-1]) if len(before) else start
        acts = int(max(0.0, at_bwd - start))
        if phase[k] == 1:
            temps = int(max(0.0, peak - at_bwd))
    names = ("forward", "backward", "optimizer")
    return {"start": start, "peak": peak, "activations": acts, "temporaries": temps,
            "phase": names[int(phase[k])], "points": _points(rel, alloc, phase, names)}


def _points(rel: np.ndarray, alloc: np.ndarray, phase: np.ndarray,
            names: tuple[str, ...]) -> list[dict[str, Any]]:
    """At most TIMELINE_POINTS points: each the highest total of an equal stretch of time."""
    if len(rel) <= TIMELINE_POINTS:
        idx = np.arange(len(rel))
    else:
        bucket = np.minimum((rel / max(float(rel[-1]), 1e-9) * TIMELINE_POINTS).astype(int),
                            TIMELINE_POINTS - 1)
        idx = np.array([int(np.flatnonzero(bucket == b)[np.argmax(alloc[bucket == b])])
                        for b in np.unique(bucket)])
    return [{"t_us": round(float(rel[i]), 3), "allocated": int(alloc[i]),
             "phase": names[int(phase[i])]} for i in idx]


def trace_what_ifs(sec: dict[str, Any], batch_size: int | None) -> list[dict[str, Any]]:
    """Batch x0.5 and x2 from a GPU trace: the step's growth scales with the batch, what it
    holds at its start does not. The range runs from the growth not scaling at all to it
    scaling whole (weight-sized temporaries inside it are not told apart)."""
    start, growth = sec.get("held_at_step_start"), sec.get("growth_bytes")
    if not isinstance(start, int) or not isinstance(growth, int) or not batch_size:
        return []
    out = []
    for n in (batch_size // 2, batch_size * 2):
        if n < 1:
            continue
        k = n / batch_size
        scaled = int(start + k * growth)
        lo, hi = sorted((scaled, start + growth))
        out.append({"change": {"batch_size": n}, "peak_bytes": scaled,
                    "range": [lo, hi], "method": "scaled from the trace's memory events"})
    return out


__all__ = ["trace_memory", "trace_what_ifs"]
