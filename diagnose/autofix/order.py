"""Predictions in autofix: the step model's predicted speedup of each fix orders the
trials, spares trials the model says cannot win, and is checked against the measurement.

``autofix(..., predictions={fix_id: speedup})``: the predicted speedup of each fix applied
alone to the baseline (baseline step / predicted step; above 1 is faster), or None where
the model cannot know (cudnn autotuning, compiler fusion); default ``report.predictions``.
With them, autofix:

- runs predicted fixes largest first, then the others in the findings' order;
- skips a fix predicted slower than the noise floor (``< 1 / (1 + floor)``), and the
  predicted fixes left once their product of gains is within it (``<= 1 + floor``), unless
  ``try_all=True``; each at the fast end of its range (``report.prediction_highs``);
- predicts a trial over the best config so far as the ratio of the two configs' predicted
  speedups over the baseline (a first trial: exactly the diagnosis' prediction);
- records each prediction on its decision and, where the trial's interval excludes it, a
  disagreement (``AutofixResult.model_disagreements``, ``model_disagreements.jsonl``).

The noise floor is the larger of ``min_gain`` and ``1.96 * noise / sqrt(max_rounds)``, the
half-width a trial at the plan's most rounds resolves at the measured noise.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..values import interval_end
from .decisions import Bound
from .stats import Interval

Predictions = Mapping[str, "float | None"]
T = TypeVar("T")


def predictions_from(given: Predictions | None, report: Any) -> dict[str, float]:
    """The usable predictions (finite and > 0) from ``given``, else from ``report``."""
    src = given if given is not None else getattr(report, "predictions", None)
    if not isinstance(src, Mapping):
        return {}
    out: dict[str, float] = {}
    for k, v in src.items():
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out[str(k)] = float(v)
    return out


def in_predicted_order(named: Sequence[tuple[Any, T]], preds: Mapping[str, float]
                       ) -> list[tuple[Any, T]]:
    """``(fix, finding)`` pairs: predicted fixes by predicted speedup (largest first), then
    the others in their given order (a stable sort)."""
    def key(item: tuple[int, tuple[Any, T]]) -> tuple[int, float, int]:
        i, (fix, _) = item
        p = preds.get(fix.id)
        return (0, -p, i) if p is not None else (1, 0.0, i)

    return [pair for _, pair in sorted(enumerate(named), key=key)]


def order_note(ordered: Sequence[tuple[Any, Any]], preds: Mapping[str, float]) -> str | None:
    shown = [f"{fix.id} ({preds[fix.id]:.2f}x)" for fix, _ in ordered if fix.id in preds]
    if not shown:
        return None
    rest = [fix.id for fix, _ in ordered if fix.id not in preds and fix.auto]
    tail = (f"; then, without a prediction for the run as diagnosed (one is made for the "
            f"config each is tried on where the model can): {', '.join(rest)}" if rest else "")
    return (f"trials in order of predicted speedup on the run as diagnosed (a trial's own row "
            f"predicts it on the config it was tried on): {', '.join(shown)}{tail}")


def noise_floor(noise: float, min_gain: float, max_rounds: int) -> float:
    """Relative change a trial cannot tell from noise (see the module docstring)."""
    return max(min_gain, 1.96 * noise / math.sqrt(max(1, max_rounds)))


def skip_reason(pred: float | None, remaining_gain: float, floor: float,
                best: float | None = None) -> str | None:
    """Why a fix predicted ``pred`` is not tried (None: try it). ``remaining_gain``: the
    product of the predicted gains (above 1) of this fix and those after it, each at the
    fast end of its range where it has one; ``best``: this fix's speedup there (the
    prediction's range holds what the capture's timings disagreed on, e.g. the CPUs'
    capacity: a fix is skipped only where even that end is no gain)."""
    if pred is None:
        return None
    best = pred if best is None else max(pred, best)
    said = f"predicted {pred:.2f}x" + (f" (at most {best:.2f}x)" if best > pred * 1.005
                                       else "")
    if best < 1.0 / (1.0 + floor):
        return (f"{said}: slower than the noise floor (±{floor:.0%}); "
                "try_all=True tries it")
    if remaining_gain <= 1.0 + floor:
        return (f"the remaining predicted gains ({remaining_gain:.2f}x together) are within "
                f"the measured noise (±{floor:.0%}); try_all=True tries them")
    return None


def disagreement(pred: float | None, iv: Interval | None,
                 rng: tuple[float, float] | None = None) -> str | None:
    """A note when the measured interval excludes the prediction: its whole range where it
    has one (``rng``, speedups: the printed range's ends), else its point."""
    if pred is None or iv is None:
        return None
    lo, hi = rng if rng is not None else (pred, pred)
    if iv.lo <= hi and lo <= iv.hi:
        return None
    side = "above" if lo > iv.hi else "below"
    said = f"predicted {pred:.2f}x" + (f" [{lo:.2f}, {hi:.2f}]" if rng is not None else "")
    return (f"model disagrees: {said}, {side} the measured "
            f"{iv.confidence:.0%} CI [{interval_end(iv.lo)}, {interval_end(iv.hi)}]")


def log_disagreements(out_dir: str | os.PathLike[str] | None,
                      rows: Sequence[Mapping[str, Any]]) -> Path | None:
    """Append the disagreements to ``<out_dir>/model_disagreements.jsonl`` (None: no folder
    or nothing to log; a folder that cannot be written is not an error of the tuning)."""
    if out_dir is None or not rows:
        return None
    path = Path(out_dir) / "model_disagreements.jsonl"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(dict(r), sort_keys=True) + "\n")
    except OSError:
        return None
    return path


def predicted_tuned_ms(base_ms: float | None, kept: Sequence[float | None],
                       composed: float | None = None) -> float | None:
    """The model's tuned step: the baseline step over ``composed`` (the step model's
    speedup of the kept changes applied together) where the model gives it; else over the
    product of the kept decisions' predictions, when every kept decision has one (each
    was predicted against the best config of its moment, so the product composes them)."""
    if base_ms is None or not kept:
        return None
    if composed is not None and composed > 0:
        return base_ms / composed
    if any(k is None or k <= 0 for k in kept):
        return None
    return base_ms / math.prod(k for k in kept if k is not None)


def below_bound_note(predicted_ms: float | None, base_ms: float | None, bound: Bound | None,
                     min_gain: float) -> str | None:
    """A note where the model's tuned step lies below the bound measured in the same
    rounds as the before/after (compute alone or input alone, at the tuned config): the
    model's input for that part read faster at the capture than in these rounds."""
    if not predicted_ms or not base_ms or bound is None:
        return None
    if predicted_ms * (1 + min_gain) >= bound.bound_ms:
        return None
    part = bound.limited_by
    return (f"the model's tuned step ({predicted_ms:.2f} ms) is below the bound measured here "
            f"({bound.bound_ms:.2f} ms, {part} alone): {base_ms / predicted_ms:.2f}x predicted "
            f"where {part} alone allows {base_ms / bound.bound_ms:.2f}x; the capture timed the "
            f"{part} faster than these rounds did")


__all__ = ["Predictions", "below_bound_note", "disagreement", "in_predicted_order",
           "log_disagreements",
           "noise_floor", "order_note", "predicted_tuned_ms", "predictions_from",
           "skip_reason"]
