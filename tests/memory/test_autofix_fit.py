"""Autofix fits the step before it speeds it up (diagnose/autofix/memfit.py): a baseline
whose measured peak is over the memory budget gets the fastest change predicted to fit,
confirmed by its measured peak, with predicted vs measured peak and time in its decision.

The first tests inject the memory section, the measured peaks and the timings; the last
runs a small MLP tower with AdamW on the CPU for real (the peaks by the memory tracker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset  # noqa: E402

from diagnose.autofix import (  # noqa: E402
    ERROR,
    KEPT,
    NO_FIT,
    SKIPPED,
    Plan,
    autofix,
    memfit,  # noqa: E402
)
from diagnose.autofix import runner as tune  # noqa: E402
from diagnose.autofix.memfit import BUDGET, fastest, fits_predicted, proposals  # noqa: E402
from diagnose.autofix.stats import Interval  # noqa: E402
from diagnose.autofix.trial import Trial, Workload  # noqa: E402
from diagnose.fixes import TrainConfig  # noqa: E402

from . import models as M  # noqa: E402

# Batch 32, peak 1000 bytes; the blocks' forward is a quarter of the tracked step
SECTION = {"peak_bytes": 1000, "batch_size": 32, "step_s": 0.2,
           "blocks": {"blocks": [{"module": "0", "forward_s": 0.05}]},
           "what_if": [
               {"change": {"batch_size": 16}, "peak_bytes": 500, "range": [500, 520],
                "method": "m"},  # changes the effective batch: never proposed
               {"change": {"batch_size": 16, "grad_accum_steps": 2}, "peak_bytes": 800,
                "range": [780, 820], "method": "m"},
               {"change": {"checkpoint_modules": ["0"]}, "peak_bytes": 700,
                "range": [700, 720], "method": "m"},
               {"change": {"amp_dtype": "bfloat16"}, "peak_bytes": 600, "range": [600, 650],
                "method": "m"},
               {"change": {"zero_grad_set_to_none": False}, "peak_bytes": 1100,
                "range": [1100, 1100], "method": "m"},
               {"change": {"optimizer_class": "SGD"}, "peak_bytes": 400, "range": [400, 400],
                "method": "m"}]}
BUDGET_BYTES = 850  # less 10%: 765 bytes to plan with


def test_the_proposals_keep_the_effective_batch_fastest_first() -> None:
    """Fit 765: amp (650) and checkpointing (720); accumulation 16 x 2 (820) and the
    scaled splits (no timeline: 1000) do not, nor zero_grad to zeros (1100). amp has no
    time prediction (taken as the step's), checkpointing 1 + 0.05 / 0.2 = 1.25x: amp
    first."""
    base = TrainConfig(batch_size=32)
    props = proposals(base, SECTION, BUDGET_BYTES, peak=1000)
    assert {p.config.effective_batch for p in props} == {32}
    assert {p.fix for p in props} == {"activation_checkpointing", "grad_accumulation", "amp",
                                      "set_to_none"}
    fit = fastest([p for p in props if fits_predicted(p, BUDGET_BYTES)])
    assert [(p.fix, p.step_ratio) for p in fit] == [("amp", None),
                                                    ("activation_checkpointing", 1.25)]
    assert proposals(base, SECTION, 10_000, peak=1000) == []  # far under: nothing


def test_without_time_predictions_fewer_micro_batches_go_first() -> None:
    mk = memfit.Proposal
    a = mk("grad_accumulation", TrainConfig(batch_size=4, grad_accum_steps=8), {}, 1, (1, 1), "m")
    b = mk("grad_accumulation", TrainConfig(batch_size=16, grad_accum_steps=2), {}, 9, (9, 9),
           "m")
    c = mk("activation_checkpointing", TrainConfig(checkpoint_modules=("0",)), {}, 1, (1, 1),
           "m", 1.3)
    assert fastest([c, a, b]) == [b, a, c]


@pytest.fixture
def injected(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Measured peaks by config (``peaks``); every comparison 10 ms -> 12 ms, or the ms
    under the config's key in ``peaks["ms"]``."""
    peaks: dict[str, Any] = {}

    def key(c: TrainConfig) -> str:
        return ("ckpt" if c.checkpoint_modules else "amp" if c.amp_dtype else
                "accum" if c.grad_accum_steps > 1 else "base")

    def measure_peak(trial: Trial, warm: bool = True) -> int | None:
        return peaks.get(key(trial.cfg), 10_000)

    def compare(self, a, b, label, *, rounds=None, bound=False, confirm=None, deadline=None):  # type: ignore[no-untyped-def]
        if bound:
            return (tune.Comparison(10.0, 10.0, Interval(1.0, 0.9, 1.1, 0.95), 4, 8),
                    tune.Bound(1.0, 4.0, b))
        ms = peaks.get("ms", {}).get(key(b), 12.0)
        r = 10.0 / ms
        return tune.Comparison(10.0, ms, Interval(r, r * 0.95, r * 1.05, 0.95), 4, 8), None

    monkeypatch.setattr(memfit, "measure_peak", measure_peak)
    monkeypatch.setattr(tune, "measure_peak", measure_peak)
    monkeypatch.setattr(tune._Tuner, "compare", compare)
    return peaks


def _run(**kw):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    loader = DataLoader(TensorDataset(torch.randn(128, 8), torch.randint(0, 4, (128,))),
                        batch_size=32)
    return autofix(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                   loss_fn=F.cross_entropy, plan=Plan.quick(), fixes=[],
                   report=SimpleNamespace(memory=SECTION, findings=[]),
                   memory_budget=BUDGET_BYTES, **kw)


def test_the_first_change_that_fits_when_measured_is_kept(injected) -> None:  # type: ignore[no-untyped-def]
    """amp is tried first and measures 900 > 850: it does not fit. Checkpointing measures
    700: kept, the new baseline, its decision with both peaks and both times (predicted
    10 x 1.25 = 12.5 ms, measured 12 ms)."""
    injected.update(base=1000, amp=900, ckpt=700)
    r = _run()
    rows = [d for d in r.decisions if d.finding == BUDGET]
    amp = next(d for d in rows if d.fix == "amp")
    assert amp.status == NO_FIT and (amp.predicted_peak_bytes, amp.measured_peak_bytes) == (
        600, 900)
    ck = next(d for d in rows if d.fix == "activation_checkpointing")
    assert ck.status == KEPT and (ck.predicted_peak_bytes, ck.measured_peak_bytes) == (700, 700)
    assert (ck.baseline_ms, ck.trial_ms) == (10.0, 12.0)
    assert ck.predicted_speedup == pytest.approx(0.8)
    assert "predicted 12.5 ms (1.25x the step), measured 12 ms (1.20x" in ck.reason
    assert all(d.status == SKIPPED for d in rows if d.fix in ("grad_accumulation",
                                                              "set_to_none"))
    assert r.baseline == r.original.replace(checkpoint_modules=("0",))
    assert "activation_checkpointing" in r.kept
    assert any("is kept to fit it" in n for n in r.notes), r.notes
    j = {(d["fix"], d["status"]): d for d in r.to_json()["decisions"]}
    assert j[("activation_checkpointing", KEPT)]["measured_peak_bytes"] == 700
    assert "use_reentrant=False" in r.code and "get_submodule" in r.code  # the change as code
    text = r.render_text(width=160)
    assert "activation_checkpointing" in text and "0.80x" in text


def test_of_those_that_fit_the_fastest_measured_is_kept(injected) -> None:  # type: ignore[no-untyped-def]
    """amp has no time prediction: measured though checkpointing is predicted; both fit;
    amp measures 15 ms, checkpointing 12 ms: checkpointing kept, amp reverted."""
    injected.update(base=1000, amp=650, ckpt=700, ms={"amp": 15.0, "ckpt": 12.0})
    r = _run()
    by = {d.fix: d for d in r.decisions if d.finding == BUDGET}
    assert by["amp"].status == "reverted" and "is faster when measured" in by["amp"].reason
    assert by["amp"].measured_peak_bytes == 650 and by["amp"].trial_ms == 15.0
    assert by["activation_checkpointing"].status == KEPT
    assert r.baseline.checkpoint_modules == ("0",) and r.baseline.amp_dtype is None


def test_a_change_predicted_slower_than_one_measured_to_fit_is_not_tried(injected) -> None:  # type: ignore[no-untyped-def]
    """amp measured to fit at 11 ms (1.1x); checkpointing is predicted 1.25x: not tried."""
    injected.update(base=1000, amp=650, ckpt=700, ms={"amp": 11.0})
    r = _run()
    fixes = [d.fix for d in r.decisions if d.finding == BUDGET and d.status != SKIPPED]
    assert fixes == ["amp"] and r.baseline.amp_dtype == "bfloat16"
    assert any("not tried: activation_checkpointing (checkpoint_modules none → [0], 1.25x)"
               in n for n in r.notes), r.notes


def test_only_the_fewest_micro_batches_of_the_splits_are_tried() -> None:
    mk = memfit.Proposal
    splits = [mk("grad_accumulation", TrainConfig(batch_size=32 // k, grad_accum_steps=k), {
        "grad_accum_steps": k}, 1, (1, 1), "m") for k in (8, 2, 4)]
    ck = mk("activation_checkpointing", TrainConfig(checkpoint_modules=("0",)),
            {"checkpoint_modules": ["0"]}, 1, (1, 1), "m", 1.3)
    assert memfit.fewest_passes([splits[0], ck, *splits[1:]]) == [ck, splits[1]]


def test_when_none_fits_it_says_why_and_keeps_the_baseline(injected) -> None:  # type: ignore[no-untyped-def]
    injected.update(base=1000, amp=900, ckpt=860)
    r = _run()
    assert r.baseline == r.original and not r.kept
    assert any("none of the 2 changes predicted to fit did when measured" in n
               for n in r.notes), r.notes


def test_a_baseline_that_fits_is_left_alone(injected) -> None:  # type: ignore[no-untyped-def]
    injected.update(base=800)
    r = _run()
    assert r.baseline == r.original and not [d for d in r.decisions if d.finding == BUDGET]
    assert any("fits the memory budget" in n for n in r.notes)


def test_a_change_the_model_cannot_take_is_an_error_row(injected, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The section names a block the model does not have: after amp (measured over the
    budget), that trial is an error, one line, and autofix goes on from the baseline."""
    injected.update(base=1000, amp=900)
    sec = {**SECTION, "what_if": [
        {"change": {"checkpoint_modules": ["enc"]}, "peak_bytes": 500, "range": [500, 500],
         "method": "m"}, *SECTION["what_if"][1:]]}
    sec["blocks"] = {"blocks": [{"module": "enc", "forward_s": 0.0}]}
    memfit_measure = memfit.measure_peak

    def real_enter(trial: Trial, warm: bool = True) -> int | None:
        with trial:  # the realisation runs: a missing submodule is one clear error
            pass
        return memfit_measure(trial, warm)
    monkeypatch.setattr(memfit, "measure_peak", real_enter)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4))
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,))),
                        batch_size=32)
    r = autofix(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                loss_fn=F.cross_entropy, plan=Plan.quick(), fixes=[],
                report=SimpleNamespace(memory=sec, findings=[]), memory_budget=850)
    err = next(d for d in r.decisions if d.fix == "activation_checkpointing")
    assert err.status == ERROR and "'enc' is not a submodule" in err.reason
    assert "\n" not in err.reason and r.baseline == r.original


def test_a_real_tower_over_its_budget_ends_with_a_change_that_fits() -> None:
    """An MLP tower with AdamW, its loader's own batch sampler (no accumulation possible),
    a budget of 3/4 of its measured peak: the section is measured and re-run under
    FakeTensorMode, checkpointing its four blocks is predicted to fit, and its measured
    peak (the tracker, one step after the optimizer's state exists) fits. The model is
    left as it was: weights restored, no forward left wrapped."""
    model = M.tower(depth=4, width=32)
    opt = torch.optim.AdamW(model.parameters())
    ds = TensorDataset(*M.batch(256, 32))
    loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 128, False))
    w = Workload.from_user(model, loader, opt, loss_fn=F.cross_entropy)
    peak = memfit.measure_peak(Trial(w, TrainConfig.from_objects(loader, opt)))
    assert peak is not None
    budget = int(0.75 * peak)
    before = {k: v.clone() for k, v in model.state_dict().items()}  # (that step trained it)
    plan = Plan(warmup=1, round_s=0.01, min_steps=2, max_steps=4, block=2, min_rounds=2,
                max_rounds=3, final_rounds=2, resamples=100)
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, fixes=[], plan=plan,
                memory_budget=budget, budget_s=5)  # the fit runs whatever the time left
    kept = [d for d in r.decisions if d.finding == BUDGET and d.status == KEPT]
    assert len(kept) == 1, r.render_text(width=160)
    d = kept[0]
    assert d.measured_peak_bytes is not None and d.measured_peak_bytes <= budget
    assert d.predicted_peak_bytes is not None and d.trial_ms is not None
    assert r.baseline.checkpoint_modules == ("0", "1", "2", "3")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not any("forward" in vars(m) for m in model.modules())


def test_modules_the_user_names_are_proposed_and_measured() -> None:
    """The user names the blocks of a tower (the requested fix bound to them; the section
    names none): their peak is re-run under FakeTensorMode, it has no time prediction, so
    it is measured, and its measured peak fits 3/4 of the baseline's."""
    from diagnose.fixes.catalog.memory import ACTIVATION_CHECKPOINTING

    model = M.tower(depth=4, width=32)
    opt = torch.optim.AdamW(model.parameters())
    ds = TensorDataset(*M.batch(256, 32))
    loader = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 128, False))
    w = Workload.from_user(model, loader, opt, loss_fn=F.cross_entropy)
    base = TrainConfig.from_objects(loader, opt)
    peak = memfit.measure_peak(Trial(w, base))
    assert peak is not None
    budget = int(0.75 * peak)
    far = {"change": {"amp_dtype": "bfloat16"}, "peak_bytes": 10**9, "range": [10**9, 10**9],
           "method": "m"}  # a section whose only what-if does not fit: no re-runs of it
    plan = Plan(warmup=1, round_s=0.01, min_steps=2, max_steps=4, block=2, min_rounds=2,
                max_rounds=3, final_rounds=2, resamples=100)
    names = ("0", "1", "2", "3")
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, plan=plan, budget_s=2,
                fixes=[ACTIVATION_CHECKPOINTING.naming(names)], memory_budget=budget,
                report=SimpleNamespace(memory={"peak_bytes": peak, "what_if": [far]},
                                       findings=[]))
    (d,) = [d for d in r.decisions if d.finding == BUDGET and d.status == KEPT]
    assert d.change == "checkpoint_modules none → [0, 1, 2, 3]", r.render_text(width=160)
    ck = d.measured_peak_bytes
    assert d.predicted_peak_bytes is not None and ck is not None and ck <= budget
    assert abs(d.predicted_peak_bytes - ck) <= 0.1 * ck  # the fake re-run's count
    assert r.baseline.checkpoint_modules == names
    with pytest.raises(ValueError, match="checkpoint_modules"):
        ACTIVATION_CHECKPOINTING.naming(["1", "1"])
