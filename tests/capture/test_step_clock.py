"""Numbers users can trust: the step time the report leads with is the unprofiled one, the
profiler's overhead is measured and said, and a window cut short by the end of the loop
never turns the loop's tail into findings."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
import diagnose.session.after_loop as after_loop  # noqa: E402
from diagnose import analyze  # noqa: E402
from diagnose.analysis import capture_notes  # noqa: E402
from diagnose.metrics.context import clock_note, context_metrics  # noqa: E402
from diagnose.report.text import step_lines  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.datasets import Pairs, train  # noqa: E402


@pytest.fixture(autouse=True)
def _planned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step counts here are exact: no extra steps timed when a busy machine makes them vary
    (tests/test_step_clock.py tests that extension on its own), and none after a fork
    (tests/capture/test_forked_steps.py)."""
    monkeypatch.setattr(after_loop, "fork_steps_wanted", lambda *_: False)
    monkeypatch.setattr(steps_mod, "EXTEND", 1)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 1)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 1)


def _make(ds: Any, batch_size: int = 8) -> tuple[nn.Module, Any, DataLoader]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(ds, batch_size=batch_size)


def test_unprofiled_steps_are_timed_and_lead_the_report(tmp_path: Path, every_probe: None
                                                        ) -> None:
    # a real loader whose samples take time: the DataLoader wait is measured by the hooks
    model, opt, loader = _make(Pairs(n=400, delay_s=0.0005))
    with diagnose(model, loader, steps=3, wait=3, clock_steps=6, out_dir=tmp_path,
                  sample_hz=0, print_report=False) as d:
        n = train(model, opt, loader, d)
    # wait 3 + warmup 1 + 3 profiled, then 1 settling + 4 timed steps before d.done: the
    # clock's 6 steps are 2 before the window (the run's first is left out) and 4 after it
    assert n == 13
    clock = load_context(d.run_dir)["capture"]["step_clock"]
    assert clock["phase"] == ["wait"] * 3 + ["warmup"] + ["active"] * 3 + ["settle"] + [
        "after"] * 4
    assert all(ms > 0 for ms in clock["ms"])
    # each step pulled one batch of 8 samples sleeping 0.5 ms each: the wait is seen, and
    # it is the dataset's reads (in-process loader) more than the collate function
    assert all(dl >= 8 * 0.5 for dl in clock["dataloader_ms"][1:])
    assert all(f >= 8 * 0.5 for f in clock["fetch_ms"][1:])
    # collating 8 tiny pairs is timed on every step and is well under the reads' 4 ms,
    # compared as medians (a busy host can stall one step's collate longer than its reads)
    assert all(c > 0 for c in clock["collate_ms"][1:])
    assert statistics.median(clock["collate_ms"][1:]) < statistics.median(clock["fetch_ms"][1:])
    assert all(f + c <= dl for f, c, dl in zip(clock["fetch_ms"], clock["collate_ms"],
                                               clock["dataloader_ms"], strict=True))
    assert set(clock["batches"]) == {1}
    # how long the training thread waited for a CPU others held (Linux schedstat)
    assert all(w is None or 0 <= w <= ms for w, ms in zip(clock["cpu_wait_ms"], clock["ms"],
                                                          strict=True))
    if Path("/proc/thread-self/schedstat").exists():
        assert 0 <= d.report.metrics["step_cpu_wait_unprofiled_share"] <= 1
    assert set(clock["batch_bytes"]) == {8 * 16 * 4 + 8 * 8}  # float32 x[8, 16], int64 y[8]
    # the model's forward on every step, by its hooks: part of the step, never all of it
    assert all(0 < f < ms for f, ms in zip(clock["forward_ms"], clock["ms"], strict=True))
    # and its optimizer.step(), by the optimizer's step hooks; their mean is a metric
    assert all(0 < o < ms for o, ms in zip(clock["optimizer_ms"], clock["ms"], strict=True))
    assert 0 < d.report.metrics["optimizer_unprofiled_ms"] < d.report.metrics[
        "step_time_unprofiled_mean_ms"]
    # after the loop: a batch from a real worker process, and (2+ threads) the model's
    # work on one thread and on torch's threads
    ctx = load_context(d.run_dir)
    assert ctx["dataloader"]["worker_handover_ms"] > 0
    if torch.get_num_threads() > 1:
        assert ctx["threads"]["work_ms"] > 0 and ctx["threads"]["work_1thread_ms"] > 0
        assert d.report.metrics["threads_one_thread_ratio"] > 0
    assert d.report.metrics["forward_unprofiled_ms"] > 0
    assert d.report.metrics["forward_calls_unprofiled"] == 1  # one model call a step
    m = d.report.metrics
    assert m["step_time_unprofiled_steps"] == 6
    timed = sorted(clock["ms"][1:3] + clock["ms"][-4:])
    assert m["step_time_unprofiled_median_ms"] == pytest.approx(
        (timed[2] + timed[3]) / 2, abs=1e-3)
    assert m["step_time_unprofiled_p10_ms"] <= m["step_time_unprofiled_median_ms"] <= m[
        "step_time_unprofiled_p90_ms"]
    assert 0 < m["dataloader_wait_unprofiled_share"] <= 1
    assert m["input_fetch_ms"] >= 4 and m["input_collate_ms"] > 0
    assert m["input_worker_wait_ms"] is None and m["input_pin_ms"] is None  # none of those
    assert m["input_batch_bytes"] == 8 * 16 * 4 + 8 * 8
    if m["step_time_unprofiled_reliable"]:
        assert m["profiler_overhead_ratio"] == pytest.approx(
            m["step_time_profiled_clock_median_ms"] / m["step_time_unprofiled_median_ms"],
            rel=1e-2)
    else:  # a busy machine: the report says so instead of stating a ratio
        assert m["profiler_overhead_ratio"] is None
        assert any("unreliable" in x for x in d.report.notes)
    st = d.report.to_json()["step_time"]
    assert st["measured"] == "without the profiler"
    assert st["median_ms"] == m["step_time_unprofiled_median_ms"]
    assert st["profiled_median_ms"] == m["step_time_median_ms"]
    text = d.report.render_text(width=160)
    lo, hi = m["step_time_unprofiled_p10_ms"], m["step_time_unprofiled_p90_ms"]
    assert (f"median without the profiler (6 steps timed by the session, p10-p90 "
            f"{lo:,.2f}-{hi:,.2f} ms)") in text
    assert "of the profiled window" in text
    html = (d.run_dir / "report.html").read_text()
    assert "median without the profiler" in html
    # the report as data beside it, as the session returned it
    data = json.loads((d.run_dir / "report.json").read_text())
    assert data["step_time"] == st and data["findings"] == d.report.to_json()["findings"]


