"""A tie between fixes (predicted within TIE of the best) is led by the fix that changes the
fewest settings, so that captures of one job name the same first fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnose.fixes.findings import _order
from diagnose.stepmodel.calibration import TIE
from diagnose.stepmodel.prediction import Prediction


@dataclass
class _Finding:
    fixes: list[str]
    hints: list[str] = field(default_factory=list)
    predictions: dict[str, Any] = field(default_factory=dict)
    gain: float | None = None

    def take_gain(self, g: float) -> None:
        self.gain = g


def _p(change: dict[str, Any], speedup: float) -> Prediction:
    return Prediction(change, 10.0 / speedup, speedup, (9.0 / speedup, 11.0 / speedup), 10.0)


def test_the_simpler_fix_leads_a_tie_and_a_clear_win_stands() -> None:
    split = _p({"num_workers": 2, "intra_op_threads": 1}, 1.05)
    fewer = _p({"num_workers": 0}, 1.05 / (1 + TIE / 2))
    f = _Finding(["threads", "num_workers_cap"])
    _order(f, {"threads": split, "num_workers_cap": fewer}, [])
    assert f.fixes == ["num_workers_cap", "threads"]
    # the same pair with the split clearly ahead: the split leads
    f = _Finding(["num_workers_cap", "threads"])
    _order(f, {"threads": _p(split.change, 1.30), "num_workers_cap": fewer}, [])
    assert f.fixes == ["threads", "num_workers_cap"]
    # the time at stake is still the best prediction's
    assert f.gain is not None and abs(f.gain - (1 - 1 / 1.30)) < 1e-9
