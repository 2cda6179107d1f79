"""A trace without ProfilerStep spans (a plain ``prof.export_chrome_trace`` of a loop that
never calls ``prof.step()``): its steps are the DataLoader's batches, one asked for to the
next; with no DataLoader either, the whole trace is one window."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tests.tracebuilder as tb
from diagnose.analysis import analyze


def _loop(with_loader: bool, steps: int = 6, optimizer: bool = False) -> tb.TraceBuilder:
    b = tb.TraceBuilder(device=None)
    for _ in range(steps):  # no `with b.step()`: no ProfilerStep span
        if with_loader:
            b.dataloader(1000.0)
        b.cpu(3000.0, "aten::addmm")
        if optimizer:
            b.optimizer_step(kernels=5)
        b.idle(50.0)
    return b


def test_steps_from_the_dataloaders_batches(tmp_path: Path) -> None:
    r = analyze(_loop(True).write(tmp_path / "x.json"))
    m = r.metrics
    assert m["steps_source"] == "DataLoader batches" and m["step_count"] == 5
    assert m["step_time_median_ms"] == pytest.approx(4.05, rel=0.02)  # 1 + 3 + 0.05 ms
    assert m["dataloader_share"] == pytest.approx(1 / 4.05, rel=0.03)
    assert any("from the DataLoader's batches" in n for n in r.notes)


def test_no_loader_no_steps_is_one_window(tmp_path: Path) -> None:
    r = analyze(_loop(False).write(tmp_path / "y.json"))
    assert r.metrics["steps_source"] == "whole trace" and r.metrics["step_count"] == 1


def test_steps_from_the_optimizers_steps_without_a_loader(tmp_path: Path) -> None:
    # a loop over batches built by hand: each optimizer.step() ends a step
    r = analyze(_loop(False, optimizer=True).write(tmp_path / "z.json"))
    m = r.metrics
    assert m["steps_source"] == "optimizer steps" and m["step_count"] == 5
    one = analyze(_loop(False, steps=1, optimizer=True).write(tmp_path / "one.json"))
    assert one.metrics["steps_source"] == "whole trace"  # one step's end: no step between
    assert m["step_time_median_ms"] > 3.0  # the 3 ms op and the optimizer's own time


def test_uneven_profiled_steps_are_noted(tmp_path: Path) -> None:
    # two of five profiled steps 20x the others (a busy host): the window's shares weigh
    # them, and the report says so; even steps give no such note
    def trace(slow: tuple[int, ...]) -> tb.TraceBuilder:
        b = tb.TraceBuilder(device=None)
        for i in range(5):
            with b.step():
                b.cpu(2000.0 * (20 if i in slow else 1), "aten::addmm")
        return b

    r = analyze(trace((0, 1)).write(tmp_path / "uneven.json"))
    assert any(n.startswith("the profiled steps are uneven: 2 of 5 took") for n in r.notes)
    even = analyze(trace(()).write(tmp_path / "even.json"))
    assert not any("uneven" in n for n in even.notes)
    # one slow step is a time, not a range ("578.4-578.4 ms", a new user's report)
    one = analyze(trace((2,)).write(tmp_path / "one.json"))
    (note,) = [n for n in one.notes if n.startswith("the profiled steps are uneven")]
    assert re.search(r": 1 of 5 took [\d.,]+ ms against", note), note