def test_saved_trace_says_times_are_as_profiled() -> None:
    trace = Path(__file__).resolve().parents[2] / "samples/traces/cpu/slow_loader.pt.trace.json.gz"
    r = analyze(trace)
    st = r.to_json()["step_time"]
    assert st["measured"] == "as profiled" and st["median_ms"] == r.metrics["step_time_median_ms"]
    assert "as profiled (a saved trace" in r.render_text(width=160)


def _cap(phase: list[str], ms: list[float]) -> dict[str, Any]:
    return {"window_complete": True, "whole_steps": phase.count("active"), "notes": [],
            "step_clock": {"phase": phase, "ms": ms, "dataloader_ms": [4.0] * len(ms)}}


def test_overhead_note_and_clock_metrics() -> None:
    phase = ["wait"] * 4 + ["warmup"] + ["active"] * 3 + ["settle", "after", "after", "after"]
    ms = [90.0, 10.0, 11.0, 12.0, 40.0, 30.0, 31.0, 29.0, 80.0, 10.5, 11.5, 12.5]
    cap = _cap(phase, ms)
    m = context_metrics({"capture": cap})
    # unprofiled: the wait steps but the run's first, the after steps (settle left out)
    assert m["step_time_unprofiled_steps"] == 6
    assert m["step_time_unprofiled_median_ms"] == 11.25  # of 10 10.5 11 11.5 12 12.5
    assert m["step_time_unprofiled_p10_ms"] == pytest.approx(10.25)
    assert m["step_time_unprofiled_p90_ms"] == pytest.approx(12.25)
    assert m["step_time_unprofiled_spread"] == pytest.approx(2 / 11.25, abs=1e-4)
    assert m["step_time_unprofiled_reliable"] is True
    assert m["step_time_profiled_clock_median_ms"] == 30.0
    assert m["profiler_overhead_ratio"] == pytest.approx(30 / 11.25, rel=1e-3)
    assert m["dataloader_wait_unprofiled_share"] == pytest.approx(24 / 67.5, rel=1e-3)
    assert m["dataloader_wait_unprofiled_ms"] == 4.0
    notes = capture_notes({"capture": cap}, m)
    assert any("the profiler slowed the profiled steps 2.67x (the loop's clock: median "
               "30.00 ms profiled, 11.25 ms without it)" in n for n in notes), notes
    assert clock_note(m) is None
    # other processes took a CPU while the window ran, none after (a new user's GAN read
    # "the profiler slowed the profiled steps 4.00x"): the slowdown is not said to be its
    busy = capture_notes({"capture": cap}, {**m, "host_cpu_others_cpus": 0.92,
                                            "step_others_cpus_unprofiled": 0.0})
    assert not any("the profiler slowed" in n for n in busy), busy
    assert any("the profiled steps took 2.67x the plain ones' time, while other processes "
               "took 0.92 CPUs (against 0.00" in n for n in busy), busy
    calm = capture_notes({"capture": cap}, {**m, "host_cpu_others_cpus": 0.1,
                                            "step_others_cpus_unprofiled": 0.0})
    assert any("the profiler slowed the profiled steps 2.67x" in n for n in calm), calm
    cap["step_clock"]["ms"][5:8] = [11.5, 11.0, 12.0]  # a profiler that costs little
    assert capture_notes({"capture": cap}, context_metrics({"capture": cap})) == []
    # no clock (an older run folder): nothing is made up
    assert context_metrics({"capture": {}})["step_time_unprofiled_median_ms"] is None


def test_a_hypervisor_that_took_the_cpus_time_is_noted() -> None:
    """The host samples saw 12% of the CPUs' time go to other machines (steal): a note says
    the timings move with their load; 1%, or no such column (an older run, not a VM): none."""
    cap = _cap(["wait"] * 3 + ["after"] * 4, [90.0, 10.0, 11.0, 10.5, 11.5, 12.5, 10.0])
    m = context_metrics({"capture": cap})
    assert not any("hypervisor" in n for n in capture_notes({"capture": cap}, m))
    notes = capture_notes({"capture": cap}, {**m, "host_steal_frac": 0.12})
    assert any("the hypervisor took 12% of the CPUs' time" in n for n in notes)
    assert not any("hypervisor" in n for n in capture_notes(
        {"capture": cap}, {**m, "host_steal_frac": 0.01}))


