"""The step model (diagnose/model): the replay of the unmodified step reproduces the
measured one on every real trace we have, and the graph really carries the dependencies
(a change of a task's time moves the step by what the dependencies say)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from diagnose import analyze
from diagnose.stepmodel import TaskKind, build_graph, replay, step_model
from diagnose.trace import read_trace
from tests import tracebuilder as tb
from tests.conftest import all_shared_traces
from tests.modeltraces import as_trace, sync_loop

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*(REPO / "samples" / "traces").rglob("*.json.gz"),
                  *(REPO / "tests" / "data" / "gpu").glob("*.json.gz")])
# traces with no model, and why (anything else must be modelled)
NO_MODEL = {
    "triton_example__triton_example.json.gz": "no ProfilerStep#",
    "mtia_trace_single_rank__mtia_rank_0.json.gz": "categories it does not (mtia",
}
# CPU runs without a DataLoader (gloo ranks): their host work alone, replayed as measured
HOST_ONLY = ("cpu_only__rank-34.OLDv.pt.trace.json.gz",
             "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
ALL = [*all_shared_traces(), *SHIPPED]


@pytest.fixture(scope="module")
def models() -> dict[str, object]:
    return {p.name: step_model(read_trace(p)) for p in ALL}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_replay_reproduces_each_trace(path, models):
    m = models[path.name]
    if path.name in NO_MODEL:
        assert m.graph is None and NO_MODEL[path.name] in m.why
        return
    assert m.graph is not None, m.why
    assert abs(m.error) <= 0.10, f"replayed {m.replayed_ms:.3f} vs measured {m.measured_ms:.3f} ms"
    if path.name in HOST_ONLY:
        assert m.to_json()["host_only"] is True and abs(m.error) < 1e-9


def test_replay_accuracy_over_all_traces(models):
    errors = [abs(m.error) for m in models.values() if m.graph is not None]
    # every trace (the project's own, and ../shared/traces where present) has its model
    # but the few that say why not
    assert len(errors) == len({p.name for p in ALL} - NO_MODEL.keys())
    assert len(errors) >= (20 if all_shared_traces() else 9)
    assert statistics.median(errors) <= 0.03


def test_hand_worked_step_and_its_dependencies(tmp_path):
    """sync_loop: a step of 111 + 1000 us (see its docstring). The host waits for the kernel,
    so doubling the kernel lengthens the step by exactly 1000 us; doubling the host work
    before the launch (100 us + the op's 3 us before its launch call: one host task of
    103 us) lengthens it by 103 us."""
    g = build_graph(as_trace(sync_loop(), tmp_path))
    assert not isinstance(g, str)
    r = replay(g)
    assert r.step_ms[1:] == pytest.approx([1.111] * (g.n_steps - 1), abs=2e-3)
    assert r.step_ms == pytest.approx(g.steps_measured / 1e3, abs=1e-6)
    slow = replay(g.scale(g.is_kind(TaskKind.KERNEL), 2.0))
    assert slow.step_ms - r.step_ms == pytest.approx([1.0] * g.n_steps, abs=1e-3)
    host = g.is_kind(TaskKind.HOST) & (g.dur > 90)
    assert host.sum() == g.n_steps
    assert replay(g.scale(host, 2.0)).step_ms - r.step_ms == pytest.approx([0.103] * g.n_steps, abs=1e-3)


def test_host_bound_step_ignores_faster_kernels(tmp_path):
    """A launch-bound step (kernels much shorter than their launches' spacing): halving
    every kernel leaves the step where it was, as the critical path says."""
    b = tb.launch_bound(steps=4)
    g = build_graph(as_trace(b, tmp_path))
    assert not isinstance(g, str)
    base = replay(g).mean_step_ms
    fast = replay(g.scale(g.is_kind(TaskKind.KERNEL), 0.5)).mean_step_ms
    assert fast == pytest.approx(base, rel=0.01)


def test_cpu_only_trace_with_a_loader_is_modelled(tmp_path):
    m = step_model(as_trace(tb.cpu_only(), tmp_path))
    assert m.graph is not None, m.why
    assert m.error == pytest.approx(0.0, abs=1e-6)
    assert m.graph.is_kind(TaskKind.DL_WAIT).sum() == m.graph.n_steps  # workers=2


def test_json_shape(tmp_path):
    doc = analyze(REPO / "samples" / "traces" / "gpu" / "pageable_copy.pt.trace.json.gz").to_json()
    sm = doc["step_model"]
    assert set(sm) >= {"measured_ms", "replayed_ms", "error"}
    assert sm["error"] == pytest.approx(sm["replayed_ms"] / sm["measured_ms"] - 1, abs=1e-4)
    assert doc["step_model_why"] is None
    json.dumps(doc)


def test_a_host_only_model_says_its_replay_matches_by_construction(tmp_path):
    """A CPU run's model replays one host's tasks in order: its JSON says host_only and its
    line does not quote the zero error as a check; a GPU trace's line quotes the error."""
    from diagnose.stepmodel.step import step_model_line

    cpu = step_model(as_trace(tb.cpu_only(), tmp_path)).to_json()
    assert cpu is not None and cpu["host_only"] is True
    line = step_model_line(cpu, None)
    assert "by construction" in line and "replayed to" not in line
    gpu = analyze(REPO / "samples" / "traces" / "gpu" / "pageable_copy.pt.trace.json.gz")
    sm = gpu.to_json()["step_model"]
    assert sm["host_only"] is False
    assert step_model_line(sm, None).startswith("replayed to ")


def test_json_without_a_model_says_why(shared):
    doc = analyze(shared / "hta" / "triton_example__triton_example.json.gz").to_json()
    assert doc["step_model"] is None
    assert "no ProfilerStep#" in doc["step_model_why"]


def test_report_line(tmp_path):
    rep = analyze(REPO / "samples" / "traces" / "gpu" / "healthy.pt.trace.json.gz")
    from diagnose.report.html import render_html

    text = rep.render_text(width=200)
    assert "step model" in text and "of the measured step" in text
    assert "of the measured step" in render_html(rep)


def test_window_is_around_the_median_step():
    from diagnose.stepmodel.window import pick_window

    durs = np.array([50.0, 10, 11, 12, 13, 14, 15, 90])
    a, b = pick_window(durs, 5)
    assert b - a == 5 and a <= int(np.argsort(durs)[4]) < b


#: a memory fix's predicted peak, beside or without its time prediction (docs/json.md)
PEAK_KEYS = ("peak_bytes", "peak_range", "peak_method", "peak_fits", "peak_change")


def test_findings_fixes_carry_predictions():
    """findings[].fixes[].predicted = {change, step_ms, speedup, range, may_not_help?,
    assumed?, peak_*?}, or null and why; may_not_help exactly where the range's slow end is
    the step as it is; a saved trace's pinned copies assume the link's rate. (A memory fix's
    peak keys, and a peak without a time prediction: tests/memory/test_finding_peaks.py.)"""
    doc = analyze(REPO / "samples" / "traces" / "gpu" / "pageable_copy.pt.trace.json.gz").to_json()
    fixes = [x for f in doc["findings"] for x in f["fixes"]]
    assert fixes
    made = [x["predicted"] for x in fixes if x["predicted"] is not None]
    assert made, fixes
    for p in made:
        assert {"change", "step_ms", "speedup", "range"} <= set(p) <= {
            "change", "step_ms", "speedup", "range", "speedup_range", "may_not_help", "slower",
            "assumed", "range_parts", *PEAK_KEYS}
        lo, hi = p["range"]
        assert lo <= p["step_ms"] <= hi and p["speedup"] > 0
        assert p.get("may_not_help", False) == (hi >= p["step_ms"] * p["speedup"] - 1e-3)
    for x in fixes:  # a why exactly where there is no time prediction
        timed = x["predicted"] is not None and "step_ms" in x["predicted"]
        assert timed != isinstance(x["predicted_why"], str)
    tr = [f for f in doc["findings"] if f["category"] == "transfer"]
    assert tr and tr[0]["fixes"][0]["id"] == "pin_memory"
    assert tr[0]["fixes"][0]["predicted"]["change"] == {"pin_memory": True, "non_blocking": True}
    assert "PCIe" in tr[0]["fixes"][0]["predicted"]["assumed"][0]


def test_a_fix_predicted_to_slow_the_job_is_not_first(tmp_path):
    """cpu_loader with 8 MB batches: workers are predicted 0.55x (tests/fixes/test_workers.py), so the
    finding does not lead with them and says why."""
    from diagnose.fixes import FIXES, TrainConfig
    from diagnose.fixes.findings import predict_findings
    from diagnose.rules.engine import Finding
    from diagnose.stepmodel.facts import Facts
    from diagnose.stepmodel.prediction import Predictor
    from tests.modeltraces import cpu_loader

    m = step_model(as_trace(cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
             "input_batch_bytes": 8_000_000, "dataloader_num_workers": 0,
             "worker_transfer_gbps": 2.0, "torch_num_threads": 1, "proc_cpu_mean_pct": 180.0}
    f = Finding("IN001", "input", "critical", "t", "m", {}, ["num_workers", "faster_input"], 0.6)
    predict_findings([f], Predictor(m, Facts.from_metrics(facts)), TrainConfig(), facts,
                     FIXES)
    assert f.fixes == ["faster_input", "num_workers"]
    assert any(h.startswith("Not offered: ") and "num_workers=" in h
               and "predicted 0.55x" in h and h.endswith(
                   "slower, on inputs this capture did not time (the JSON's assumed)")
               for h in f.hints), f.hints
    # faster_input cannot be predicted: the rule's own time at stake and grade stand
    assert f.severity == "critical" and f.estimated_gain == 0.6
    assert not any("busy machine" in h for h in f.hints)


@pytest.mark.parametrize("busy", [0.04, 0.3])
def test_a_busy_machine_withholds_predictions_of_cpu_work(tmp_path, busy: float) -> None:
    """Other processes held a CPU the training thread waited for (schedstat): from 10% of
    the timed steps on, a change of workers or threads gets no number (the fix stays
    offered, and says why); below it, the number stands. A wait for the run's own workers
    keeps its predictions, with a hint."""
    from diagnose.fixes import FIXES, TrainConfig
    from diagnose.fixes.findings import BUSY, ON_A_BUSY_MACHINE, offered, predict_findings
    from diagnose.rules.engine import Finding
    from diagnose.stepmodel.facts import Facts
    from diagnose.stepmodel.prediction import Prediction, Predictor
    from tests.modeltraces import cpu_loader

    m = step_model(as_trace(cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
             "input_batch_bytes": 8_000_000, "dataloader_num_workers": 0,
             "worker_transfer_gbps": 2.0, "torch_num_threads": 1, "proc_cpu_mean_pct": 180.0,
             "step_cpu_wait_unprofiled_share": busy}
    f = Finding("IN001", "input", "critical", "t", "m", {}, ["num_workers"], 0.6)
    predict_findings([f], Predictor(m, Facts.from_metrics(facts)), TrainConfig(), facts,
                     FIXES)
    got = f.predictions["num_workers"]
    if busy >= BUSY:
        assert isinstance(got, str) and got.startswith(ON_A_BUSY_MACHINE)
        assert f"in {busy:.0%} of the timed steps" in got
        assert offered(f) == ["num_workers"]  # still the fix to try
    else:
        assert isinstance(got, Prediction)
    assert not any("busy" in h for h in f.hints)
    # the same wait beside the run's own six workers and 0.2 CPUs of other work: the run's
    # own processes held the CPU, and a quieter machine would not change it
    g = Finding("IN001", "input", "critical", "t", "m", {}, ["num_workers"], 0.6)
    own = {**facts, "workers_count": 6, "host_cpu_others_cpus": 0.2}
    predict_findings([g], Predictor(m, Facts.from_metrics(own)), TrainConfig(), own, FIXES)
    assert isinstance(g.predictions["num_workers"], Prediction)
    said = [h for h in g.hints if h.startswith("predicted beside the run's own use of the CPUs")]
    assert len(said) == (busy >= BUSY)
    assert not said or "this run's own processes held (its 6 DataLoader workers" in said[0]
    assert not said or said[0].endswith("(autofix measures it)")
    # a finding whose own evidence is the wait (CF010's message states it) is not told
    # it again (a new user read the same 20% twice in one finding)
    e = Finding("CF010", "config", "warning", "t", "m",
                {"step_cpu_wait_unprofiled_share": busy}, ["num_workers"], 0.6)
    predict_findings([e], Predictor(m, Facts.from_metrics(own)), TrainConfig(), own, FIXES)
    assert not [h for h in e.hints if h.startswith("predicted beside the run's own use")]
    if busy >= BUSY:  # autofix leaves an IterableDataset's workers: the user times it
        assert "or let autofix measure" in got
        h = Finding("IN001", "input", "critical", "t", "m", {}, ["num_workers"], 0.6)
        stream = {**facts, "dataloader_iterable": True}
        predict_findings([h], Predictor(m, Facts.from_metrics(stream)), TrainConfig(),
                         stream, FIXES)
        told = h.predictions["num_workers"]
        assert isinstance(told, str) and "time it by hand" in told and "let autofix" not in told


def test_a_lead_fix_predicted_on_assumptions_says_what_it_assumed(tmp_path) -> None:
    """No worker's batch, send or hand-over was timed for this loader: the workers'
    prediction rests on assumptions, and the finding's hint names each of them."""
    from diagnose.fixes import FIXES, TrainConfig
    from diagnose.fixes.findings import predict_findings
    from diagnose.rules.engine import Finding
    from diagnose.stepmodel.facts import Facts
    from diagnose.stepmodel.prediction import Prediction, Predictor
    from tests.modeltraces import cpu_loader

    m = step_model(as_trace(cpu_loader(), tmp_path))
    facts = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
             "input_batch_bytes": 8_000_000, "dataloader_num_workers": 0,
             "worker_transfer_gbps": 2.0, "torch_num_threads": 1, "proc_cpu_mean_pct": 180.0}
    f = Finding("IN001", "input", "critical", "t", "m", {}, ["num_workers"], 0.6)
    predict_findings([f], Predictor(m, Facts.from_metrics(facts)), TrainConfig(), facts,
                     FIXES)
    p = f.predictions["num_workers"]
    assert isinstance(p, Prediction) and p.assumed
    (hint,) = [h for h in f.hints if h.startswith("num_workers: predicted on what")]
    assert hint == ("num_workers: predicted on what this capture could not time, assumed: "
                    + "; ".join(p.assumed))


def test_a_kernel_queued_behind_a_busy_stream_moves_with_it(tmp_path):
    """A host that runs ahead of its GPU until the launch queue is full (10 kernels of 400
    us): each launch then waits for a kernel to end. One kernel a step starts 10 us after
    its stream allowed, which no dependency explains: it keeps that spacing behind its
    stream, not its measured latency (4 ms behind its launch). Halving the kernels halves
    the step; with none the step is the host's own. A V100 trace's AMP prediction was held
    at 1.14x by five such kernels, each pinned ~80 ms after its launch."""
    from diagnose.stepmodel.calibrate import replayed_step_ms

    b = tb.TraceBuilder()
    ends: list[float] = []
    for _ in range(6):
        with b.step():
            for i in range(20):
                free = ends[-10] + 2.0 if len(ends) >= 10 else 0.0  # a slot in the queue
                if i == 10:  # this kernel starts 10 us after its stream allowed
                    b._stream_free[7] += 10.0
                b.kernel(dur=400.0, launch_dur=max(5.0, free - b.now))
                ends.append(b._stream_free[7])
                b.idle(20.0)
    path = b.write(tmp_path / "ahead.json.gz")
    g = build_graph(read_trace(path))
    assert not isinstance(g, str)
    base = replayed_step_ms(g)
    assert base == pytest.approx(8.01, rel=0.01)
    kernel = g.is_kind(TaskKind.KERNEL)
    assert replayed_step_ms(g.scale(kernel, 0.5)) == pytest.approx(base / 2, rel=0.02)
    assert replayed_step_ms(g.scale(kernel, 0.0)) < 1.0


def test_work_queued_past_the_window_joins_the_graph(tmp_path):
    """A host that never waits (no full queue: 20 launches a 0.6 ms step, 8 ms of kernels)
    runs several windows ahead: between the window's last kernel that ran inside it and
    its own first launched kernel, the stream runs earlier steps' work. That work joins the
    graph, queued in stream order, rather than a 5.6 ms hole read as one kernel's spacing
    (which no change of the kernels would shorten)."""
    from diagnose.stepmodel.calibrate import busiest_ms

    b = tb.TraceBuilder()
    for _ in range(5):
        with b.step():
            for i in range(20):
                if i == 10:  # one kernel a step 10 us late behind its stream, unexplained
                    b._stream_free[7] = b._stream_free.get(7, 0.0) + 10.0
                b.kernel(dur=400.0, launch_dur=5.0)
                b.idle(20.0)
    g = build_graph(read_trace(b.write(tmp_path / "far_ahead.json.gz")))
    assert not isinstance(g, str)
    kernel = g.is_kind(TaskKind.KERNEL)
    assert g.gap[kernel].max() <= 10.0
    assert busiest_ms(g) == pytest.approx(8.0, rel=0.01)
    assert busiest_ms(g.scale(kernel, 0.0)) == pytest.approx(0.6, rel=0.05)


def _graph_arrays(g) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in vars(g).items() if isinstance(v, np.ndarray)}


@pytest.mark.parametrize("ahead", [False, True])
def test_the_graph_is_built_from_the_events_around_its_window(tmp_path, monkeypatch, ahead):
    """The builder reads only the events that reach into its few steps, and every device op
    the window's calls launched, however late it ran (a host that runs ahead of its GPU
    queues its kernels several steps on): the graph is the one the whole trace gives."""
    from diagnose.stepmodel import build

    b = tb.TraceBuilder()
    for _ in range(12):
        with b.step():
            b.dataloader(300.0)
            for _ in range(6):
                b.kernel(dur=400.0 if ahead else 50.0, launch_dur=5.0)
                b.cpu(30.0)
            if not ahead:
                b.memcpy("DtoH", bytes=2 << 20, dur=80.0)
    t = read_trace(b.write(tmp_path / "long.json.gz"))
    cut, around = build.build_graph(t), build.around
    monkeypatch.setattr(build, "around", lambda t, w0, w1: t)
    whole = build.build_graph(t)
    assert not isinstance(cut, str) and not isinstance(whole, str)
    assert _graph_arrays(cut) == _graph_arrays(whole)
    g0 = float(cut.t0)
    sub = around(t, g0, g0 + float(cut.steps_measured.sum()))
    assert len(sub) < len(t) / 2  # a few of twelve steps, not the trace
