"""Searching: one trial per candidate config, decided by the sequential rule; the
ladder searches (climbing or descending, e.g. num_workers); the micro-batch search when
the batch does not fit.

:func:`try_fix` is the one place that runs a fix's trials. It knows no fix ids: each fix
unit says how its candidates are walked (``Fix.search_mode``: each, climb or descend),
where a climb starts (``Fix.search_start``), and which fixes share one search
(``Fix.search_key``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..capture.probes import time_cpu_capacity
from ..fixes import SEARCH_CLIMB, SEARCH_DESCEND, TIE, Facts, Fix, TrainConfig, micro_batches
from ..values import usable_cpus
from .budget import Budgeted
from .decisions import (
    FITS,
    KEPT,
    NO_CHANGE,
    NO_FIT,
    NOT_APPLICABLE,
    OK,
    REVERTED,
    SKIPPED,
    Decision,
)
from .measure import Plan
from .order import disagreement
from .stats import Interval, rounds_to_decide
from .trial import TuneError, Workload, fits

#: the TrainConfig fields whose change moves CPU work between torch's threads and workers
CPU_FIELDS = frozenset({"num_workers", "intra_op_threads"})
#: a trial's mean steps' ratio this far (|log|, about 10%) from its paired speedup is
#: stated beside it: the two then tell different stories, and the ms column shows the means
UNEVEN = 0.1



def _steps(original: TrainConfig, cfg: TrainConfig, owners: list[tuple[Fix, frozenset[str]]]
           ) -> list[tuple[Any, dict[str, Any]]] | None:
    """``cfg`` as transforms of the baseline ``original``: ``owners`` are the fixes that
    set its fields, in order, each with the fields it set. Owners sharing a field are one
    change, through the latest one whose fields cover the group's; each change is the
    config's values of its fields (none where they are the baseline's). None where a field
    has no owner or no owner's transform covers its group."""
    groups: list[tuple[list[int], set[str]]] = []
    for i, (_, fields) in enumerate(owners):
        touching = [grp for grp in groups if grp[1] & fields]
        members = sorted([i, *(j for grp in touching for j in grp[0])])
        union = set(fields).union(*(grp[1] for grp in touching))
        groups = [grp for grp in groups if not any(grp is t for t in touching)]
        groups.append((members, union))
    groups.sort(key=lambda grp: grp[0][0])
    diff = original.diff(cfg)
    if any(not any(f in grp[1] for grp in groups) for f in diff):
        return None
    out: list[tuple[Any, dict[str, Any]]] = []
    for members, union in groups:
        part = {f: new for f, (_, new) in diff.items() if f in union}
        if not part:
            continue
        cover = [owners[j][0] for j in members if owners[j][1] >= union]
        if not cover or cover[-1].transform is None:
            return None
        out.append((cover[-1].transform, part))
    return out



