"""autofix, orchestrated: a baseline, the fixes the findings name in predicted order, one
measured trial each, a before/after; keep only what measurably helps.

    report = diagnose(model, loader, optimizer=opt, loss_fn=loss_fn).autofix()  # the usual way
    report = autofix(model, loader, optimizer, loss_fn=loss_fn, report=d.report)  # this module
    report.print()           # every decision with its numbers; before/after; the code change
    loader = report.loader   # your dataset/sampler/collate_fn with the winning settings

The flow follows the project's one direction: a baseline capture (the same
:class:`~diagnose.session.Session` a user runs, handed in as ``capture``) is analysed into
findings; the findings' fix ids become :class:`~diagnose.fixes.Fix` objects, ordered by
their predicted speedup (:mod:`diagnose.autofix.order`); each fix is a pure change of a
frozen :class:`~diagnose.fixes.TrainConfig`; a trial realises the config
(:mod:`diagnose.autofix.trial`) and is timed against the current best in interleaved rounds
(:mod:`diagnose.autofix.measure`) until the sequential rule of :mod:`diagnose.autofix.stats`
decides; :mod:`diagnose.autofix.search` runs each fix's trials. The model, the optimizer and
the random number generators are put back bit-exact afterwards (:mod:`diagnose.autofix.state`)
unless ``keep_tuned_state=True``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..capture.quiet import warnings_once
from ..fixes import FIXES, Facts, Fix, TrainConfig
from ..values import mib
from .decisions import ADVICE, KEPT, OK, REVERTED, SKIPPED, Bound, Comparison, Decision
from .live import cpu_count, live_facts
from .measure import Plan
from .memfit import BUDGET, fit_budget, measure_peak, over_budget, predicted_peak
from .order import (
    below_bound_note,
    in_predicted_order,
    log_disagreements,
    noise_floor,
    order_note,
    predicted_tuned_ms,
    predictions_from,
    skip_reason,
)
from .report import AutofixReport
from .search import Tuner, seconds_said, try_fix
from .state import restore, take
from .stats import Interval
from .trial import TuneError, Workload, build_loader, build_optimizer, fits

_Tuner = Tuner  # the name tests patch (``runner._Tuner.compare``)


# ---------------------------------------------------------------------- planning
def planned_fixes(findings: Iterable[Any]) -> list[tuple[Fix, str]]:
    """The fixes the findings name, in order (worst finding first), each once."""
    out: list[tuple[Fix, str]] = []
    seen: set[str] = set()
    for f in findings:
        for fid in f.fixes:
            if fid in FIXES and fid not in seen:
                seen.add(fid)
                out.append((FIXES[fid], f.rule))
    return out


def unknown_fix(fixes: Iterable[str | Fix]) -> str | None:
    """Why ``fixes`` cannot be tried: the first id no fix has, with the known ones."""
    bad = next((f for f in fixes if isinstance(f, str) and f not in FIXES), None)
    return None if bad is None else (
        f"unknown fix {bad!r}: known fixes are {', '.join(sorted(FIXES))}")


def _requested(fixes: Iterable[str | Fix]) -> list[tuple[Fix, str]]:
    fixes = list(fixes)
    if (why := unknown_fix(fixes)) is not None:
        raise TuneError(why)
    return [(FIXES[f] if isinstance(f, str) else f, "requested") for f in fixes]


# ---------------------------------------------------------------------- entry point
#: what every trial times, said under the tables: the step autofix runs is its own, so work
#: the user's loop does beside it is in none of the times, and a gain measured here is
#: larger than the same change gives that loop
STEP_TIMED = ("the times are of autofix's own step: the forward (step_fn or loss_fn), "
              "backward, the optimizer's step and zero_grad on each batch; work your loop "
              "does beside them (gradient clipping, a scheduler, logging) is in none of them, "
              "and dilutes the gain in your loop")
#: the baseline's step timed this many times apart (either way) in the first trial and in
#: the before/after check: the machine's pace moved between them, and a note says so
PACE_MOVED = 1.5


def _pace_moved(decisions: list[Any], final: Any) -> str | None:
    """Where the first trial's baseline step and the before/after check's differ by
    :data:`PACE_MOVED` or more (other work came or went on the machine's CPUs), the note
    that says so: each speedup compares configs timed at the same moments, but the steps
    themselves are not the job's steady pace; None otherwise."""
    first = next((d.baseline_ms for d in decisions if d.baseline_ms), None)
    last = getattr(final, "base_ms", None) if final is not None else None
    if not first or not last or max(first, last) < PACE_MOVED * min(first, last):
        return None
    return (f"the baseline's step took {first:.2f} ms in the first trial and {last:.2f} ms in "
            "the before/after check: the machine's pace moved between them (other work on "
            "its CPUs). Each speedup compares steps timed in turn, at the same moments; "
            "measure again on a quieter machine before trusting the ms")


#: Records ``steps`` profiled steps of a workload under a config and returns their analysis
#: (a Report, or None when nothing was recorded): ``capture(workload, config, steps=...,
#: out_dir=...)``. Autofix takes it as an argument so that it needs nothing from the layer
#: above it (``diagnose.session.capture_baseline`` is the one ``diagnose(...)`` passes).
Capture = Callable[..., Any]


@warnings_once()
def autofix(
    model: Any,
    loader: Any,
    optimizer: Any,
    *,
    loss_fn: Callable[[Any, Any], Any] | None = None,
    step_fn: Callable[[Any, Any], Any] | None = None,
    device: Any = None,
    max_trials: int = 12,
    budget_s: float = 300.0,
    min_gain: float = 0.03,
    compile: bool = False,
    keep_tuned_state: bool = False,
    report: Any = None,
    fixes: Iterable[str | Fix] | None = None,
    start: TrainConfig | None = None,
    plan: Plan | None = None,
    diagnose_steps: int = 5,
    out_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
    capture: Capture | None = None,
    predictions: Mapping[str, float | None] | None = None,
    try_all: bool = False,
    memory_budget: int | None = None,
) -> AutofixReport:
    """Try the fixes the findings name, one trial each, and keep those that measurably help.

    ``loss_fn(model(x), y)`` for ``(x, y)`` batches, or ``step_fn(model, batch) -> loss``
    (the batch already on the device); autofix runs backward, the optimizer step and
    zero_grad itself. Findings come from ``report`` (e.g. ``d.report`` of an earlier
    ``with diagnose(...)``) or from ``capture``, which records and analyses the baseline
    (``diagnose(...).autofix()`` passes the session's; see :data:`Capture`); ``fixes``
    names the fixes to try instead. ``start`` states step settings the loop already uses (e.g.
    ``TrainConfig(amp_dtype="bfloat16")``; the DataLoader settings are read from ``loader``).
    A change is kept only if its speedup's confidence interval lies above ``1 + min_gain``.
    ``max_trials`` and ``budget_s`` bound the trials (the budget covers the baseline's
    capture and timing and the before/after too, and is overrun by at most 10%: see
    :class:`~diagnose.autofix.search.Tuner`); ``compile=True`` lets autofix try
    ``torch.compile`` (compile time counted). Model, optimizer and RNG state are restored
    afterwards unless ``keep_tuned_state``; the user's DataLoader and optimizer objects are
    never modified.

    ``predictions``: fix id -> the step model's predicted speedup of that fix over the
    baseline (default: ``report.predictions`` when the diagnosis has them; see
    :mod:`diagnose.autofix.order`). Trials then run in predicted order, a fix predicted
    slower than the noise floor is skipped and autofix stops when the remaining predicted
    gains are within the measured noise, unless ``try_all=True``; each decision shows the
    prediction next to the measurement, and disagreements beyond the CI are recorded
    (``model_disagreements.jsonl`` in ``out_dir``). A warning repeated by the trials (each
    rebuilt DataLoader warns again) is shown once.

    ``memory_budget``: bytes a step may use. Where the baseline's measured peak is over
    it, the fastest change predicted to fit whose measured peak fits becomes the baseline
    first. A fix whose predicted peak (the diagnosis' memory what-if of its change) does
    not fit it less 10% is skipped with that reason, and the kept fixes' decisions carry
    their predicted peak beside the tuned config's measured one
    (:mod:`diagnose.autofix.memfit`).
    """
    w = Workload.from_user(model, loader, optimizer, loss_fn=loss_fn, step_fn=step_fn,
                           device=device)
    if min_gain < 0 or max_trials < 0 or budget_s <= 0:
        raise TuneError("autofix: need min_gain >= 0, max_trials >= 0 and budget_s > 0")
    if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(
            memory_budget, int) or memory_budget <= 0):
        raise TuneError(f"autofix: memory_budget must be a positive number of bytes, "
                        f"not {memory_budget!r}")
    peaks: dict[str, dict[str, Any]] = {}
    plan = plan or Plan()
    steps_kw = {} if start is None else {
        k: v for k, v in start.to_json().items()
        if k not in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                     "batch_size")}
    original = TrainConfig.from_objects(loader, optimizer, **steps_kw)
    snap = take(model, loader)
    tuner = _Tuner(w, plan, min_gain, max_trials, budget_s, progress)
    notes: list[str] = []
    preds: dict[str, float] = {}
    try:
        facts = live_facts(w, compile, cpus=cpu_count())  # (tests patch runner.cpu_count)
        # 1. a baseline that runs: search the micro-batch when it does not fit
        tuner.progress("baseline: checking that a step fits")
        base = original
        ok, msg = fits(tuner.trial_for(base))
        if not ok:
            base = tuner.search_batch(base, msg)
            notes.append(f"the DataLoader's batch ({original.batch_size}) does not fit; "
                         f"baseline: micro-batch {base.batch_size} x {base.grad_accum_steps} "
                         "accumulation steps (same effective batch)")
        # 2. findings -> fixes, in predicted order
        named: list[tuple[Fix, str]]
        if fixes is not None:
            named = _requested(fixes)
        else:
            if report is None and capture is None:
                raise TuneError("autofix needs the baseline's findings: pass report= (a "
                                "diagnosis), fixes=, or capture= (diagnose(model, loader, "
                                "optimizer=..., loss_fn=...).autofix() does this for you)")
            if report is None and capture is not None:
                tuner.progress("baseline: capturing profiled steps for the diagnosis")
                report = capture(w, base, steps=diagnose_steps, out_dir=out_dir)
            if report is None:
                raise TuneError("the baseline capture produced no report: nothing to fix from")
            named = planned_fixes(report.findings)
            metrics = getattr(report, "metrics", {}) or {}
            facts = Facts.from_metrics(metrics, live=facts)
        preds = predictions_from(predictions, report)
        tuner.preds = preds
        # each prediction at the fast end of its range (the skips use it)
        highs: dict[str, float] = (
            predictions_from(getattr(report, "prediction_highs", None), None)
            if predictions is None else {})
        if predictions is None:  # the model's prediction for each config a search tries
            tuner.cand_preds = getattr(report, "candidate_predictions", None) or {}
            tuner.spans = getattr(report, "prediction_spans", None) or {}
            tuner.advised = getattr(report, "advised_changes", None) or {}
            tuner.predictor = getattr(report, "predictor", None)
            tuner.facts = facts
        named = in_predicted_order(named, preds)
        said = order_note(named, preds)
        if said:
            notes.append(said)
        if memory_budget:  # fit the budget before speeding up (autofix/memfit.py)
            mods = next((m for f, _ in named if (m := getattr(f, "modules", ()))), ())
            base = fit_budget(tuner, base, report, memory_budget, notes, mods)
        # 3. the baseline's pace and bound
        tuner.progress("baseline: timing the step, compute alone and input alone")
        tuner.pilot(base)
        bound_before = tuner.bound(base)
        tuner.original = base
        # 4. the trials of each fix
        best = base
        todo = [(fix, finding) for fix, finding in named if fix.auto]
        for fix, finding in named:
            if not fix.auto:
                tuner.note(fix, "", ADVICE, fix.title, finding)
                continue
            # budget shares: this fix and those still to try that apply to the config as it
            # is now (a fix that needs workers takes no share from a run without them until
            # a kept change gives it some)
            todo.remove((fix, finding))
            tuner.fixes_left = 1 + sum(1 for f, _ in todo if f.why_not(best, facts) is None)
            peak = predicted_peak(fix, report, memory_budget) if memory_budget else None
            if peak is not None and memory_budget:
                peaks[fix.id] = peak
                over = over_budget(peak, memory_budget)
                if over is not None:
                    tuner.note(fix, "", SKIPPED, over, finding)
                    continue
            if not try_all:
                pred = preds.get(fix.id)
                gain = math.prod(max(1.0, preds.get(f.id, 1.0), highs.get(f.id, 1.0))
                                 for f, _ in [(fix, finding), *todo] if f.id in preds)
                why = skip_reason(pred, gain, noise_floor(tuner.noise, min_gain,
                                                          plan.max_rounds),
                                  best=highs.get(fix.id))
                if why is not None:
                    tuner.note(fix, "", SKIPPED, why, finding)
                    continue
            best = try_fix(tuner, fix, best, facts, finding, input_ms=bound_before.data_ms,
                           compute_ms=bound_before.compute_ms)
        # 5. before/after and the bound of the winner
        final: Comparison | None = None
        bound: Bound | None = None
        tuned_ms: float | None = None
        if best != base:
            final, bound = tuner.compare(
                base, best, "before/after: baseline, tuned, compute alone, input alone",
                rounds=tuner.final_rounds(base, best), bound=True, confirm=1.0,
                deadline=tuner.end)
            tuned_ms = final.cand_ms
            iv = final.interval
            if final.status != OK or iv is None or iv.lo <= 1.0:
                # the winner must also win its own before/after: else the machine changed
                # between the trials and now (another process), and the baseline stays
                why = (f"before/after {iv} does not confirm it (the machine's load changed?)"
                       if final.status == OK and iv is not None
                       else f"before/after failed: {final.note}")
                tuner.decisions[:] = [
                    dataclasses.replace(d, status=REVERTED, reason=(
                        f"{d.reason}: kept, and the trials after it started from it; then "
                        "reverted, as the before/after did not confirm it (the "
                        "confirmation row)"))
                    if d.status == KEPT and d.finding != BUDGET else d
                    for d in tuner.decisions]
                tuner.decisions.append(Decision(
                    "confirmation", base.describe_change(best), REVERTED, why, None,
                    final.base_ms, final.cand_ms, iv, final.rounds, final.steps))
                notes.append(f"the kept fixes were reverted: {why}")
                best, final, bound = base, None, None
        if bound is None:
            tuned_ms, bound = tuner.bound_rounds(best, plan.final_rounds)
        if memory_budget and best != base:
            _with_peaks(tuner.decisions, peaks, measure_peak(tuner.trial_for(best)),
                        memory_budget, notes)
    finally:
        if not keep_tuned_state:
            restore(snap)
    code_str = _code(original, best, loader, optimizer, str(w.device))
    opt_changed = (best.optimizer_foreach, best.optimizer_fused) != (
        original.optimizer_foreach, original.optimizer_fused)
    retimed = tuner.capacity_note()
    if retimed:
        notes.append(retimed)
    moved = _pace_moved(tuner.decisions, final)
    if moved:
        notes.append(moved)
    undecided = undecided_note(tuner.undecided, best == base, plan.max_rounds)
    if undecided:
        notes.append(undecided)
    tuned_pred = predicted_tuned_ms(
        final.base_ms if final else None,
        [d.predicted_speedup for d in tuner.decisions if d.status == KEPT],
        tuner.tuned_speedup(best))
    below = below_bound_note(tuned_pred, final.base_ms if final else None, bound, min_gain)
    if below:
        notes.append(below)
    notes.append(STEP_TIMED)
    logged = log_disagreements(out_dir, tuner.disagreements)
    if logged is not None:
        notes.append(f"the model's predictions disagreed with {len(tuner.disagreements)} "
                     f"measurement(s): logged in {logged}")
    return AutofixReport(
        original=original, baseline=base, best=best, decisions=tuner.decisions, final=final,
        bound=bound, bound_before=bound_before, tuned_ms=tuned_ms,
        named={f.id: r for f, r in named},
        diagnosis=report, loader=build_loader(loader, best),
        optimizer=build_optimizer(optimizer, best) if opt_changed else None, code=code_str,
        trials=tuner.trials, elapsed_s=tuner.clock() - tuner.t0,
        device=str(w.device), cpus=facts.cpu_count or cpu_count(), min_gain=min_gain, notes=notes,
        predicted_tuned_ms=tuned_pred,
        model_disagreements=tuner.disagreements,
    )


