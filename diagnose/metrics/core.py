"""Named measurements computed from one Trace.

Every metric has a documented name and unit in CATALOG. A metric the trace
cannot give (no GPU events, no DataLoader annotation, ...) is ``None``, never
0, so a rule that needs it is "not evaluated" rather than "passed".

Fractions are of the profiled window: the union of ``ProfilerStep#N`` spans
(time between two steps does not count), or the whole trace span where it has
none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..trace import DEVICE_KINDS, HOST_KINDS, Kind, Trace
from . import intervals as iv

CATALOG: dict[str, tuple[str, str]] = {}


def _doc(name: str, unit: str, doc: str) -> str:
    CATALOG[name] = (unit, doc)
    return name


# ---- names the analysis recognises -------------------------------------------------
_STEP = re.compile(r"^ProfilerStep#\d+$")
_DATALOADER = re.compile(r"^enumerate\(DataLoader\)#")
_SYNC_RUNTIME = frozenset(
    {
        "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
        "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpy",
        "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
    }
)
_SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
_LAUNCH = frozenset(
    {
        "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
        "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel", "hipExtLaunchKernel",
        "hipModuleLaunchKernel", "cudaGraphLaunch", "hipGraphLaunch",
    }
)
_MEMCPY_API = re.compile(r"^(cuda|hip)Memcpy|^cuMemcpy")
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
_TRITON_KERNEL = re.compile(r"^triton_")
_COMPILED_REGION = re.compile(r"^Torch-Compiled Region|^CompiledFunction")
_BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$|Backward\b")
_OPTIMIZER_OP = re.compile(r"^Optimizer\.step#|^aten::_fused_(adam|adamw|sgd|adagrad)|^aten::_foreach_(add|addcdiv|lerp|mul)_$")
_CONV = re.compile(r"scudnn|hcudnn|implicit_convolve|winograd|convolve|_fprop|wgrad|dgrad|conv2d|conv_|"
                   r"cudnn_.*(conv|infer|train)", re.IGNORECASE)
_COMM_KERNEL = re.compile(r"nccl|rccl", re.IGNORECASE)
_GEMM = re.compile(
    r"gemm|gemv|cutlass|xmma|nvjet|cublas|scudnn|hcudnn|implicit_convolve|winograd|"
    r"convolve|_fprop|wgrad|dgrad|conv2d|conv_|cudnn_.*(conv|infer|train)",
    re.IGNORECASE,
)
_FP32_SIMT = re.compile(
    r"sgemm|scudnn|_simt_|implicit_convolve_sgemm|<float, float|<float,\s*float|_ffma_|f32f32_f32f32_f32|"
    r"winograd.*<float|wgrad_alg\d_engine<float|dgrad_engine<float|gemv2T_kernel_val<int, int, float",
    re.IGNORECASE,
)
_TENSOR_CORE = re.compile(
    r"h884|h1688|h16816|s1688|s16816|i8816|i16832|hmma|imma|tensorop|tf32|bf16|f16|fp16|"
    r"xmma|gmma|nvjet|sm\d\d_|hgemm|_h\d{3,}|884|1688|16816|bgemm",
    re.IGNORECASE,
)
_OPT_STEP = re.compile(r"^Optimizer\.step#")
_OPT_ZERO = re.compile(r"^Optimizer\.zero_grad#")
_FOREACH = re.compile(r"multi_tensor_apply|_foreach_|fused_adam|FusedAdam|_fused_", re.IGNORECASE)
_DATAPARALLEL = re.compile(r"^(Broadcast|ReduceAddCoalesced|Gather|Scatter)(Backward)?$")


#: Rows of the top-kernels table each rank carries.
TOP_KERNELS = 10

# A pageable host-to-device copy needs at most its bytes at PAGEABLE_GBPS plus
# PAGEABLE_COPY_US per copy: a deliberately low rate (pageable copies run at several GB/s
# on PCIe 3 and newer) and a generous fixed cost, so that "blocked far longer than its
# bytes need" only holds when the host waited for something else: the queued GPU work a
# pageable copy must wait behind (a hidden synchronisation).
PAGEABLE_GBPS = 1.0
PAGEABLE_COPY_US = 20.0
HIDDEN_SYNC_RATIO = 5.0  # blocked at least this many times what the bytes need ...
HIDDEN_SYNC_GPU_BUSY = 0.5  # ... while the GPU ran other work at least this share of the time

# Tensor cores vs fp32 SIMT, peak dense throughput ratio by CUDA compute capability, from
# NVIDIA's datasheets (fp16/bf16 tensor-core FLOP/s with fp32 accumulation / fp32 FLOP/s):
# V100 125/15.7, T4 65/8.1, A100 312/19.5, A10 125/31.2 (GeForce/L40 parts lower: ~2),
# H100 SXM 989/67. The speedup we expect of AMP for the fp32 GEMM/conv time is half the
# peak ratio, at most 4x: real GEMMs are not all compute-bound (tile shapes, memory).
_TC_PEAK_RATIO = ((9, 14.8), (8.9, 2.0), (8.6, 2.0), (8, 16.0), (7.5, 8.0), (7, 8.0))
TC_SPEEDUP_CAP = 4.0

# CPU ops in the window needed to call a trace training or inference (is_training)
MIN_OPS_TO_TELL = 20


@dataclass
class MetricSet:
    """Flat name -> value mapping, per-step series, and notes on what was missing."""

    values: dict[str, Any]
    series: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tables: dict[str, Any] = field(default_factory=dict)  # e.g. top_kernels, for reports


def _r(x: float | None, nd: int = 6) -> float | None:
    if x is None:
        return None
    x = float(x)
    return round(x, nd) if np.isfinite(x) else None


def compute(trace: Trace, max_steps: int | None = None) -> MetricSet:
    """All trace metrics for one rank (of its first ``max_steps`` ProfilerSteps, if given:
    a window cut short by the end of the loop ends in a step that is not whole)."""
    return _Computer(trace, max_steps).run()


class _Computer:
    def __init__(self, t: Trace, max_steps: int | None = None) -> None:
        self.t = t
        self.max_steps = max_steps
        self.v: dict[str, Any] = {}
        self.series: dict[str, list[float]] = {}
        self.notes: list[str] = []
        self.tables: dict[str, Any] = {}

    # ------------------------------------------------------------- selection
    def run(self) -> MetricSet:
        t = self.t
        valid = np.isfinite(t.ts)
        host_all = np.isin(t.kind, [int(k) for k in HOST_KINDS]) & valid
        if host_all.any():
            counts = np.bincount(t.pid_id[host_all], minlength=len(t.pids))
            self.main_pid = int(np.argmax(counts))
            self.host = host_all & (t.pid_id == self.main_pid)
        else:
            self.main_pid = -1
            self.host = host_all
        self.dev = np.isin(t.kind, [int(k) for k in DEVICE_KINDS]) & valid
        self.has_gpu = bool(self.dev.any())
        self._window()
        self._device_info()
        self._workload()
        self._breakdown_and_idle()
        self._dataloader()
        self._transfers()
        self._syncs()
        self._kernels()
        self._top_kernels()
        self._communication()
        self._memory()
        self._optimizer()
        self.v[_doc("trace_dropped_events", "count",
                    "Events dropped because their fields had unusable types")] = t.dropped_events
        return MetricSet(self.v, self.series, self.notes, self.tables)

    def _sel(self, mask: np.ndarray) -> iv.Intervals:
        t = self.t
        return iv.union(t.ts[mask], t.end[mask])

    @cached_property
    def mid(self) -> np.ndarray:
        """Each event's midpoint."""
        return self.t.ts + self.t.dur / 2

    @cached_property
    def in_window(self) -> np.ndarray:
        """Events whose midpoint lies inside a profiled step (computed once)."""
        return iv.inside(self.steps_u, self.mid)

    def _in_window(self, mask: np.ndarray) -> np.ndarray:
        """Events (of ``mask``) whose midpoint lies inside a profiled step."""
        return mask & self.in_window

    def _contains(self, u: iv.Intervals, mask: np.ndarray) -> np.ndarray:
        """Events of ``mask`` whose midpoint lies inside ``u`` (only those are searched)."""
        out = np.zeros(len(mask), bool)
        idx = np.flatnonzero(mask)
        out[idx] = iv.contains(u, self.mid[idx])
        return out

    def in_steps(self, u: iv.Intervals) -> float:
        """Length of ``u`` inside the profiled steps (time between steps does not count)."""
        return iv.overlap(self.steps_u, u)

    def frac(self, u: iv.Intervals) -> float:
        return self.in_steps(u) / self.W if self.W > 0 else 0.0

    # ---------------------------------------------------------------- window
    def _window(self) -> None:
        t, v = self.t, self.v
        is_step = t.name_mask(lambda n: bool(_STEP.match(n))) & self.host & np.isin(
            t.kind, [int(Kind.ANNOTATION), int(Kind.CPU_OP)]
        )
        idx = np.flatnonzero(is_step)
        idx = idx[np.argsort(t.ts[idx], kind="stable")]
        if len(idx):
            # drop repeated or nested step spans: keep those starting after the last kept one ended
            keep, last_end = [], -np.inf
            for i in idx.tolist():  # once per step (a handful), not per event
                if t.ts[i] >= last_end - 1e-3 and t.dur[i] > 0:
                    keep.append(i)
                    last_end = t.end[i]
            idx = np.array(keep, dtype=np.int64)
            if self.max_steps is not None and len(idx) > self.max_steps:
                self.notes.append(f"{len(idx) - self.max_steps} ProfilerStep span(s) after the "
                                  f"{self.max_steps} whole step(s) left out (the loop ended)")
                idx = idx[:self.max_steps]
        if len(idx):
            self.step_lo, self.step_hi = t.ts[idx], t.end[idx]
            source = "ProfilerStep"
        else:
            span = (self.host | self.dev) & (t.kind != Kind.TRACE)
            if not span.any():
                span = np.isfinite(t.ts) & (t.kind != Kind.TRACE)
            lo = float(np.min(t.ts[span])) if span.any() else 0.0
            hi = float(np.max(t.end[span])) if span.any() else 0.0
            self.step_lo, self.step_hi = np.array([lo]), np.array([hi])
            source = "whole trace"
            self.notes.append("no ProfilerStep# spans: the whole trace is analysed as one window")
        self.lo, self.hi = float(self.step_lo[0]), float(self.step_hi[-1])
        self.steps_u = (self.step_lo, self.step_hi)
        self.W = float(np.sum(self.step_hi - self.step_lo))
        self.n_steps = len(self.step_lo)
        st = (self.step_hi - self.step_lo) / 1e3
        v[_doc("steps_source", "", "Where the step windows come from: ProfilerStep or whole trace")] = source
        v[_doc("step_count", "count", "Profiled steps (ProfilerStep# spans; 1 for a whole-trace window)")] = (
            self.n_steps
        )
        v[_doc("window_ms", "ms", "Length of the profiled window (sum of the step spans)")] = _r(self.W / 1e3, 3)
        v[_doc("step_time_median_ms", "ms", "Median step time")] = _r(np.median(st), 3)
        v[_doc("step_time_p90_ms", "ms", "90th percentile step time")] = _r(np.percentile(st, 90), 3)
        v[_doc("step_time_mean_ms", "ms", "Mean step time")] = _r(np.mean(st), 3)
        v[_doc("step_time_cv", "ratio", "Coefficient of variation of step time (std/mean)")] = (
            _r(np.std(st) / np.mean(st), 4) if self.n_steps > 1 and np.mean(st) > 0 else None
        )
        v[_doc("has_gpu", "bool", "The trace has device (kernel/memcpy/memset) activity")] = self.has_gpu
        self.series["step_ms"] = [round(x, 4) for x in st.tolist()]

    def _device_info(self) -> None:
        v, props = self.v, self.t.device_properties
        p = props[0] if props else {}
        name = p.get("name") if isinstance(p.get("name"), str) else None
        major = p.get("computeMajor", p.get("major"))
        minor = p.get("computeMinor", p.get("minor"))
        mem = p.get("totalGlobalMem")
        vendor = None
        if name:
            low = name.lower()
            vendor = "amd" if ("amd" in low or "radeon" in low or "instinct" in low) else (
                "nvidia" if any(k in low for k in ("nvidia", "tesla", "geforce", "quadro", "rtx"))
                else "other")
        isint = lambda x: isinstance(x, int) and not isinstance(x, bool)  # noqa: E731
        v[_doc("device_name", "", "GPU name from deviceProperties")] = name
        v[_doc("device_vendor", "", "nvidia, amd or other (from the device name)")] = vendor
        v[_doc("device_cc_major", "", "CUDA compute capability, major")] = (
            major if isint(major) and vendor == "nvidia" else None)
        v[_doc("device_cc_minor", "", "CUDA compute capability, minor")] = (
            minor if isint(minor) and vendor == "nvidia" else None)
        v[_doc("device_memory_bytes", "bytes", "Device memory capacity")] = mem if isint(mem) else None
        tc = None
        if vendor == "nvidia" and isint(major):
            tc = major >= 7
        v[_doc("device_has_tensor_cores", "bool", "NVIDIA GPU with compute capability >= 7.0")] = tc
        v[_doc("rank", "", "Rank of this trace (distributedInfo, else the file name)")] = self.t.rank
        v[_doc("world_size", "count", "World size from distributedInfo")] = self.t.world_size
        v[_doc("dist_backend", "", "torch.distributed backend from distributedInfo")] = self.t.backend

    # -------------------------------------------------------------- workload
    def _workload(self) -> None:
        """Training or inference; CUDA/HIP graphs and compiled (Triton) code in use."""
        t, v = self.t, self.v
        ops = self.host & np.isin(t.kind, [int(Kind.CPU_OP), int(Kind.ANNOTATION)])
        # a handful of ops (a micro-benchmark, a collective alone) cannot tell inference apart
        has_ops = int(self._in_window(ops & (t.kind == Kind.CPU_OP)).sum()) >= MIN_OPS_TO_TELL
        backward = bool((ops & t.name_mask(lambda n: bool(_BACKWARD_OP.search(n)))).any())
        opt = bool((ops & t.name_mask(lambda n: bool(_OPTIMIZER_OP.search(n)))).any())
        v[_doc("has_backward", "bool",
               "Backward ops in the trace (autograd::engine::evaluate_function, *Backward*); "
               f"None when the window has fewer than {MIN_OPS_TO_TELL} CPU ops")] = backward if has_ops else None
        v[_doc("has_optimizer_step", "bool",
               "optimizer.step() annotations or optimizer kernels' ops (_foreach_add_, _fused_adam, "
               "...) in the trace; None when the window has too few CPU ops to tell")] = opt if has_ops else None
        training = (backward or opt) if has_ops else None
        v[_doc("is_training", "bool",
               "The trace trains (backward or an optimizer step); False: it looks like inference; "
               "None: too few CPU ops to tell")] = training
        if training is False:
            self.notes.append("this looks like inference (no backward, no optimizer step): "
                              "training-only rules not evaluated")
        gpu = self.has_gpu
        kern = self._in_window((t.kind == Kind.KERNEL) & self.dev)
        n_kern = int(kern.sum())
        n_graph = int((kern & self.graph_kernel).sum())
        launches = self._in_window(self.host & (t.kind == Kind.RUNTIME) & t.name_mask(
            lambda n: bool(_GRAPH_LAUNCH.match(n))))
        n_launch = int(launches.sum())
        v[_doc("graph_launches_per_step", "count",
               "CUDA/HIP graph launches (cudaGraphLaunch, hipGraphLaunch) per step")] = (
            _r(n_launch / self.n_steps, 2) if gpu else None)
        v[_doc("graph_kernel_frac", "fraction",
               "Kernels replayed by a graph launch (matched by correlation id) / all kernels")] = (
            _r(n_graph / n_kern) if gpu and n_kern else None)
        v[_doc("uses_cuda_graphs", "bool",
               "CUDA/HIP graphs are in use: the window has graph launches")] = (
            n_launch > 0 or n_graph > 0) if gpu else None
        triton = t.name_mask(lambda n: bool(_TRITON_KERNEL.match(n)))
        kd = t.dur[kern]
        tri_us = float(t.dur[kern & triton].sum())
        v[_doc("triton_kernel_frac", "fraction",
               "Kernel time in Triton kernels (triton_*: torch.compile / Inductor) / kernel time")] = (
            _r(tri_us / kd.sum()) if gpu and kd.sum() > 0 else None)
        region = bool((ops & t.name_mask(lambda n: bool(_COMPILED_REGION.match(n)))).any())
        v[_doc("uses_compiled_code", "bool",
               "Compiled code runs: Triton kernels, or torch.compile regions on the host")] = (
            bool((kern & triton).any()) or region)
        notes = []
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
        self.notes.extend(notes)

    @cached_property
    def graph_kernel(self) -> np.ndarray:
        """Device events replayed by a CUDA/HIP graph launch (mask, matched by correlation id)."""
        t = self.t
        launch = self.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda n: bool(_GRAPH_LAUNCH.match(n)))
        corr = t.correlation[launch]
        corr = corr[~np.isnan(corr)]
        out = np.zeros(len(t), bool)
        if len(corr):
            idx = np.flatnonzero(self.dev)
            out[idx] = np.isin(t.correlation[idx], corr)
        return out

    @cached_property
    def pageable_h2d(self) -> np.ndarray:
        """Pageable host-to-device copies on the device (mask over all events)."""
        t = self.t
        if not len(t.names):
            return np.zeros(len(t), bool)
        pg = np.fromiter((("Pageable" in n) and _copy_direction(n) == "h2d" for n in t.names),
                         bool, len(t.names))
        return self.dev & (t.kind == Kind.MEMCPY) & pg[t.name_id]

    @cached_property
    def pageable_blocked(self) -> tuple[iv.Intervals, np.ndarray]:
        """Host time blocked issuing pageable host-to-device copies, and the copy API calls.

        Each copy API call (found by the copy's correlation id) is widened to the
        ``aten::copy_`` op on its thread that holds it: current PyTorch follows a pageable
        copy with a stream synchronisation inside that op, older versions block inside
        ``cudaMemcpyAsync`` itself.
        """
        t = self.t
        rt = np.flatnonzero(self.host & (t.kind == Kind.RUNTIME)
                            & t.name_mask(lambda n: bool(_MEMCPY_API.match(n))))
        corr = t.correlation[self.pageable_h2d]
        rt = rt[np.isin(t.correlation[rt], corr[~np.isnan(corr)])]
        lo, hi = t.ts[rt].copy(), t.end[rt].copy()
        ops = np.flatnonzero(self.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n == "aten::copy_"))
        if len(rt) and len(ops):
            ops = ops[np.argsort(t.ts[ops], kind="stable")]
            pos = np.searchsorted(t.ts[ops], t.ts[rt], side="right") - 1
            cand = ops[np.maximum(pos, 0)]
            ok = (pos >= 0) & (t.end[cand] >= t.end[rt]) & (t.tid_id[cand] == t.tid_id[rt])
            lo[ok], hi[ok] = t.ts[cand[ok]], t.end[cand[ok]]
        return iv.union(lo, hi), rt

    # ------------------------------------------------------------- breakdown
    def _breakdown_and_idle(self) -> None:
        t, v = self.t, self.v
        comm_name = t.name_mask(lambda n: bool(_COMM_KERNEL.search(n)))
        kern = (t.kind == Kind.KERNEL) & self.dev
        self.comm_mask = kern & comm_name
        self.compute_mask = kern & ~comm_name
        self.dl_mask = self.host & t.name_mask(lambda n: bool(_DATALOADER.match(n)))
        cpu_mask = self.host & (t.kind == Kind.CPU_OP) & ~self.dl_mask & ~t.name_mask(
            lambda n: bool(_STEP.match(n)))
        runtime_mask = self.host & (t.kind == Kind.RUNTIME)
        sets = {
            "kernel": self._sel(self.compute_mask),
            "memcpy": self._sel(self.dev & (t.kind == Kind.MEMCPY)),
            "memset": self._sel(self.dev & (t.kind == Kind.MEMSET)),
            "communication": self._sel(self.comm_mask),
            "runtime": self._sel(runtime_mask),
            "dataloader": self._sel(self.dl_mask),
            "cpu_exec": self._sel(cpu_mask),
        }
        self.sets = sets
        step_len = self.step_hi - self.step_lo
        total = float(step_len.sum())
        acc = iv.EMPTY
        prev = np.zeros(self.n_steps)
        for cat, u in sets.items():
            acc = iv.merge(acc, u)
            now = iv.measure_between(acc, self.step_lo, self.step_hi)
            claimed = now - prev
            prev = now
            self.series[f"{cat}_ms"] = [round(x, 4) for x in (claimed / 1e3).tolist()]
            v[_doc(f"share_{cat}", "fraction",
                   f"Share of step time attributed to {cat.replace('_', ' ')} "
                   "(each category claims only time no higher category claimed)")] = (
                _r(claimed.sum() / total) if total > 0 else None)
        other = step_len - prev
        self.series["other_ms"] = [round(x, 4) for x in (other / 1e3).tolist()]
        v[_doc("share_other", "fraction", "Share of step time in no category above")] = (
            _r(other.sum() / total) if total > 0 else None)
        if not self.has_gpu:
            for c in ("kernel", "memcpy", "memset", "communication", "runtime"):
                v[f"share_{c}"] = None
        self._gpu_busy_and_idle()

    def _gpu_busy_and_idle(self) -> None:
        t, v = self.t, self.v
        names = ("gpu_busy_frac", "gpu_idle_frac", "idle_input_frac", "idle_sync_frac",
                 "idle_launch_frac", "idle_other_frac", "idle_copy_sync_frac",
                 "idle_sync_call_frac", "idle_graph_launch_frac", "idle_kernel_launch_frac")
        _doc("gpu_busy_frac", "fraction",
             "Union of kernel, memcpy and memset time on the busiest device / window")
        _doc("gpu_idle_frac", "fraction", "Window time with no device activity at all / window")
        _doc("idle_input_frac", "fraction", "GPU idle while the host waits on the DataLoader / window")
        _doc("idle_sync_frac", "fraction",
             "GPU idle after the host drained it with a synchronising call (.item(), "
             "synchronize, a blocking pageable copy) until new work arrived / window")
        _doc("idle_copy_sync_frac", "fraction",
             "The part of idle_sync_frac that begins while the host is blocked in a pageable "
             "host-to-device copy (the copy call and the synchronisation it issues) / window")
        _doc("idle_sync_call_frac", "fraction",
             "The rest of idle_sync_frac: after .item(), synchronize and other synchronising "
             "calls / window")
        _doc("idle_kernel_launch_frac", "fraction",
             "The part of idle_launch_frac that ends with a kernel launched on its own (not "
             "replayed by a graph) / window")
        _doc("idle_graph_launch_frac", "fraction",
             "The part of idle_launch_frac that ends with kernels replayed by a CUDA/HIP graph "
             "(the GPU waits for one graph launch, not for per-kernel launches) / window")
        _doc("idle_launch_frac", "fraction",
             "GPU idle waiting for the host to launch the next work (launch overhead, Python "
             "and CPU work between launches) / window")
        _doc("idle_other_frac", "fraction", "GPU idle for no attributable host cause / window")
        if not self.has_gpu or self.W <= 0:
            for n in names:
                v[n] = None
            return
        dev_idx = np.flatnonzero(self.dev)
        dev_no = t.device[dev_idx]
        dev_key = np.where(np.isnan(dev_no), -1.0 - t.pid_id[dev_idx], dev_no)
        busiest = 0.0
        for d in np.unique(dev_key):  # once per device
            sel = dev_idx[dev_key == d]
            busiest = max(busiest, self.frac(iv.union(t.ts[sel], t.end[sel])))
        busy = self._sel(self.dev)
        v["gpu_busy_frac"] = _r(busiest)
        # idle gaps inside steps only: the time between two steps is set aside as if busy
        between = (self.step_hi[:-1], self.step_lo[1:])
        keep = between[1] > between[0]
        gs, ge = iv.gaps(iv.merge(busy, (between[0][keep], between[1][keep])), self.lo, self.hi)
        glen = ge - gs
        v["gpu_idle_frac"] = _r(glen.sum() / self.W)
        input_part = iv.measure_between(self.sets["dataloader"], gs, ge)
        rest = np.maximum(glen - input_part, 0.0)
        self.sync_set = self._sync_set()
        copy_set = self.pageable_blocked[0]
        copy_flag = iv.contains(copy_set, gs)
        sync_flag = iv.contains(self.sync_set, gs) | copy_flag
        # which device op ends each gap, and when was it launched?
        order = dev_idx[np.argsort(t.ts[dev_idx], kind="stable")]
        nxt = np.searchsorted(t.ts[order], ge, side="left")
        has_next = nxt < len(order)
        nxt_ev = order[np.minimum(nxt, len(order) - 1)]
        launch_end = self._launch_end(nxt_ev)
        host_late = has_next & ~np.isnan(launch_end) & (launch_end >= gs - 1e-3)
        # a gap is the host's doing only if the work that ends it was not yet launched when
        # the GPU ran dry; a gap between work already queued (inside a CUDA graph, behind a
        # cross-stream wait) is the device's own, whatever the host is doing meanwhile
        queued = has_next & ~np.isnan(launch_end) & ~host_late
        sync_flag &= ~queued
        copy_flag &= ~queued
        sync_part = np.where(sync_flag, rest, 0.0)
        launch_part = np.where(~sync_flag & host_late, rest, 0.0)
        other_part = rest - sync_part - launch_part
        W = self.W
        v["idle_input_frac"] = _r(input_part.sum() / W)
        v["idle_sync_frac"] = _r(sync_part.sum() / W)
        v["idle_launch_frac"] = _r(launch_part.sum() / W)
        v["idle_other_frac"] = _r(other_part.sum() / W)
        copy_part = np.where(copy_flag, sync_part, 0.0)
        v["idle_copy_sync_frac"] = _r(copy_part.sum() / W)
        v["idle_sync_call_frac"] = _r((sync_part - copy_part).sum() / W)
        # idle gaps that end with work replayed by a CUDA/HIP graph: one graph launch, not
        # one launch per kernel (counted in idle_launch_frac, reported apart)
        graph_end = has_next & self.graph_kernel[nxt_ev]
        graph_part = np.where(graph_end, launch_part, 0.0)
        v["idle_graph_launch_frac"] = _r(graph_part.sum() / W)
        v["idle_kernel_launch_frac"] = _r((launch_part - graph_part).sum() / W)

    def _launch_end(self, dev_events: np.ndarray) -> np.ndarray:
        """End time of the host runtime call that launched each device event (NaN if unknown)."""
        t = self.t
        rt = np.flatnonzero((t.kind == Kind.RUNTIME) & ~np.isnan(t.correlation))
        out = np.full(len(dev_events), np.nan)
        if not len(rt):
            return out
        order = rt[np.argsort(t.correlation[rt], kind="stable")]
        keys = t.correlation[order]
        want = t.correlation[dev_events]
        pos = np.searchsorted(keys, want)
        pos_c = np.minimum(pos, len(keys) - 1)
        hit = (pos < len(keys)) & (keys[pos_c] == want)
        out[hit] = t.end[order[pos_c[hit]]]
        return out

    def _sync_set(self) -> iv.Intervals:
        t = self.t
        m = self.host & (
            ((t.kind == Kind.RUNTIME) & t.name_mask(lambda n: n in _SYNC_RUNTIME))
            | ((t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n in _SYNC_OPS))
        )
        self.sync_runtime_mask = self.host & (t.kind == Kind.RUNTIME) & t.name_mask(
            lambda n: n in _SYNC_RUNTIME)
        self.item_mask = self.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n == "aten::item")
        return self._sel(m)

    # ------------------------------------------------------------ dataloader
    def _dataloader(self) -> None:
        t, v = self.t, self.v
        has = bool(self._in_window(self.dl_mask).any())
        dl = self.sets["dataloader"]
        per_step = iv.measure_between(dl, self.step_lo, self.step_hi) / 1e3
        self.series["dataloader_wait_ms"] = [round(x, 4) for x in per_step.tolist()]
        v[_doc("dataloader_share", "fraction",
               "Window time inside DataLoader __next__ (enumerate(DataLoader)) / window")] = (
            _r(self.frac(dl)) if has else None)
        v[_doc("dataloader_wait_ms_per_step", "ms", "Mean DataLoader wait per step")] = (
            _r(per_step.mean(), 3) if has else None)
        v[_doc("dataloader_wait_max_ms", "ms", "Longest DataLoader wait in one step")] = (
            _r(per_step.max(), 3) if has else None)
        v[_doc("dataloader_wait_median_ms", "ms", "Median DataLoader wait per step")] = (
            _r(np.median(per_step), 3) if has else None)
        multi = None
        if has:
            names = set(t.names_of(np.flatnonzero(self.dl_mask)))
            if any("_MultiProcessingDataLoaderIter" in n for n in names):
                multi = True
            elif any("_SingleProcessDataLoaderIter" in n for n in names):
                multi = False
        v[_doc("dataloader_multiprocess", "bool",
               "The loader uses worker processes (num_workers > 0), from the iterator's name")] = multi

    # ------------------------------------------------------------- transfers
    def _transfers(self) -> None:
        t, v = self.t, self.v
        mc = self._in_window(self.dev & (t.kind == Kind.MEMCPY))
        names = t.names
        direction = [_copy_direction(n) for n in names]
        pageable_n = np.fromiter(("Pageable" in n for n in names), bool, len(names))
        pinned_n = np.fromiter(("Pinned" in n for n in names), bool, len(names))
        gpu = self.has_gpu
        for d in ("h2d", "d2h", "d2d"):
            of_d = np.fromiter((x == d for x in direction), bool, len(names))
            m = mc & of_d[t.name_id] if len(names) else mc
            self._copy_stats(f"memcpy_{d}", m, gpu, f"{d.upper().replace('2', '->')} copies")
            if d != "d2d":
                self._copy_stats(f"memcpy_{d}_pageable", m & pageable_n[t.name_id], gpu,
                                 f"{d.upper().replace('2', '->')} copies from/to pageable host memory")
                self._copy_stats(f"memcpy_{d}_pinned", m & pinned_n[t.name_id], gpu,
                                 f"{d.upper().replace('2', '->')} copies from/to pinned host memory",
                                 full=False)
        # host time blocked in the copy API calls that issued pageable copies
        rt_copy = self.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda n: bool(_MEMCPY_API.match(n)))
        pageable_corr = t.correlation[mc & pageable_n[t.name_id]] if len(names) else np.zeros(0)
        rt_idx = np.flatnonzero(rt_copy)
        pg_rt = np.zeros(len(t), bool)
        pg_rt[rt_idx] = np.isin(t.correlation[rt_idx], pageable_corr[~np.isnan(pageable_corr)])
        v[_doc("memcpy_api_host_frac", "fraction",
               "Host time inside cudaMemcpy*/hipMemcpy* API calls / window")] = (
            _r(self.frac(self._sel(rt_copy))) if gpu else None)
        v[_doc("memcpy_pageable_host_frac", "fraction",
               "Host time blocked in the copy API calls that issued pageable copies / window")] = (
            _r(self.frac(self._sel(pg_rt))) if gpu else None)
        v[_doc("memcpy_pageable_host_ms_per_step", "ms",
               "Host time blocked issuing pageable copies, per step")] = (
            _r(self.in_steps(self._sel(pg_rt)) / 1e3 / self.n_steps, 3)
            if gpu else None)
        self._pageable_blocking(gpu)
        known = bool(np.any(pageable_n | pinned_n)) if len(names) else False
        v[_doc("memcpy_pinned_info", "bool",
               "Copy names say pageable vs pinned (NVIDIA); False on e.g. AMD traces")] = (
            known if gpu else None)

    def _pageable_blocking(self, gpu: bool) -> None:
        """How long the host is blocked by pageable copies, and whether it waited for the copy
        or for the GPU work queued before it (a hidden synchronisation)."""
        t, v = self.t, self.v
        blocked, rt = self.pageable_blocked
        blocked_us = self.in_steps(blocked)
        copies = self._in_window(self.pageable_h2d)
        b = t.nbytes[copies]
        b = b[np.isfinite(b)]
        expected_us = float(b.sum()) / (PAGEABLE_GBPS * 1e3) + PAGEABLE_COPY_US * int(copies.sum())
        other_dev = self._sel(self.dev & ~self.pageable_h2d)
        busy_in = iv.overlap(iv.clip(blocked, self.lo, self.hi), other_dev)
        busy_frac = busy_in / blocked_us if blocked_us > 0 else None
        n = self.n_steps
        v[_doc("memcpy_pageable_blocked_ms_per_step", "ms",
               "Host time blocked by pageable host-to-device copies per step: the copy call, "
               "widened to the aten::copy_ op that holds it (with the sync it issues)")] = (
            _r(blocked_us / 1e3 / n, 3) if gpu else None)
        v[_doc("memcpy_pageable_expected_ms_per_step", "ms",
               f"What those copies' bytes need per step at a plausible {PAGEABLE_GBPS:g} GB/s "
               f"plus {PAGEABLE_COPY_US:g} us per copy")] = (
            _r(expected_us / 1e3 / n, 3) if gpu else None)
        v[_doc("memcpy_pageable_blocked_gpu_busy_frac", "fraction",
               "Share of that blocked host time during which the GPU ran other work "
               "(kernels, other copies)")] = _r(busy_frac) if gpu else None
        hidden = (blocked_us > 0 and blocked_us >= HIDDEN_SYNC_RATIO * expected_us
                  and (busy_frac or 0.0) >= HIDDEN_SYNC_GPU_BUSY)
        v[_doc("memcpy_pageable_hidden_sync", "bool",
               f"Pageable copies act as a hidden synchronisation: the host is blocked "
               f">= {HIDDEN_SYNC_RATIO:g}x what their bytes need while the GPU runs queued "
               f"work >= {HIDDEN_SYNC_GPU_BUSY:.0%} of that time")] = (
            bool(hidden) if gpu else None)

    def _copy_stats(self, prefix: str, m: np.ndarray, gpu: bool, what: str, full: bool = True) -> None:
        t, v = self.t, self.v
        n = int(m.sum())
        dur = t.dur[m]
        b = t.nbytes[m]
        b = b[np.isfinite(b)]
        v[_doc(f"{prefix}_count", "count", f"Number of {what} in the window")] = n if gpu else None
        if not full:
            return
        v[_doc(f"{prefix}_per_step", "count", f"{what} per step")] = (
            _r(n / self.n_steps, 2) if gpu else None)
        v[_doc(f"{prefix}_ms", "ms", f"Device time of {what}")] = _r(dur.sum() / 1e3, 3) if gpu else None
        v[_doc(f"{prefix}_bytes", "bytes", f"Bytes moved by {what}")] = int(b.sum()) if gpu else None
        gbps = (b.sum() / (dur.sum() * 1e3)) if gpu and n and dur.sum() > 0 and len(b) else None
        v[_doc(f"{prefix}_gbps", "GB/s", f"Achieved bandwidth of {what}")] = _r(gbps, 3)

    # ----------------------------------------------------------------- syncs
    def _syncs(self) -> None:
        v = self.v
        gpu = self.has_gpu
        if not hasattr(self, "sync_set"):
            self.sync_set = self._sync_set()
        n_sync = int(self._in_window(self.sync_runtime_mask).sum())
        n_item = int(self._in_window(self.item_mask).sum())
        v[_doc("sync_calls_per_step", "count",
               "Synchronising runtime calls (cuda*Synchronize, blocking cudaMemcpy) per step")] = (
            _r(n_sync / self.n_steps, 2) if gpu else None)
        v[_doc("item_calls_per_step", "count", "aten::item calls (.item(), float(t), ...) per step")] = (
            _r(n_item / self.n_steps, 2) if gpu else None)
        v[_doc("sync_frac", "fraction", "Host time inside synchronising calls / window")] = (
            _r(self.frac(self.sync_set)) if gpu else None)
        v[_doc("sync_ms_per_step", "ms", "Host time inside synchronising calls per step")] = (
            _r(self.in_steps(self.sync_set) / 1e3 / self.n_steps, 3)
            if gpu else None)

    # --------------------------------------------------------------- kernels
    def _kernels(self) -> None:
        t, v = self.t, self.v
        gpu = self.has_gpu
        k = self._in_window((t.kind == Kind.KERNEL) & self.dev)
        kd = t.dur[k]
        launch = self._in_window(self.host & (t.kind == Kind.RUNTIME) & t.name_mask(
            lambda n: n in _LAUNCH and not _GRAPH_LAUNCH.match(n)))
        ld = t.dur[launch]
        v[_doc("kernels_per_step", "count", "GPU kernels per step (graph replays included)")] = (
            _r(len(kd) / self.n_steps, 1) if gpu else None)
        v[_doc("launched_kernels_per_step", "count",
               "GPU kernels per step launched one by one (not replayed by a CUDA/HIP graph)")] = (
            _r(int((k & ~self.graph_kernel).sum()) / self.n_steps, 1) if gpu else None)
        v[_doc("kernel_median_us", "us", "Median kernel duration")] = (
            _r(np.median(kd), 3) if gpu and len(kd) else None)
        v[_doc("kernel_ms_per_step", "ms", "Summed kernel time per step")] = (
            _r(kd.sum() / 1e3 / self.n_steps, 3) if gpu else None)
        v[_doc("launch_api_median_us", "us",
               "Median duration of kernel-launch API calls (graph launches not included)")] = (
            _r(np.median(ld), 3) if gpu and len(ld) else None)
        v[_doc("launch_api_frac", "fraction", "Host time inside kernel-launch API calls / window")] = (
            _r(self.frac(self._sel(launch))) if gpu else None)
        v[_doc("launches_per_step", "count",
               "Kernel-launch API calls per step (graph launches not included)")] = (
            _r(len(ld) / self.n_steps, 1) if gpu else None)
        # GEMM / convolution precision from kernel names
        names = t.names
        is_gemm = np.fromiter((bool(_GEMM.search(n)) for n in names), bool, len(names))
        is_simt = np.fromiter((bool(_FP32_SIMT.search(n)) for n in names), bool, len(names))
        is_tc = np.fromiter((bool(_TENSOR_CORE.search(n)) for n in names), bool, len(names)) & ~is_simt
        is_conv = np.fromiter((bool(_CONV.search(n)) for n in names), bool, len(names))
        if len(names):
            g = k & is_gemm[t.name_id]
            simt = t.dur[g & is_simt[t.name_id]].sum()
            tc = t.dur[g & is_tc[t.name_id]].sum()
            gemm_total = t.dur[g].sum()
            conv = t.dur[k & is_conv[t.name_id]].sum()
        else:
            simt = tc = gemm_total = conv = 0.0
        classified = simt + tc
        v[_doc("gemm_kernel_frac", "fraction",
               "GEMM/convolution kernel time / all kernel time")] = (
            _r(gemm_total / kd.sum()) if gpu and kd.sum() > 0 else None)
        v[_doc("gemm_fp32_frac", "fraction",
               "Of GEMM/conv time whose precision the kernel name tells: share in fp32 "
               "SIMT kernels (no tensor cores)")] = (
            _r(simt / classified) if gpu and classified > 0 else None)
        v[_doc("gemm_tensorcore_frac", "fraction",
               "Of GEMM/conv time whose precision the kernel name tells: share on tensor cores")] = (
            _r(tc / classified) if gpu and classified > 0 else None)
        v[_doc("gemm_fp32_ms_per_step", "ms", "fp32 SIMT GEMM/conv kernel time per step")] = (
            _r(simt / 1e3 / self.n_steps, 3) if gpu and classified > 0 else None)
        v[_doc("conv_kernel_ms_per_step", "ms", "Convolution kernel time per step (cuDNN, by name)")] = (
            _r(conv / 1e3 / self.n_steps, 3) if gpu else None)
        peak = None
        cc = v.get("device_cc_major"), v.get("device_cc_minor")
        if v.get("device_has_tensor_cores") and cc[0] is not None:
            ccf = cc[0] + (cc[1] or 0) / 10
            peak = next((r for lo, r in _TC_PEAK_RATIO if ccf >= lo), None)
        speedup = min(peak / 2, TC_SPEEDUP_CAP) if peak else None
        v[_doc("tensor_core_peak_ratio", "ratio",
               "Peak fp16/bf16 tensor-core vs fp32 SIMT throughput of this GPU (NVIDIA datasheets, "
               "by compute capability)")] = peak
        v[_doc("tensor_core_speedup", "ratio",
               f"Speedup expected of AMP for fp32 GEMM/conv kernels: half the peak ratio, at most "
               f"{TC_SPEEDUP_CAP:g}x (conservative)")] = speedup
        v[_doc("gemm_fp32_saving_ms_per_step", "ms",
               "fp32 SIMT GEMM/conv time per step that AMP is expected to save: "
               "gemm_fp32_ms_per_step * (1 - 1/tensor_core_speedup)")] = (
            _r(simt / 1e3 / self.n_steps * (1 - 1 / speedup), 3)
            if gpu and classified > 0 and speedup else None)

    def _top_kernels(self, n: int = TOP_KERNELS) -> None:
        """The kernels with the most total time in the whole trace (for the reports)."""
        t = self.t
        mask = (t.kind == Kind.KERNEL) & self.dev
        if not mask.any():
            return
        ids = t.name_id[mask]
        total = np.bincount(ids, weights=t.dur[mask], minlength=len(t.names))
        calls = np.bincount(ids, minlength=len(t.names))
        all_us = float(total.sum())
        order = np.argsort(-total, kind="stable")[:n]
        self.tables["top_kernels"] = {
            "distinct": int((calls > 0).sum()),
            "rows": [{"name": t.names[i], "calls": int(calls[i]),
                      "total_ms": round(float(total[i]) / 1e3, 6),
                      "share": round(float(total[i]) / all_us, 6) if all_us > 0 else 0.0}
                     for i in order if calls[i] > 0]}

    # --------------------------------------------------------- communication
    def _communication(self) -> None:
        v = self.v
        comm = self.sets["communication"]
        has = self.has_gpu and bool(self._in_window(self.comm_mask).any())
        kern = self.sets["kernel"]
        c = self.in_steps(comm)
        # |comm ∩ compute| by inclusion-exclusion, all measured inside the steps
        ov = max(c + self.in_steps(kern) - self.in_steps(iv.merge(comm, kern)), 0.0)
        v[_doc("comm_frac", "fraction", "Communication (NCCL/RCCL) kernel time, as a union / window")] = (
            _r(c / self.W) if self.has_gpu and self.W > 0 else None)
        v[_doc("comm_overlap_frac", "fraction",
               "Share of communication time that overlaps compute kernels")] = (
            _r(ov / c) if has and c > 0 else None)
        v[_doc("comm_exposed_frac", "fraction",
               "Communication time not hidden behind compute / window")] = (
            _r((c - ov) / self.W) if has and self.W > 0 else (0.0 if self.has_gpu else None))

    # ---------------------------------------------------------------- memory
    def _memory(self) -> None:
        t, v = self.t, self.v
        dtype = t.mem_device_type
        mem = dtype.idx[dtype.val == 1]  # memory events of a GPU (device type 1)
        mem = mem[t.kind[mem] == Kind.MEMORY]
        alloc = t.mem_allocated[mem]
        res = t.mem_reserved[mem]
        alloc = alloc[np.isfinite(alloc)]
        res = res[np.isfinite(res)]
        pa = float(alloc.max()) if len(alloc) else None
        pr = float(res.max()) if len(res) else None
        total = v.get("device_memory_bytes")
        v[_doc("gpu_mem_peak_allocated_bytes", "bytes",
               "Peak memory allocated by PyTorch's caching allocator ([memory] events)")] = (
            int(pa) if pa is not None else None)
        v[_doc("gpu_mem_peak_reserved_bytes", "bytes",
               "Peak memory reserved by the caching allocator ([memory] events)")] = (
            int(pr) if pr is not None else None)
        v[_doc("gpu_mem_peak_frac", "fraction", "Peak reserved (else allocated) / device capacity")] = (
            _r((pr if pr is not None else pa) / total)
            if total and (pr is not None or pa is not None) else None)
        v[_doc("gpu_mem_frag_ratio", "ratio", "Peak reserved / peak allocated")] = (
            _r(pr / pa, 3) if pr is not None and pa else None)
        # 2021 traces carry only per-allocation deltas: the peak growth is still known
        deltas = t.mem_delta[mem]
        deltas = deltas[np.isfinite(deltas)]
        v[_doc("gpu_mem_growth_peak_bytes", "bytes",
               "Peak of the running sum of allocation deltas in the trace (a lower bound on use)")] = (
            int(np.max(np.cumsum(deltas))) if len(deltas) else None)

    # ------------------------------------------------------------- optimizer
    def _launched_device_us(self, spans: iv.Intervals) -> float:
        """Device time (in the window) of the work launched by runtime calls inside ``spans``."""
        t = self.t
        rt = self._contains(spans, self.host & (t.kind == Kind.RUNTIME))
        corr = t.correlation[rt]
        corr = corr[~np.isnan(corr)]
        if not len(corr):
            return 0.0
        idx = np.flatnonzero(self._in_window(self.dev))
        return float(t.dur[idx[np.isin(t.correlation[idx], corr)]].sum())

    def _host_stake_us(self, spans: iv.Intervals) -> float:
        """Step time at stake in host time spent in ``spans``: a GPU that keeps busy meanwhile
        loses nothing, so on a GPU it is at most the GPU's idle waiting for launches."""
        host = self.in_steps(spans)
        if not self.has_gpu:
            return host
        return min(host, (self.v.get("idle_launch_frac") or 0.0) * self.W)

    def _optimizer(self) -> None:
        t, v = self.t, self.v
        hostish = self.host & np.isin(t.kind, [int(Kind.ANNOTATION), int(Kind.CPU_OP)])
        step_spans = self._sel(self._in_window(hostish & t.name_mask(lambda n: bool(_OPT_STEP.match(n)))))
        zero_spans = self._sel(self._in_window(hostish & t.name_mask(lambda n: bool(_OPT_ZERO.match(n)))))
        launch = self.host & (t.kind == Kind.RUNTIME) & t.name_mask(lambda n: n in _LAUNCH)
        has_opt = len(step_spans[0]) > 0
        foreach_names = t.name_mask(lambda n: bool(_FOREACH.search(n)))
        # only launches and foreach ops are asked "inside optimizer.step()?"
        in_opt = (self._contains(step_spans, launch | foreach_names) if has_opt
                  else np.zeros(len(t), bool))
        n_launch = int((launch & in_opt).sum())
        v[_doc("optimizer_launches_per_step", "count",
               "Kernel launches inside optimizer.step(), per step")] = (
            _r(n_launch / self.n_steps, 1) if has_opt and self.has_gpu else None)
        v[_doc("optimizer_ms_per_step", "ms", "Host time inside optimizer.step(), per step")] = (
            _r(iv.measure(step_spans) / 1e3 / self.n_steps, 3) if has_opt else None)
        v[_doc("optimizer_stake_frac", "fraction",
               "Step time at stake in optimizer.step()'s host time / window: on a GPU, at most "
               "the GPU's idle waiting for launches (idle_launch_frac); on a CPU, all of it")] = (
            _r(self._host_stake_us(step_spans) / self.W) if has_opt and self.W > 0 else None)
        v[_doc("optimizer_kernel_ms_per_step", "ms",
               "Device time of the kernels launched inside optimizer.step(), per step")] = (
            _r(self._launched_device_us(step_spans) / 1e3 / self.n_steps, 3)
            if has_opt and self.has_gpu else None)
        v[_doc("optimizer_uses_foreach", "bool",
               "optimizer.step() runs multi-tensor (foreach/fused) kernels or ops")] = (
            bool((foreach_names & in_opt).any()) if has_opt else None)
        if len(zero_spans[0]):
            zero_ops = self.host & (t.kind == Kind.CPU_OP) & t.name_mask(lambda n: n == "aten::zero_")
            fills = self._contains(zero_spans, zero_ops)
            v_zero = _r(int(fills.sum()) / self.n_steps, 1)
            if self.has_gpu:
                cost = self._launched_device_us(zero_spans) + self._host_stake_us(zero_spans)
            else:
                cost = self.in_steps(self._sel(fills))
            v_cost = _r(cost / self.W) if self.W > 0 else None
        else:
            v_zero = v_cost = None
        v[_doc("zero_grad_fill_ops_per_step", "count",
               "aten::zero_ calls inside optimizer.zero_grad() per step (0 with set_to_none)")] = v_zero
        v[_doc("zero_grad_cost_frac", "fraction",
               "What zeroing gradients costs / window: the device time of the kernels and "
               "memsets launched inside optimizer.zero_grad(), plus its host time up to the GPU's "
               "idle waiting for launches (CPU-only: host time in its aten::zero_ calls)")] = v_cost
        dp = self._in_window(self.host & (t.kind == Kind.CPU_OP) & t.name_mask(
            lambda n: bool(_DATAPARALLEL.match(n))))
        v[_doc("dataparallel_ops_per_step", "count",
               "nn.DataParallel scatter/broadcast/gather ops per step")] = (
            _r(int(dp.sum()) / self.n_steps, 1))
        v[_doc("dataparallel_ms_per_step", "ms",
               "Host time in nn.DataParallel scatter/broadcast/gather ops per step")] = (
            _r(self.in_steps(self._sel(dp)) / 1e3 / self.n_steps, 3))


def _copy_direction(name: str) -> str | None:
    if not name.startswith("Memcpy"):
        return None
    if "HtoD" in name or "Host->Device" in name or "HostToDevice" in name:
        return "h2d"
    if "DtoH" in name or "Device->Host" in name or "DeviceToHost" in name:
        return "d2h"
    if "DtoD" in name or "Device->Device" in name or "PtoP" in name or "DeviceToDevice" in name:
        return "d2d"
    return None


def _register_catalog() -> None:
    """Fill CATALOG at import: every metric documents itself where it is computed, and
    every code path documents its metrics whatever the trace holds, so one run over a
    one-event trace registers them all."""
    from ..trace.decode import Decoded, Event

    compute(Trace.from_decoded(Decoded([Event(cat="cpu_op", name="x", ts=0.0, dur=1.0)],
                                       [], None, None), "<catalog>"))


_register_catalog()
