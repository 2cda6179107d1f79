"""Predictions in autofix: trials in predicted order, skips of what cannot win, each
decision beside its prediction, disagreements stated and logged in the run folder."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix import KEPT, REVERTED, SKIPPED, Plan, autofix  # noqa: E402
from diagnose.autofix import runner as tune  # noqa: E402
from diagnose.autofix.measure import Looks  # noqa: E402
from diagnose.autofix.order import (  # noqa: E402
    disagreement,
    in_predicted_order,
    log_disagreements,
    noise_floor,
    predicted_tuned_ms,
    predictions_from,
    skip_reason,
)
from diagnose.autofix.stats import Interval  # noqa: E402
from diagnose.fixes import Fix  # noqa: E402

# Three changes autofix can make on any CPU, each a custom fix (what is measured is faked)
FA = Fix("fa", "cudnn benchmark", "#", auto=True, change={"cudnn_benchmark": True})
FB = Fix("fb", "zero_grad to zeros", "#", auto=True, change={"zero_grad_set_to_none": False})
FC = Fix("fc", "foreach optimizer", "#", auto=True, change={"optimizer_foreach": True})
FD = Fix("fd", "fused optimizer", "#", auto=True, change={"optimizer_fused": False})
MEASURED = {  # the interval each change measures, by the config field it changes
    "cudnn_benchmark": Interval(1.12, 1.06, 1.18, 0.95),
    "zero_grad_set_to_none": Interval(1.05, 0.99, 1.11, 0.95),
    "optimizer_foreach": Interval(0.80, 0.76, 0.84, 0.95),
    "optimizer_fused": Interval(1.00, 0.97, 1.03, 0.95),
}


@pytest.fixture
def faked(monkeypatch):
    """Trials measure MEASURED; the before/after confirms. Records what was compared."""
    calls: list[tuple[str, object]] = []

    def compare(self, a, b, label, *, rounds=None, bound=False, confirm=None, deadline=None):
        change = a.describe_change(b)
        if bound:  # the before/after
            return (tune.Comparison(10.0, 8.0, Interval(1.25, 1.2, 1.3, 0.95), 10, 12),
                    tune.Bound(1.0, 4.0, b))
        calls.append((change, rounds))
        iv = next(v for k, v in MEASURED.items() if change.startswith(k))
        return tune.Comparison(10.0, 10.0 / iv.ratio, iv, 6, 12), None

    monkeypatch.setattr(tune._Tuner, "compare", compare)
    return calls


def _run(**kw):
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,))),
                        batch_size=8)
    return autofix(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                   loss_fn=F.cross_entropy, plan=Plan.quick(), **kw)


def test_trials_run_in_predicted_order_and_a_predicted_loss_is_skipped(faked, tmp_path) -> None:
    preds = {"fa": 1.10, "fb": 1.40, "fc": 0.80}
    r = _run(fixes=[FA, FB, FC, FD], predictions=preds, out_dir=tmp_path)
    assert [c.split()[0] for c, _ in faked] == ["zero_grad_set_to_none", "cudnn_benchmark",
                                                "optimizer_fused"]  # fb, fa, then fd
    assert all(isinstance(rounds, Looks) for _, rounds in faked)  # sequential trials
    by = {d.fix: d for d in r.decisions}
    assert [d.fix for d in r.decisions] == ["fb", "fa", "fc", "fd"]
    assert by["fb"].status == REVERTED and by["fa"].status == KEPT
    assert by["fc"].status == SKIPPED and "slower than the noise floor" in by["fc"].reason
    assert by["fd"].status == REVERTED and by["fd"].predicted_speedup is None
    assert [by[f].predicted_speedup for f in ("fb", "fa", "fc")] == [1.40, 1.10, 0.80]
    assert any("trials in order of predicted speedup on the run as diagnosed (a trial's own "
               "row predicts it on the config it was tried on): fb (1.40x), fa (1.10x), "
               "fc (0.80x); "
               "then, without a prediction for the run as diagnosed" in n and n.endswith(": fd") for n in r.notes), r.notes
    # 1.40x predicted, [0.99, 1.11] measured: a finding about the model, logged
    assert "model disagrees: predicted 1.40x, above the measured 95% CI" in by["fb"].reason
    assert "model disagrees" not in by["fa"].reason  # 1.10 lies in [1.06, 1.18]
    (row,) = [json.loads(x) for x in (tmp_path / "model_disagreements.jsonl").read_text()
              .splitlines()]
    assert row["fix"] == "fb" and row["predicted_speedup"] == 1.40 and row["ci"] == [0.99, 1.11]
    assert r.model_disagreements == [row]
    # the prediction beside the measurement: JSON, the table, the before/after
    j = r.to_json()
    assert [d["predicted_speedup"] for d in j["decisions"]] == [1.40, 1.10, 0.80, None]
    assert r.predicted_tuned_ms == pytest.approx(10.0 / 1.10) == j["predicted_tuned_ms"]
    text = r.render_text(width=160)
    assert "predicted" in text and "1.40x" in text
    tuned = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("tuned"))
    assert "9.09" in tuned and "8.00" in tuned, text  # predicted and measured tuned step


def test_try_all_tries_what_the_model_would_skip(faked) -> None:
    r = _run(fixes=[FA, FC], predictions={"fa": 1.10, "fc": 0.80}, try_all=True)
    assert [d.fix for d in r.decisions] == ["fa", "fc"]
    assert r.decisions[1].status == REVERTED and "slower" in r.decisions[1].reason


def test_autofix_stops_when_the_remaining_predicted_gains_are_within_the_noise(faked) -> None:
    preds = {"fa": 1.20, "fb": 1.01, "fc": 1.005}
    r = _run(fixes=[FC, FB, FA, FD], predictions=preds)
    assert [c.split()[0] for c, _ in faked] == ["cudnn_benchmark", "optimizer_fused"]
    by = {d.fix: d for d in r.decisions}
    for f in ("fb", "fc"):
        assert by[f].status == SKIPPED and "within the measured noise" in by[f].reason
    assert by["fd"].status == REVERTED  # no prediction: still tried


def test_predictions_come_from_the_diagnosis_when_not_given(faked) -> None:
    report = SimpleNamespace(metrics={}, predictions={"fa": 1.15, "nope": float("nan")},
                             findings=[SimpleNamespace(rule="X001", fixes=["foreach_optimizer"])])
    r = _run(report=report)
    assert r.decisions[0].fix == "foreach_optimizer"
    assert r.decisions[0].predicted_speedup is None and r.model_disagreements == []


def test_a_fix_is_skipped_only_where_even_the_fast_end_of_its_range_gains_nothing(faked):
    """The diagnosis' range holds what its timings disagreed on (the CPUs' capacity): fa
    at 0.99x with 1.30x at the fast end of its range is tried, not skipped as within the
    noise; fc, 0.80x at best, is skipped, and its reason says both."""
    report = SimpleNamespace(metrics={}, findings=[],
                             predictions={"fa": 0.99, "fc": 0.80},
                             prediction_highs={"fa": 1.30, "fc": 0.85})
    r = _run(fixes=[FA, FC], report=report)
    by = {d.fix: d for d in r.decisions}
    assert [c.split()[0] for c, _ in faked] == ["cudnn_benchmark"]
    assert by["fa"].status == KEPT and by["fa"].predicted_speedup == 0.99
    assert by["fc"].status == SKIPPED
    assert "predicted 0.80x (at most 0.85x): slower than the noise floor" in by["fc"].reason
    # without the ranges the same predictions skip both (the remaining gains: none)
    faked.clear()
    r = _run(fixes=[FA, FC], report=SimpleNamespace(
        metrics={}, findings=[], predictions={"fa": 0.99, "fc": 0.80}))
    assert faked == [] and all(d.status == SKIPPED for d in r.decisions)


def test_without_predictions_nothing_changes(faked) -> None:
    r = _run(fixes=[FC, FA])
    assert [d.fix for d in r.decisions] == ["fc", "fa"]  # the given order
    assert all(d.predicted_speedup is None for d in r.decisions)
    assert r.predicted_tuned_ms is None and not any("predicted" in n for n in r.notes)


# ---------------------------------------------------------------------- the pieces
def test_predictions_from_keeps_usable_numbers_only() -> None:
    got = predictions_from({"a": 1.2, "b": None, "c": float("inf"), "d": -1, "e": True,
                            "f": 2}, None)
    assert got == {"a": 1.2, "f": 2.0}
    assert predictions_from(None, SimpleNamespace(predictions={"x": 0.9})) == {"x": 0.9}
    assert predictions_from(None, SimpleNamespace()) == {}


def test_order_is_stable_for_fixes_without_a_prediction() -> None:
    named = [(FD, "r1"), (FA, "r2"), (FC, "r3"), (FB, "r4")]
    out = in_predicted_order(named, {"fc": 1.1, "fb": 1.3})
    assert [f.id for f, _ in out] == ["fb", "fc", "fd", "fa"]


def test_skips_disagreements_and_the_predicted_tuned_step() -> None:
    floor = noise_floor(0.05, 0.03, 20)
    assert floor == 0.03 and noise_floor(0.2, 0.03, 20) == pytest.approx(1.96 * 0.2 / 20 ** 0.5)
    assert skip_reason(None, 1.0, floor) is None
    assert skip_reason(0.95, 2.0, floor) is not None  # slower than 1 / 1.03
    assert skip_reason(0.99, 2.0, floor) is None  # within the noise: measure it
    assert skip_reason(1.02, 1.02, floor) is not None  # all that is left is within the noise
    # the fast end of the prediction's range decides: 0.95x, at most 1.10x, is measured
    assert skip_reason(0.95, 1.10, floor, best=1.10) is None
    assert "(at most" not in (skip_reason(0.90, 1.0, floor, best=0.80) or "")
    iv = Interval(1.3, 1.2, 1.4, 0.95)
    assert disagreement(1.25, iv) is None and disagreement(None, iv) is None
    assert "below" in (disagreement(1.1, iv) or "")
    # with its range: the model disagrees only where the whole range misses the interval
    # (a new user's 1.79x [1.00, 2.13] against a measured [0.90, 1.25] was "disagrees")
    low = Interval(1.06, 0.90, 1.25, 0.95)
    assert disagreement(1.79, low, (1.00, 2.13)) is None
    assert disagreement(1.79, low) is not None
    assert disagreement(1.79, low, (1.30, 2.13)) == (
        "model disagrees: predicted 1.79x [1.30, 2.13], above the measured 95% CI "
        "[0.90, 1.25]")
    assert predicted_tuned_ms(10.0, [2.0, 1.25]) == pytest.approx(4.0)
    assert predicted_tuned_ms(10.0, [2.0, None]) is None
    # the step model's composed speedup of the kept changes wins over the product
    assert predicted_tuned_ms(10.0, [2.0, None], 2.5) == pytest.approx(4.0)
    assert predicted_tuned_ms(10.0, [], 2.5) is None  # nothing kept
    assert log_disagreements(None, [{"fix": "a"}]) is None


# ---------------------------------------------------------------------- HTML and the tab
def test_html_and_the_tensorboard_tab_show_measured_and_predicted(tmp_path) -> None:
    from diagnose import analyze
    from diagnose.report.html import autofix_cells, render_html
    from diagnose.report.tb_plugin.runfile import run_document
    from diagnose.report.tb_plugin.view import run_view
    from tests import tracebuilder as tb

    tuned = SimpleNamespace(decisions=[
        SimpleNamespace(fix="num_workers", change="num_workers 0 → 2", status="kept",
                        baseline_ms=20.0, trial_ms=11.0, speedup=Interval(1.8, 1.6, 2.0, 0.95),
                        predicted_speedup=1.9, predicted_range=(1.45, 2.3)),
        SimpleNamespace(fix="fb", change="x", status="reverted", baseline_ms=10.0,
                        trial_ms=10.1, speedup=None, predicted_speedup=None),
    ], final=SimpleNamespace(base_ms=20.0, cand_ms=11.0, interval=Interval(1.8, 1.6, 2.0, 0.95)),
        predicted_tuned_ms=10.0, code="")
    assert autofix_cells(("a", 20.0, 11.0, 1.8, 1.6, 2.0, 1.9)) == (
        "a", "20.0 ms", "11.0 ms", "-45.0%", "1.80x [1.60, 2.00]", "1.90x", "better")
    assert autofix_cells(("a", 20.0, 11.0))[4:] == ("", "", "better")
    # the prediction's range beside it (rows of nine), and a far end printed as such
    assert autofix_cells(("a", 20.0, 11.0, 1.8, 0.0004, 2.0, 1.9, 1.45, 2.3))[4:6] == (
        "1.80x [<0.01, 2.00]", "1.90x [1.45, 2.30]")
    report = analyze(tb.dataloader_bound().write(tmp_path / "t.pt.trace.json.gz"))
    page = render_html(report, autofix=tuned, kernels=False)
    section = page[page.index('id="autofix"'):]
    section = section[:section.index("</section>")]
    for text in ("speedup [CI]", "predicted [range]", "1.80x [1.60, 2.00]",
                 "1.90x [1.45, 2.30]", "2.00x"):
        assert text in section, text  # 2.00x: the model's tuned step, 20 ms / 10 ms
    view = run_view("r", run_document(report, tuned))
    rows = view["autofix"]["rows"]
    assert rows[0][4:] == ["1.80x [1.60, 2.00]", "1.90x [1.45, 2.30]", "better"]
    assert rows[1][4:] == ["", "", "worse"] and rows[2][5] == "2.00x"
    doc = run_document(report, tuned)  # a run file written before the range: rows of seven
    doc["autofix"]["rows"] = [r[:7] for r in doc["autofix"]["rows"]]
    assert run_view("r", doc)["autofix"]["rows"][0][5] == "1.90x"


def test_the_decisions_table_and_json_carry_the_predicted_range() -> None:
    """A new user's autofix table showed 1.79x alone, and 'model disagrees', where the
    diagnosis had printed 1.00-2.13x: the trial's range goes beside its point, in the table
    and the JSON, and the report's spans scale it (the range over the point)."""
    from rich.console import Console

    from diagnose.autofix.decisions import Decision
    from diagnose.autofix.render import decisions_table
    from diagnose.result import Analysis
    from diagnose.stepmodel.prediction import Prediction

    d = Decision("num_workers", "num_workers 0 → 2", "reverted", "no gain", "IN001", 43.9,
                 41.7, Interval(1.06, 0.90, 1.25, 0.95), 20, 20, None, 1.79,
                 predicted_range=(1.00, 2.13))
    assert d.to_json()["predicted_range"] == [1.0, 2.13]
    con = Console(width=200, record=True)
    con.print(decisions_table(SimpleNamespace(decisions=[d], min_gain=0.03)))
    assert "1.79x [1.00, 2.13]" in con.export_text()
    p = Prediction({"num_workers": 2}, 35.3 / 1.79, 1.79, (35.3 / 2.13, 35.3 / 1.0), 35.3)
    a = Analysis.__new__(Analysis)
    a.findings = [SimpleNamespace(predictions={"num_workers": p})]
    lo, hi = a.prediction_spans["num_workers"]
    assert (1.79 * lo, 1.79 * hi) == (pytest.approx(1.0), pytest.approx(2.13))


