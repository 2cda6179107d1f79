"""optimizer.step() and zero_grad() as the trace shows them, and nn.DataParallel's ops."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..trace import Kind
from . import intervals as iv
from .declare import GPU, HOST_OPS, LINKS, OPTIMIZER, RUNTIME, ZERO_GRAD, Metric, rnd
from .names import LAUNCH, OPTIMIZER_STEP, STEP
from .window import CHUNK, StepWindow

_OPT_ZERO = re.compile(r"^Optimizer\.zero_grad#")
_OPT_CLASS = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_FOREACH = re.compile(r"multi_tensor_apply|_foreach_|fused_adam|FusedAdam|_fused_", re.IGNORECASE)
_DATAPARALLEL = re.compile(r"^(Broadcast|ReduceAddCoalesced|Gather|Scatter)(Backward)?$")

METRICS = (
    Metric("optimizer_launches_per_step", "count",
           "Kernel launches inside optimizer.step(), per step", (GPU, RUNTIME, OPTIMIZER)),
    Metric("optimizer_ms_per_step", "ms", "Host time inside optimizer.step(), per step",
           (OPTIMIZER,)),
    Metric("optimizer_stake_frac", "fraction",
           "Step time at stake in optimizer.step()'s host time / window: on a GPU, at most "
           "the GPU's idle waiting for launches (idle_launch_frac); on a CPU, all of it",
           (OPTIMIZER, RUNTIME, LINKS)),
    Metric("optimizer_kernel_ms_per_step", "ms",
           "Device time of the kernels launched inside optimizer.step(), per step",
           (GPU, RUNTIME, LINKS, OPTIMIZER)),
    Metric("optimizer_step_class", "name",
           "The optimizer's class as the trace names its step (Optimizer.step#SGD.step: "
           "SGD); several, comma-separated", (OPTIMIZER,)),
    Metric("optimizer_uses_foreach", "bool",
           "optimizer.step() runs multi-tensor (foreach/fused) kernels or ops", (OPTIMIZER,)),
    Metric("zero_grad_fill_ops_per_step", "count",
           "aten::zero_ calls inside optimizer.zero_grad() per step (0 with set_to_none); "
           "where the optimizers step without a zero_grad annotation (Module.zero_grad), "
           "the aten::zero_ calls outside any other op or annotated span",
           (ZERO_GRAD,)),
    Metric("zero_grad_cost_frac", "fraction",
           "What zeroing gradients costs / window: the device time of the kernels and "
           "memsets launched inside optimizer.zero_grad(), plus its host time up to the GPU's "
           "idle waiting for launches (CPU-only: host time in its aten::zero_ calls)",
           (ZERO_GRAD, RUNTIME, LINKS)),
    Metric("dataparallel_ops_per_step", "count",
           "nn.DataParallel scatter/broadcast/gather ops per step", (HOST_OPS,)),
    Metric("dataparallel_ms_per_step", "ms",
           "Host time in nn.DataParallel scatter/broadcast/gather ops per step", (HOST_OPS,)),
)


def _launched_device_us(w: StepWindow, spans: iv.Intervals) -> float:
    """Device time (in the window) of the work launched by runtime calls inside ``spans``."""
    t = w.t
    rt = w.contains(spans, w.host & (t.kind == Kind.RUNTIME))
    corr = t.correlation[rt]
    corr = corr[~np.isnan(corr)]
    if not len(corr):
        return 0.0
    idx = np.flatnonzero(w.within(w.dev))
    return float(t.dur[idx[np.isin(t.correlation[idx], corr)]].sum())


def _host_stake_us(w: StepWindow, spans: iv.Intervals, idle_launch_frac: float | None
                   ) -> float | None:
    """Step time at stake in host time spent in ``spans``: a GPU that keeps busy meanwhile
    loses nothing, so on a GPU it is at most the GPU's idle waiting for launches (None
    where that is unknown: no launches recorded)."""
    host = w.in_steps(spans)
    if not w.has_gpu:
        return host
    return None if idle_launch_frac is None else min(host, idle_launch_frac * w.W)


def _top_level(w: StepWindow, mask: np.ndarray) -> np.ndarray:
    """Events of ``mask`` that no other host op or annotation (but a step's marker) holds:
    a gradient zeroed by the loop itself, not a fill inside another op (``torch.zeros``)
    or inside the loader's or the user's annotated spans."""
    t = w.t
    idx = np.flatnonzero(mask)
    out = np.zeros(len(mask), bool)
    if not len(idx):
        return out
    holding = w.within(w.of_kind(Kind.ANNOTATION, Kind.CPU_OP) & ~mask
                       & t.name_mask(lambda s: not STEP.match(s)))
    at = t.ts[idx]
    reach = np.full(len(idx), -np.inf)  # the furthest end of a holder begun by each event
    for a in range(0, len(t), CHUNK):  # the holders a chunk of events at a time: the most
        holders = np.flatnonzero(holding[a:a + CHUNK]) + a  # of those begun by then, over
        if not len(holders):  # every chunk, is the most over all of them
            continue
        order = holders[np.argsort(t.ts[holders], kind="stable")]
        ends = np.maximum.accumulate(t.end[order])
        k = np.searchsorted(t.ts[order], at, side="right") - 1
        np.maximum(reach, np.where(k >= 0, ends[np.maximum(k, 0)], -np.inf), out=reach)
    out[idx[~(reach >= t.end[idx])]] = True
    return out


def optimizer_metrics(w: StepWindow, idle_launch_frac: float | None, *,
                      grads_set_to_none: bool | None = None) -> dict[str, Any]:
    """The METRICS above. ``idle_launch_frac``: the GPU's idle waiting for launches, the
    most that host time can cost on a GPU (see :mod:`.idle`). ``grads_set_to_none``: what
    the capture saw of the steps' gradients (``context["capture"]["step_signals"]``);
    True gives no fills where zero_grad is not annotated (Module.zero_grad's default)."""
    t = w.t
    n, W, gpu = w.n_steps, w.W, w.has_gpu
    hostish = w.of_kind(Kind.ANNOTATION, Kind.CPU_OP)
    step_spans = w.sel(w.within(hostish & t.name_mask(lambda s: bool(OPTIMIZER_STEP.match(s)))))
    zero_spans = w.sel(w.within(hostish & t.name_mask(lambda s: bool(_OPT_ZERO.match(s)))))
    launch = w.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda s: bool(LAUNCH.match(s)))
    has_opt = len(step_spans[0]) > 0
    stake = _host_stake_us(w, step_spans, idle_launch_frac) if has_opt else None
    launched = w.has_links  # which kernels a span launched: its calls' correlation ids
    foreach_names = t.name_mask(lambda s: bool(_FOREACH.search(s)))
    # only launches and foreach ops are asked "inside optimizer.step()?"
    in_opt = w.contains(step_spans, launch | foreach_names) if has_opt else np.zeros(len(t), bool)
    v: dict[str, Any] = {
        "optimizer_launches_per_step": rnd(int((launch & in_opt).sum()) / n, 1)
        if has_opt and gpu and w.has_runtime else None,
        "optimizer_ms_per_step": rnd(iv.measure(step_spans) / 1e3 / n, 3) if has_opt else None,
        "optimizer_stake_frac": rnd(stake / W) if stake is not None and W > 0 else None,
        "optimizer_kernel_ms_per_step": rnd(_launched_device_us(w, step_spans) / 1e3 / n, 3)
        if has_opt and launched else None,
        "optimizer_uses_foreach": bool((foreach_names & in_opt).any()) if has_opt else None,
        "optimizer_step_class": ", ".join(sorted(
            {m.group(1) for s in t.names if (m := _OPT_CLASS.match(s))})) or None
        if has_opt else None,
    }
    v_zero = v_cost = None
    fills: np.ndarray | None = None
    zero_ops = w.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda s: s == "aten::zero_")
    if len(zero_spans[0]):
        fills = w.contains(zero_spans, zero_ops)
    elif has_opt and grads_set_to_none is True:
        v_zero, v_cost = 0.0, 0.0
    elif has_opt:  # the optimizers step; gradients zeroed by the loop (Module.zero_grad)
        fills = _top_level(w, w.within(zero_ops))
        zero_spans = w.sel(fills)
    if fills is not None:
        v_zero = rnd(int(fills.sum()) / n, 1)
        cost: float | None = w.in_steps(w.sel(fills))
        if gpu:
            zero_stake = _host_stake_us(w, zero_spans, idle_launch_frac)
            cost = (_launched_device_us(w, zero_spans) + zero_stake
                    if launched and zero_stake is not None else None)
        v_cost = rnd(cost / W) if cost is not None and W > 0 else None
    v["zero_grad_fill_ops_per_step"] = v_zero
    v["zero_grad_cost_frac"] = v_cost
    dp = w.within(w.host & (t.kind == Kind.CPU_OP) & t.name_mask(
        lambda s: bool(_DATAPARALLEL.match(s))))
    v["dataparallel_ops_per_step"] = rnd(int(dp.sum()) / n, 1) if w.has_ops else None
    v["dataparallel_ms_per_step"] = rnd(w.in_steps(w.sel(dp)) / 1e3 / n, 3) if w.has_ops else None
    return v
