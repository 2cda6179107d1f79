"""The trace builder's own oracle (``measure()``) and the product's metrics agree on every
scenario, in both naming styles, the GPU idle split included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from diagnose.metrics.core import compute
from diagnose.trace import read_trace
from tests import tracebuilder as tb

# oracle key -> (the product's metric, or how to read it from the metrics; tolerance)
Read = Callable[[dict[str, Any]], Any]
PAIRS: dict[str, tuple[Read, float]] = {
    "window_us": (lambda m: m["window_ms"] * 1e3, 0.5),  # window_ms is rounded to 1 us
    "steps": (lambda m: m["step_count"], 0),
    "step_ms": (lambda m: m["step_time_mean_ms"], 5.01e-4),  # rounded to 1 us
    "gpu_busy": (lambda m: m["gpu_busy_frac"], 2e-6),
    "dataloader": (lambda m: m["dataloader_share"], 2e-6),
    "memcpy_host": (lambda m: m["memcpy_api_host_frac"], 2e-6),
    "sync_host": (lambda m: m["sync_frac"], 2e-6),
    "nccl": (lambda m: m["comm_frac"], 2e-6),
    "comm_overlap": (lambda m: m["comm_overlap_frac"], 2e-6),
    "gemm_share": (lambda m: m["gemm_kernel_frac"], 2e-6),
    "gemm_fp32_of_gemm": (lambda m: m["gemm_fp32_frac"], 2e-6),
    "gemm_fp32_share": (lambda m: None if m["gemm_fp32_ms_per_step"] is None
                        else m["gemm_fp32_ms_per_step"] / m["kernel_ms_per_step"], 1e-4),
    "kernels_per_step": (lambda m: m["kernels_per_step"], 0.05),
    "optimizer_kernels_per_step": (lambda m: m["optimizer_launches_per_step"], 0.05),
    "zero_fill_per_step": (lambda m: m["zero_grad_fill_ops_per_step"], 0.05),
    "max_reserved_frac": (lambda m: m["gpu_mem_peak_frac"], 2e-6),
    "gpu_idle": (lambda m: m["gpu_idle_frac"], 2e-6),
    "idle_input": (lambda m: m["idle_input_frac"], 2e-6),
    "idle_sync": (lambda m: m["idle_sync_frac"], 2e-6),
    "idle_launch": (lambda m: m["idle_launch_frac"], 2e-6),
    "idle_other": (lambda m: m["idle_other_frac"], 2e-6),
    "idle_copy_sync": (lambda m: m["idle_copy_sync_frac"], 2e-6),
    "idle_graph_launch": (lambda m: m["idle_graph_launch_frac"], 2e-6),
}

CASES = [(name, legacy) for name in sorted(tb.SCENARIOS) for legacy in (False, True)]


@pytest.mark.parametrize(("name", "legacy"), CASES,
                         ids=[f"{n}{'-legacy' if leg else ''}" for n, leg in CASES])
def test_oracle_and_metrics_agree(tmp_path, name, legacy):
    b = tb.SCENARIOS[name](legacy=legacy)
    want = tb.measure(b.build())
    assert set(want) == set(PAIRS), "every oracle figure is compared"
    m = compute(read_trace(b.write(tmp_path / f"{name}.pt.trace.json.gz"))).values
    for key, (read, tol) in PAIRS.items():
        got = read(m) if key != "window_us" or m["window_ms"] is not None else None
        if want[key] is None or got is None:
            assert want[key] is None and got is None, (key, want[key], got)
        else:
            assert got == pytest.approx(want[key], abs=tol), key


def test_the_idle_split_adds_up():
    """Each scenario's idle time is split whole: input + sync + launch + other = idle."""
    for name, fn in tb.SCENARIOS.items():
        m = tb.measure(fn().build())
        if m["gpu_idle"] is None:
            assert name == "cpu_only"
            continue
        parts = m["idle_input"] + m["idle_sync"] + m["idle_launch"] + m["idle_other"]
        assert parts == pytest.approx(m["gpu_idle"], abs=1e-9), name
        assert m["gpu_idle"] + m["gpu_busy"] == pytest.approx(1.0, abs=1e-9), name


def test_each_symptom_shows_in_its_own_idle_share():
    """The scenarios plant one cause each: the oracle's idle split says which."""
    split = {n: tb.measure(fn().build()) for n, fn in tb.SCENARIOS.items()}
    assert split["dataloader_bound"]["idle_input"] > 0.3
    assert split["sync_bound"]["idle_sync"] > 0.1
    assert split["launch_bound"]["idle_launch"] > 0.5
    assert split["eager_decode"]["idle_launch"] > 0.5
    # a CUDA graph queues its kernels at once: its gaps are the device's own, not launches
    assert split["graph_decode"]["idle_other"] > 0.1 > 0.01 > split["graph_decode"]["idle_launch"]
    pc = split["pageable_copies"]
    assert pc["idle_copy_sync"] == pc["idle_sync"] > 0
    for quiet in ("healthy", "fp32_gemm", "memory_pressure"):
        assert split[quiet]["gpu_idle"] < 0.05, quiet
