"""WindowProfiler.restart_wait: the steps before the window start over at the next step
(the session found a better step signal), in the wait and in the warmup; never once the
window records."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from diagnose.capture.profiler import WindowProfiler  # noqa: E402
from diagnose.runfolder import trace_files  # noqa: E402


def _profiled(run_dir: Path) -> list[int]:
    (f,) = trace_files(run_dir)
    with gzip.open(f, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sorted(int(m.group(1)) for e in events if e.get("ph") == "X"
                  for m in [re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))] if m)


def _work() -> None:
    (torch.randn(32, 32) @ torch.randn(32, 32)).sum()


@pytest.mark.parametrize("restart_in", ["wait", "warmup"])
def test_restart_before_the_window(tmp_path: Path, restart_in: str) -> None:
    prof = WindowProfiler(tmp_path, wait=2, warmup=1, active=2)
    prof.start()
    phases = []
    for i in range(20):
        _work()
        if i == (1 if restart_in == "wait" else 2):
            assert prof.phase == restart_in and prof.restart_wait() == restart_in
        phases.append(prof.phase)
        prof.step()
        if prof.finished:
            break
    # the step running at the restart is the last before it; then the phase runs again
    if restart_in == "wait":
        assert phases == ["wait", "wait", "wait", "wait", "warmup", "active", "active"]
    else:
        assert phases == ["wait", "wait", "warmup", "warmup", "active", "active"]
    assert prof.window_complete and len(_profiled(tmp_path)) == 2


def test_no_restart_once_the_window_records(tmp_path: Path) -> None:
    prof = WindowProfiler(tmp_path, wait=0, warmup=0, active=3)
    prof.start()
    assert prof.phase == "active" and prof.restart_wait() is None
    for _ in range(3):
        _work()
        prof.step()
    assert prof.window_complete and len(_profiled(tmp_path)) == 3
