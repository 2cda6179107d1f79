"""The memory rules' fixes carry the what-if of their change as a predicted peak
(diagnose/fixes/catalog/memory.py ``peak_prediction``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from diagnose.fixes import FIXES  # noqa: E402
from diagnose.fixes.catalog.memory import peak_prediction  # noqa: E402
from diagnose.memory.live import measure  # noqa: E402
from diagnose.rules.engine import load_rules  # noqa: E402

from . import models as M  # noqa: E402

SECTION = {"what_if": [
    {"change": {"batch_size": 16}, "peak_bytes": 600, "range": [600, 640], "method": "m"},
    {"change": {"batch_size": 16, "grad_accum_steps": 2}, "peak_bytes": 700,
     "range": [680, 760], "method": "m"},
    {"change": {"batch_size": 8, "grad_accum_steps": 4}, "peak_bytes": 500,
     "range": [480, 560], "method": "m"},
    {"change": {"checkpoint_modules": ["0", "1"]}, "peak_bytes": 650, "range": [650, 700],
     "method": "m", "step_ms": 12.5},
]}


def test_the_fix_gets_the_what_if_of_exactly_its_change() -> None:
    ckpt = peak_prediction(FIXES["activation_checkpointing"], SECTION)
    assert ckpt == {"peak_bytes": 650, "range": [650, 700],
                    "change": {"checkpoint_modules": ["0", "1"]}, "method": "m",
                    "step_ms": 12.5}
    # accumulation, not the smaller batch alone (that changes what is learned)
    acc = peak_prediction(FIXES["grad_accumulation"], SECTION)
    assert acc is not None and acc["change"] == {"batch_size": 8, "grad_accum_steps": 4}
    assert peak_prediction(FIXES["amp"], SECTION) is None  # no such what-if
    assert peak_prediction(FIXES["expandable_segments"], SECTION) is None


def test_of_several_the_first_that_fits_the_budget() -> None:
    """2 micro-batches fit 900 bytes less a tenth (760 <= 810): the fewer passes win."""
    acc = peak_prediction(FIXES["grad_accumulation"], SECTION, budget_bytes=900)
    assert acc is not None and acc["change"]["grad_accum_steps"] == 2
    acc = peak_prediction(FIXES["grad_accumulation"], SECTION, budget_bytes=700)
    assert acc is not None and acc["change"]["grad_accum_steps"] == 4  # 560 <= 630


def test_an_out_of_memory_steps_fixes_each_carry_a_peak() -> None:
    """A tower that runs out of an emulated 1 MB: every fix of ME001 that changes memory
    gets a predicted peak below the failed step's."""
    model = M.tower(depth=3, width=64)
    opt = torch.optim.AdamW(model.parameters())
    b = M.batch(256, 64)
    sec = measure(model, opt, b, M.loss, limit_bytes=1_500_000)
    assert sec["oom"] is not None
    full = sec["full_step"]["peak_bytes"]
    rule = next(r for r in load_rules() if r.id == "ME001")
    peaks = {f: peak_prediction(FIXES[f], sec, 1_500_000) for f in rule.fixes}
    assert set(peaks) == {"grad_accumulation", "amp", "activation_checkpointing"}
    for fid, p in peaks.items():
        assert p is not None, fid
        assert p["range"][0] <= p["peak_bytes"] <= p["range"][1]
        assert p["peak_bytes"] < full, fid


def test_a_peak_predicted_for_a_fix_autofix_would_not_try_is_not_said_not_to_apply() -> None:
    """A new user's JSON carried the checkpointing fix's predicted peak beside
    ``predicted_why: "does not apply to this run: ..."``: what does not apply is autofix's
    trial of it (the step fits its memory); its peak stands, and the reason says so."""
    from diagnose.fixes.findings import DOES_NOT_APPLY
    from diagnose.fixes.peaks import predict_peaks
    from diagnose.rules.engine import Finding

    f = Finding(rule="ME004", title="t", category="memory", severity="info", message="m",
                evidence={}, estimated_gain=None, fixes=["activation_checkpointing"])
    f.predictions = {"activation_checkpointing": f"{DOES_NOT_APPLY}: needs a step over its "
                                                 "memory budget"}
    predict_peaks([f], {**SECTION, "peak_bytes": 900}, {})
    assert f.peaks["activation_checkpointing"]["peak_bytes"] == 650
    why = f.predictions["activation_checkpointing"]
    assert why == ("its step time is not predicted: autofix does not try it on this run: "
                   "needs a step over its memory budget")
