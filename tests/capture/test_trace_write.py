"""The window's trace as the profiler stops (diagnose/capture/profiler.py): written under
torch's own file name, deflated in one call; and the loop's wait for it, reported."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import torch

from diagnose.capture.profiler import write_trace
from diagnose.report.text import step_lines


def test_the_trace_is_written_gzipped_under_torchs_name(tmp_path: Path) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.mm(torch.randn(8, 8), torch.randn(8, 8))
    out = write_trace(prof, tmp_path / "run", "rank0")
    assert re.fullmatch(r"rank0\.\d+\.pt\.trace\.json\.gz", out.name)
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # the text removed
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert any(e.get("name") == "aten::mm" for e in doc["traceEvents"])


def test_the_loops_wait_for_the_window_to_end_is_stated():
    """A wait of 100 ms or more as the window ended is the tool's, and says so; a shorter
    one is not worth a line."""
    m = {"step_count": 5, "steps_source": "ProfilerStep", "step_time_median_ms": 20.0,
         "step_time_p90_ms": 22.0, "probes_ms_total": 400.0,
         "capture_profiler_close_ms": 3100.0}
    window = step_lines(m)[1] or ""
    assert "the loop waited 3.1 s as the window ended" in window
    short = step_lines({**m, "capture_profiler_close_ms": 40.0})[1] or ""
    assert "window ended" not in short
