"""Metrics from a run's ``context.json`` (written by capture; see diagnose.capture.context).

Flat names rules can use next to the trace metrics, e.g. ``dataloader_num_workers
== 0 and dataloader_wait_frac > 0.4``. Every value that the context does not
state is None (rule "not evaluated"), never a default.
"""

from __future__ import annotations

import statistics
from typing import Any

CATALOG: dict[str, tuple[str, str]] = {
    "dataloader_num_workers": (
        "count",
        "DataLoader num_workers (0: batches are loaded in the training process)",
    ),
    "dataloader_pin_memory": ("bool", "DataLoader pin_memory"),
    "dataloader_batch_size": (
        "samples",
        "DataLoader batch_size (None with a custom batch_sampler)",
    ),
    "dataloader_persistent_workers": ("bool", "DataLoader persistent_workers"),
    "dataloader_prefetch_factor": (
        "batches",
        "DataLoader prefetch_factor per worker (None when num_workers=0)",
    ),
    "cudnn_benchmark": ("bool", "torch.backends.cudnn.benchmark at capture time"),
    "optimizer_class": ("name", "class of the optimizer that stepped the model (e.g. 'AdamW')"),
    "optimizer_foreach": (
        "bool",
        "the optimizer runs foreach (multi-tensor) kernels, as torch resolves it",
    ),
    "optimizer_fused": ("bool", "the optimizer runs a fused kernel"),
    "torch_num_threads": ("count", "torch.get_num_threads() in the training process"),
    "cpu_count": ("count", "CPUs the training process may use (os.sched_getaffinity)"),
    "model_param_count": ("count", "number of parameters (elements) of the model"),
    "model_param_dtype": ("name", "dtype holding most of the model's parameters (e.g. 'float32')"),
    "model_device": (
        "name",
        "device of the model's parameters ('cuda:0', 'cpu'; 'mixed' if several)",
    ),
    "model_is_dataparallel": ("bool", "the model is wrapped in nn.DataParallel"),
    "model_has_conv": ("bool", "the model has convolution layers"),
    "torch_version": ("name", "torch.__version__ of the captured run"),
    "step_time_unprofiled_median_ms": (
        "ms",
        "median step time without the profiler (the session's clock, steps outside the "
        "profiled window but the run's first and the first after it): what the job does "
        "when nobody watches",
    ),
    "step_time_unprofiled_steps": ("count", "steps timed without the profiler"),
    "dataloader_wait_unprofiled_share": (
        "fraction",
        "share of the unprofiled steps' time the loop waited for its next batch",
    ),
    "step_time_profiled_clock_median_ms": (
        "ms",
        "median step time of the profiled window by the same clock (for the overhead ratio)",
    ),
    "profiler_overhead_ratio": (
        "ratio",
        "profiled median step / unprofiled median step (1.0: the profiler costs nothing)",
    ),
    "window_complete": (
        "bool",
        "the profiled window ran every step of its schedule (False: the loop ended first)",
    ),
    "whole_steps": ("count", "whole steps in the profiled window (a cut-short one has fewer)"),
    "oom": (
        "bool",
        "the run ended in an out-of-memory error (False when it did not; None: unknown)",
    ),
    "oom_requested_bytes": ("bytes", "size of the allocation that failed"),
    "oom_in_use_bytes": ("bytes", "memory allocated by PyTorch on the device when it failed"),
    "oom_total_bytes": ("bytes", "capacity of the device that ran out (None on CPU)"),
    "oom_device": ("name", "device that ran out of memory ('cuda:0', 'cpu')"),
}


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def context_metrics(ctx: dict[str, Any] | None) -> dict[str, object]:
    """The CATALOG names from a context dict; all None when there is no context."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    if not isinstance(ctx, dict):
        return out
    out["dataloader_num_workers"] = _int(_get(ctx, "dataloader", "num_workers"))
    out["dataloader_pin_memory"] = _bool(_get(ctx, "dataloader", "pin_memory"))
    out["dataloader_batch_size"] = _int(_get(ctx, "dataloader", "batch_size"))
    out["dataloader_persistent_workers"] = _bool(_get(ctx, "dataloader", "persistent_workers"))
    out["dataloader_prefetch_factor"] = _int(_get(ctx, "dataloader", "prefetch_factor"))
    out["cudnn_benchmark"] = _bool(ctx.get("cudnn_benchmark"))
    out["optimizer_class"] = _str(_get(ctx, "optimizer", "class"))
    foreach = _get(ctx, "optimizer", "foreach_effective")
    out["optimizer_foreach"] = _bool(
        foreach if foreach is not None else _get(ctx, "optimizer", "foreach")
    )
    fused = _get(ctx, "optimizer", "fused_effective")
    out["optimizer_fused"] = _bool(fused if fused is not None else _get(ctx, "optimizer", "fused"))
    out["torch_num_threads"] = _int(ctx.get("torch_num_threads"))
    out["cpu_count"] = _int(ctx.get("cpu_count"))
    out["model_param_count"] = _int(_get(ctx, "model", "param_count"))
    out["model_param_dtype"] = _str(_get(ctx, "model", "param_dtype"))
    out["model_device"] = _str(_get(ctx, "model", "device"))
    out["model_is_dataparallel"] = _bool(_get(ctx, "model", "is_dataparallel"))
    out["model_has_conv"] = _bool(_get(ctx, "model", "has_conv"))
    out["torch_version"] = _str(ctx.get("torch_version"))
    out.update(_clock_metrics(_get(ctx, "capture")))
    out.update(_cuda_memory(_get(ctx, "capture", "cuda_memory")))
    if "oom" in ctx:  # a capture always writes the key: null means the run did not OOM
        oom = ctx.get("oom")
        out["oom"] = isinstance(oom, dict)
        if isinstance(oom, dict):
            out["oom_requested_bytes"] = _int(oom.get("requested_bytes"))
            out["oom_in_use_bytes"] = _int(oom.get("in_use_bytes"))
            out["oom_total_bytes"] = _int(oom.get("total_bytes"))
            out["oom_device"] = _str(oom.get("device"))
    return out


def _clock_rows(cap: Any) -> list[tuple[str, float, float]]:
    """(phase, step ms, DataLoader wait ms) of every step the session's clock timed."""
    clock = cap.get("step_clock") if isinstance(cap, dict) else None
    if not isinstance(clock, dict):
        return []
    phase, ms, dl = clock.get("phase") or [], clock.get("ms") or [], clock.get("dataloader_ms") or []
    if not (len(phase) == len(ms) == len(dl)):
        return []
    return list(zip(phase, ms, dl, strict=True))


