"""Interval arithmetic against a brute-force oracle, and metric semantics on built traces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose import analyze
from diagnose.metrics import CATALOG
from diagnose.metrics import intervals as iv
from tests import tracebuilder as tb

spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=25)


def _grid(pairs, lo=0, hi=260):
    """Brute force on a 1-unit grid: which unit cells are covered."""
    cov = np.zeros(hi - lo, dtype=bool)
    for s, d in pairs:
        cov[s:s + d] = True
    return cov


def _u(pairs):
    s = np.array([p[0] for p in pairs], dtype=float)
    e = np.array([p[0] + p[1] for p in pairs], dtype=float)
    return iv.union(s, e)


@settings(max_examples=300, deadline=None)
@given(spans, spans, st.integers(0, 250), st.integers(0, 250))
def test_intervals_match_brute_force(a, b, x0, x1):
    lo, hi = min(x0, x1), max(x0, x1)
    ua, ub = _u(a), _u(b)
    ga, gb = _grid(a), _grid(b)
    assert iv.measure(ua) == ga.sum()
    assert np.all(ua[0][1:] > ua[1][:-1])  # disjoint and sorted
    assert float(iv.measure_between(ua, lo, hi)) == ga[lo:hi].sum()
    assert iv.overlap(ua, ub) == (ga & gb).sum()
    assert iv.measure(iv.merge(ua, ub)) == (ga | gb).sum()
    gs, ge = iv.gaps(ua, lo, hi)
    assert float(np.sum(ge - gs)) == (~ga[lo:hi]).sum()


def test_time_between_steps_does_not_count(tmp_path):
    b = tb.TraceBuilder()
    for _ in range(4):
        with b.step():
            for _ in range(10):
                b.kernel(dur=1000.0, launch_dur=5.0)
            b.sync()
        b.idle(50_000.0)  # e.g. evaluation or logging between profiled steps: not a step
    r = analyze(b.write(tmp_path / "gaps.json.gz"))
    m = r.metrics
    assert m["gpu_busy_frac"] > 0.9
    assert m["window_ms"] == pytest.approx(sum(r.series["step_ms"]), rel=1e-6)
    assert not [f for f in r.findings if f.severity != "info"], r.render_text()
    # the GPU keeps up (the loop syncs): its work per step is the step, and no note says
    # the host ran ahead, though 50 ms pass between the steps
    assert m["device_step_ms"] == pytest.approx(10.0, rel=0.02)
    assert not any("ran ahead" in n for n in r.notes)


def test_missing_inputs_are_none_not_zero(tmp_path):
    r = analyze(tb.cpu_only().write(tmp_path / "cpu.json.gz"))
    m = r.metrics
    for name in ("gpu_busy_frac", "idle_sync_frac", "memcpy_h2d_count", "kernels_per_step",
                 "gemm_fp32_frac", "comm_overlap_frac", "gpu_mem_peak_frac"):
        assert m[name] is None, name
    assert m["dataloader_share"] is not None  # the CPU-only run still has a DataLoader


def test_every_metric_is_documented(tmp_path):
    r = analyze(tb.healthy().write(tmp_path / "h.json.gz"))
    undocumented = [k for k in r.metrics if k not in CATALOG]
    assert not undocumented
    for name, (_unit, doc) in CATALOG.items():
        assert doc, name


def test_copies_by_direction_and_kind(tmp_path):
    r = analyze(tb.pageable_copies().write(tmp_path / "p.json.gz"))
    m = r.metrics
    assert m["memcpy_h2d_pageable_count"] == m["memcpy_h2d_count"] > 0
    assert m["memcpy_h2d_pinned_count"] == 0
    assert m["memcpy_h2d_pageable_bytes"] > 0 and m["memcpy_h2d_pageable_gbps"] > 0
    h = analyze(tb.healthy().write(tmp_path / "h.json.gz")).metrics
    assert h["memcpy_h2d_pinned_count"] > 0 and h["memcpy_h2d_pageable_count"] == 0


# Key metrics of real traces, pinned when the metrics were split by area (every metric of
# every shared, sample and test-data trace was checked identical then): a change here is a
# change of what the tool reports, to be made on purpose.
PINNED = {
    "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": {
        "step_time_mean_ms": 78.828, "gpu_busy_frac": 0.974417, "idle_input_frac": 0.0,
        "idle_sync_frac": 0.0, "idle_launch_frac": 0.014166, "idle_other_frac": 0.011417,
        "share_kernel": 0.9652, "gemm_fp32_frac": 1.0, "optimizer_stake_frac": 0.011847,
        "kernels_per_step": 703.4, "is_training": True, "dataloader_share": None},
    "kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz": {
        "step_time_mean_ms": 174.829, "gpu_busy_frac": 0.560205, "idle_input_frac": 0.33897,
        "idle_sync_frac": 0.002518, "idle_launch_frac": 0.092582, "idle_other_frac": 0.005726,
        "dataloader_share": 0.396378, "share_kernel": 0.548747, "memcpy_h2d_pageable_count": 12,
        "optimizer_stake_frac": 0.092582, "kernels_per_step": 1367.8},
    "hta/cpu_only__rank-34.OLDv.pt.trace.json.gz": {
        "step_time_mean_ms": 256.988, "gpu_busy_frac": None, "share_kernel": None,
        "optimizer_stake_frac": 0.041249, "is_training": True},
}


@pytest.mark.shared_traces
@pytest.mark.parametrize("rel", sorted(PINNED))
def test_key_metrics_of_real_traces_are_pinned(rel):
    from diagnose.metrics.core import compute
    from diagnose.trace import read_trace
    from tests.conftest import shared_trace

    m = compute(read_trace(shared_trace(rel))).values
    for name, want in PINNED[rel].items():
        assert m[name] == (pytest.approx(want, abs=1e-9) if isinstance(want, float) else want), name


def _behind(tmp_path, keep_warmup_kernels: bool):
    """A loop that never syncs: the host launches two warm-up steps' long kernels, then
    three profiled steps whose kernels queue behind them. The profiler recorded none of
    the warm-up launches (and, where ``keep_warmup_kernels`` is False, none of their
    kernels either: they started before it did)."""
    import gzip
    import json

    b = tb.TraceBuilder()
    for _ in range(2):  # warm-up, before the window
        for _ in range(4):
            b.kernel(dur=3000.0, launch_dur=5.0)
        b.idle(400.0)
    first = b.now
    for _ in range(3):
        with b.step():
            for _ in range(4):
                b.kernel(dur=3000.0, launch_dur=5.0)
            b.idle(400.0)
    doc = b.build()
    pre_launch = {e["args"]["correlation"] for e in doc["traceEvents"]
                  if e.get("cat") == "cuda_runtime" and e["ts"] < first}
    doc["traceEvents"] = [
        e for e in doc["traceEvents"]
        if not (e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in pre_launch)
        and not (e.get("cat") == "kernel" and e["args"].get("correlation") in pre_launch
                 and not keep_warmup_kernels)
        and not (e.get("ph") in ("s", "f") and e.get("id") in pre_launch)]
    path = tmp_path / "behind.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return analyze(path)


@pytest.mark.parametrize("keep_warmup_kernels", [True, False])
def test_the_gpus_backlog_from_before_the_window_is_busy_time(tmp_path, keep_warmup_kernels):
    """The window's first kernels wait behind the warm-up's (recorded without their
    launches, or not at all): the GPU is working through them, not idle for want of work.
    An H200 trace of samples/healthy.py had its first 4.9 ms counted as idle, and a
    warning (samples/traces/gpu_h200/healthy.pt.trace.json.gz)."""
    r = _behind(tmp_path, keep_warmup_kernels)
    m = r.metrics
    assert m["gpu_busy_frac"] > 0.95, m["gpu_busy_frac"]
    assert m["gpu_idle_frac"] < 0.05
    assert not [f for f in r.findings if f.severity != "info"], r.render_text()


def test_a_host_ahead_of_the_gpu_is_said_and_the_model_runs_at_the_gpus_pace(tmp_path):
    """Each step launches 12 ms of kernels in a 0.4 ms host step: the job runs at the GPU's
    pace (the healthy sample's H100 and H200 traces: 7 ms of GPU work a step in 2-3 ms
    host steps)."""
    r = _behind(tmp_path, keep_warmup_kernels=False)
    m = r.metrics
    assert m["device_step_ms"] == pytest.approx(12.0, rel=0.01)
    assert m["step_time_mean_ms"] < 1.0
    assert any(n.startswith("the host ran ahead of the GPU: each profiled step launched 12.00 ms")
               for n in r.notes), r.notes
    a = getattr(r, "analysis", r)
    assert a.predictor.base_ms == pytest.approx(12.0, rel=0.01)


def test_kernels_launched_a_step_are_its_launch_calls(tmp_path):
    """A host that runs ahead of the GPU launches 4 kernels a step whose kernels run after
    its window ends: the step launched 4, whether or not they ran inside it (a ResNet-50
    trace read 1,390 kernels run in the window against 1,478 launch calls a step)."""
    m = _behind(tmp_path, keep_warmup_kernels=False).metrics
    assert m["launched_kernels_per_step"] == m["launches_per_step"] == 4.0
    assert m["kernels_per_step"] < 4.0


@pytest.mark.parametrize("name", ["cudaLaunchKernelExC_v11060", "hipExtModuleLaunchKernel",
                                  "hipModuleLaunchCooperativeKernel"])
def test_every_launch_call_is_a_launch(tmp_path, name):
    """Newer CUDA names its launch calls with a version suffix, and ROCm has its own: each
    counts as a launch (AMD's MI250 trace launches with hipExtModuleLaunchKernel)."""
    import gzip
    import json

    b = tb.TraceBuilder()
    for _ in range(3):
        with b.step():
            for _ in range(5):
                b.kernel(dur=4.0, launch_dur=6.0)
            b.idle(50.0)
    doc = b.build()
    for e in doc["traceEvents"]:
        if e.get("name") == "cudaLaunchKernel":
            e["name"] = name
    path = tmp_path / "renamed.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    m = analyze(path).metrics
    assert m["launches_per_step"] == m["launched_kernels_per_step"] == 5.0
    assert m["launch_api_median_us"] == pytest.approx(6.0)
