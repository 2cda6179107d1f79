"""What kind of run the trace is: training or inference, CUDA/HIP graphs, compiled code."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..trace import Kind
from .declare import CPU_OPS, GPU, LINKS, RUNTIME, Metric, rnd
from .names import GRAPH_LAUNCH
from .window import StepWindow

_BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|Backward\b")
_OPTIMIZER_OP = re.compile(
    r"^Optimizer\.step#|^aten::_fused_(adam|adamw|sgd|adagrad)|^aten::_foreach_(add|addcdiv|lerp|mul)_$")
_TRITON_KERNEL = re.compile(r"^triton_")
_COMPILED_REGION = re.compile(r"^Torch-Compiled Region|^CompiledFunction")

# CPU ops in the window needed to call a trace training or inference (is_training)
MIN_OPS_TO_TELL = 20

METRICS = (
    Metric("has_backward", "bool",
           "Backward ops in the trace (autograd::engine::evaluate_function, *Backward*); "
           f"None when the window has fewer than {MIN_OPS_TO_TELL} CPU ops", (CPU_OPS,)),
    Metric("has_optimizer_step", "bool",
           "optimizer.step() annotations or optimizer kernels' ops (_foreach_add_, _fused_adam, "
           "...) in the trace; None when the window has too few CPU ops to tell", (CPU_OPS,)),
    Metric("is_training", "bool",
           "The trace trains (backward or an optimizer step); False: it looks like inference; "
           "None: too few CPU ops to tell", (CPU_OPS,)),
    Metric("graph_launches_per_step", "count",
           "CUDA/HIP graph launches (cudaGraphLaunch, hipGraphLaunch) per step", (GPU, RUNTIME)),
    Metric("graph_kernel_frac", "fraction",
           "Kernels replayed by a graph launch (matched by correlation id) / all kernels",
           (GPU, RUNTIME, LINKS)),
    Metric("uses_cuda_graphs", "bool",
           "CUDA/HIP graphs are in use: the window has graph launches", (GPU, RUNTIME)),
    Metric("triton_kernel_frac", "fraction",
           "Kernel time in Triton kernels (triton_*: torch.compile / Inductor) / kernel time", (GPU,)),
    Metric("uses_compiled_code", "bool",
           "Compiled code runs: Triton kernels, or torch.compile regions on the host"),
)


def graph_replayed(w: StepWindow) -> np.ndarray:
    """Device events replayed by a CUDA/HIP graph launch (mask, matched by correlation id)."""
    t = w.t
    launch = w.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda n: bool(GRAPH_LAUNCH.match(n)))
    corr = t.correlation[launch]
    corr = corr[~np.isnan(corr)]
    out = np.zeros(len(t), bool)
    if len(corr):
        idx = np.flatnonzero(w.dev)
        out[idx] = np.isin(t.correlation[idx], corr)
    return out


def workload_metrics(w: StepWindow, graph_kernel: np.ndarray) -> tuple[dict[str, Any], list[str]]:
    """The METRICS above, and notes (inference; graphs or compiled code in use).

    ``graph_kernel``: :func:`graph_replayed`.
    """
    t = w.t
    ops = w.of_kind(Kind.CPU_OP, Kind.ANNOTATION)
    # a handful of ops (a micro-benchmark, a collective alone) cannot tell inference apart
    has_ops = int(w.within(ops & (t.kind == Kind.CPU_OP)).sum()) >= MIN_OPS_TO_TELL
    backward = bool((ops & t.name_mask(lambda n: bool(_BACKWARD_OP.search(n)))).any())
    opt = bool((ops & t.name_mask(lambda n: bool(_OPTIMIZER_OP.search(n)))).any())
    training = (backward or opt) if has_ops else None
    notes: list[str] = []
    if training is False:
        notes.append("this looks like inference (no backward, no optimizer step): "
                     "training-only rules not evaluated")
    gpu = w.has_gpu and w.has_runtime  # graph launches are runtime calls
    kern = w.within((t.kind == Kind.KERNEL) & w.dev)
    n_kern = int(kern.sum())
    n_graph = int((kern & graph_kernel).sum())
    launches = w.within(w.host & (t.kind == Kind.RUNTIME) & t.name_mask(
        lambda n: bool(GRAPH_LAUNCH.match(n))))
    n_launch = int(launches.sum())
    triton = t.name_mask(lambda n: bool(_TRITON_KERNEL.match(n)))
    kd = t.dur[kern]
    tri_us = float(t.dur[kern & triton].sum())
    region = bool((ops & t.name_mask(lambda n: bool(_COMPILED_REGION.match(n)))).any())
    v: dict[str, Any] = {
        "has_backward": backward if has_ops else None,
        "has_optimizer_step": opt if has_ops else None,
        "is_training": training,
        "graph_launches_per_step": rnd(n_launch / w.n_steps, 2) if gpu else None,
        "graph_kernel_frac": rnd(n_graph / n_kern) if w.has_links and n_kern else None,
        "uses_cuda_graphs": (n_launch > 0 or n_graph > 0) if gpu else None,
        "triton_kernel_frac": rnd(tri_us / kd.sum()) if w.has_gpu and kd.sum() > 0 else None,
        "uses_compiled_code": bool((kern & triton).any()) or region,
    }
    if v["uses_cuda_graphs"]:
        frac = v["graph_kernel_frac"]
        share = f"{frac:.0%} of kernels" if frac is not None else "kernels"
        notes.append(f"CUDA/HIP graphs are in use ({share} replayed by "
                     f"{v['graph_launches_per_step']:g} graph launches per step): replayed "
                     "kernels are not counted as individual launches, and CUDA graphs and "
                     "torch.compile are not suggested")
    if v["uses_compiled_code"]:
        frac = v["triton_kernel_frac"]
        share = f" ({frac:.0%} of kernel time in Triton kernels)" if frac else ""
        notes.append(f"compiled code is in use{share}: torch.compile is not suggested")
    return v, notes
