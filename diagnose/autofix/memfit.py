"""Autofix under a memory budget: fit the step first, then speed it up.

Fitting (:func:`fit_budget`, before any fix that speeds the step up): the baseline's peak is
measured; where it is over the budget, the changes the memory section predicts a peak for
(its what-ifs, at the same effective batch: activation checkpointing of the blocks it names,
smaller micro-batches with accumulation, autocast where the device runs it, zero_grad's
``set_to_none``, foreach or for-loop optimizer kernels) are proposed, those whose range's
high end fits the budget less ``FIT_MARGIN`` ordered fastest first (the predicted step time:
the what-if's, else the step model's, else unknown and taken as the baseline's; ties go to
the cheaper kind of change; of the accumulation splits only the fewest micro-batches). Each
is measured in turn, its peak, then its time against the baseline, until the rest are
predicted no faster than one measured to fit (one without a time prediction is always
measured); the fastest measured of those that fit is kept as the new baseline, the others
reverted, each decision with predicted vs measured peak and time. Without a memory section,
one is measured on a trial's batch. Modules the user names to checkpoint (the
``activation_checkpointing`` unit bound to them, among the requested fixes) are one more
proposal, their peak re-run under FakeTensorMode.

Speeding up: a fix whose predicted peak (the what-if of its change,
:func:`~diagnose.fixes.catalog.memory.peak_prediction`) does not fit is not tried, and the
tuned config's peak is measured beside the kept fixes' predicted peaks.

A peak is measured over one optimizer step after a step that builds the optimizer's state
(the steady state the what-ifs predict): the allocator's peak
(``torch.cuda.max_memory_allocated``) on CUDA, the memory tracker (diagnose.memory) on CPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..fixes import FIXES, Fix, TrainConfig
from ..fixes.catalog.memory import (
    ACTIVATION_CHECKPOINTING,
    GRAD_ACCUMULATION,
    Proposal,
    near_budget,
    peak_prediction,
)
from ..memory import FIT_MARGIN
from ..values import mib
from .decisions import ERROR, KEPT, NO_FIT, OK, REVERTED, SKIPPED, Comparison, Decision
from .trial import Trial, fits, to_device

#: the finding a decision made to fit the memory budget names
BUDGET = "budget"
#: what-if fields that a fit may change through a fix other than the memory units
_OTHER_FIELDS = ("amp_dtype", "zero_grad_set_to_none", "optimizer_foreach")
#: a change's kind, cheapest first where step times tie (no time, faster, more passes,
#: the forward twice): the order of the what-ifs' changes in an OOM's explanation
_COST = ("zero_grad_set_to_none", "optimizer_foreach", "amp_dtype", "grad_accum_steps",
         "checkpoint_modules")


def predicted_peak(fix: Fix, report: Any, budget: int) -> dict[str, Any] | None:
    """The fix's predicted peak from ``report.memory`` (None: no what-if of its change)."""
    return peak_prediction(fix, getattr(report, "memory", None), budget)


def over_budget(peak: dict[str, Any], budget: int) -> str | None:
    """Why a fix predicted ``peak`` is not tried under ``budget`` bytes (None: it fits)."""
    rng = peak.get("range")
    high = int(rng[1]) if rng else int(peak["peak_bytes"])
    if high <= budget * (1 - FIT_MARGIN):
        return None
    return (f"predicted peak {mib(peak['peak_bytes'])} (up to {mib(high)}, "
            f"{peak.get('method') or 'memory what-if'}) does not fit the memory budget "
            f"{mib(budget)} less {FIT_MARGIN:.0%}")


