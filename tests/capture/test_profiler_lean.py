"""The profiler window's lean options: no external correlation where only the CPU is
profiled; a device keeps torch's defaults; the trace still holds what the analysis reads."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity

from diagnose.capture.profiler import WindowProfiler, lean_config


def test_lean_config_only_without_a_device() -> None:
    assert lean_config([ProfilerActivity.CPU]) is not None
    assert lean_config([ProfilerActivity.CPU, ProfilerActivity.CUDA]) is None


def test_cpu_window_trace_has_ops_and_steps(tmp_path: Path) -> None:
    prof = WindowProfiler(tmp_path, wait=0, warmup=1, active=2)
    prof.start()
    x = torch.randn(16, 16)
    for _ in range(3):
        (x @ x).relu().sum()
        prof.step()
    assert prof.finished and not prof.errors
    (path,) = tmp_path.glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    names = [str(e.get("name")) for e in events]
    assert any(e.get("cat") == "cpu_op" for e in events)
    assert sum(n.startswith("ProfilerStep#") for n in names) == 2
    assert "aten::mm" in names and "aten::relu" in names
