"""``torch-diagnose compare A B``: deltas, findings resolved/still/new, JSON, the CI gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.cli import main
from diagnose.report.compare import compare_reports
from tests import tracebuilder as tb
from tests.conftest import shared_trace

NW0 = "kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
NW4 = "kineto/resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz"


def _metric(doc: dict, name: str) -> dict:
    return next(m for m in doc["metrics"] if m["name"] == name)


@pytest.mark.shared_traces
def test_resnet_more_workers(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(shared_trace(NW0)), str(shared_trace(NW4))
    assert main(["compare", a, b, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dl = _metric(doc, "dataloader_share")
    assert 0.35 <= dl["a"] <= 0.40 and dl["b"] <= 0.02 and dl["verdict"] == "better"
    step = _metric(doc, "step_time_median_ms")
    assert step["b"] < step["a"] and step["change_pct"] == pytest.approx(
        (step["b"] - step["a"]) / step["a"] * 100, abs=0.01)
    assert "IN001" in {f["rule"] for f in doc["findings"]["resolved"]}
    assert "PR001" in {f["rule"] for f in doc["findings"]["still"]}
    for name in ("step_time_p90_ms", "gpu_busy_frac", "share_kernel",
                 "idle_sync_frac", "memcpy_pageable_host_frac", "launch_api_frac"):
        _metric(doc, name)
    assert "share_dataloader" not in {m["name"] for m in doc["metrics"]}  # dataloader_share

    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "dataloader_share" in out and "39.6%" in out and "1.0%" in out
    assert "-38.6 pp" in out
    assert "resolved" in out and "IN001" in out


@pytest.mark.shared_traces
def test_fail_on_regression(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(shared_trace(NW0)), str(shared_trace(NW4))
    assert main(["compare", a, b, "--fail-on-regression", "5"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "within the allowed +5%" in last and "step time as profiled" in last
    # the other way round (4 workers -> none) the median step is ~39% slower, but 6 steps
    # against 6, one of them as slow as A's: the medians' interval reaches "no change"; the
    # mean step's (+25%) does not, and it is a regression
    assert main(["compare", b, a, "--fail-on-regression", "5", "--format", "json"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "+39.3%" in lines[0] and "worse by the mean step" in lines[0]
    doc = json.loads(captured.out)  # stdout stays pure JSON
    assert doc["regression"]["failed"] is True and doc["step_time"]["verdict"] == "worse"
    assert doc["step_time"]["by_mean"] is True and doc["step_time"]["mean_interval_pct"][0] > 5
    assert doc["step_time"]["a"]["steps"] == 6 and doc["step_time"]["interval_pct"][0] < 0


def test_fail_on_regression_beyond_the_noise(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    fast = tb.healthy().write(tmp_path / "fast.pt.trace.json.gz")
    slow = tb.dataloader_bound().write(tmp_path / "slow.pt.trace.json.gz")
    assert main(["compare", str(fast), str(slow), "--fail-on-regression", "5"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "worse" in last and "regression: more than the allowed +5%" in last
    assert main(["compare", str(slow), str(fast), "--fail-on-regression", "5"]) == 0
    assert "better" in capsys.readouterr().out


def test_findings_resolved_new_and_not_evaluated(tmp_path: Path) -> None:
    slow = analyze(tb.dataloader_bound().write(tmp_path / "slow.pt.trace.json.gz"))
    good = analyze(tb.healthy().write(tmp_path / "good.pt.trace.json.gz"))
    c = compare_reports(slow, good)
    assert [f.rule for f in c.by_status("resolved")] == ["IN001"] and not c.by_status("new")
    back = compare_reports(good, slow)
    assert [f.rule for f in back.by_status("new")] == ["IN001"]
    assert back.step_change_pct() is not None and back.step_change_pct() > 0
    # a rule B cannot evaluate (no GPU there) is not claimed as resolved
    copies = analyze(tb.pageable_copies().write(tmp_path / "copies.pt.trace.json.gz"))
    cpu = analyze(tb.cpu_only().write(tmp_path / "cpu.pt.trace.json.gz"))
    cc = compare_reports(copies, cpu)
    assert "TR001" in {f.rule for f in cc.by_status("not_evaluated")}
    assert "TR001" not in {f.rule for f in cc.by_status("resolved")}


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tb.healthy().write(tmp_path / "good.pt.trace.json.gz")
    bad = tmp_path / "broken.pt.trace.json"
    bad.write_text("{not json", encoding="utf-8")
    for args in ([str(tmp_path / "missing.json"), str(good)], [str(good), str(bad)]):
        assert main(["compare", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("torch-diagnose: error:"), err
    with pytest.raises(SystemExit) as e:
        main(["compare", str(good), str(good), "--fail-on-regression", "-1"])
    assert e.value.code == 2


def test_output_file(tmp_path: Path) -> None:
    a = tb.dataloader_bound().write(tmp_path / "a.pt.trace.json.gz")
    b = tb.healthy().write(tmp_path / "b.pt.trace.json.gz")
    out = tmp_path / "cmp.txt"
    assert main(["compare", str(a), str(b), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "step_time_median_ms" in text and "resolved" in text


# ---------------------------------------------------------------- real captures, this machine
def _capture(tmp_path: Path, delay_s: float) -> Path:
    """A tiny CPU job whose DataLoader sleeps ``delay_s`` per sample, captured with
    ``diagnose(model, loader)``: its run folder (steps timed without the profiler too)."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader

    from diagnose.session import diagnose
    from tests.datasets import Pairs, train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(Pairs(n=800, delay_s=delay_s), batch_size=8)
        with diagnose(model, loader, steps=3, wait=8, out_dir=tmp_path, sample_hz=0,
                      print_report=False) as d:
            train(model, opt, loader, d)
    finally:
        torch.set_num_threads(threads)
    assert d.run_dir is not None
    return Path(d.run_dir)


