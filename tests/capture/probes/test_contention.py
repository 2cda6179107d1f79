"""The model's work beside busy processes (diagnose/capture/probes/contention.py, timed in
the threads probe's rounds: compute.time_threads_and_busy): the busy processes are real,
and gone afterwards."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from diagnose.capture.probes import common
from diagnose.capture.probes.compute import time_threads_and_busy

ROOT = Path(__file__).resolve().parents[3]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Dropout(0.5),
                         nn.Linear(64, 4)).train()


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_the_work_beside_busy_processes_is_timed_and_they_are_gone():
    """Torch's threads beside one busy process more than the CPUs they leave:
    real processes (this one's children while they run, none after), each ratio the work
    beside them over the same work alone, and the run left as it was (buffers, RNG,
    threads). With threads and busy processes over the CPUs the ops wait for descheduled
    threads; their size is the host's, so here only that each is a positive, finite
    ratio (a busy host can slow the timing alone as much as the timing beside)."""
    import math

    import psutil

    m = _model()
    x = torch.randn(256, 32)
    bufs = [b.clone() for b in m.buffers()]
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    cpus = threads  # the busy processes then always oversubscribe torch's threads
    spent = common.probe_clock()
    alone, out = time_threads_and_busy(m, ((x,), {}), cpus)
    assert alone is not None and alone["work_ms"] > 0 and alone["work_1thread_ms"] > 0
    assert out is not None and out["torch_threads"] == threads and out["work_ms"] > 0
    assert out["work_ms"] == alone["work_ms"]  # the work alone, timed once for both
    assert set(out["busy_ratio"]) == {"1"}
    assert all(r > 0 and math.isfinite(r) for r in out["busy_ratio"].values())
    assert not psutil.Process().children()
    assert all(torch.equal(b, s) for b, s in zip(m.buffers(), bufs, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads
    # each part's own time on the probes' clock
    assert spent["threads"] > 0 and spent["threads_busy"] > 0


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_without_cpus_only_the_threads_are_timed():
    """No CPU count (a job without a DataLoader): the threads timing alone, no busy
    process started, no busy time on the clock."""
    import psutil

    spent = common.probe_clock()
    alone, busy = time_threads_and_busy(_model(), ((torch.randn(64, 32),), {}), None)
    assert alone is not None and busy is None
    assert "threads_busy" not in spent and spent["threads"] > 0
    assert not psutil.Process().children()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_stopped_busy_processes_go_with_a_killed_parent(tmp_path: Path) -> None:
    """A training process killed with SIGKILL while its busy processes are stopped (the
    timing pauses them between rounds) takes them with it: the kernel kills them with
    their parent."""
    import os
    import signal
    import subprocess

    import psutil

    script = tmp_path / "parent.py"
    script.write_text("import sys, time\n"
                      "from diagnose.capture.probes.contention import spinners\n"
                      "print(*[p.pid for p in spinners(2)], flush=True)\n"
                      "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
    try:
        assert parent.stdout is not None
        pids = [int(x) for x in parent.stdout.readline().split()]
        assert len(pids) == 2
        # SIGSTOP is delivered when the kernel next schedules the process: wait for it
        deadline = time.monotonic() + 10
        while (stopped := [psutil.Process(p).status() for p in pids]) != [
                psutil.STATUS_STOPPED] * 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stopped == [psutil.STATUS_STOPPED] * 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_the_work_beside_busy_processes_is_not_timed_where_it_cannot_tell():
    """One thread (no parallel ops to wait in), no inputs, or so many CPUs beyond torch's
    threads that the busy processes would be too many: None."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert time_threads_and_busy(_model(), ((torch.randn(4, 32),), {}), 2) == (None, None)
    finally:
        torch.set_num_threads(before)
    assert time_threads_and_busy(_model(), None, 2) == (None, None)
    alone, busy = time_threads_and_busy(_model(), ((torch.randn(4, 32),), {}), 64)
    assert busy is None and (alone is not None or torch.get_num_threads() < 2)
