"""One prediction per change: autofix's first trial of a fix predicts exactly what the
report predicted for that config, and a later trial the ratio of the report's predictions
for the two configs (each over the baseline). Trials are faked: nothing is timed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix import search  # noqa: E402
from diagnose.autofix.decisions import OK, Comparison  # noqa: E402
from diagnose.autofix.measure import Plan  # noqa: E402
from diagnose.autofix.search import Tuner, try_fix  # noqa: E402
from diagnose.autofix.stats import Interval  # noqa: E402
from diagnose.autofix.trial import Workload  # noqa: E402
from diagnose.fixes import FIXES, Facts, TrainConfig  # noqa: E402
from diagnose.result import Analysis  # noqa: E402
from diagnose.stepmodel import step_model  # noqa: E402
from diagnose.stepmodel.prediction import Prediction, Predictor  # noqa: E402
from tests import modeltraces as mt  # noqa: E402

FIX_IDS = ("threads", "num_workers", "gc_freeze", "batched_fetch")


def _run(tmp_path, cpu_capacity: float | None = None):
    """cpu_loader's run on 2 CPUs (2000 us loading + 1000 us ops a step, no workers, torch
    on 2 threads, collector pauses, a batched fetch timed): the report's predictions,
    made as :func:`diagnose.fixes.findings.predict_findings` makes them, and a Tuner
    holding what autofix takes from that report."""
    m = step_model(mt.as_trace(mt.cpu_loader(), tmp_path))
    assert m.graph is not None
    metrics = {"step_time_median_ms": 3.0, "step_count": m.graph.n_steps, "cpu_count": 2,
               "input_batch_bytes": 400_000, "dataloader_num_workers": 0,
               "input_worker_handover_ms": 0.2, "torch_num_threads": 2,
               "proc_cpu_mean_pct": 180.0, "threads_one_thread_ratio": 1.5,
               "model_work_quiet_ms": 1.0, "dataloader_dataset_tensor_indexable": True,
               "gc_pause_ms": 0.9, "gc_pause_loader_ms": 0.6,
               "input_fetch_ms": 1.5, "input_collate_ms": 0.5, "input_batched_fetch_ms": 0.2}
    if cpu_capacity is not None:
        metrics.update(cpu_capacity=cpu_capacity, cpu_capacity_min=cpu_capacity,
                       cpu_capacity_max=cpu_capacity)
    facts = Facts.from_metrics(metrics)
    model = nn.Linear(8, 4)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,))),
                        batch_size=8)
    w = Workload.from_user(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                           loss_fn=F.cross_entropy)
    base = TrainConfig.from_objects(w.loader, w.optimizer)
    pred = Predictor(m, facts)
    finding = SimpleNamespace(fixes=list(FIX_IDS), predictions={
        x: FIXES[x].predict(pred, base, facts) for x in FIX_IDS})
    for x, p in finding.predictions.items():
        assert isinstance(p, Prediction) and p.candidates, (x, p)
    report = SimpleNamespace(findings=[finding])
    # the report's own accessors, as the runner reads them
    t = Tuner(w, Plan(), 0.03, 50, 600.0, None,
              {k: v for k, v in Analysis.predictions.fget(report).items() if v})  # type: ignore[attr-defined]
    t.cand_preds = Analysis.candidate_predictions.fget(report)  # type: ignore[attr-defined]
    t.advised = Analysis.advised_changes.fget(report)  # type: ignore[attr-defined]
    t.original, t.predictor, t.facts = base, pred, facts
    return t, base, finding, facts


def _faked(monkeypatch, keep: set[tuple[tuple[str, object], ...]] = frozenset()):
    """Trials measure no change (reverted), or a clear gain for the changes in ``keep``."""
    def compare(self, a, b, label, *, rounds=None, bound=False, confirm=None, deadline=None):
        change = tuple(sorted(a.diff(b).items()))
        key = tuple((k, new) for k, (_, new) in change)
        iv = Interval(1.5, 1.4, 1.6, 0.95) if key in keep else Interval(1.0, 0.97, 1.03, 0.95)
        return Comparison(10.0, 10.0 / iv.ratio, iv, 6, 12, OK), None

    monkeypatch.setattr(Tuner, "compare", compare)


def _report_says(finding, fix_id: str, base: TrainConfig, cfg: TrainConfig) -> float:
    """The report's prediction for the change from ``base`` to ``cfg`` through ``fix_id``."""
    change = tuple(sorted((k, new) for k, (_, new) in base.diff(cfg).items()))
    return dict(finding.predictions[fix_id].candidates)[change]


