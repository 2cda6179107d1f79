"""Each epoch's start as the loop waits for it (diagnose/capture/loader_shim.py patches
DataLoader.__iter__ for the session's loader; steps.py records the first batch's wait)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from diagnose.metrics.context import context_metrics  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.capture.test_step_clock import _cap  # noqa: E402
from tests.datasets import Pairs, train  # noqa: E402


def test_each_epoch_start_with_workers_is_timed(tmp_path: Path, every_probe):
    """Epochs of 6 batches from one worker process (not persistent): every new iterator is
    recorded with its iter() time, its first batch's wait and its worker; the metrics give
    the median start and the epoch's length; DataLoader.__iter__ is put back."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs(n=48), batch_size=8, num_workers=1)
    before = DataLoader.__iter__
    with diagnose(model, loader, steps=2, wait=3, clock_steps=6, out_dir=tmp_path,
                  sample_hz=0, print_report=False) as d:
        while not d.done:  # epoch after epoch
            train(model, opt, loader, d)
    assert DataLoader.__iter__ is before
    starts = load_context(d.run_dir)["capture"]["loader_starts"]
    assert len(starts) >= 2
    assert all(s["workers"] == 1 and s["iter_ms"] > 0 and s["first_wait_ms"] > 0
               for s in starts)
    # the clock marks the steps in which a new iterator's first batch came
    clock = load_context(d.run_dir)["capture"]["step_clock"]
    marked = clock["loader_starts"]
    assert len(marked) == len(clock["ms"]) and set(marked) <= {0, 1}
    assert 1 <= sum(marked) <= len(starts)
    m = d.report.metrics
    assert m["dataloader_epoch_batches"] == 6
    assert m["dataloader_start_ms"] > 0 and m["input_worker_start_ms"] > 0
    if m["cpu_count"] >= 2:  # a worker's batch and the CPUs' capacity, after the loop
        assert 1.0 <= m["cpu_capacity"] <= m["cpu_count"]
        assert m["input_worker_batch_ms"] > 0


def test_an_in_process_loader_has_no_worker_start(tmp_path: Path):
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs(n=48), batch_size=8)
    with diagnose(model, loader, steps=2, wait=3, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, print_report=False) as d:
        while not d.done:  # epoch after epoch
            train(model, opt, loader, d)
    starts = load_context(d.run_dir)["capture"]["loader_starts"]
    assert starts and all(s["workers"] == 0 for s in starts)
    assert d.report.metrics["dataloader_start_ms"] is None
    # the CPUs' capacity timed on enter too (a loader's run: its fixes move CPU work)
    ctx = load_context(d.run_dir)
    on_enter, pace = ctx["cpu_capacity_on_enter"], ctx["cpu_pace_ms"]
    if (d.report.metrics["cpu_count"] or 1) >= 2:
        assert 1.0 <= on_enter[1] <= on_enter[0] <= on_enter[2] <= d.report.metrics["cpu_count"]
        assert 0 < pace[1] <= pace[0] <= pace[2] < 1000  # the loop alone: median, least, most
        assert d.report.metrics["host_pace_ms"] == pace[0]
    else:  # one CPU: nothing to share
        assert on_enter is None and pace is None