def measure_peak(trial: Trial, warm: bool = True) -> int | None:
    """The peak bytes of one optimizer step of ``trial``, after one untracked step that
    builds the optimizer's state (``warm``); None: it ran out of memory."""
    import torch

    if warm and not fits(trial, steps=1)[0]:
        return None
    dev = torch.device(trial.w.device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        ok, _ = fits(trial, steps=1)
        return int(torch.cuda.max_memory_allocated(dev)) if ok else None
    from ..memory.tracker import StepTracker

    tracker = StepTracker(trial.w.model, trial.optimizer)
    with tracker:
        ok, _ = fits(trial, steps=1)
    return int(tracker.result().peak_bytes) if ok else None


def _job(tuner: Any, cfg: TrainConfig) -> tuple[Any, Any, Any]:
    """(optimizer, batch on the device, step(model, batch) -> loss) of a trial of ``cfg``,
    the optimizer's state built first, as the steady state holds it."""
    w = tuner.w
    trial = tuner.trial_for(cfg)
    fits(trial, steps=1)
    try:
        batch = to_device(trial.next_batch(), w.device)
    finally:
        trial.close()
    if w.step_fn is not None:
        return trial.optimizer, batch, w.step_fn

    def step(model: Any, b: Any) -> Any:
        return w.loss_fn(model(b[0]), b[1])
    return trial.optimizer, batch, step


def measured_section(tuner: Any, cfg: TrainConfig) -> dict[str, Any]:
    """The memory section (its what-ifs) of one step of ``cfg`` on a trial's batch; the
    model is updated (autofix restores it)."""
    from ..memory.live import measure

    opt, batch, step = _job(tuner, cfg)
    return measure(tuner.w.model, opt, batch, step, only=lambda change: may_fit(cfg, change))


def named_checkpoint(tuner: Any, cfg: TrainConfig, names: tuple[str, ...],
                     notes: list[str]) -> Proposal | None:
    """Checkpointing the modules the user names, its peak from one step re-run under
    FakeTensorMode (no time prediction: the blocks' forward was not timed); None (with a
    note) where the step cannot be re-run so or a name is not a submodule."""
    from ..memory.fake import FakeRunError, fake_step
    from ..memory.whatif import FAKE, FAKE_HIGH

    change = {"checkpoint_modules": list(names)}
    try:
        opt, batch, step = _job(tuner, cfg)
        m = fake_step(tuner.w.model, opt, batch, step, change)
    except (FakeRunError, AttributeError) as e:
        notes.append(f"checkpointing {', '.join(names)} was not predicted: {e}")
        return None
    peak = m.tracked_peak_bytes
    return Proposal(ACTIVATION_CHECKPOINTING.id, cfg.replace(checkpoint_modules=names),
                    change, peak, (peak, int(peak * (1 + FAKE_HIGH))), FAKE)


def may_fit(cfg: TrainConfig, change: Mapping[str, Any]) -> bool:
    """A what-if change a fit of ``cfg`` may use: config fields that keep the effective
    batch, and not one that only adds bytes (gradients kept between steps, the optimizer's
    temporaries over all parameters at once)."""
    if change.get("zero_grad_set_to_none") is False or change.get("optimizer_foreach") is True:
        return False
    try:
        return cfg.replace(**change).effective_batch == cfg.effective_batch
    except (TypeError, ValueError):  # not a config field (another optimizer's class)
        return False


# ---------------------------------------------------------------------- proposals
def _owner(change: Mapping[str, Any]) -> Fix | None:
    """The automatic fix whose fields cover ``change`` (of the other fixes' fields)."""
    if not set(change) <= set(_OTHER_FIELDS):
        return None
    return next((f for f in FIXES.values() if f.auto and set(change) <= set(f.fields)), None)


def proposals(base: TrainConfig, memory: Mapping[str, Any] | None, budget: int,
              peak: int | None = None, predictor: Any = None) -> list[Proposal]:
    """The changes of ``base`` whose peak the memory section predicts, at the same effective
    batch, where the step's peak (``peak``, else the section's) is near the budget or over
    it; each with its predicted step time as a multiple of the step's where it is known."""
    out: list[Proposal] = [*ACTIVATION_CHECKPOINTING.propose(base, memory, budget, peak),
                           *GRAD_ACCUMULATION.propose(base, memory, budget, peak)]
    if near_budget(peak if peak is not None else (memory or {}).get("peak_bytes"), budget):
        for w in (memory or {}).get("what_if") or ():
            change = dict(w.get("change") or {})
            fix = _owner(change)
            if fix is None or not isinstance(w.get("peak_bytes"), int):
                continue
            try:
                cfg = base.replace(**change)
            except (TypeError, ValueError):
                continue
            r = w.get("range") or (w["peak_bytes"], w["peak_bytes"])
            out.append(Proposal(fix.id, cfg, change, int(w["peak_bytes"]),
                                (int(r[0]), int(r[1])), str(w.get("method") or "")))
    seen: set[TrainConfig] = set()
    kept = []
    for p in out:
        if p.config == base or p.config in seen or p.config.effective_batch != \
                base.effective_batch:
            continue
        seen.add(p.config)
        if p.step_ratio is None and predictor is not None:
            p = dataclasses.replace(p, step_ratio=_predicted_ratio(predictor, p))
        kept.append(p)
    return kept


def _predicted_ratio(predictor: Any, p: Proposal) -> float | None:
    """The step model's step time of ``p``'s change as a multiple of the step's."""
    fix = FIXES.get(p.fix)
    if fix is None or fix.transform is None:
        return None
    try:
        pred = predictor.predict_change(fix.transform, p.change)
    except Exception:  # a broken transform is a missing prediction, never a failed run
        return None
    speedup = getattr(pred, "speedup", None)
    return 1.0 / speedup if isinstance(speedup, float) and speedup > 0 else None


def fits_predicted(p: Proposal, budget: int) -> bool:
    return p.high <= budget * (1 - FIT_MARGIN)


def fastest(props: list[Proposal]) -> list[Proposal]:
    """Fastest predicted first (no prediction: taken as the step's own time); ties go to
    the cheaper kind of change, then the fewer micro-batches, then the lower peak."""
    def kind(p: Proposal) -> int:
        keys = [i for i, k in enumerate(_COST) if k in p.change]
        return keys[-1] if keys else len(_COST)
    return sorted(props, key=lambda p: (p.step_ratio if p.step_ratio is not None else 1.0,
                                        kind(p), p.config.grad_accum_steps, p.high))


# ---------------------------------------------------------------------- fitting
def fit_budget(tuner: Any, base: TrainConfig, report: Any, budget: int,
               notes: list[str], modules: tuple[str, ...] = ()) -> TrainConfig:
    """The config to speed up from under ``budget`` bytes (module doc): ``base`` where its
    measured peak fits, else the fastest change whose measured peak fits, of those predicted
    to fit (each trial's decision records both peaks and both times), else ``base`` with a
    note saying why none could. ``modules``: submodules the user names to checkpoint, a
    proposal beside the memory section's blocks."""
    tuner.progress("memory budget: measuring the baseline's peak")
    base_peak = measure_peak(tuner.trial_for(base))
    if base_peak is not None and base_peak <= budget:
        notes.append(f"the baseline's measured peak {mib(base_peak)} fits the memory budget "
                     f"{mib(budget)}")
        return base
    memory = getattr(report, "memory", None)
    if not (isinstance(memory, Mapping) and memory.get("what_if")):
        tuner.progress("memory budget: measuring where the bytes go")
        memory = measured_section(tuner, base)
    said = mib(base_peak) if base_peak is not None else "out of memory"
    props = proposals(base, memory, budget, base_peak if base_peak is not None else
                      budget + 1, getattr(tuner, "predictor", None))
    named = named_checkpoint(tuner, base, modules, notes) if modules else None
    if named is not None and named.config not in {p.config for p in props}:
        props.append(named)
    tried = fewest_passes(fastest([p for p in props if fits_predicted(p, budget)]))
    for p in props:
        if not fits_predicted(p, budget):
            tuner.decisions.append(Decision(
                p.fix, base.describe_change(p.config), SKIPPED,
                f"predicted peak {mib(p.peak_bytes)} (up to {mib(p.high)}, {p.method}) does "
                f"not fit the memory budget {mib(budget)} less {FIT_MARGIN:.0%}", BUDGET,
                predicted_peak_bytes=p.peak_bytes))
    fitted: list[tuple[float, int]] = []  # (measured step / the baseline's, decision index)
    untried: list[Proposal] = []
    for i, p in enumerate(tried):
        best = min(fitted, default=None)
        if best is not None and all(q.step_ratio is not None and q.step_ratio >= best[0]
                                    for q in tried[i:]):
            untried = tried[i:]  # predicted no faster than a change measured to fit
            break
        ratio = _try(tuner, base, p, budget, base_peak)
        if ratio is not None:
            fitted.append((ratio, len(tuner.decisions) - 1))
    if fitted:
        _, at = min(fitted)
        kept = tuner.decisions[at]
        for _, j in fitted:
            if j != at:
                d = tuner.decisions[j]
                tuner.decisions[j] = dataclasses.replace(
                    d, status=REVERTED, reason=f"{d.reason}; fits, but {kept.fix} "
                    f"({kept.change}) is faster when measured")
        chosen = next(p for p in tried if base.describe_change(p.config) == kept.change)
        rest = "; ".join(f"{q.fix} ({base.describe_change(q.config)}, {q.step_ratio:.2f}x)"
                         for q in untried)
        notes.append(f"the baseline's measured peak {said} is over the memory budget "
                     f"{mib(budget)}: {kept.change} is kept to fit it (the baseline for the "
                     "fixes that follow)" + (f"; predicted to fit but no faster than that "
                                             f"measured, not tried: {rest}" if rest else ""))
        return chosen.config
    why = ("no change the memory section predicts a peak for fits it"
           if not tried else f"none of the {len(tried)} changes predicted to fit did when "
           "measured")
    notes.append(f"the baseline's measured peak {said} is over the memory budget "
                 f"{mib(budget)} and {why}: the fixes that follow start from the baseline "
                 "as it is")
    return base


def fewest_passes(props: list[Proposal]) -> list[Proposal]:
    """``props`` with one accumulation split: the fewest micro-batches (more passes only
    add time), in its place."""
    accum = [p for p in props if "grad_accum_steps" in p.change]
    first = min(accum, key=lambda p: p.config.grad_accum_steps, default=None)
    return [p for p in props if p is first or "grad_accum_steps" not in p.change]


def _try(tuner: Any, base: TrainConfig, p: Proposal, budget: int, base_peak: int | None
         ) -> float | None:
    """Measure ``p``'s peak, then (where it fits) its time against ``base``; record the
    decision (kept: the caller reverts it where another fits faster). Returns its measured
    step time over the baseline's (inf: not timed), None where it does not fit."""
    change = base.describe_change(p.config)
    tuner.progress(f"memory budget: {p.fix}: {change}: measuring its peak")
    tuner.trials += 1
    pred = (f"peak predicted {mib(p.peak_bytes)} (up to {mib(p.high)}, {p.method})")
    try:
        peak = measure_peak(tuner.trial_for(p.config))
    except Exception as e:  # a change the user's objects cannot take: say so, go on
        tuner.decisions.append(Decision(p.fix, change, ERROR, f"{pred}; {type(e).__name__}: "
                                        f"{e}"[:300], BUDGET, predicted_peak_bytes=p.peak_bytes))
        return None
    if peak is None or peak > budget:
        got = "out of memory" if peak is None else f"measured {mib(peak)}"
        tuner.decisions.append(Decision(p.fix, change, NO_FIT,
                                        f"{pred}, {got}: over the memory budget {mib(budget)}",
                                        BUDGET, predicted_peak_bytes=p.peak_bytes,
                                        measured_peak_bytes=peak))
        return None
    c, _ = tuner.compare(base, p.config, f"memory budget: {p.fix}: {change}",
                         rounds=tuner.plan.min_rounds)
    reason = f"{pred}, measured {mib(peak)}: fits the memory budget {mib(budget)}"
    if base_peak is not None:
        reason += f" (the baseline's {mib(base_peak)} does not)"
    reason += "; " + step_time_said(c, p.step_ratio)
    tuner.decisions.append(Decision(
        p.fix, change, KEPT, reason, BUDGET, c.base_ms, c.cand_ms, c.interval, c.rounds,
        c.steps, c.setup_s, None if p.step_ratio is None else 1.0 / p.step_ratio,
        p.peak_bytes, peak))
    ok = c.status == OK and c.cand_ms is not None and c.base_ms
    return c.cand_ms / c.base_ms if ok else float("inf")


def step_time_said(c: Comparison, ratio: float | None) -> str:
    """Predicted vs measured step time of a fit, in words."""
    pred = ("time not predicted" if ratio is None else
            f"predicted {_ms(c.base_ms * ratio)} ms ({ratio:.2f}x the step)" if c.base_ms
            else f"predicted {ratio:.2f}x the step")
    if c.status != OK or c.cand_ms is None or not c.base_ms:
        return f"{pred}; its time was not measured ({c.note or c.status})"
    return (f"{pred}, measured {_ms(c.cand_ms)} ms ({c.cand_ms / c.base_ms:.2f}x the "
            f"baseline's {_ms(c.base_ms)} ms)")


def _ms(x: float) -> str:
    return f"{x:.3g}"


__all__ = ["BUDGET", "fastest", "fewest_passes", "fit_budget", "fits_predicted", "measure_peak",
           "measured_section", "mib", "named_checkpoint", "over_budget", "predicted_peak", "proposals",
           "step_time_said"]