def _unprofiled_rows(rows: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The steps that count as unprofiled. Left out: the run's first step (one-time costs:
    workers starting, lazy init) and the first after the window (the profiler's teardown
    runs in it)."""
    first_after = next((i for i, r in enumerate(rows) if r[0] == "after"), None)
    return [r for i, r in enumerate(rows)
            if i > 0 and i != first_after and r[0] in ("wait", "after")]


def unprofiled_step_ms(context: Any) -> list[float]:
    """Each unprofiled step's time (ms) by the session's own clock, in the order run, from a
    run's context.json (``[]`` where the capture timed none, e.g. a saved trace)."""
    cap = context.get("capture") if isinstance(context, dict) else None
    return [float(r[1]) for r in _unprofiled_rows(_clock_rows(cap))]


def _clock_metrics(cap: Any) -> dict[str, object]:
    """Step times by the session's own clock: the profiled window's steps against the
    unprofiled ones around it (the first step of a run, with its one-time costs, is left out)."""
    out: dict[str, object] = {}
    if not isinstance(cap, dict):
        return out
    out["window_complete"] = _bool(cap.get("window_complete"))
    out["whole_steps"] = _int(cap.get("whole_steps"))
    rows = _clock_rows(cap)
    free, prof = _unprofiled_rows(rows), [r for r in rows if r[0] == "active"]
    if free:
        med = statistics.median(r[1] for r in free)
        out["step_time_unprofiled_median_ms"] = round(med, 3)
        out["step_time_unprofiled_steps"] = len(free)
        total = sum(r[1] for r in free)
        out["dataloader_wait_unprofiled_share"] = (
            round(sum(r[2] for r in free) / total, 4) if total > 0 else None)
    if prof:
        out["step_time_profiled_clock_median_ms"] = round(statistics.median(r[1] for r in prof), 3)
    if free and prof and out["step_time_unprofiled_median_ms"]:
        out["profiler_overhead_ratio"] = round(
            out["step_time_profiled_clock_median_ms"] / out["step_time_unprofiled_median_ms"], 3)
    return out


def _cuda_memory(mem: Any) -> dict[str, object]:
    """The allocator's peaks read at the end of the window (a lean capture has no [memory]
    events): the same names the trace gives when it has them (the trace's values win)."""
    if not isinstance(mem, dict):
        return {}
    pa, pr, total = (_int(mem.get(k)) for k in
                     ("peak_allocated_bytes", "peak_reserved_bytes", "total_bytes"))
    peak = pr if pr is not None else pa
    return {"gpu_mem_peak_allocated_bytes": pa, "gpu_mem_peak_reserved_bytes": pr,
            "gpu_mem_peak_frac": round(peak / total, 6) if peak is not None and total else None,
            "gpu_mem_frag_ratio": round(pr / pa, 3) if pr is not None and pa else None}