def test_captures_same_job_within_noise_and_a_real_change_better(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two captures of one job. Another process holding a CPU for the whole of one capture
    # looks exactly like a real change (+15% was seen here), and nothing in the two runs
    # tells them apart: up to 3 pairs are made, and one must read "within noise" (a tool
    # that called every pair a change would fail; a busy stretch does not).
    verdicts = []
    for _ in range(3):
        a1, a2 = _capture(tmp_path, 0.002), _capture(tmp_path, 0.002)
        code = main(["compare", str(a1), str(a2), "--fail-on-regression", "5"])
        out = capsys.readouterr().out
        assert "step time without the profiler" in out
        verdicts.append((code, "within noise" in out))
        if verdicts[-1] == (0, True):
            break
    assert verdicts[-1] == (0, True), verdicts
    # A real change: 8 ms of loading a step instead of 16 (~-45%, model compute included).
    # A busy stretch during B's capture can eat part of it, so, like the pairs above, up
    # to 3 captures of B are made and one must read "better" by more than 15% (a tool that
    # never saw a real change, or saw it as noise, would fail all three).
    for _ in range(3):
        b = _capture(tmp_path, 0.001)
        assert main(["compare", str(a1), str(b), "--format", "json"]) == 0
        st = json.loads(capsys.readouterr().out)["step_time"]
        assert st["measured"] == "without the profiler"
        assert st["a"]["steps"] >= 5 and st["b"]["steps"] >= 5
        if st["verdict"] == "better" and st["change_pct"] < -15:
            break
    assert st["verdict"] == "better" and st["interval_pct"][1] < -5, st
    assert -70 < st["change_pct"] < -15, st  # no more than the whole of the loading time
    ra = analyze(a1)
    assert st["a_median_ms"] == ra.step_time()["median_ms"]  # the figure analyze leads with


def test_runs_whose_host_ran_ahead_of_the_gpu_are_said_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The healthy sample on an H100 and an H200: both loops never wait for the GPU, so
    their profiled steps (2.9 and 2.2 ms) are the host's, not the ~7 ms a step of GPU work
    the job runs at; the comparison says so instead of leaving "-19%" unqualified."""
    root = Path(__file__).resolve().parents[2] / "samples" / "traces"
    a, b = (str(root / d / "healthy.pt.trace.json.gz") for d in ("gpu", "gpu_h200"))
    assert main(["compare", a, b, "--format", "json"]) == 0
    note = json.loads(capsys.readouterr().out)["step_time"]["note"]
    assert "run A's host ran ahead of its GPU (7.05 ms of GPU work a step" in note
    assert "run B's host ran ahead of its GPU (6.75 ms" in note
    assert note.endswith("the profiled steps are the host's, not the job's pace")
    # runs that keep up with their GPU get no such note
    nw0 = str(root / "gpu" / "slow_loader.pt.trace.json.gz")
    assert main(["compare", nw0, nw0, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time"]["note"] is None


# ------------------------------------------------------------------ one voice
def _with_unprofiled(r, steps_ms: list[float]):  # type: ignore[no-untyped-def]
    """``r`` as a live capture whose loop timed ``steps_ms`` without the profiler."""
    r.metrics["step_time_unprofiled_median_ms"] = float(sorted(steps_ms)[len(steps_ms) // 2])
    r.metrics["step_time_unprofiled_steps"] = len(steps_ms)
    r.series["step_unprofiled_ms"] = list(steps_ms)
    return r


def test_the_table_speaks_with_the_headline(tmp_path: Path) -> None:
    """The step-time row is the headline's figure with its verdict: a change the interval
    calls "within noise" is not "better" two lines below (the profiled median moved 30%
    here); the other step statistics carry no verdict; each metric is listed once."""
    slow = analyze(tb.dataloader_bound().write(tmp_path / "slow.pt.trace.json.gz"))
    fast = analyze(tb.healthy().write(tmp_path / "fast.pt.trace.json.gz"))
    c = compare_reports(slow, fast)
    assert c.step is not None and c.step.measured == "as profiled"
    (head,) = [m for m in c.metrics if m.headline]
    assert c.metrics[0] is head and head.name == "step_time_median_ms"
    assert (head.a, head.b, head.verdict) == (c.step.median_a, c.step.median_b, c.step.verdict)
    assert c.step_change_pct() == pytest.approx(head.change_pct)
    names = [m.name for m in c.metrics]
    assert len(names) == len(set(names)) and "share_dataloader" not in names
    assert all(m.verdict is None for m in c.metrics
               if m.name in ("step_time_p90_ms", "step_time_cv"))

    # live captures: the headline is the unprofiled step, within noise (a noisy +-10%)
    a = _with_unprofiled(slow, [100.0, 80.0, 120.0, 95.0, 110.0, 90.0, 105.0, 85.0])
    b = _with_unprofiled(fast, [92.3, 75.0, 110.0, 88.0, 101.0, 83.0, 97.0, 79.0])
    c = compare_reports(a, b)
    assert c.step is not None and c.step.measured == "without the profiler"
    assert c.step.verdict == "within noise"
    head = c.metrics[0]
    assert head.headline and head.name == "step_time_unprofiled_median_ms"
    assert head.verdict == "within noise" and head.change_pct == pytest.approx(
        c.step.change_pct)
    profiled = next(m for m in c.metrics if m.name == "step_time_median_ms")
    assert profiled.change_pct is not None and profiled.change_pct < -5  # beyond the floor,
    assert profiled.verdict is None  # yet no second verdict on the step time
    doc = c.to_json()
    assert doc["metrics"][0]["headline"] is True and doc["metrics"][0]["verdict"] == \
        doc["step_time"]["verdict"] == "within noise"
    assert doc["step_time_median_change_pct"] == pytest.approx(c.step.change_pct, abs=0.01)
    from diagnose.report.compare import render_text

    text = render_text(c)
    rows = [line for line in text.splitlines() if "step_time" in line]
    assert "within noise" in rows[0] and "step_time_unprofiled_median_ms" in rows[0]
    assert not any("better" in r or "worse" in r for r in rows), rows


def test_a_share_that_fell_because_the_step_grew_is_not_better(tmp_path: Path) -> None:
    """A new user's CI gate: a planted sleep took the step from 2.3 to 5.9 ms; the
    DataLoader's share fell 26% -> 14% only because the step grew (its wait went 0.84 ->
    0.91 ms, worse). The share gets no verdict; where the wait fell too, it is better."""
    a = analyze(tb.dataloader_bound().write(tmp_path / "a.pt.trace.json.gz"))
    b = analyze(tb.dataloader_bound(share=0.6).write(tmp_path / "b.pt.trace.json.gz"))
    assert compare_reports(a, b).step.verdict == "worse"  # the step grew
    a.metrics.update(dataloader_share=0.261, dataloader_wait_ms_per_step=0.84)
    b.metrics.update(dataloader_share=0.141, dataloader_wait_ms_per_step=0.91)
    rows = {m.name: m for m in compare_reports(a, b).metrics}
    assert rows["dataloader_wait_ms_per_step"].verdict == "worse"
    assert rows["dataloader_share"].verdict is None
    assert compare_reports(a, b).to_json()["metrics"][[m["name"] for m in compare_reports(
        a, b).to_json()["metrics"]].index("dataloader_share")]["verdict"] is None
    b.metrics.update(dataloader_wait_ms_per_step=0.40)
    rows = {m.name: m for m in compare_reports(a, b).metrics}
    assert rows["dataloader_share"].verdict == "better"


def test_a_share_that_rose_because_the_step_shrank_is_not_worse(tmp_path: Path) -> None:
    """A new user's fix took the step 40% down; the DataLoader's share rose 8.7% -> 14%
    because the compute around the wait shrank while the wait itself fell (1.2 -> 1.1 ms)
    or held. No verdict on the share; where the wait grew too, it is worse."""
    a = analyze(tb.dataloader_bound(share=0.6).write(tmp_path / "a.pt.trace.json.gz"))
    b = analyze(tb.dataloader_bound().write(tmp_path / "b.pt.trace.json.gz"))
    assert compare_reports(a, b).step.verdict == "better"  # the step shrank
    a.metrics.update(dataloader_share=0.087, dataloader_wait_ms_per_step=1.2)
    b.metrics.update(dataloader_share=0.14, dataloader_wait_ms_per_step=1.1)
    rows = {m.name: m for m in compare_reports(a, b).metrics}
    assert rows["dataloader_wait_ms_per_step"].verdict == "better"
    assert rows["dataloader_share"].verdict is None
    b.metrics.update(dataloader_wait_ms_per_step=1.2)  # held: the share still no verdict
    assert {m.name: m for m in compare_reports(a, b).metrics}["dataloader_share"].verdict \
        is None
    b.metrics.update(dataloader_wait_ms_per_step=1.5)
    rows = {m.name: m for m in compare_reports(a, b).metrics}
    assert rows["dataloader_share"].verdict == "worse"


def test_the_windows_shares_are_within_noise_where_the_step_is(tmp_path: Path) -> None:
    """A new user compared two captures of one unchanged job: the step time within noise,
    the profiled window's loader share +21.6 points and its wait +48% marked "worse". Where
    the headline's step time is within noise, the window's timed shares and times are too;
    a count (sync calls a step) keeps its verdict."""
    path = tb.dataloader_bound().write(tmp_path / "a.pt.trace.json.gz")
    a, b = analyze(path), analyze(path)
    a.metrics.update(dataloader_share=0.316, dataloader_wait_ms_per_step=7.92,
                     sync_calls_per_step=1.0)
    b.metrics.update(dataloader_share=0.532, dataloader_wait_ms_per_step=11.7,
                     sync_calls_per_step=4.0)
    c = compare_reports(a, b)
    assert c.step.verdict == "within noise"
    rows = {m.name: m for m in c.metrics}
    assert rows["dataloader_share"].verdict == "within noise"
    assert rows["dataloader_wait_ms_per_step"].verdict == "within noise"
    assert rows["sync_calls_per_step"].verdict == "worse"
    # a share that moved 21.6 points: a line says the time stayed in the step
    (note,) = c.notes()
    assert note.startswith("dataloader_share rose 31.6% -> 53.2% while the step time "
                           "stayed within noise")
    assert c.to_json()["notes"] == [note]
    from diagnose.report.compare import render_text

    assert "dataloader_share rose 31.6% -> 53.2%" in " ".join(render_text(c).split())
    b.metrics.update(dataloader_share=0.39)  # 7.4 points: the verdict alone
    assert compare_reports(a, b).notes() == []


def test_a_run_whose_own_report_doubts_its_step_says_so(tmp_path: Path) -> None:
    """Run B's clock marked its step time unreliable, and other processes held the CPU
    its training thread waited for in 40% of its steps: the comparison and the CI gate's
    line say so, whatever the verdict; runs without such doubts get no caveat."""
    from diagnose.report.compare import regression_line

    a = _with_unprofiled(analyze(tb.healthy().write(tmp_path / "a.pt.trace.json.gz")),
                         [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.1])
    b = _with_unprofiled(analyze(tb.healthy().write(tmp_path / "b.pt.trace.json.gz")),
                         [30.0, 12.0, 45.0, 14.0, 38.0, 13.0, 40.0, 12.5])
    assert compare_reports(a, b).step.note is None
    b.metrics.update(step_time_unprofiled_reliable=False, step_cpu_wait_unprofiled_share=0.4,
                     host_cpu_others_cpus=1.0)
    c = compare_reports(a, b)
    assert c.step.note == ("run B's own report marks its step time unreliable and waited "
                           "for a CPU other processes held in 40% of its steps: compare "
                           "again on a quieter host")
    worse, line = regression_line(c, 5.0)
    assert line.endswith(f"({c.step.note})")
    # the same spread where B's training thread waited for its own 2 DataLoader workers
    # (other processes took 0.1 CPUs): the spread is the run's own, not the host's
    b.metrics.update(host_cpu_others_cpus=0.1, step_others_cpus_unprofiled=0.1,
                     dataloader_num_workers=2, workers_count=2, cpu_count=2)
    own = compare_reports(a, b).step.note
    assert own is not None and "compare again on a quieter host" not in own
    # a new user read "unreliable (this run's own processes held (its 2 ...": held what
    assert own.startswith("run B's own report marks its step time unreliable: its training "
                          "thread waited for a CPU this run's own processes held (its 2 "
                          "DataLoader workers")
    assert own.endswith("the spread is the run's own, which a quieter host leaves as it is; "
                        "compare more steps of each")


def test_a_host_whose_own_pace_moved_is_said_to_have_moved(tmp_path: Path) -> None:
    """A new user compared two captures of one unchanged job minutes apart: 86.1 -> 73.8 ms,
    "better", on a shared host whose speed drifted. Each capture times a fixed loop alone
    as it begins (host_pace_ms): where the two differ beyond the noise floor, the step line
    says the host moved as well as the job; within it, nothing."""
    steps_a = [86.1, 84.1, 89.3, 85.0, 87.2, 86.0, 88.1, 84.9]
    a = _with_unprofiled(analyze(tb.healthy().write(tmp_path / "a.pt.trace.json.gz")), steps_a)
    b = _with_unprofiled(analyze(tb.healthy().write(tmp_path / "b.pt.trace.json.gz")),
                         [x * 0.857 for x in steps_a])
    a.metrics.update(host_pace_ms=6.10, host_pace_min_ms=6.02, host_pace_max_ms=6.21)
    b.metrics.update(host_pace_ms=5.20, host_pace_min_ms=5.12, host_pace_max_ms=5.31)
    c = compare_reports(a, b)
    assert c.step.verdict == "better"  # the verdict is the steps'; the note says why to doubt
    assert c.step.note == (
        "the host's own pace moved: a fixed Python loop, timed alone as each capture began, "
        "took 6.10 ms in A and 5.20 ms in B (-15%), so the step times moved with the host as "
        "well as with the job: compare again on a quieter host")
    b.metrics.update(host_pace_ms=5.95, host_pace_min_ms=5.90, host_pace_max_ms=5.99)
    assert compare_reports(a, b).step.note is None  # apart, but -2.5%: within the floor
    # the medians 15% apart, but the rounds overlap (one timing's jitter): nothing said
    b.metrics.update(host_pace_ms=5.20, host_pace_min_ms=5.12, host_pace_max_ms=6.40)
    assert compare_reports(a, b).step.note is None
    b.metrics["host_pace_ms"] = None  # a run without the timing (a saved trace, no loader)
    assert compare_reports(a, b).step.note is None


def test_too_few_steps_cannot_pass_a_regression_gate(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # 2 steps a run give no interval: a +150% change is not passed as "within noise"
    fast = tb.healthy(steps=2).write(tmp_path / "fast.pt.trace.json.gz")
    slow = tb.dataloader_bound(steps=2, share=0.6).write(tmp_path / "slow.pt.trace.json.gz")
    assert main(["compare", str(fast), str(slow), "--fail-on-regression", "5"]) == 2
    err = capsys.readouterr().err
    assert "too few steps to tell a regression" in err and "cannot tell" in err
    assert main(["compare", str(fast), str(slow)]) == 0
    assert "cannot tell" in capsys.readouterr().out


def test_two_models_are_said_to_be_two_models(tmp_path: Path) -> None:
    """Runs whose models differ in their parameter count say that the step times compare
    two models. Same model, or a count not known: nothing said."""
    path = tb.healthy().write(tmp_path / "run.pt.trace.json.gz")
    cnn = analyze(path, context={"model": {"param_count": 1_200_000}})
    mlp = analyze(path, context={"model": {"param_count": 30_000}})
    note = compare_reports(cnn, mlp).step.note
    assert note is not None and "models differ (A 1,200,000 parameters, B 30,000)" in note
    same = compare_reports(cnn, analyze(path, context={"model": {"param_count": 1_200_000}}))
    assert same.step.note is None or "models differ" not in same.step.note
    unknown = compare_reports(cnn, analyze(path))
    assert unknown.step.note is None or "models differ" not in unknown.step.note


def test_two_batch_sizes_are_compared_per_sample(tmp_path: Path) -> None:
    """Runs whose DataLoaders batch 32 and 16 samples, the same steps: a new user read
    "better" per step for a run that did 2.5x the time a sample. The change, its interval
    and its verdict are per sample (here +100%: worse, twice the time a sample in B); the
    medians stay per step, and the table's step row gives no verdict of its own. The same
    batch, or one not known: per step, nothing said."""
    from diagnose.report.compare import render_text

    path = tb.healthy().write(tmp_path / "run.pt.trace.json.gz")
    big = analyze(path, context={"dataloader": {"batch_size": 32}})
    small = analyze(path, context={"dataloader": {"batch_size": 16}})
    c = compare_reports(big, small)
    assert c.step.note is not None and "batches differ (A 32 samples, B 16)" in c.step.note
    ma, mb = c.step.median_a, c.step.median_b
    assert f"{ma / 32:.3f} against {mb / 16:.3f} ms a sample" in c.step.note
    assert c.step.per_sample == (32, 16) and ma == mb
    assert c.step.change_pct == pytest.approx(100.0) and c.step.verdict == "worse"
    assert c.step.line().startswith(f"time per sample as profiled: {ma / 32:,.4g} ms ->")
    j = c.step.to_json()
    assert (j["per"], j["batch_sizes"], j["a_median_ms"]) == ("sample", [32, 16], ma)
    assert c.metrics[0].headline and c.metrics[0].verdict is None
    assert "ms a sample, middle half" in render_text(c)
    back = compare_reports(small, big).step
    assert back.change_pct == pytest.approx(-50.0) and back.verdict == "better"
    for other in (analyze(path, context={"dataloader": {"batch_size": 32}}), analyze(path)):
        note = compare_reports(big, other).step.note
        assert note is None or "batches differ" not in note


def test_within_noise_says_how_large_a_change_the_captures_tell_apart(tmp_path: Path) -> None:
    """A new user checked a fix the tool predicted at 1.05x with one capture each side:
    -2.7%, "within noise", while runs timed in turn measured 1.10x. "Within noise" now says
    the smallest change one capture each tells apart (the floor plus the interval's
    half-width) and how to measure a smaller one; a verdict beyond the band says neither."""
    from diagnose.report.compare import render_text
    from diagnose.report.compare_html import render_compare_html

    steps = [31.0, 32.5, 31.6, 30.9, 32.0, 31.4, 32.2, 31.1, 31.8, 31.5]
    a = _with_unprofiled(analyze(tb.healthy().write(tmp_path / "a.pt.trace.json.gz")), steps)
    b = _with_unprofiled(analyze(tb.healthy().write(tmp_path / "b.pt.trace.json.gz")),
                         [x * 0.973 for x in steps])
    c = compare_reports(a, b)
    st = c.step
    assert st is not None and st.verdict == "within noise" and st.diff is not None
    lo, hi = st.diff.lo_pct, st.diff.hi_pct
    assert st.least_pct == pytest.approx(5.0 + (hi - lo) / 2)
    assert c.to_json()["step_time"]["tells_apart_pct"] == pytest.approx(st.least_pct, abs=0.01)
    said = f"tells apart only a change beyond about ±{st.least_pct:.0f}%"
    assert said in " ".join(render_text(c).split())
    assert said in " ".join(render_compare_html(c).split())
    assert "time A and B in turn" in st.resolution()
    slower = analyze(tb.healthy().write(tmp_path / "c.pt.trace.json.gz"))
    worse = compare_reports(a, _with_unprofiled(slower, [x * 1.3 for x in steps]))
    assert worse.step.verdict == "worse" and worse.step.resolution() is None
    assert "tells apart" not in render_text(worse)


def test_a_finding_whose_fix_is_in_place_in_b_is_resolved(tmp_path: Path) -> None:
    """A new user's B (persistent workers) showed IN005 "not evaluated (... the workers
    persist)": B cannot evaluate it because A's fix removed the epochs' restarts. Where B
    has one of the finding's fixes in place, the finding is resolved and says which; a
    rule B cannot evaluate otherwise stays "not evaluated"."""
    from diagnose.report.compare import render_text
    from diagnose.report.compare_html import render_compare_html
    from diagnose.rules.engine import Finding, NotEvaluated

    a = analyze(tb.healthy().write(tmp_path / "a.pt.trace.json.gz"))
    b = analyze(tb.healthy().write(tmp_path / "b.pt.trace.json.gz"))
    a.findings.append(Finding(rule="IN005", category="input", severity="info",
                              title="Every epoch starts the DataLoader's workers again",
                              message="Each epoch's start cost 228 ms", evidence={},
                              fixes=["persistent_workers"], estimated_gain=0.06))
    b.not_evaluated.append(NotEvaluated("IN005", "needs dataloader_epoch_start_share: no "
                                        "epoch began, or the workers persist"))
    c = compare_reports(a, b)
    assert "IN005" in {f.rule for f in c.by_status("not_evaluated")}  # B's workers: unknown
    b.metrics["dataloader_persistent_workers"] = True
    c = compare_reports(a, b)
    (ch,) = [f for f in c.findings if f.rule == "IN005"]
    assert ch.status == "resolved" and ch.reason == (
        "its fix is in place: persistent_workers=True already")
    said = "B: its fix is in place: persistent_workers=True already"
    assert said in " ".join(render_text(c).split())
    assert said in " ".join(render_compare_html(c).split())
