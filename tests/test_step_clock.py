"""Numbers users can trust: the step time the report leads with is the unprofiled one, the
profiler's overhead is measured and said, and a window cut short by the end of the loop
never turns the loop's tail into findings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

from diagnose import analyze  # noqa: E402
from diagnose.analysis import capture_notes  # noqa: E402
from diagnose.metrics.context import context_metrics  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.datasets import Pairs, train  # noqa: E402


def _make(ds: Any, batch_size: int = 8) -> tuple[nn.Module, Any, DataLoader]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(ds, batch_size=batch_size)


def test_unprofiled_steps_are_timed_and_lead_the_report(tmp_path: Path) -> None:
    # a real loader whose samples take time: the DataLoader wait is measured by the hooks
    model, opt, loader = _make(Pairs(n=400, delay_s=0.0005))
    with diagnose(model, loader, steps=3, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        n = train(model, opt, loader, d)
    # wait 1 + warmup 1 + 3 profiled, then 3 + 1 unprofiled steps before d.done
    assert n == 10
    clock = load_context(d.run_dir)["capture"]["step_clock"]
    assert clock["phase"] == ["wait", "warmup"] + ["active"] * 3 + ["after"] * 4
    assert all(ms > 0 for ms in clock["ms"])
    # each step pulled one batch of 8 samples sleeping 0.5 ms each: the wait is seen
    assert all(dl >= 8 * 0.5 for dl in clock["dataloader_ms"][1:])
    m = d.report.metrics
    assert m["step_time_unprofiled_steps"] == 3  # the first step after the window left out
    after = sorted(clock["ms"][-3:])
    assert m["step_time_unprofiled_median_ms"] == pytest.approx(after[1], abs=1e-3)
    assert 0 < m["dataloader_wait_unprofiled_share"] <= 1
    assert m["profiler_overhead_ratio"] == pytest.approx(
        m["step_time_profiled_clock_median_ms"] / m["step_time_unprofiled_median_ms"], rel=1e-2)
    st = d.report.to_json()["step_time"]
    assert st["measured"] == "without the profiler"
    assert st["median_ms"] == m["step_time_unprofiled_median_ms"]
    assert st["profiled_median_ms"] == m["step_time_median_ms"]
    text = d.report.render_text(width=160)
    assert "median without the profiler (3 steps timed by the session)" in text
    assert "of the profiled window" in text
    html = (d.run_dir / "report.html").read_text()
    assert "median without the profiler" in html


def test_saved_trace_says_times_are_as_profiled() -> None:
    trace = Path(__file__).resolve().parents[1] / "samples/traces/cpu/slow_loader.pt.trace.json.gz"
    r = analyze(trace)
    st = r.to_json()["step_time"]
    assert st["measured"] == "as profiled" and st["median_ms"] == r.metrics["step_time_median_ms"]
    assert "as profiled (a saved trace" in r.render_text(width=160)


def test_overhead_note_and_clock_metrics() -> None:
    cap = {"window_complete": True, "whole_steps": 3, "notes": [],
           "step_clock": {"phase": ["wait", "wait", "active", "active", "active", "after",
                                    "after", "after"],
                          "ms": [90.0, 10.0, 30.0, 31.0, 29.0, 80.0, 11.0, 12.0],
                          "dataloader_ms": [5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 5.0, 6.0]}}
    m = context_metrics({"capture": cap})
    # unprofiled: the 2nd wait step and the after steps but their first (10, 11, 12)
    assert m["step_time_unprofiled_median_ms"] == 11.0
    assert m["step_time_unprofiled_steps"] == 3
    assert m["step_time_profiled_clock_median_ms"] == 30.0
    assert m["profiler_overhead_ratio"] == pytest.approx(30 / 11, rel=1e-3)
    assert m["dataloader_wait_unprofiled_share"] == pytest.approx(15 / 33, rel=1e-3)
    notes = capture_notes({"capture": cap}, m)
    assert any("the profiler slowed the profiled steps 2.73x" in n for n in notes)
    cap["step_clock"]["ms"][2:5] = [11.5, 11.0, 12.0]  # a profiler that costs little
    assert capture_notes({"capture": cap}, context_metrics({"capture": cap})) == []
    # no clock (an older run folder): nothing is made up
    assert context_metrics({"capture": {}})["step_time_unprofiled_median_ms"] is None


def test_short_loader_fits_the_schedule_and_says_so(tmp_path: Path) -> None:
    """2 batches (a large batch over a small dataset): the schedule is shortened up front
    so the one profiled step is whole; the loop's tail makes no finding."""
    model, opt, loader = _make(Pairs(n=64, delay_s=0.002), batch_size=32)
    with diagnose(model, loader, out_dir=tmp_path, sample_hz=0, print_report=False) as d:
        train(model, opt, loader)
    r = d.report
    assert r.metrics["step_count"] == 1 and r.metrics["window_complete"] is True
    note = "the DataLoader yields 2 batches per pass, fewer than the schedule needs"
    assert any(note in n for n in r.notes)
    assert any(note in n for n in r.to_json()["notes"])
    assert note in " ".join(r.render_text(width=200).split())
    ctx = load_context(d.run_dir)["capture"]
    assert (ctx["wait"], ctx["warmup"], ctx["active"]) == (0, 0, 1)


class _Stream(IterableDataset):
    """No __len__: the schedule cannot be fitted up front."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            yield torch.randn(16, generator=g), int(torch.randint(0, 3, (1,), generator=g))


# a loop that runs to its end makes a boundary as the final __next__ ends it: n batches
# give n boundaries, wait 1 + warmup 1 of them before the window
@pytest.mark.parametrize(("batches", "whole"), [(5, 3), (2, 0)])
def test_cut_short_window_analyses_whole_steps_only(tmp_path: Path, batches: int,
                                                    whole: int) -> None:
    model, opt, loader = _make(_Stream(8 * batches))
    with diagnose(model, loader, steps=5, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        train(model, opt, loader)
    r = d.report
    ctx = load_context(d.run_dir)["capture"]
    assert ctx["window_complete"] is False and ctx["whole_steps"] == whole
    cut = [n for n in r.notes if "cut short by the end of the loop" in n]
    assert cut, r.notes
    assert "use fewer wait/warmup/steps, or run the loop over more batches" in cut[0]
    assert cut[0] in json.dumps(r.to_json())
    if whole:
        assert r.metrics["step_count"] == whole  # the tail's partial step is left out
        assert any("left out (the loop ended)" in n for n in r.notes)
    else:
        assert r.metrics["step_count"] is None  # no whole step: the trace is not analysed
        assert not [f for f in r.findings if f.category == "input"]