@pytest.mark.parametrize("fix_id", FIX_IDS)
def test_each_trial_from_the_baseline_predicts_the_reports_number(fix_id, tmp_path,
                                                                  monkeypatch) -> None:
    """Every config a fix tries from the baseline (each trial reverted: all start there)
    carries the report's prediction for that exact change; the first trial of a fix is
    the report's headline number when it tries the advised config."""
    _faked(monkeypatch)
    t, base, finding, facts = _run(tmp_path)
    fix = FIXES[fix_id]
    try_fix(t, fix, base, facts, "X", input_ms=2.0, compute_ms=1.0)
    tried = [d for d in t.decisions if d.speedup is not None]
    assert tried, t.decisions
    for d in tried:
        cfg = next(c for c in fix.candidates(base, facts) if base.describe_change(c) == d.change)
        assert d.predicted_speedup == pytest.approx(_report_says(finding, fix_id, base, cfg),
                                                    rel=1e-9), (fix_id, d.change)
    first = tried[0]
    headline = finding.predictions[fix_id]
    if base.describe_change(base.replace(**headline.change)) == first.change:
        assert first.predicted_speedup == pytest.approx(headline.speedup, rel=1e-9)


def test_the_split_tried_first_is_the_reports_second_fix_number(tmp_path, monkeypatch
                                                                 ) -> None:
    """The split the report advises (1 thread + 2 workers) is autofix's first trial of the
    threads fix, at the report's number."""
    _faked(monkeypatch)
    t, base, finding, facts = _run(tmp_path)
    headline = finding.predictions["threads"]
    assert headline.change == {"num_workers": 2, "intra_op_threads": 1}
    try_fix(t, FIXES["threads"], base, facts, "X", input_ms=2.0, compute_ms=1.0)
    first = next(d for d in t.decisions if d.speedup is not None)
    assert first.change == base.describe_change(base.replace(**headline.change))
    assert first.predicted_speedup == pytest.approx(headline.speedup, rel=1e-9)


def test_a_later_trial_predicts_the_ratio_of_the_reports_numbers(tmp_path, monkeypatch
                                                                 ) -> None:
    """num_workers=1 is kept; the threads fix then tries its splits against it: each
    trial's prediction is the report's speedup of that split over the report's speedup
    of num_workers=1 (both over the same baseline)."""
    _faked(monkeypatch, keep={(("num_workers", 1),)})
    t, base, finding, facts = _run(tmp_path)
    one = base.replace(num_workers=1)
    assert t.trial(FIXES["num_workers"], base, one, "X")
    kept = t.decisions[-1]
    assert kept.predicted_speedup == pytest.approx(
        _report_says(finding, "num_workers", base, one), rel=1e-9)
    try_fix(t, FIXES["threads"], one, facts, "X", input_ms=2.0, compute_ms=1.0)
    later = [d for d in t.decisions[1:] if d.speedup is not None]
    assert later
    for d in later:
        cfg = next(c for c in FIXES["threads"].candidates(base, facts)
                   if one.describe_change(c) == d.change)
        # the split's workers may equal num_workers=1's; the report's threads prediction
        # for the whole change from the baseline, over the report's num_workers=1
        whole = _report_says(finding, "threads", base, cfg)
        assert d.predicted_speedup == pytest.approx(
            whole / _report_says(finding, "num_workers", base, one), rel=1e-9), d.change


def test_a_capacity_timed_again_is_said_on_the_decision(tmp_path, monkeypatch) -> None:
    """Autofix times the CPUs again before a fix that moves CPU work and predicts again
    with it: the trial's decision says its prediction replaces the report's."""
    _faked(monkeypatch)
    t, base, finding, facts = _run(tmp_path, cpu_capacity=1.5)
    monkeypatch.setattr(search, "time_cpu_capacity", lambda cpus: 2.0)
    try_fix(t, FIXES["threads"], base, facts, "X", input_ms=2.0, compute_ms=1.0)
    first = next(d for d in t.decisions if d.speedup is not None)
    cfg = next(c for c in FIXES["threads"].candidates(base, facts)
               if base.describe_change(c) == first.change)
    was = _report_says(finding, "threads", base, cfg)
    assert first.predicted_speedup != pytest.approx(was, rel=1e-3)
    assert (f"supersedes the report's {was:.2f}x" in first.reason), first.reason
    assert "CPUs' capacity timed again before this fix (2.00 CPUs, the capture's 1.50)" \
        in first.reason, first.reason