def test_the_steps_that_started_an_epoch_are_told_apart() -> None:
    """Unprofiled steps of 10-12 ms, two of which started a new loader iterator (an
    epoch's start with workers: 95 and 105 ms): the steady steps' mean leaves them out,
    11.0, and an epoch's start costs their median, 100, less the steady median, 11: 89.
    The clock's mean keeps them (the job's pace over these steps); a clock without the
    column, or whose steps all or none started one, says nothing of epochs."""
    phase = ["wait"] * 4 + ["active"] * 2 + ["settle"] + ["after"] * 5
    ms = [90.0, 10.0, 95.0, 12.0, 30.0, 31.0, 80.0, 11.0, 105.0, 10.0, 12.0, 11.0]
    cap = _cap(phase, ms)
    cap["step_clock"]["loader_starts"] = [1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    m = context_metrics({"capture": cap})
    assert m["step_time_steady_mean_ms"] == pytest.approx(11.0)
    assert m["dataloader_epoch_boundary_ms"] == pytest.approx(89.0)
    assert m["step_time_unprofiled_mean_ms"] == pytest.approx(266.0 / 8)
    # the noise of the mean a prediction starts from: the steady steps' standard error
    # (10, 12, 11, 10, 12, 11: std sqrt(0.8) over 11, over sqrt(6))
    assert m["step_time_unprofiled_mean_error"] == pytest.approx(
        math.sqrt(0.8) / 11 / math.sqrt(6), abs=1e-4)
    for starts in ([0] * 12, [1] * 12, None):
        cap["step_clock"]["loader_starts"] = starts
        m = context_metrics({"capture": cap})
        assert m["step_time_steady_mean_ms"] is None
        assert m["dataloader_epoch_boundary_ms"] is None
        # no epoch told apart: every unprofiled step's (the first and the one after the
        # window left out)
        free = [10.0, 95.0, 12.0, 11.0, 105.0, 10.0, 12.0, 11.0]
        assert m["step_time_unprofiled_mean_error"] == pytest.approx(
            statistics.stdev(free) / statistics.fmean(free) / math.sqrt(8), abs=1e-4)


def test_the_loops_work_between_epochs_is_not_the_epochs_start() -> None:
    """The same clock where each step that began an epoch also held 40 ms of the loop's own
    work from the last iterator running out to the new iter() (an evaluation): the start
    costs 89 ms as before, and the gap is told apart (its median, 40)."""
    phase = ["wait"] * 4 + ["active"] * 2 + ["settle"] + ["after"] * 5
    ms = [130.0, 10.0, 135.0, 12.0, 30.0, 31.0, 80.0, 11.0, 145.0, 10.0, 12.0, 11.0]
    cap = _cap(phase, ms)
    cap["step_clock"]["loader_starts"] = [1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    cap["step_clock"]["epoch_gap_ms"] = [40.0, 0, 40.0, 0, 0, 0, 0, 0, 40.0, 0, 0, 0]
    m = context_metrics({"capture": cap})
    assert m["dataloader_epoch_boundary_ms"] == pytest.approx(89.0)
    assert m["dataloader_epoch_gap_ms"] == pytest.approx(40.0)
    # 10 batches an epoch with 2 workers: the start, 8.9 ms a step, over the mean step with
    # the gap's 4.0 ms in it
    m = context_metrics({"capture": cap, "dataloader": {
        "num_workers": 2, "persistent_workers": False, "len": 10}})
    assert m["dataloader_epoch_start_share"] == pytest.approx(8.9 / (11.0 + 8.9 + 4.0),
                                                               abs=1e-4)
    del cap["step_clock"]["epoch_gap_ms"]  # a clock from before the column: all of it
    assert context_metrics({"capture": cap})["dataloader_epoch_boundary_ms"] == \
        pytest.approx(129.0)


def test_the_steps_after_an_epochs_start_count_until_each_new_worker_gave_a_batch() -> None:
    """The run's first step and two epochs' starts, each forking 2 workers
    (``capture.loader_starts``): the 2 steps after each take 18 (the first's second step
    starts an epoch), 20 and 14, then 16 and 12 ms, against a steady median of 10 (the
    steady steps are those that began no epoch, these among them). Each position's median
    over the epochs (18, 13) less the steady median, summed: 11 ms. A step of the profiled
    window at such a position is not counted; where no counted step holds a position, or
    the starts forked no worker, it is not known."""
    phase = ["wait"] * 6 + ["active"] * 2 + ["settle"] + ["after"] * 11
    ms = [90.0, 18.0, 100.0, 20.0, 14.0, 10.0, 30.0, 31.0, 80.0, 10.0, 100.0, 16.0, 12.0,
          *[10.0] * 7]
    cap = _cap(phase, ms)
    starts = [1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, *[0] * 9]
    cap["step_clock"]["loader_starts"] = starts
    cap["loader_starts"] = [{"iter_ms": 5.0, "first_wait_ms": 8.0, "workers": 2}] * 3
    m = context_metrics({"capture": cap})
    assert m["dataloader_epoch_boundary_ms"] == pytest.approx(90.0)
    assert m["dataloader_epoch_after_ms"] == pytest.approx(18 + 13 - 2 * 10.0)
    cap["loader_starts"] = [{"iter_ms": 5.0, "first_wait_ms": 8.0, "workers": 0}] * 3
    assert context_metrics({"capture": cap})["dataloader_epoch_after_ms"] is None
    # the second start moved into the window: its steps after are not counted, the
    # first start's alone are
    cap["loader_starts"] = [{"iter_ms": 5.0, "first_wait_ms": 8.0, "workers": 2}] * 3
    cap["step_clock"]["loader_starts"] = [1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, *[0] * 9]
    m = context_metrics({"capture": cap})
    assert m["dataloader_epoch_after_ms"] == pytest.approx(18 + 13 - 2 * 10.0)


def test_the_loops_forward_is_the_steady_steps_mean() -> None:
    """The forward's contention reads the loop's forward as the steady steps' mean: a
    worker's burst on some forwards (7 ms against 3) counts as often as it lands, where the
    median (3) drops it; the step that began an epoch (40 ms) and the one after it, in
    which its one new worker hands over its first batch (9 ms), are left to the epoch's
    start. Without epoch marks every step after the window counts."""
    phase = ["wait"] * 2 + ["active"] * 2 + ["settle"] + ["after"] * 9
    fwd = [3.0, 3.0, 30.0, 30.0, 3.0, 3.0, 3.0, 7.0, 40.0, 9.0, 3.0, 3.0, 3.0, 7.0]
    cap = _cap(phase, [12.0] * len(phase))
    cap["step_clock"]["forward_ms"] = fwd
    cap["step_clock"]["forwards"] = [1] * len(phase)
    cap["step_clock"]["loader_starts"] = [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    cap["loader_starts"] = [{"iter_ms": 5.0, "first_wait_ms": 8.0, "workers": 1}] * 2
    m = context_metrics({"capture": cap})
    assert m["forward_unprofiled_ms"] == pytest.approx(3.0)  # the after steps' median
    assert m["forward_unprofiled_mean_ms"] == pytest.approx(29 / 7, abs=1e-4)
    cap["step_clock"].pop("loader_starts")
    m = context_metrics({"capture": cap})
    assert m["forward_unprofiled_mean_ms"] == pytest.approx(sum(fwd[5:]) / 9, abs=1e-4)


def test_an_older_clock_leaves_out_the_first_step_after_the_window() -> None:
    cap = _cap(["wait", "wait", "active", "active", "active", "after", "after", "after"],
               [90.0, 10.0, 30.0, 31.0, 29.0, 80.0, 11.0, 12.0])
    cap["step_clock"].pop("dataloader_ms")  # e.g. no DataLoader hooks: no wait, not 0
    m = context_metrics({"capture": cap})
    assert m["step_time_unprofiled_median_ms"] == 11.0 and m["step_time_unprofiled_steps"] == 3
    assert m["dataloader_wait_unprofiled_share"] is None
    assert m["step_time_unprofiled_reliable"] is False  # 3 steps are too few to trust
    assert m["profiler_overhead_ratio"] is None
    assert "only 3 steps were timed" in (clock_note(m) or "")


@pytest.mark.parametrize(("profiled", "free", "why"), [
    # the busy-machine report: unprofiled steps slower than profiled ones ("0.54x as long")
    ([30.0, 31.0, 29.0], [55.0, 56.0, 54.0, 57.0, 55.0, 56.0], "the profiled steps came out"),
    # steps that vary more than their median
    ([30.0, 31.0, 29.0], [10.0, 30.0, 12.0, 45.0, 11.0, 28.0], "the steps timed vary widely"),
])
def test_an_unreliable_clock_says_so_instead_of_a_ratio(
        profiled: list[float], free: list[float], why: str) -> None:
    phase = ["wait"] * 4 + ["warmup"] + ["active"] * 3 + ["settle"] + ["after"] * 3
    ms = [90.0, *free[:3], 40.0, *profiled, 80.0, *free[3:]]
    cap = _cap(phase, ms)
    cap["step_clock"]["cpu_wait_ms"] = [x / 4 for x in ms]  # a busy machine
    m = context_metrics({"capture": cap})
    assert m["step_cpu_wait_unprofiled_share"] == 0.25
    assert "the training thread waited 25% of these steps for a CPU" in (clock_note(m) or "")
    assert m["step_time_unprofiled_reliable"] is False
    assert m["profiler_overhead_ratio"] is None  # no "the profiler made steps 0.54x as long"
    note = clock_note(m) or ""
    assert why in note and "clock_steps=" in note
    assert not any("profiler slowed" in n for n in capture_notes({"capture": _cap(phase, ms)}, m))
    text_head, window = step_lines(m)
    assert "as long" not in (window or "")


def test_the_note_asks_for_more_steps_than_were_timed() -> None:
    """A new user read "time more steps (clock_steps=30)" after "53 steps timed by the
    session": the note asks for at least 30 steps, else twice as many as were timed, while
    fewer than ENOUGH_STEPS were. Another then asked 60, 120, 360 in turn: past that, more
    steps leave the spread as it is, and the note says so instead."""
    base = {"step_time_unprofiled_reliable": False, "step_time_unprofiled_spread": 0.9,
            "step_time_unprofiled_p10_ms": 38.0, "step_time_unprofiled_p90_ms": 67.0,
            "step_time_unprofiled_median_ms": 47.0}
    for n, asked in ((3, 30), (12, 30), (15, 30), (29, 60)):
        assert f"clock_steps={asked})" in (clock_note({**base, "step_time_unprofiled_steps": n})
                                           or ""), n
    for n in (53, 200):
        note = clock_note({**base, "step_time_unprofiled_steps": n}) or ""
        assert "clock_steps=" not in note, note
        assert f"more steps than the {n} timed would steady the median, not narrow" in note
        assert "For a better figure, run when the machine is less busy" in note
    # the step line's own precision (a new user read 144.688 ms beside 144.69 ms)
    note = clock_note({**base, "step_time_unprofiled_steps": 53,
                       "step_time_unprofiled_p90_ms": 144.688}) or ""
    assert "(p10 38.00 ms, p90 144.69 ms, median 47.00 ms)" in note


def test_a_few_early_steps_faster_than_the_profiled_ones_blame_no_machine() -> None:
    """Profiled steps faster than the unprofiled ones: with enough steps timed something
    else changed the pace; with 2 (a run that raised at step 7), they were early steps."""
    base = {"step_time_unprofiled_reliable": False, "step_time_unprofiled_median_ms": 0.73,
            "step_time_profiled_clock_median_ms": 0.427}
    few = clock_note({**base, "step_time_unprofiled_steps": 2}) or ""
    many = clock_note({**base, "step_time_unprofiled_steps": 40}) or ""
    assert "as a few early steps can" in few and "something else" not in few
    assert "something else changed the pace" in many


@pytest.mark.parametrize(("others", "workers", "busy_machine"), [
    (1.08, 0, True), (1.08, 6, True), (0.3, 6, False), (0.3, 0, True), (None, 6, True)])
def test_a_wait_for_a_cpu_names_who_held_it(others: float | None, workers: int,
                                            busy_machine: bool) -> None:
    """The training thread waited 25% of its steps for a CPU. Beside a DataLoader's
    workers and less than half a CPU of other processes' work, the run's own processes
    held it: the note says so and does not send the user to a quieter machine. Without
    workers, with more of other work, or with it unknown, the machine was busy."""
    phase = ["wait"] * 4 + ["warmup"] + ["active"] * 3 + ["settle"] + ["after"] * 3
    ms = [90.0, 10.0, 30.0, 12.0, 40.0, 30.0, 31.0, 29.0, 80.0, 45.0, 11.0, 28.0]
    cap = _cap(phase, ms)
    cap["step_clock"]["cpu_wait_ms"] = [x / 4 for x in ms]
    m = {**context_metrics({"capture": cap}), "host_cpu_others_cpus": others,
         "workers_count": workers}
    note = clock_note(m) or ""
    assert "the training thread waited 25% of these steps for a CPU" in note
    assert ("the machine was busy" in note) is busy_machine
    assert ("less busy" in note) is busy_machine
    assert ("this run's own processes held (its 6 DataLoader workers beside it; other "
            "processes took 0.30 CPUs)" in note) is not busy_machine


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
    with diagnose(model, loader, steps=5, wait=1, out_dir=tmp_path, sample_hz=0,
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


def _run_clock(monkeypatch: pytest.MonkeyPatch, lengths: list[float],
               full: frozenset[int] = frozenset(), after: int = 4,
               min_s: float = 0.0) -> steps_mod.Steps:
    """A Steps without profiler (every step is after the window) on a fake clock whose
    steps last ``lengths`` ms in turn (in the steps numbered in ``full``, a full
    collection paused the thread for all but 10 ms); advanced until done or the lengths
    run out."""
    now = [0.0]
    monkeypatch.setattr(steps_mod, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(steps_mod, "EXTEND", 3)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 20)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_S", min_s)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 30)
    s = steps_mod.Steps(None, after=after, settle=1)
    s.gc_timed = True
    s.start()
    for i, ms in enumerate(lengths):
        now[0] += ms / 1e3
        if i in full:
            s.on_gc((ms - 10.0) / 1e3, 2)
        s.advance()
        if s.done:
            break
    return s


def test_steps_that_vary_are_timed_longer(monkeypatch: pytest.MonkeyPatch) -> None:
    steady = _run_clock(monkeypatch, [50.0] + [10.0, 11.0, 10.5, 10.2] * 10)
    assert steady.done and [r[0] for r in steady.rows] == ["settle"] + ["after"] * 4
    # busy: the same 4 planned steps vary by more than their median, so up to 3 x 4 are timed
    busy = _run_clock(monkeypatch, [50.0] + [10.0, 30.0, 9.0, 25.0] * 10)
    assert busy.done and len(busy.rows) == 1 + 3 * 4
    # a pace that settles ends the extension as soon as the spread is back under the bound
    calm = _run_clock(monkeypatch, [50.0, 10.0, 30.0, 10.0, 10.0] + [10.0] * 20)
    assert calm.done and len(calm.rows) == 1 + 9  # p90 of 9 steps, 1 at 30 ms: 14 ms


def test_short_steps_are_timed_for_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steady 10 ms steps after the window: 4 planned are 40 ms of a pace that drifts over
    seconds, so more are timed while they took under MIN_AFTER_S in all, up to 30 x 4;
    400 ms steps pass it with the plan."""
    short = _run_clock(monkeypatch, [50.0] + [10.0] * 200, min_s=1.0)
    assert short.done and len(short.rows) == 1 + 100  # the 100th passes 1 s
    capped = _run_clock(monkeypatch, [50.0] + [10.0] * 200, min_s=2.5)
    assert capped.done and len(capped.rows) == 1 + 30 * 4
    fewer = _run_clock(monkeypatch, [50.0] + [10.0] * 40, min_s=0.065)
    assert fewer.done and len(fewer.rows) == 1 + 7  # the 7th passes 65 ms
    long = _run_clock(monkeypatch, [50.0] + [400.0] * 40, min_s=1.0)
    assert long.done and len(long.rows) == 1 + 4


def test_steps_a_rare_full_collection_paused_are_timed_longer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One step in 15 pauses 200 ms for a full collection. The 12 planned steps saw one:
    their p90 does not reach it (the spread alone would end the clock there), and one is
    too few to know the collector's share, so the clock goes on until it has seen
    GC_FULL_SEEN (5: four spacings), past the 3x of steps that vary, while the steps
    after the window are cheap (under GC_EXTEND_S in all); steps that never pause fully
    end as planned."""
    assert steps_mod.GC_FULL_SEEN == 5
    lengths = [50.0] + ([10.0, 10.0, 210.0] + [10.0] * 12) * 6
    lengths = lengths[:1] + lengths[2:]  # the first pause in step 2
    paused = _run_clock(monkeypatch, lengths, frozenset(i for i, ms in enumerate(lengths)
                                                        if ms > 200), after=12)
    assert paused.done and sum(r[10] for r in paused.rows) == 5
    assert paused.rows[-1][10] == 1 and len(paused.rows) == 1 + 2 + 4 * 15  # the 5th pause
    assert len(paused.rows) > 1 + 3 * 12  # past the 3x of steps that vary
    # the same job with 1 s steps: 5 s of them after the window end the wait at 3x
    slow = _run_clock(monkeypatch, [x * 100 for x in lengths], frozenset(
        i for i, ms in enumerate(lengths) if ms > 200), after=12)
    assert slow.done and len(slow.rows) == 1 + 3 * 12
    plain = _run_clock(monkeypatch, [50.0] + [10.0] * 40, after=12)
    assert plain.done and len(plain.rows) == 1 + 12


class _Device:
    """A fake GPU on the fake clock: each host step of ``host`` ms queues ``work`` ms of
    device work, run in order; ``sync`` waits (moves the clock) until the queue is empty."""

    def __init__(self, now: list[float], work: float) -> None:
        self.now, self.work, self.free_at, self.calls = now, work / 1e3, 0.0, 0

    def launch(self) -> None:
        self.free_at = max(self.free_at, self.now[0]) + self.work

    def sync(self) -> None:
        self.calls += 1
        self.now[0] = max(self.now[0], self.free_at)


def _device_clock(monkeypatch: pytest.MonkeyPatch, host: float, work: float,
                  after: int = 8) -> steps_mod.Steps:
    """Steps after the window (a settle step first) of ``host`` ms each on the host, each
    launching ``work`` ms on the fake device, timed as the session times them."""
    now = [0.0]
    monkeypatch.setattr(steps_mod, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    dev = _Device(now, work)
    s = steps_mod.Steps(None, after=after, settle=1, sync=dev.sync)
    s.start()
    for _ in range(1 + after):
        now[0] += host / 1e3
        dev.launch()
        s.advance()
    assert s.done and dev.calls == 2  # before the block (untimed) and at its end
    return s


def _clocked(s: steps_mod.Steps) -> dict[str, Any]:
    cap = {"window_complete": True, "whole_steps": 0, "step_clock": s.clock(),
           "step_clock_drain_ms": s.drain_ms}
    return context_metrics({"capture": cap})


def test_a_host_ahead_of_its_gpu_is_timed_at_the_gpus_pace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that never waits for its GPU: 1.5 ms of launches a step, 7 ms of GPU work.
    Its steps time the launches; the drain at the block's end holds the rest, and the
    step time is the block's over its steps, as a loop timed with one synchronize at its end
    gives. The settle step's queue is drained before the block, off the clock."""
    s = _device_clock(monkeypatch, host=1.5, work=7.0)
    assert [round(r[1], 6) for r in s.rows[1:]] == [1.5] * 8  # launches only
    # the block: its first launch at 1.5 ms, then 8 x 7 ms of GPU work; 12 ms of launches
    assert s.drain_ms == pytest.approx(1.5 + 56.0 - 12.0, abs=1e-6)
    m = _clocked(s)
    assert m["step_time_device_paced"] is True
    assert m["step_time_unprofiled_median_ms"] == pytest.approx(57.5 / 8, abs=1e-3)
    assert m["step_time_unprofiled_mean_ms"] == m["step_time_unprofiled_median_ms"]
    assert m["profiler_overhead_ratio"] is None  # host launches against the GPU's pace
    head, _ = step_lines(m)
    assert "the host ran ahead of the GPU" in head and "wait for the GPU" in head


@pytest.mark.parametrize("broke", [True, False])
def test_a_loop_that_ends_before_the_clock_is_done_still_drains(
        monkeypatch: pytest.MonkeyPatch, broke: bool) -> None:
    """A short loader: 4 of 8 planned steps after the window, then the loop ends (the
    session's exit calls finish()). After a ``break`` the step in progress holds a step's
    launches and counts; where the loader ran out, the boundary came with the last batch
    asked for and nothing is in progress."""
    now = [0.0]
    monkeypatch.setattr(steps_mod, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    dev = _Device(now, 7.0)
    s = steps_mod.Steps(None, after=8, settle=1, sync=dev.sync)
    s.start()
    for _ in range(1 + 4):
        now[0] += 1.5 / 1e3
        dev.launch()
        s.advance()
    if broke:
        now[0] += 1.5 / 1e3
        dev.launch()
    else:
        now[0] += 0.1 / 1e3  # the loader's StopIteration
    s.finish()
    assert not s.done and dev.calls == 2
    steps = 5 if broke else 4
    assert [r[0] for r in s.rows] == ["settle"] + ["after"] * steps
    m = _clocked(s)
    assert m["step_time_device_paced"] is True
    # the block: the first launch 1.5 ms in, then 7 ms of GPU work a step (the loop's way
    # out, 0.1 ms, is in no step)
    assert m["step_time_unprofiled_median_ms"] == pytest.approx(
        (1.5 + 7.0 * steps - (0.0 if broke else 0.1)) / steps, abs=1e-3)
    s.finish()  # once only
    assert dev.calls == 2


@pytest.mark.parametrize(("host", "work"), [(7.0, 1.5), (7.0, 6.5)])
def test_a_loop_that_keeps_up_with_its_gpu_keeps_its_own_steps(
        monkeypatch: pytest.MonkeyPatch, host: float, work: float) -> None:
    """Host-bound steps leave at most one step's GPU work queued: the drain is shorter than
    a step, and the steps stand as timed."""
    s = _device_clock(monkeypatch, host=host, work=work)
    assert s.drain_ms is not None and s.drain_ms <= work + 1e-6
    m = _clocked(s)
    assert m["step_time_device_paced"] is False
    assert m["step_time_unprofiled_median_ms"] == pytest.approx(host, abs=1e-3)
    assert "ran ahead" not in step_lines(m)[0]


def test_a_cpu_run_has_no_drain() -> None:
    s = steps_mod.Steps(None, after=2, settle=1)
    s.start()
    for _ in range(3):
        s.advance()
    assert s.done and s.drain_ms is None
    m = _clocked(s)
    assert m["step_time_device_paced"] is None and m["step_time_unprofiled_drain_ms"] is None


def test_a_cpu_loop_that_ends_before_the_clock_is_done_reads_the_other_processes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU loop whose steps were timed longer (a busy machine) and ended first: finish()
    reads the other processes' CPUs up to the loop's end (CF007 and CF008 need them), once,
    with no drain."""
    from diagnose.capture import others

    # wall, usable CPUs' busy, own, this process's workers'
    snaps = iter([(0.0, 0.0, 0.0, 0.0), (2.0, 3.0, 1.0, 0.5)])
    monkeypatch.setattr(steps_mod, "cpu_snapshot", lambda: next(snaps))
    monkeypatch.setattr(others, "cpu_snapshot", lambda: next(snaps))
    s = steps_mod.Steps(None, after=8, settle=1)
    s.start()
    for _ in range(1 + 3):
        s.advance()
    assert not s.done and s.after_others_cpus is None
    s.finish()
    assert s.after_others_cpus == pytest.approx(1.0) and s.drain_ms is None
    assert s.after_workers_cpus == pytest.approx(0.25)  # 0.5 s of the workers' CPU in 2 s
    s.finish()  # once only: the snapshots are spent
    assert s.after_others_cpus == pytest.approx(1.0)


def test_trace_export_is_off_the_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing the trace (here made 1.5 s slower) happens between two steps and is counted
    in neither: no step the clock timed holds it (steps of ~1 ms: one of 1.5 s would be
    the export's, however busy the host)."""
    import torch.profiler as tp

    real = tp.tensorboard_trace_handler

    def slow_handler(*args: Any, **kwargs: Any) -> Any:
        handler = real(*args, **kwargs)

        def ready(prof: Any) -> None:
            time.sleep(1.5)
            handler(prof)
        return ready

    monkeypatch.setattr(tp, "tensorboard_trace_handler", slow_handler)
    model, opt, loader = _make(Pairs(n=400))
    with diagnose(model, loader, steps=2, wait=2, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, analyze=False) as d:
        train(model, opt, loader, d)
    clock = load_context(d.run_dir)["capture"]["step_clock"]
    assert "settle" in clock["phase"] and d.done
    assert max(clock["ms"]) < 1500, clock


def _input_cap(fetch: Any, collate: Any) -> dict[str, Any]:
    phase = ["wait", "wait", "active", "settle", "after", "after"]
    return {"step_clock": {"phase": phase, "ms": [50.0, 20.0, 30.0, 25.0, 20.0, 20.0],
                           "dataloader_ms": [9.0, 10.0, 12.0, 5.0, 10.0, 10.0],
                           "fetch_ms": fetch, "collate_ms": collate,
                           "batches": [1] * 6, "batch_bytes": [4096] * 5 + [None]}}


def test_input_by_cause_in_process_and_with_workers() -> None:
    cap = _input_cap([6.0] * 6, [2.0] * 6)
    m = context_metrics({"capture": cap, "dataloader": {"num_workers": 0, "pin_memory": True}})
    assert (m["input_fetch_ms"], m["input_collate_ms"], m["input_pin_ms"]) == (6.0, 2.0, 2.0)
    assert m["input_fetch_share"] == 0.3 and m["input_collate_share"] == 0.1
    assert m["input_worker_wait_ms"] is None and m["input_worker_wait_share"] is None
    assert m["input_batch_bytes"] == 4096
    m = context_metrics({"capture": cap, "dataloader": {"num_workers": 0, "pin_memory": False}})
    assert m["input_pin_ms"] is None  # no pinning: the rest is not called pinning
    # workers: fetch and collate happen elsewhere (null columns); the wait is theirs
    cap = _input_cap([None] * 6, [None] * 6)
    m = context_metrics({"capture": cap, "dataloader": {"num_workers": 2, "pin_memory": True}})
    assert m["input_fetch_ms"] is None and m["input_collate_ms"] is None
    assert m["input_pin_ms"] is None
    assert m["input_worker_wait_ms"] == 10.0 and m["input_worker_wait_share"] == 0.5
    assert context_metrics({})["input_fetch_ms"] is None  # nothing known: None, not 0
    assert m["input_loading_median_ms"] is None


def test_the_loops_median_loading_leaves_a_paused_step_out() -> None:
    """The loop's fetch and collate of a batch, as the timings beside the loop compare
    with it: the median over the unprofiled steps, so that one step's full collection
    (130 ms in the fetch) moves it no more than any other step; two batches in a step
    count as two."""
    cap = _input_cap([6.0, 6.0, 6.0, 6.0, 136.0, 12.0], [2.0] * 5 + [4.0])
    cap["step_clock"]["batches"] = [1] * 5 + [2]
    m = context_metrics({"capture": cap, "dataloader": {"num_workers": 0}})
    assert m["input_loading_median_ms"] == 8.0
    assert m["input_fetch_ms"] > 30  # the mean holds the pause: it is the loop's cost


@pytest.mark.parametrize("in_turn", [(7.0, 5.0, 6.5, 1.0), None])
def test_the_batches_timed_in_turn_are_the_workers_and_the_in_process_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        in_turn: tuple[float, float, float, float] | None,
        every_probe: None) -> None:
    """A worker's batch and this process's are timed in turn after the loop, so that a
    busy moment falls on both; where that cannot be timed, the in-process batch is timed alone and the
    worker's comes from the capacity rounds. What sending a batch costs a real worker is
    timed beside it, where a worker can be forked."""
    import diagnose.session.after_loop as session_mod

    monkeypatch.setattr(session_mod, "time_batches_in_turn", lambda loader: in_turn)
    monkeypatch.setattr(session_mod, "time_worker_send", lambda loader: 1.5)
    monkeypatch.setattr(session_mod, "time_inprocess_batch", lambda loader: 12.5)
    monkeypatch.setattr(session_mod, "time_worker_batches", lambda loader, cpus: (9.0, 2.0))
    model, opt, loader = _make(Pairs(n=200))
    with diagnose(model, loader, steps=2, wait=1, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, print_report=False) as d:
        train(model, opt, loader, d)
    made = load_context(d.run_dir)["dataloader"]
    want = (7.0, 5.0, 1.5, 6.5, 1.0) if in_turn else (9.0, 12.5, None, None, None)
    assert (made["worker_batch_ms"], made["inprocess_batch_ms"], made["worker_send_ms"],
            made.get("worker_batch_cpu_ms"), made.get("worker_batch_cpus")) == want


def test_who_held_the_cpus_the_training_thread_waited_for():
    """With workers and under 0.5 CPUs of other work, the run's own processes held them;
    with more, other processes did, and in a job of several ranks its other ranks (not
    this process's children) are counted among them and named."""
    from diagnose.metrics.context.cpu_holders import cpu_wait_holders

    own = cpu_wait_holders({"host_cpu_others_cpus": 0.2, "workers_count": 4})
    assert own == (False, "this run's own processes held (its 4 DataLoader workers beside "
                          "it; other processes took 0.20 CPUs)")
    assert cpu_wait_holders({"host_cpu_others_cpus": 1.4, "workers_count": 1}) == (
        True, "other processes held")
    # workers that used almost no CPU explain no wait: torch's threads on every CPU do,
    # beside any other work (a new user's job: 3 idle workers, 2 threads on 2 CPUs)
    idle = {"host_cpu_others_cpus": 0.3, "workers_count": 3, "workers_cpus": 0.0015,
            "torch_num_threads": 2, "cpu_count": 2}
    assert cpu_wait_holders(idle) == (
        False, "this run's own threads held: torch's 2 threads fill the 2 CPUs, so the "
               "least other work keeps one of them waiting (here its 3 DataLoader workers' "
               "0.00 CPUs in the profiled window and other processes' 0.30)")
    busy = {**idle, "workers_cpus": 0.6}  # the workers may hold them
    assert "its 3 DataLoader workers beside it" in cpu_wait_holders(busy)[1]
    # the workers' CPUs over the clock's own unprofiled steps prevail over the window's,
    # where a profiler that slowed the loop 7x left the workers idle
    assert "its 3 DataLoader workers beside it" in cpu_wait_holders(
        {**idle, "step_workers_cpus_unprofiled": 0.36})[1]
    assert "workers' 0.00 CPUs and other" in cpu_wait_holders(
        {**busy, "step_workers_cpus_unprofiled": 0.001})[1]
    assert "its 3 DataLoader workers beside it" in cpu_wait_holders(
        {**idle, "torch_num_threads": 1})[1]  # a CPU left to spare: not the threads
    assert cpu_wait_holders({"host_cpu_others_cpus": 1.4, "workers_count": 1,
                             "world_size": 2}) == (
        True, "other processes held (this job's other ranks on this host among them)")
    # a clock that counted torchrun's ranks on this host as the job's own: under 0.5 CPUs
    # of other work, the wait was the job's (a new user's 2 gloo ranks on 2 CPUs had
    # their DataLoader fix withheld as if the machine were busy)
    ranks = {"step_others_cpus_unprofiled": 0.1, "world_size": 2,
             "step_others_leave_out_ranks": 2}
    assert cpu_wait_holders(ranks) == (
        False, "this job's own processes held (its 2 ranks on this host and their workers; "
               "other processes took 0.10 CPUs)")
    assert cpu_wait_holders({**ranks, "step_others_cpus_unprofiled": 1.2}) == (
        True, "other processes held")


def test_torchruns_ranks_on_this_host_are_the_jobs_own_processes(monkeypatch) -> None:
    """Under torchrun (``TORCHELASTIC_RUN_ID``, ``LOCAL_WORLD_SIZE`` of 2 or more) the
    elastic agent, this process's parent, roots the job's processes: the other ranks and
    their workers are not "other processes". Elsewhere this process roots them."""
    import psutil

    from diagnose.capture import others

    for env, want in (({}, 1), ({"LOCAL_WORLD_SIZE": "4"}, 1),
                      ({"LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "x"}, 4),
                      ({"LOCAL_WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "x"}, 1),
                      ({"LOCAL_WORLD_SIZE": "two", "TORCHELASTIC_RUN_ID": "x"}, 1)):
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert others.local_ranks() == want, env
        root = others._job_root(psutil)
        assert root.pid == (os.getppid() if want > 1 else os.getpid())
    # the snapshot's own CPU time is then the agent's tree's: at least this process's
    mine = sum(psutil.Process().cpu_times()[:2])  # read first: the snapshot comes later
    assert others.cpu_snapshot()[2] >= mine


def test_a_ranks_clock_note_says_whose_steps_it_read(tmp_path: Path) -> None:
    """Under torch.distributed the report's headline is over every rank, the clock's note
    over this rank's own steps: a new user read two medians for one run (2.51 ms in the
    headline, 2.426 ms in the note). The note says it is this rank's."""
    from diagnose.session.lifecycle import Session

    phase = ["wait"] * 4 + ["active"] * 2 + ["settle", "after", "after"]
    ms = [90.0, 1.8, 2.4, 6.5, 30.0, 31.0, 80.0, 2.1, 6.6]
    for dist, starts in ((SimpleNamespace(rank=0), "rank 0's step time without the profiler"),
                         (None, "the step time without the profiler")):
        s = Session.__new__(Session)
        s._dist, s._sampler_thread, s.notes = dist, None, []
        ctx = {"capture": _cap(phase, ms)}
        s._note_clock(ctx, tmp_path)
        assert s.notes and s.notes[0].startswith(starts), s.notes
        assert ctx["capture"]["notes"] == s.notes


def test_a_steady_step_timed_on_a_busy_machine_says_so():
    """A new user's capture beside another process (0.9 CPUs of 2; the training thread
    waited 40% of the steps for a CPU) read a steady step and printed no note; now it
    says the step is the busy moment's. A wait for the run's own workers is no busy
    machine."""
    m = {"step_time_unprofiled_reliable": True, "step_cpu_wait_unprofiled_share": 0.40,
         "step_others_cpus_unprofiled": 0.9, "cpu_count": 2, "dataloader_num_workers": 4}
    from diagnose.metrics.context.clock_note import clock_note

    note = clock_note(dict(m)) or ""
    assert note.startswith("the steps were timed on a busy machine") and "40%" in note
    assert clock_note({**m, "step_others_cpus_unprofiled": 0.02}) is None
    assert clock_note({**m, "step_cpu_wait_unprofiled_share": 0.04}) is None


def test_a_load_that_moved_during_the_capture_is_said(tmp_path: Path) -> None:
    """Other processes took 1.00 CPUs while the window was profiled and 0.30 while the
    steps after it were timed (a new user's capture beside a test suite that ended half
    way: 3,145 ms profiled steps against a 152 ms step): the session's notes say the two
    come from different loads. A steady load, or one figure missing: nothing."""
    from diagnose.metrics.context import load_shift_note
    from diagnose.session.lifecycle import Session

    moved = {"host_cpu_others_cpus": 0.998, "step_others_cpus_unprofiled": 0.303}
    note = load_shift_note(moved)
    assert note is not None and "took 1.00 CPUs while the window was profiled and 0.30" in note
    assert load_shift_note({**moved, "host_cpu_others_cpus": 0.7}) is None  # under 0.5 apart
    assert load_shift_note({"step_others_cpus_unprofiled": 0.303}) is None
    phase = ["wait"] * 4 + ["active"] * 2 + ["settle"] + ["after"] * 6
    s = Session.__new__(Session)
    s._dist, s._sampler_thread, s.notes = None, None, []
    s._load_metrics = lambda run_dir: {"host_cpu_others_cpus": 0.998}  # the window's samples
    ctx = {"capture": {**_cap(phase, [90.0, 10.0, 10.5, 10.2, 30.0, 31.0, 80.0] + [10.1] * 6),
                       "after_others_cpus": 0.303}}
    s._note_clock(ctx, tmp_path)
    assert [n for n in s.notes if n.startswith("the machine's load changed")], s.notes
    assert ctx["capture"]["notes"] == s.notes


def test_the_busy_note_starts_where_the_predictions_are_withheld() -> None:
    """The share of steps waiting for other processes' CPUs from which the step time is
    said to be the busy moment's is the one from which a change of CPU work gets no number
    (two layers apart: metrics cannot import the step model's calibration)."""
    from diagnose.metrics.context.clock_note import BUSY_NOTE
    from diagnose.stepmodel.calibration import BUSY

    assert BUSY_NOTE == BUSY