def undecided_note(undecided: list[tuple[str, str, Interval, int, float | None]],
                   nothing_kept: bool, max_rounds: int) -> str | None:
    """What the trials that measured a gain but were left undecided would need
    (:meth:`~.search.Tuner.to_decide`): the most promising one's rounds and seconds at the
    noise its rounds showed, and what gives them (a longer budget; past ``max_rounds``,
    a quieter machine too). None where no trial was left so."""
    if not undecided:
        return None
    fix, change, iv, need, need_s = max(undecided, key=lambda u: u[2].ratio)
    said = (f"{len(undecided)} trial{'s' if len(undecided) > 1 else ''} measured a gain but "
            f"stayed undecided{' (nothing was kept)' if nothing_kept else ''}; the most "
            f"promising, {fix} ({change}), measured {iv}: about {need} rounds")
    said += "" if need_s is None else f", {seconds_said(need_s)} for it alone,"
    said += " would keep it at the noise its rounds showed, if that speedup holds; "
    if need > max_rounds:
        return said + (f"that is more than a trial's {max_rounds} rounds at most: autofix "
                       "cannot decide it on a machine this noisy (a quieter one would)")
    return said + "give autofix more time (budget_s=, --budget)"


def _with_peaks(decisions: list[Decision], peaks: Mapping[str, Mapping[str, Any]],
                measured: int | None, budget: int, notes: list[str]) -> None:
    """The kept decisions with their predicted peak and the tuned config's measured one."""
    def kept(d: Decision) -> Decision:
        pred = (peaks.get(d.fix) or {}).get("peak_bytes")
        said = ", ".join(x for x in (
            f"predicted {mib(pred)}" if pred is not None else "",
            f"measured {mib(measured)} (the tuned config)" if measured is not None else ""
        ) if x)
        return dataclasses.replace(d, predicted_peak_bytes=pred, measured_peak_bytes=measured,
                                   reason=f"{d.reason}; peak {said}" if said else d.reason)
    decisions[:] = [kept(d) if d.status == KEPT else d for d in decisions]
    if measured is None:
        notes.append("the tuned config ran out of memory when its peak was measured")
    else:
        notes.append(f"the tuned config's measured peak: {mib(measured)} of the "
                     f"{mib(budget)} memory budget"
                     + (" (over it)" if measured > budget else ""))


def _code(original: TrainConfig, best: TrainConfig, loader: Any, optimizer: Any,
          device: str) -> str:
    from ..fixes.code import render_change

    return render_change(original, best, loader=loader, optimizer=optimizer, device=device)


__all__ = ["Bound", "Capture", "Comparison", "Decision", "Plan", "TuneError",
           "AutofixReport", "autofix", "cpu_count", "planned_fixes"]
