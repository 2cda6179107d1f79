"""Shared fixtures: the real traces in ../shared/traces (skipped with a reason where absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = Path(os.environ.get("TORCH_DIAGNOSE_SHARED_TRACES", REPO.parent / "shared" / "traces"))


def shared_trace(rel: str) -> Path:
    """Path of a real trace under ../shared/traces; skips the test if it is not there."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"real trace {rel} not available ({SHARED_TRACES} absent)")
    return p


def all_shared_traces() -> list[Path]:
    if not SHARED_TRACES.is_dir():
        return []
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


@pytest.fixture
def shared() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} absent: real-trace tests need ../shared/traces")
    return SHARED_TRACES


@pytest.fixture(scope="session", autouse=True)
def no_stray_processes():
    """The whole suite must leave no child process behind (servers, workers, torchrun)."""
    import gc
    import time

    import psutil

    yield
    gc.collect()  # DataLoader iterators kept alive by stored tracebacks
    me = psutil.Process()
    deadline = time.monotonic() + 15
    kids = me.children(recursive=True)
    while kids and time.monotonic() < deadline:
        time.sleep(0.2)
        kids = [k for k in me.children(recursive=True) if k.is_running()
                and k.status() != psutil.STATUS_ZOMBIE]
    assert not kids, f"the test suite left processes behind: {kids}"


@pytest.fixture
def forkable(monkeypatch):
    """Tests of the worker-pool paths run as the CLI does, in a process with no other
    Python thread: earlier tests leave library threads behind (the notebook test's
    Jupyter client keeps its channel threads), which would make fork_pool refuse."""
    from diagnose.trace import parallel

    monkeypatch.setattr(parallel, "_other_threads", lambda: False)


@pytest.fixture
def every_probe(monkeypatch):
    """The probes after the loop all run, whatever they cost and whatever the loop waited
    on: for tests of what the probes measure (the budget's own tests are in
    tests/capture/probes/test_budget.py and tests/session/test_after_loop_budget.py)."""
    import diagnose.capture.probes.budget as budget
    import diagnose.session.after_loop as after_loop

    monkeypatch.setattr(budget, "PROBE_SHARE", 1e6)
    monkeypatch.setattr(after_loop, "unneeded", lambda *a, **k: {})