def test_the_before_after_table_carries_the_predicted_range() -> None:
    """The tuned step's predicted speedup has the kept fix's range, scaled to it, as the
    decisions table shows it; with two kept fixes, or none with a range, the point alone."""
    from rich.console import Console

    from diagnose.autofix.decisions import Comparison, Decision
    from diagnose.autofix.render import before_after_table
    from diagnose.fixes import TrainConfig

    def cell(decisions: list[Decision]) -> str:
        base = TrainConfig(num_workers=0, batch_size=8)
        r = SimpleNamespace(original=base, baseline=base, best=base.replace(num_workers=2),
                            decisions=decisions, tuned_ms=24.6, predicted_tuned_ms=24.64,
                            final=Comparison(31.05, 24.6, Interval(1.26, 1.20, 1.32, 0.95),
                                             10, 36))
        con = Console(width=200, record=True)
        con.print(before_after_table(r))
        return next(line for line in con.export_text().splitlines() if "tuned" in line)

    def kept(fix: str, rng: tuple[float, float] | None) -> Decision:
        return Decision(fix, "", KEPT, "", None, 31.0, 24.6, Interval(1.26, 1.2, 1.32, 0.95),
                        10, 36, None, 1.26, predicted_range=rng)

    assert "24.64 (1.26x [0.57, 1.50])" in cell([kept("a", (0.57, 1.50))])
    assert "24.64 (1.26x)" in cell([kept("a", None)])
    assert "24.64 (1.26x)" in cell([kept("a", (0.57, 1.50)), kept("b", (1.0, 1.1))])



def test_a_prediction_below_the_measured_bound_says_so() -> None:
    """A new user read a predicted tuned step of 16.14 ms beside an input-alone bound of
    20.96 ms measured in the same rounds, unremarked: a note now names the prediction and
    the most the bound allows; a prediction at the bound (within the gain autofix keeps a
    change for) or with no bound adds none."""
    from diagnose.autofix.decisions import Bound
    from diagnose.autofix.order import below_bound_note
    from diagnose.fixes import TrainConfig

    b = Bound(compute_ms=1.99, data_ms=20.96, config=TrainConfig(num_workers=2))
    note = below_bound_note(16.14, 28.21, b, 0.03)
    assert note is not None and "(16.14 ms) is below the bound measured here (20.96 ms, " \
        "input alone): 1.75x predicted where input alone allows 1.35x" in note
    assert below_bound_note(20.5, 28.21, b, 0.03) is None
    assert below_bound_note(16.14, 28.21, None, 0.03) is None
    assert below_bound_note(None, 28.21, b, 0.03) is None
