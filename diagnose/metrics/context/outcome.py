"""How the run ended: an out-of-memory error (a capture always writes the ``oom`` key:
null means the run did not run out), and the device allocator's peaks read at the end of
the window."""

from __future__ import annotations

from typing import Any

from ...values import as_int, as_number
from .fields import as_str, get

CATALOG: dict[str, tuple[str, str]] = {
    "oom": (
        "bool",
        "the run ended in an out-of-memory error (False when it did not; None: unknown)",
    ),
    "oom_requested_bytes": ("bytes", "size of the allocation that failed"),
    "oom_in_use_bytes": ("bytes", "memory allocated by PyTorch on the device when it failed"),
    "oom_total_bytes": ("bytes", "capacity of the device that ran out (None on CPU)"),
    "oom_device": ("name", "device that ran out of memory ('cuda:0', 'cpu')"),
    "probes_ms_total": ("ms", "the session's own timings of the job (its probes: a worker's "
                        "batch, the compute on one thread, the CPUs' capacity, ...), all "
                        "of them: what the capture spent measuring beyond the loop"),
    "probes_ms_each": ("name", "each of the session's own timings of the job with its time, "
                       "the longest first, e.g. 'cpu_capacity 1.35 s, threads 0.57 s' "
                       "(those under 5 ms left out)"),
    "capture_profiler_close_ms": (
        "ms", "the loop's wait as the profiled window ended: the profiler's stop, its trace "
        "collected and written (once a capture; a step that long is the tool's, not the "
        "job's)"),
    "probes_noise_rel": ("ratio", "the relative noise (standard error of the median) of the "
                         "probes the capture's time budget cut short, the most of them (the "
                         "predictions that read a probe's value are made at the ends of its "
                         "own noise: threads_noise_rel, "
                         "input_batched_fetch_work_noise_rel)"),
}

#: where each probe that reports its noise writes its values in ``context.json``
_NOISY = {"threads": ("threads",), "work_after_fetch": ("dataloader", "work_after_fetch")}


def probes_noise(ctx: dict[str, Any]) -> float | None:
    """The most relative noise among the probes the budget cut short (0.0: none was cut or
    none of those cut reports noise; None: no record of the budget)."""
    rec = ctx.get("probes")
    if not isinstance(rec, dict):
        return None
    worst = 0.0
    for name in rec.get("cut") or []:
        got = get(ctx, *_NOISY.get(str(name), ("-",)), "noise")
        if isinstance(got, int | float) and not isinstance(got, bool) and got > worst:
            worst = float(got)
    return round(worst, 4)


def _cuda_memory(mem: Any) -> dict[str, object]:
    """The allocator's peaks read at the end of the window (a lean capture has no [memory]
    events): the same names the trace gives when it has them (the trace's values win)."""
    if not isinstance(mem, dict):
        return {}
    pa, pr, total = (as_int(mem.get(k)) for k in
                     ("peak_allocated_bytes", "peak_reserved_bytes", "total_bytes"))
    peak = pr if pr is not None else pa
    return {"gpu_mem_peak_allocated_bytes": pa, "gpu_mem_peak_reserved_bytes": pr,
            "gpu_mem_peak_frac": round(peak / total, 6) if peak is not None and total else None,
            "gpu_mem_frag_ratio": round(pr / pa, 3) if pr is not None and pa else None}


def outcome_metrics(ctx: dict[str, Any]) -> dict[str, object]:
    """The :data:`CATALOG` names, and the peaks of :func:`_cuda_memory`."""
    out = _cuda_memory(get(ctx, "capture", "cuda_memory"))
    probes = ctx.get("probes_ms")
    if isinstance(probes, dict):
        each = sorted(((str(k), float(v)) for k, v in probes.items()
                       if isinstance(v, int | float) and not isinstance(v, bool)),
                      key=lambda kv: -kv[1])
        out["probes_ms_total"] = round(sum(v for _, v in each), 1) if each else None
        out["probes_ms_each"] = ", ".join(f"{k} {v / 1e3:.2f} s" for k, v in each
                                          if v >= 5) or None  # under 0.01 s: not shown
    out["probes_noise_rel"] = probes_noise(ctx)
    out["capture_profiler_close_ms"] = as_number(get(ctx, "capture", "profiler_close_ms"))
    if "oom" in ctx:  # a capture always writes the key: null means the run did not OOM
        oom = ctx.get("oom")
        out["oom"] = isinstance(oom, dict)
        if isinstance(oom, dict):
            out["oom_requested_bytes"] = as_int(oom.get("requested_bytes"))
            out["oom_in_use_bytes"] = as_int(oom.get("in_use_bytes"))
            out["oom_total_bytes"] = as_int(oom.get("total_bytes"))
            out["oom_device"] = as_str(oom.get("device"))
    return out
