"""Metrics from the sampler time series of a run (the dict ``diagnose.runfolder.load_samples`` returns).

Values summarise the profiled window (between the ``active_start`` and
``active_end`` marks) when at least ``MIN_WINDOW_SAMPLES`` ticks fall inside
it, else the whole sampled span. A series that was not sampled gives None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MIN_WINDOW_SAMPLES = 3

CATALOG: dict[str, tuple[str, str]] = {
    "gpu_util_mean_pct": ("%", "mean NVML GPU utilization (share of time a kernel was running)"),
    "gpu_mem_used_max_bytes": ("bytes", "peak device memory in use (NVML, all processes)"),
    "gpu_mem_total_bytes": ("bytes", "device memory capacity (NVML)"),
    "gpu_sm_clock_mean_mhz": ("MHz", "mean SM clock"),
    "gpu_power_mean_w": ("W", "mean board power draw"),
    "gpu_pcie_rx_mean_mbps": ("MB/s", "mean PCIe receive throughput of the GPU (NVML KB/s / 1000)"),
    "gpu_pcie_tx_mean_mbps": (
        "MB/s",
        "mean PCIe transmit throughput of the GPU (NVML KB/s / 1000)",
    ),
    "host_cpu_mean_pct": ("%", "mean busy % over the usable CPUs and time"),
    "host_cpu_busiest_core_pct": ("%", "time-mean busy % of the busiest usable CPU"),
    "host_iowait_frac": ("fraction", "share of CPU time spent waiting for I/O (system-wide)"),
    "host_steal_frac": (
        "fraction", "share of CPU time the hypervisor gave to something else while the job "
        "ran (steal, system-wide; a virtual machine's CPUs shared with its neighbours)"),
    "proc_cpu_mean_pct": ("%", "mean CPU of the training process, % of one core (can exceed 100)"),
    "proc_rss_max_bytes": ("bytes", "peak resident memory of the training process"),
    "workers_count": ("count", "most DataLoader worker processes alive at once"),
    "workers_cpu_mean_pct": ("%", "mean CPU per DataLoader worker, % of one core"),
    "workers_cpus": ("CPUs", "CPUs' worth of work the DataLoader workers did together: the "
                             "mean per worker times the most alive at once"),
    "host_cpu_others_cpus": (
        "CPUs",
        "CPUs' worth of work that processes other than the training process and its "
        "DataLoader workers (under torchrun, the job's other ranks on this host with "
        "theirs) did while it ran: the usable CPUs' busy time less theirs, mean "
        "over the samples (what a busy machine costs the run, apart from its own load)",
    ),
    "sample_count": ("count", "sampler rows the values above were computed from"),
}


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _finite(xs: Sequence[Any]) -> list[float]:
    return [
        float(x)
        for x in xs
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))
    ]


def _mean(xs: Sequence[Any]) -> float | None:
    v = _finite(xs)
    return sum(v) / len(v) if v else None


def _max(xs: Sequence[Any]) -> float | None:
    v = _finite(xs)
    return max(v) if v else None


def _window(
    series: dict[str, list[Any]] | None, marks: dict[str, Any]
) -> dict[str, list[Any]] | None:
    """The rows of a series inside the profiled window, or all rows (see module doc)."""
    if not isinstance(series, dict) or not isinstance(series.get("t"), list) or not series["t"]:
        return None
    lo, hi = marks.get("active_start"), marks.get("active_end")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return series
    idx = [i for i, t in enumerate(series["t"]) if isinstance(t, (int, float)) and lo <= t <= hi]
    if len(idx) < MIN_WINDOW_SAMPLES:
        return series
    return {k: [v[i] for i in idx] if isinstance(v, list) else v for k, v in series.items()}


def _col(s: dict[str, list[Any]] | None, name: str) -> list[Any]:
    if s is None:
        return []
    col = s.get(name)
    return col if isinstance(col, list) else []


def _to_int(x: float | None) -> int | None:
    return int(x) if x is not None else None


def samples_metrics(samples: dict[str, Any] | None) -> dict[str, object]:
    """The CATALOG names from a samples dict; all None when nothing was sampled."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    if not isinstance(samples, dict):
        return out
    series = _dict(samples.get("series"))
    marks = _dict(samples.get("marks"))
    info = _dict(samples.get("info"))
    rows = 0

    gpu = _window(series.get("gpu"), marks)
    gpu_info = _dict(info.get("gpu"))
    if gpu is not None:
        rows += len(gpu["t"])
        out["gpu_util_mean_pct"] = _mean(_col(gpu, "util_pct"))
        out["gpu_mem_used_max_bytes"] = _to_int(_max(_col(gpu, "mem_used_bytes")))
        out["gpu_sm_clock_mean_mhz"] = _mean(_col(gpu, "sm_clock_mhz"))
        out["gpu_power_mean_w"] = _mean(_col(gpu, "power_w"))
        rx, tx = _mean(_col(gpu, "pcie_rx_kbps")), _mean(_col(gpu, "pcie_tx_kbps"))
        out["gpu_pcie_rx_mean_mbps"] = rx / 1000.0 if rx is not None else None
        out["gpu_pcie_tx_mean_mbps"] = tx / 1000.0 if tx is not None else None
    total = gpu_info.get("mem_total_bytes")
    out["gpu_mem_total_bytes"] = (
        total if isinstance(total, int) and not isinstance(total, bool) else None
    )

    host = _window(series.get("host"), marks)
    if host is not None:
        rows += len(host["t"])
        per_core: dict[int, list[float]] = {}
        for row in _col(host, "cpu_pct"):
            if isinstance(row, list):
                for i, v in enumerate(row):
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        per_core.setdefault(i, []).append(float(v))
        every = [v for vs in per_core.values() for v in vs]
        out["host_cpu_mean_pct"] = sum(every) / len(every) if every else None
        core_means = [sum(vs) / len(vs) for vs in per_core.values() if vs]
        out["host_cpu_busiest_core_pct"] = max(core_means) if core_means else None
        iow = _mean(_col(host, "iowait_pct"))
        out["host_iowait_frac"] = iow / 100.0 if iow is not None else None
        steal = _mean(_col(host, "steal_pct"))
        out["host_steal_frac"] = steal / 100.0 if steal is not None else None
        out["proc_cpu_mean_pct"] = _mean(_col(host, "proc_cpu_pct"))
        out["proc_rss_max_bytes"] = _to_int(_max(_col(host, "proc_rss_bytes")))
        counts = _col(host, "workers_count")
        alive = _to_int(_max(counts))
        out["workers_count"] = alive
        per_worker: list[float] = []
        for cpu, n in zip(
            _col(host, "workers_cpu_pct"), _col(host, "workers_cpu_n") or counts, strict=False
        ):
            if isinstance(cpu, (int, float)) and isinstance(n, int) and n > 0:
                per_worker.append(float(cpu) / n)
        mean = sum(per_worker) / len(per_worker) if per_worker else None
        out["workers_cpu_mean_pct"] = mean
        out["workers_cpus"] = mean / 100 * alive if mean is not None and alive else None
        out["host_cpu_others_cpus"] = _others(host)
    out["sample_count"] = rows if (gpu is not None or host is not None) else None
    return out