def test_no_capacity_timing_on_enter_without_a_loader(tmp_path: Path):
    """A loop without a DataLoader has no fix that moves CPU work between processes: the
    CPUs' capacity is not timed on enter."""
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
    with diagnose(model, steps=2, wait=3, clock_steps=4, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        while not d.done:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            d.step()
    assert load_context(d.run_dir)["cpu_capacity_on_enter"] is None


@pytest.mark.parametrize(("on_enter", "loops", "worker", "want", "span"), [
    (None, [(1.6, 1.3, 1.7), (2.0, 1.8, 2.0)], 1.5, 2.0, (1.3, 2.0)),
    (None, [(1.9, 1.9, 1.9), (1.4, 1.2, 1.5)], 1.3, 1.9, (1.2, 1.9)),
    (None, [(1.5, 1.4, 1.6), None], 1.95, 1.95, (1.4, 1.95)),
    (None, [None, None], None, None, (None, None)),
    # every timing after the loop in one slow moment; the one before the loop was not
    ((2.0, 1.98, 2.0), [(1.34, 1.29, 1.37), None], None, 2.0, (1.29, 2.0)),
    ((1.5, 1.4, 1.6), [(1.9, 1.85, 1.95), (1.8, 1.7, 1.9)], None, 1.9, (1.4, 1.95))])
def test_cpu_capacity_is_the_most_of_the_timings_and_their_rounds_span(
        tmp_path: Path, monkeypatch, every_probe, on_enter, loops, worker, want, span):
    """With budget for every probe the CPUs' capacity is timed before the loop, twice after
    it with a Python loop (each with its rounds' span: point, least, most) and once with a
    worker's batches: a timing reads low where something else held a CPU for a moment (on
    a shared host for seconds, so that the timings after the loop may all fall in one), so
    the most of them stands; the least and the most of the timings and their rounds are
    kept for the predictions' ranges."""
    import diagnose.capture.runinfo as runinfo
    import diagnose.session.after_loop as sess

    left = list(loops)
    monkeypatch.setattr(runinfo, "time_cpu_capacity_pace",
                        lambda cpus: None if on_enter is None else (*on_enter, (5.0, 4.9, 5.2)))
    monkeypatch.setattr(sess, "time_cpu_capacity_span", lambda cpus: left.pop(0))
    monkeypatch.setattr(sess, "time_worker_batches",
                        lambda loader, cpus: None if worker is None else (2.0, worker))
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs(n=48), batch_size=8)
    with diagnose(model, loader, steps=2, wait=3, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, print_report=False) as d:
        while not d.done:
            train(model, opt, loader, d)
    assert not left or loops[0] is None  # both timings (the second where the first gave one)
    m = d.report.metrics
    assert m["cpu_capacity"] == want
    assert (m["cpu_capacity_min"], m["cpu_capacity_max"]) == span


def test_the_steady_wait_leaves_out_the_steps_that_started_workers() -> None:
    """The loader's share of the unprofiled steps that began no epoch: an epoch's start
    (IN005's) is not the steady wait IN001 grades; None without the starts column, and
    under MIN_CLOCK_STEPS such steps."""
    phase = ["wait"] * 8 + ["active"] * 3 + ["after"] * 6
    ms = [90.0] + [20.0] * 7 + [30.0] * 3 + [80.0] + [20.0] * 5
    cap = _cap(phase, ms)
    cap["step_clock"]["dataloader_ms"] = [60.0] + [2.0] * 7 + [9.0] * 3 + [60.0] + [2.0] * 5
    cap["step_clock"]["loader_starts"] = [1] + [0] * 3 + [1] + [0] * 12
    cap["step_clock"]["ms"][4] = 150.0
    cap["step_clock"]["dataloader_ms"][4] = 130.0
    m = context_metrics({"capture": cap})
    # unprofiled: wait steps 2-8 (one starts workers) and after steps 2-6
    assert m["dataloader_wait_steady_share"] == pytest.approx(2.0 / 20.0)
    assert m["dataloader_wait_unprofiled_share"] == pytest.approx(
        (6 * 2.0 + 130.0 + 5 * 2.0) / (6 * 20.0 + 150.0 + 5 * 20.0), rel=1e-3)
    cap["step_clock"].pop("loader_starts")
    assert context_metrics({"capture": cap})["dataloader_wait_steady_share"] is None
    few = _cap(["wait"] * 4 + ["active"] * 3, [90.0, 20.0, 20.0, 20.0, 30.0, 30.0, 30.0])
    few["step_clock"]["loader_starts"] = [0] * 7
    assert context_metrics({"capture": few})["dataloader_wait_steady_share"] is None