def _apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` with two decimals, more (up to four) where two would print them equal
    ("1.03 < 1.03")."""
    for places in (2, 3, 4):
        x, y = f"{a:.{places}f}", f"{b:.{places}f}"
        if x != y:
            break
    return x, y

def seconds_said(s: float) -> str:
    """``s`` seconds as a planning figure: "about 40 s", "under a second"."""
    return f"about {s:.0f} s" if s >= 1.0 else "under a second"


class Tuner(Budgeted):
    """The trials of one autofix run: decisions, predictions, searches, within its budget
    (:class:`~.budget.Budgeted`)."""

    def __init__(self, w: Workload, plan: Plan, min_gain: float, max_trials: int,
                 budget_s: float, progress: Callable[[str], None] | None,
                 predictions: dict[str, float] | None = None) -> None:
        super().__init__(w, plan, min_gain, progress, max_trials, budget_s)
        self.decisions: list[Decision] = []
        self.preds = predictions or {}
        # fix id -> its prediction's range over its point (slow end, fast end): a trial's
        # own point scaled by it is the range it is judged against
        self.spans: dict[str, tuple[float, float]] = {}
        self.disagreements: list[dict[str, Any]] = []
        # trials left undecided that measured a gain: (fix, change, interval, the rounds
        # and the seconds that would decide it at their noise; :meth:`to_decide`)
        self.undecided: list[tuple[str, str, Interval, int, float | None]] = []
        self.searched: dict[str, str] = {}  # search key -> the fix that ran that search
        # kept changes: the fields each changed and its fix's prediction (vs the baseline)
        self.kept: list[tuple[frozenset[str], float | None]] = []
        # fix id -> {change from the baseline as a set of (field, value): speedup}
        self.cand_preds: dict[str, dict[frozenset[tuple[str, Any]], float]] = {}
        # fix id -> the change its prediction advises (of the configs within TIE of the
        # best, the one whose workers leave the step the most time between batches)
        self.advised: dict[str, frozenset[tuple[str, Any]]] = {}
        # the diagnosis' Predictor: a trial after kept changes applies their transforms first
        self.predictor: Any = None
        self.kept_fixes: list[tuple[Fix, frozenset[str]]] = []  # in the order kept
        self.facts = Facts()  # the diagnosed run's metrics and live facts
        # the CPUs' capacity timed again before trials that move CPU work, and the
        # capture's own timings (cpu_capacity_min, cpu_capacity_max)
        self.capacity_timings: list[float] = []
        self.capture_capacity: tuple[float | None, float | None] | None = None
        # fix id -> the report's predictions for its configs that the capacity timed again
        self.superseded: dict[str, dict[frozenset[tuple[str, Any]], float]] = {}

    def note(self, fix: Fix, change: str, status: str, reason: str, finding: str | None
             ) -> None:
        """A decision without a trial (not applicable, no change, skipped, advice)."""
        self.decisions.append(Decision(fix.id, change, status, reason, finding,
                                       predicted_speedup=self.preds.get(fix.id)))

    def of_config(self, fix: Fix, cfg: TrainConfig) -> float | None:
        """The model's speedup of ``cfg`` over the baseline through ``fix``'s transform: its
        prediction for that config's values of the fields the fix's search sets (1.0 where
        they are the baseline's), None where the search had no such config."""
        return self._of_config(self.cand_preds.get(fix.id), cfg)

    def _of_config(self, table: dict[frozenset[tuple[str, Any]], float] | None,
                   cfg: TrainConfig) -> float | None:
        if not table or self.original is None:
            return None
        fields = {k for change in table for k, _ in change}
        key = frozenset((k, getattr(cfg, k)) for k in fields
                        if getattr(cfg, k) != getattr(self.original, k))
        return 1.0 if not key else table.get(key)

    def composed(self, fix: Fix, best: TrainConfig, cand: TrainConfig) -> float | None:
        """The model's speedup of ``cand`` over ``best`` with the kept changes in the model:
        each config is the baseline with the kept fixes' transforms applied in the order
        they were kept, then (for ``cand``) this fix's. Fixes that set the same fields (a
        ladder's rungs; num_workers after a kept threads split) are one change, through
        the transform of the one whose fields cover them all (the threads split's covers
        num_workers), for the config's values. None where there is no model, a change no
        fix's transform covers, or the model cannot tell."""
        if self.predictor is None or self.original is None:
            return None
        kept = list(self.kept_fixes)
        sb = _steps(self.original, best, kept)
        sc = _steps(self.original, cand, [*kept, (fix, self._owned(fix, best, cand))])
        if sb is None or sc is None:
            return None
        try:
            pb, pc = self.predictor.predict_steps(sb), self.predictor.predict_steps(sc)
        except Exception:  # a broken transform is a missing prediction, never a failed run
            return None
        if isinstance(pb, str) or isinstance(pc, str) or pb.speedup <= 0:
            return None
        # each over the baseline in its own frame (a change of workers adds the epoch's
        # start to both its sides), as the diagnosis predicts the first trial and
        # tuned_speedup the kept ones
        return float(pc.speedup / pb.speedup)

    def _owned(self, fix: Fix, best: TrainConfig, cand: TrainConfig) -> frozenset[str]:
        """The fields ``fix`` sets in ``cand``: those it changes from ``best``, and those of
        its own fields that ``cand`` holds away from the baseline (a split after a kept
        num_workers sets both), so a config is predicted through the fix as the report
        predicts it: one change from the baseline, not the fix's transform on top of
        another's for the same fields."""
        orig = self.original if self.original is not None else best
        own = {f for f in fix.fields if getattr(cand, f) != getattr(orig, f)}
        return frozenset(best.diff(cand)) | frozenset(own)

    def saving_over(self, fix: Fix, best: TrainConfig) -> float | None:
        """A fix predicted without a graph transform (persistent workers: an epoch's start)
        for the config it is tried on, ``best``, which the diagnosis may not have had
        (workers kept for a run without them, or fewer): the time per step it saves there
        (its prediction's base less its step) off the model's step for ``best``."""
        if self.predictor is None:
            return None
        try:
            p = fix.predict(self.predictor, best, self.facts)
        except Exception:
            return None
        base_ms, step_ms = getattr(p, "base_ms", None), getattr(p, "step_ms", None)
        if not isinstance(base_ms, float) or not isinstance(step_ms, float):
            return None
        now = 1.0 if best == self.original else self.tuned_speedup(best)
        if now is None:
            return None
        best_ms = base_ms / now
        return best_ms / max(best_ms - (base_ms - step_ms), 1e-9)

    def tuned_speedup(self, best: TrainConfig) -> float | None:
        """The model's speedup of ``best`` (the kept changes together, composed as in
        :meth:`composed`) over the baseline; None without a model or a prediction."""
        if self.predictor is None or self.original is None or best == self.original:
            return None
        steps = _steps(self.original, best, list(self.kept_fixes))
        if not steps:
            return None
        try:
            p = self.predictor.predict_steps(steps)
        except Exception:
            return None
        return None if isinstance(p, str) else float(p.speedup)

    def relative(self, pred: float | None, best: TrainConfig, cand: TrainConfig,
                 fix: Fix | None = None) -> float | None:
        """The model's speedup of ``cand`` over ``best``: through the step model with the
        kept changes in it (:meth:`composed`) where the diagnosis has one. Else, where the
        fix's search predicted both configs (a ladder's rungs), the ratio of those. Else:
        predictions are made against the baseline; a kept change this trial overrides (the
        same fields, e.g. num_workers again) is divided out, as the model predicted both
        against the same baseline. None where a kept change it overrides had no
        prediction."""
        if fix is not None:
            both = self.composed(fix, best, cand)
            if both is not None:
                return both
            if fix.transform is None:  # predicted for the config it is tried on
                saved = self.saving_over(fix, best)
                if saved is not None:
                    return saved
            a, b = self.of_config(fix, cand), self.of_config(fix, best)
            if a is not None and b is not None and b > 0:
                return a / b
        if pred is None:
            return None
        fields = set(best.diff(cand))
        over = [p for f, p in self.kept if f & fields]
        known = [p for p in over if p is not None and p > 0]
        if len(known) < len(over):
            return None
        return pred / math.prod(known)

    def retime_capacity(self, fix: Fix, cands: list[TrainConfig], best: TrainConfig) -> None:
        """Before the trials of a fix that moves CPU work (workers, torch's threads): time
        the CPUs' capacity once more and fold it into the model's facts, then predict the
        fix's configs again with it, so a capture made while something else held a CPU
        does not set the prediction. The trial's prediction is made at the most of all the
        timings, as the capture's is at the most of its own. About half a second a fix,
        only with a model whose capture timed the capacity."""
        if self.predictor is None or self.original is None or self.facts.cpu_capacity is None \
                or self.predictor.withholds(fix.fields) is not None:
            return
        if not any(set(best.diff(c)) & CPU_FIELDS for c in cands):
            return
        got = time_cpu_capacity(usable_cpus())
        if got is None:
            return
        if self.capture_capacity is None:
            f = self.facts
            self.capture_capacity = (f.cpu_capacity_min, f.cpu_capacity if
                                     f.cpu_capacity_max is None else f.cpu_capacity_max)
        self.capacity_timings.append(got)
        changed = self.predictor.add_capacity_timings([got])
        if not changed:
            return
        self.facts = self.facts.replace(**changed)
        try:
            p = fix.predict(self.predictor, self.original, self.facts)
        except Exception:  # a broken transform keeps the diagnosis' predictions
            return
        if isinstance(p, str) or p.at_least or not p.candidates:
            return
        if fix.id in self.cand_preds:
            self.superseded.setdefault(fix.id, self.cand_preds[fix.id])
        self.cand_preds[fix.id] = {frozenset(c): float(x) for c, x in p.candidates}
        if p.change:
            self.advised[fix.id] = frozenset(p.change.items())
        if fix.id in self.preds:
            self.preds[fix.id] = float(p.speedup)

    def superseded_note(self, fix: Fix, pred: float | None, best: TrainConfig,
                        cand: TrainConfig) -> str | None:
        """Where this trial's prediction was made again with the CPUs' capacity timed
        before the fix's trials and differs from what the report said of the same
        comparison (its predictions for both configs, as a ratio): both numbers, the
        report's stated as superseded (None: the report's number stands)."""
        old = self.superseded.get(fix.id)
        if pred is None or old is None or not self.capacity_timings:
            return None
        a, b = self._of_config(old, cand), self._of_config(old, best)
        if a is None or b is None or b <= 0 or f"{a / b:.2f}" == f"{pred:.2f}":
            return None
        then = self.capture_capacity[1] if self.capture_capacity else None
        at = (f"{max(self.capacity_timings):.2f} CPUs, the capture's "
              + (f"{then:.2f}" if isinstance(then, float) else "not timed"))
        return (f"predicted {pred:.2f}x with the CPUs' capacity timed again before this fix "
                f"({at}): supersedes the report's {a / b:.2f}x")

    def capacity_note(self) -> str | None:
        """What the timings before the trials read, beside the capture's (None: none)."""
        if not self.capacity_timings or self.capture_capacity is None:
            return None
        lo, hi = min(self.capacity_timings), max(self.capacity_timings)
        a, b = self.capture_capacity
        def span(x: float, y: float) -> str:  # one figure where both ends print alike
            return f"{x:.2f}-{y:.2f}" if f"{x:.2f}" != f"{y:.2f}" else f"{y:.2f}"

        then = (span(a, b) if isinstance(a, float) and isinstance(b, float) and b > a
                else f"{b:.2f}" if isinstance(b, float) else "not timed")
        now = span(lo, hi)
        return (f"the CPUs' capacity, timed again before the trials that move CPU work: "
                f"{now} CPUs (the capture's: {then}); those trials were predicted at the "
                "most of all the timings")

    # ------------------------------------------------------------------ one trial
    def to_decide(self, fix: Fix, change: str, iv: Interval, rounds: int, threshold: float,
                  best: TrainConfig, cand: TrainConfig) -> str | None:
        """What an undecided trial that measured a gain would need to be kept, at the noise
        its rounds showed, if its speedup holds (:func:`~.stats.rounds_to_decide`): "about
        N rounds (S s)", kept in :attr:`undecided` for the run's note; None where more
        rounds would not keep it."""
        need = rounds_to_decide(iv, rounds, threshold)
        if need is None:
            return None
        per_round = self.round_s(best, cand)
        need_s = None if per_round is None else need * per_round
        self.undecided.append((fix.id, change, iv, need, need_s))
        return (f"at the noise its rounds showed, about {need} rounds"
                + ("" if need_s is None else f" ({seconds_said(need_s)})")
                + " would keep it, if the speedup it measured holds")

    def trial(self, fix: Fix, best: TrainConfig, cand: TrainConfig, finding: str | None) -> bool:
        """Time ``cand`` against ``best`` until the sequential rule decides; record the
        decision (with the prediction, and the model's disagreement); True if kept."""
        change = best.describe_change(cand)
        why = self.out_of_budget() or self.too_long(best, cand)
        if why:
            self.note(fix, change, SKIPPED, why, finding)
            return False
        self.trials += 1
        pred = self.relative(self.preds.get(fix.id), best, cand, fix)  # for this comparison
        span = self.spans.get(fix.id)
        rng = None if pred is None or span is None else (pred * span[0], pred * span[1])
        again = self.superseded_note(fix, pred, best, cand)
        looks = self.schedule(pred, self.share_s(cand), best, cand)
        label = f"trial {self.trials}: {fix.id}: {change}"
        c, _ = self.compare(best, cand, label, rounds=looks)
        threshold = 1.0 + self.min_gain
        if c.status != OK or c.interval is None:
            note = c.note if again is None else f"{c.note}; {again}" if c.note else again
            self.decisions.append(Decision(fix.id, change, c.status, note, finding,
                                           c.base_ms, c.cand_ms, None, c.rounds, c.steps,
                                           c.setup_s, pred, predicted_range=rng))
            return False
        iv = c.interval
        if iv.above(threshold):
            status, reason = KEPT, "CI lower bound {} > {}".format(*_apart(iv.lo, threshold))
        elif iv.hi < 1.0:
            status, reason = REVERTED, f"slower: CI upper bound {_apart(iv.hi, 1.0)[0]} < 1"
        elif iv.below(threshold):
            status = REVERTED
            reason = "no gain worth keeping: CI upper bound {} < {}".format(
                *_apart(iv.hi, threshold))
        else:
            status = REVERTED
            reason = (f"no gain shown in {c.rounds} rounds: CI lower bound "
                      + "{} ≤ {}".format(*_apart(iv.lo, threshold)))
            more = self.to_decide(fix, change, iv, c.rounds, threshold, best, cand)
            if more:
                reason += f"; {more}"
        if cand.compile and c.setup_s is not None and c.base_ms and c.cand_ms:
            # compile time is counted: the steps it takes to pay for itself
            saved = c.base_ms - c.cand_ms
            pays = f"pays back after {math.ceil(1e3 * c.setup_s / saved):,} steps" \
                if saved > 0 else "never pays back"
            reason += f"; first step (compile) {c.setup_s:.1f} s, {pays}"
        if again is not None:
            reason += f"; {again}"
        if c.base_ms and c.cand_ms and abs(math.log(c.base_ms / c.cand_ms / iv.ratio)) > UNEVEN:
            # the ms are the arms' mean steps, where one slow round weighs by its length
            reason += (f"; the mean steps give {c.base_ms / c.cand_ms:.2f}x: the speedup pairs "
                       "the rounds, each counting once, and the rounds were uneven")
        off = disagreement(pred, iv, rng)
        if off is not None:
            reason += f"; {off}"
        if pred is not None and not iv.lo <= pred <= iv.hi:  # the point's error, logged
            self.disagreements.append({
                "fix": fix.id, "change": change, "finding": finding, "predicted_speedup": pred,
                "predicted_range": None if rng is None else list(rng),
                "speedup": iv.ratio, "ci": [iv.lo, iv.hi], "confidence": iv.confidence,
                "rounds": c.rounds, "baseline_ms": c.base_ms, "trial_ms": c.cand_ms,
                "status": status})
        self.decisions.append(Decision(fix.id, change, status, reason, finding, c.base_ms,
                                       c.cand_ms, iv, c.rounds, c.steps, c.setup_s, pred,
                                       predicted_range=rng))
        if status == KEPT:
            self.kept.append((frozenset(best.diff(cand)), self.preds.get(fix.id)))
            self.kept_fixes.append((fix, self._owned(fix, best, cand)))
        return status == KEPT

    # ------------------------------------------------------------------ searches
    def search_climb(self, fix: Fix, best: TrainConfig, cands: list[TrainConfig],
                     start: int, finding: str | None) -> TrainConfig:
        """A ladder of one field (``fix.search_key``, e.g. num_workers), ascending: start at
        ``values[start]`` (the fix's estimate), climb while each step is a measured gain; if
        the start is no gain, walk down until one is, then climb from there; refine once
        between the best and the first value above it that was no gain."""
        key = fix.search_key
        assert key is not None
        values = [getattr(c, key) for c in cands]
        start = max(0, min(start, len(values) - 1))
        floor = getattr(self.original, key) if self.original is not None else values[0] - 1
        tried: set[tuple[int, int]] = set()  # (from, to): never the same comparison twice

        def attempt(v: int) -> bool | None:
            nonlocal best
            cur = getattr(best, key)
            if (cur, v) in tried or v == cur:
                return None
            tried.add((cur, v))
            cand = best.replace(**{key: v})
            if self.trial(fix, best, cand, finding):
                best = cand
                return True
            return False

        def climb(i: int) -> int | None:
            """Try values[i:] upwards while kept; the first value that was no gain."""
            for v in values[i:]:
                if v <= getattr(best, key):
                    continue
                if attempt(v) is False:
                    return v
            return None

        if attempt(values[start]):
            failed = climb(start + 1)
            lower = [v for v in values[:start] if v > floor]
            if lower and getattr(best, key) == values[start]:
                attempt(lower[-1])  # as fast with fewer? (kept only if faster)
        else:
            failed = values[start]
            for i in range(start - 1, -1, -1):
                if attempt(values[i]):
                    failed = climb(i + 1)
                    break
        if failed is not None and failed - getattr(best, key) > 1:
            attempt((failed + getattr(best, key)) // 2)
        return best

    def search_descend(self, fix: Fix, best: TrainConfig, cands: list[TrainConfig],
                       finding: str | None) -> TrainConfig:
        """A descending ladder of one field (e.g. too many workers: the CPU count, one less,
        half, 1, 0; the rung predicted best first where the model predicted them), each
        value below the best so far tried against it. A value that is no gain does not end
        the search: the cost of workers is not monotone in their number (0 workers means no
        inter-process transfer at all)."""
        key = fix.search_key
        assert key is not None
        for c in cands:  # descending: every value is below the best so far
            cand = best.replace(**{key: getattr(c, key)})
            if getattr(cand, key) < getattr(best, key) and self.trial(fix, best, cand, finding):
                best = cand
        return best

    def search_batch(self, cfg: TrainConfig, first_error: str) -> TrainConfig:
        """The largest micro-batch that fits, keeping the effective batch (binary search
        over the divisors of the effective batch; fitting is monotone in the batch)."""
        options = micro_batches(cfg)
        if not options:
            raise TuneError("the batch does not fit in memory and the DataLoader has no "
                            "batch_size autofix can split (a batch_sampler of its own, or "
                            "batch_size=None: the batch is made by the sampler or dataset)")
        self.decisions.append(Decision("grad_accumulation", f"batch_size {cfg.batch_size}",
                                       NO_FIT, f"out of memory: {first_error}", "OOM"))
        lo, hi = 1, len(options) - 1  # options[0] is cfg itself: does not fit
        found: TrainConfig | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            c = options[mid]
            self.progress(f"batch search: micro-batch {c.batch_size} x {c.grad_accum_steps}")
            ok, msg = fits(self.trial_for(c))
            change = cfg.describe_change(c)
            if ok:
                found = c
                self.decisions.append(Decision("grad_accumulation", change, FITS,
                                               "runs without running out of memory", "OOM"))
                hi = mid - 1
            else:
                self.decisions.append(Decision("grad_accumulation", change, NO_FIT,
                                               f"out of memory: {msg}", "OOM"))
                lo = mid + 1
        if found is None:
            raise TuneError(f"out of memory even at micro-batch 1 (effective batch "
                            f"{cfg.effective_batch}): the model itself does not fit")
        return found


def _advice_first(t: Tuner, fix: Fix, cands: list[TrainConfig]) -> list[TrainConfig]:
    """``cands`` (best predicted first) with the config the fix's advice names first where
    its prediction ties the best (within TIE): the trial then checks what the finding
    advised, and a tie goes where the loader has headroom."""
    advised, orig = t.advised.get(fix.id), t.original
    if not advised or orig is None or not cands:
        return cands
    fields = {k for k, _ in advised}
    top = t.of_config(fix, cands[0])
    for i, c in enumerate(cands):
        change = frozenset((k, getattr(c, k)) for k in fields if getattr(c, k) != getattr(orig, k))
        p = t.of_config(fix, c)
        if change == advised and p is not None and top is not None and p * (1 + TIE) >= top:
            return [c, *cands[:i], *cands[i + 1:]]
    return cands


def _by_prediction(t: Tuner, fix: Fix, cands: list[TrainConfig]) -> list[TrainConfig] | None:
    """``cands``, the best predicted first (the advised one first where it ties the best);
    None where the model predicted none of them."""
    guess = [t.of_config(fix, c) for c in cands]
    if all(p is None for p in guess):
        return None
    order = sorted(range(len(cands)), key=lambda i: (-(guess[i] or 0.0), i))
    return _advice_first(t, fix, [cands[i] for i in order])


def try_fix(t: Tuner, fix: Fix, best: TrainConfig, facts: Facts,
            finding: str | None, *, input_ms: float, compute_ms: float) -> TrainConfig:
    """The trials of one automatic fix from ``best``; the best config after them.
    ``input_ms``/``compute_ms``: the baseline's input-only and compute-only step, where a
    climbing search starts (``Fix.search_start``)."""
    key = fix.search_key
    if key is not None and key in t.searched:
        t.note(fix, "", NO_CHANGE, f"searched above, as {t.searched[key]}", finding)
        return best
    why = fix.why_not(best, facts)
    if why is not None:
        t.note(fix, "", NOT_APPLICABLE, why, finding)
        return best
    cands = fix.candidates(best, facts)
    if not cands:
        t.note(fix, "", NO_CHANGE, "already in place", finding)
        return best
    if key is not None:
        t.searched[key] = fix.id
    t.retime_capacity(fix, cands, best)
    mode = fix.search_mode(best, cands)
    if mode == SEARCH_DESCEND:  # the rung predicted best first, as the finding advised it
        return t.search_descend(fix, best, _by_prediction(t, fix, cands) or cands, finding)
    if mode == SEARCH_CLIMB:
        base = t.original if t.original is not None else best
        # the climb starts at the rung predicted best (not at the first rung tried in
        # predicted order); the fix's own estimate where the model predicted no rung
        ranked = _by_prediction(t, fix, cands)
        start = cands.index(ranked[0]) if ranked else fix.search_start(
            base, cands, input_ms=input_ms, compute_ms=compute_ms)
        return t.search_climb(fix, best, cands, start, finding)
    # each config on its own: the one the model predicts best first
    cands = _by_prediction(t, fix, cands) or cands
    for cand in cands:
        if fix.why_not(best, facts) is not None or cand == best:
            break
        if t.trial(fix, best, cand, finding):
            best = cand
    return best


__all__ = ["Tuner", "try_fix"]