#: the host samples' columns of the job's own CPU beside the training process's
#: (``proc_cpu_pct``): its DataLoader workers, the other ranks on the host (torchrun), its
#: other descendants (torch.compile's workers), each % of one core
JOB_CPU_COLUMNS = ("workers_cpu_pct", "peers_cpu_pct", "kids_cpu_pct")


def _others(host: dict[str, Any]) -> float | None:
    """The usable CPUs' busy time less the training process's, its workers', its other
    descendants' (``torch.compile``'s workers) and (under torchrun) the other ranks' on this
    host (in CPUs, mean over the samples that have the first two, at least 0; a worker,
    descendant or rank column missing is none)."""
    got: list[float] = []
    job = [_col(host, k) for k in JOB_CPU_COLUMNS]
    for i, (cores, proc) in enumerate(zip(_col(host, "cpu_pct"), _col(host, "proc_cpu_pct"),
                                          strict=False)):
        busy = _finite(cores) if isinstance(cores, list) else []
        if not busy or not isinstance(proc, (int, float)) or isinstance(proc, bool):
            continue
        more = [c[i] for c in job if i < len(c)]
        own = float(proc) + sum(float(x) for x in more
                                if isinstance(x, (int, float)) and not isinstance(x, bool))
        got.append((sum(busy) - own) / 100.0)
    # the mean clamped, not each tick: readings a moment apart, and the CPU of descendants
    # reaped in lumps, put the job's own above the busy CPUs in one tick and below in another
    return round(max(sum(got) / len(got), 0.0), 3) if got else None


def samples_notes(samples: dict[str, Any] | None) -> list[str]:
    """Lines for the report: GPU sampling not available (and why), one per sampler error."""
    if not isinstance(samples, dict):
        return []
    notes: list[str] = []
    unavailable = _dict(samples.get("unavailable"))
    for name, reason in unavailable.items():
        what = "GPU" if name == "gpu" else f"{name.capitalize()}"
        notes.append(f"{what} sampling not available: {reason}")
    for err in samples.get("errors") or []:
        if isinstance(err, dict):
            notes.append(
                f"{err.get('sampler', '?')} sampler failed and was stopped: {err.get('error', '?')}"
            )
    return notes
