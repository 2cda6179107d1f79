"""Device memory from the trace's ``[memory]`` events (the caching allocator's totals), and
the metrics of a tracked step's memory section (by kind, what checkpointing would do)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..trace import Kind, Trace
from .declare import DEVICE_PROPERTIES, GPU, MEMORY_EVENTS, Metric, Need, rnd

_EVENTS = (GPU, MEMORY_EVENTS)

METRICS: tuple[Metric, ...] = (
    Metric("gpu_mem_peak_allocated_bytes", "bytes",
           "Peak memory allocated by PyTorch's caching allocator ([memory] events)",
           _EVENTS),
    Metric("gpu_mem_peak_reserved_bytes", "bytes",
           "Peak memory reserved by the caching allocator ([memory] events)", _EVENTS),
    Metric("gpu_mem_peak_frac", "fraction", "Peak reserved (else allocated) / device capacity",
           (*_EVENTS, DEVICE_PROPERTIES)),
    Metric("gpu_mem_frag_ratio", "ratio", "Peak reserved / peak allocated", _EVENTS),
    Metric("gpu_mem_growth_peak_bytes", "bytes",
           "Peak of the running sum of allocation deltas in the trace (a lower bound on use)",
           _EVENTS),
)


def memory_metrics(t: Trace, device_memory_bytes: int | None) -> dict[str, Any]:
    """The trace's METRICS; ``device_memory_bytes``: the device's capacity, where known."""
    dtype = t.mem_device_type
    mem = dtype.idx[dtype.val == 1]  # memory events of a GPU (device type 1)
    mem = mem[t.kind[mem] == Kind.MEMORY]
    alloc = t.mem_allocated[mem]
    res = t.mem_reserved[mem]
    alloc = alloc[np.isfinite(alloc)]
    res = res[np.isfinite(res)]
    pa = float(alloc.max()) if len(alloc) else None
    pr = float(res.max()) if len(res) else None
    total = device_memory_bytes
    peak = pr if pr is not None else pa
    # 2021 traces carry only per-allocation deltas: the peak growth is still known
    deltas = t.mem_delta[mem]
    deltas = deltas[np.isfinite(deltas)]
    return {
        "gpu_mem_peak_allocated_bytes": int(pa) if pa is not None else None,
        "gpu_mem_peak_reserved_bytes": int(pr) if pr is not None else None,
        "gpu_mem_peak_frac": rnd(peak / total) if total and peak is not None else None,
        "gpu_mem_frag_ratio": rnd(pr / pa, 3) if pr is not None and pa else None,
        "gpu_mem_growth_peak_bytes": int(np.max(np.cumsum(deltas))) if len(deltas) else None,
        **section_metrics(None),  # a tracked step's: the analysis adds them
    }


# ---------------------------------------------------------------------- a tracked step
def _profiled(m: Mapping[str, Any]) -> bool | None:
    return None if "mem_step_peak_bytes" not in m else m["mem_step_peak_bytes"] is not None


MEMORY_PROFILE = Need(
    "a step's memory by kind", "no step's memory was measured by kind (a live capture "
    "tracks one step with torch's MemTracker)", _profiled)
_BLOCKS = Need("blocks to checkpoint", "no module has two children whose saved activations "
               "checkpointing would free")

#: Metrics of the analysis' memory section (diagnose/memory/section.py), added to a run's
#: metrics by the analysis: :func:`section_metrics`.
SECTION_METRICS = (
    Metric("mem_step_peak_bytes", "bytes", "Peak bytes of the tracked step (MemTracker's "
           "count; on CUDA the allocator's peak where higher)", (MEMORY_PROFILE,)),
    Metric("mem_step_peak_mib", "MiB", "mem_step_peak_bytes in MiB (2**20 bytes), as the "
           "report's memory section writes it", (MEMORY_PROFILE,)),
    Metric("mem_activations_frac", "fraction",
           "Activations (saved for backward) / the tracked step's peak", (MEMORY_PROFILE,)),
    Metric("mem_model_states_frac", "fraction",
           "Parameters, gradients and optimizer state / the tracked step's peak",
           (MEMORY_PROFILE,)),
    Metric("mem_model_states_bytes", "bytes",
           "The model's parameters, their gradients and the optimizer's state (bytes): "
           "what an optimizer step writes", (MEMORY_PROFILE,)),
    Metric("mem_peak_budget_frac", "fraction",
           "The tracked step's peak / the device's capacity (1 where it ran out)",
           (MEMORY_PROFILE, DEVICE_PROPERTIES)),
    Metric("mem_checkpoint_blocks", "count", "Blocks the checkpointing what-if checkpoints",
           (MEMORY_PROFILE, _BLOCKS)),
    Metric("mem_checkpoint_peak_frac", "fraction",
           "Predicted peak with those blocks checkpointed (its range's high end) / the peak",
           (MEMORY_PROFILE, _BLOCKS)),
    Metric("mem_checkpoint_time_frac", "fraction",
           "Step time checkpointing adds: the blocks' forward / the tracked step",
           (MEMORY_PROFILE, _BLOCKS)),
    Metric("mem_graph_kept_bytes", "bytes",
           "Bytes saved for backward in the tracked step that a graph still holds as it "
           "ends: a graph the loop keeps past its step", (MEMORY_PROFILE,)),
    Metric("mem_graph_kept_mib", "MiB", "mem_graph_kept_bytes in MiB", (MEMORY_PROFILE,)),
    Metric("mem_graph_kept_frac", "fraction", "mem_graph_kept_bytes / the tracked step's peak",
           (MEMORY_PROFILE,)),
    Metric("mem_graph_kept_modules", "",
           "The modules whose saved tensors outlive the step, largest first",
           (MEMORY_PROFILE,)),
    Metric("mem_oom_largest_batch", "count",
           "Largest batch predicted to fit after an out-of-memory error", (MEMORY_PROFILE,)),
)

METRICS = METRICS + SECTION_METRICS


def section_metrics(sec: Mapping[str, Any] | None,
                    device_memory_bytes: int | None = None) -> dict[str, Any]:
    """SECTION_METRICS from the memory section (all None without a tracked step)."""
    out: dict[str, Any] = dict.fromkeys(m.name for m in SECTION_METRICS)
    if not sec or sec.get("source") != "tracker" or not sec.get("peak_bytes"):
        return out
    peak = float(sec["peak_bytes"])
    kinds = sec.get("by_kind") or {}
    out["mem_step_peak_bytes"] = int(peak)
    out["mem_step_peak_mib"] = rnd(peak / 2**20, 1)
    out["mem_activations_frac"] = rnd((kinds.get("activations") or 0) / peak, 4)
    states = sum(kinds.get(k) or 0 for k in ("parameters", "gradients", "optimizer_state"))
    out["mem_model_states_frac"] = rnd(states / peak, 4)
    model = sec.get("model") or {}
    whole = [model.get(k) for k in ("parameters", "gradients", "optimizer_state")]
    if all(isinstance(x, int) for x in whole):
        out["mem_model_states_bytes"] = sum(whole)
    kept = sec.get("kept_after_step") or {}
    if isinstance(kept.get("bytes"), int):
        out["mem_graph_kept_bytes"] = kept["bytes"]
        out["mem_graph_kept_mib"] = rnd(kept["bytes"] / 2**20, 2)
        out["mem_graph_kept_frac"] = rnd(kept["bytes"] / peak, 4)
        out["mem_graph_kept_modules"] = ", ".join(
            f"{m.get('module')} ({m.get('class') or '?'})" for m in kept.get("modules") or []
        ) or None
    if sec.get("oom"):
        out["mem_peak_budget_frac"] = 1.0
    elif device_memory_bytes:
        out["mem_peak_budget_frac"] = rnd(peak / device_memory_bytes, 4)
    ckpt = next((w for w in sec.get("what_if") or ()
                 if "checkpoint_modules" in (w.get("change") or {})), None)
    if ckpt is not None and ckpt.get("range"):
        out["mem_checkpoint_blocks"] = len(ckpt["change"]["checkpoint_modules"])
        out["mem_checkpoint_peak_frac"] = rnd(ckpt["range"][1] / peak, 4)
        blocks = sec.get("blocks") or {}
        step_s = sec.get("step_s")
        if isinstance(step_s, int | float) and step_s > 0:
            out["mem_checkpoint_time_frac"] = rnd(
                min(1.0, float(blocks.get("forward_s") or 0.0) / step_s), 4)
    largest = (sec.get("oom_explanation") or {}).get("largest_batch") or {}
    out["mem_oom_largest_batch"] = largest.get("batch_size")
    return out
