"""autofix: measure a baseline, try the fixes the findings name, keep only what measurably helps.

    report = diagnose(model, loader, optimizer=opt, loss_fn=loss_fn).autofix()  # the usual way
    report = autofix(model, loader, optimizer, loss_fn=loss_fn, report=d.report)  # this module
    report.print()           # every decision with its numbers; before/after; the code change
    loader = report.loader   # your dataset/sampler/collate_fn with the winning settings

The flow follows the project's one direction: a baseline capture (the same
:class:`~diagnose.session.Session` a user runs, handed in as ``capture``) is analysed into
findings; the
findings' fix ids become :class:`~diagnose.fixes.Fix` objects; each fix is a
pure change of a frozen :class:`~diagnose.fixes.TrainConfig`; a trial realises
the config (:mod:`diagnose.tune.trial`) and is timed against the current best
in interleaved rounds; :mod:`diagnose.tune.stats` decides. The model, the
optimizer and the random number generators are put back bit-exact afterwards
(:mod:`diagnose.tune.state`) unless ``keep_tuned_state=True``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..fixes import FIXES, Fix, TrainConfig, micro_batches
from .report import TuneReport
from .result import (
    ADVICE,
    ERROR,
    FITS,
    KEPT,
    NO_CHANGE,
    NO_FIT,
    NOT_APPLICABLE,
    REVERTED,
    SKIPPED,
    Bound,
    Comparison,
    Decision,
)
from .state import restore, take
from .stats import Interval, block_means, pooled_median, speedup_interval
from .trial import (
    Trial,
    TuneError,
    Workload,
    build_loader,
    build_optimizer,
    fits,
    is_oom,
    release_memory,
)


@dataclass(frozen=True)
class Plan:
    """How trials are measured."""

    # Many short rounds rather than a few long ones: on a shared machine the variation
    # between rounds (other processes) dominates, and it shrinks with the number of rounds.
    warmup: int = 3  # discarded steps at the start of every round (plus one per worker)
    round_s: float = 0.15  # target time of one arm's measured steps in one round
    min_steps: int = 8  # two blocks: slow steps make long rounds even so
    max_steps: int = 400
    block: int = 4  # steps per observation (at least 2 x the workers of either arm)
    min_rounds: int = 6  # even: each arm goes first equally often
    max_rounds: int = 14  # more rounds only while the interval straddles 1 + min_gain
    final_rounds: int = 10  # before/after and speed of light (fixed: nothing is decided)
    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0

    @classmethod
    def quick(cls) -> Plan:
        """Short rounds: for tests and `torch-diagnose demo --quick` (wider intervals)."""
        return cls(warmup=2, round_s=0.1, min_steps=8, max_steps=80, min_rounds=2,
                   max_rounds=4, final_rounds=4, resamples=1000)


# ---------------------------------------------------------------------- facts
def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def live_facts(w: Workload, allow_compile: bool) -> dict[str, Any]:
    """What autofix knows for sure about this process (overrides a diagnosis' metrics)."""
    import inspect

    import torch

    cuda = w.on_cuda
    bf16 = False
    if cuda:
        try:
            bf16 = bool(torch.cuda.is_bf16_supported())
        except Exception:
            bf16 = False
    try:
        fused_ok = "fused" in inspect.signature(type(w.optimizer).__init__).parameters
    except (TypeError, ValueError):
        fused_ok = False
    has_conv = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in w.model.modules())
    iterable = isinstance(w.loader.dataset, torch.utils.data.IterableDataset)
    return {"device_type": w.device.type, "cpu_count": cpu_count(), "bf16_supported": bf16,
            "fused_supported": fused_ok, "model_has_conv": has_conv,
            "iterable_dataset": iterable, "allow_compile": allow_compile, "oom": False}


# ---------------------------------------------------------------------- the engine
class _Tuner:
    def __init__(self, w: Workload, plan: Plan, min_gain: float, max_trials: int,
                 budget_s: float, progress: Callable[[str], None] | None) -> None:
        self.w, self.plan, self.min_gain = w, plan, min_gain
        self.max_trials, self.budget_s = max_trials, budget_s
        self.progress = progress or (lambda s: None)
        self.t0 = time.perf_counter()
        self.decisions: list[Decision] = []
        self.trials = 0
        self.steps = plan.min_steps
        self.w_original_workers = 0
        self.workers_searched_by: str | None = None  # the fix that searched num_workers
        self._optimizers: dict[tuple[bool | None, bool | None], Any] = {}

    def trial_for(self, cfg: TrainConfig) -> Trial:
        """A Trial of ``cfg``; trials with the same optimizer settings share one rebuilt
        optimizer (one copy of the state on the device, not one per trial)."""
        key = (cfg.optimizer_foreach, cfg.optimizer_fused)
        if key not in self._optimizers:
            self._optimizers[key] = build_optimizer(self.w.optimizer, cfg)
        return Trial(self.w, cfg, self._optimizers[key])

    # ------------------------------------------------------------------ measuring
    def _layout(self, a: TrainConfig, b: TrainConfig) -> tuple[int, int, int]:
        workers = max(a.num_workers, b.num_workers)
        k = max(self.plan.block, 2 * workers)
        n = max(k, math.ceil(self.steps / k) * k)
        return self.plan.warmup + workers, n, k

    def _rounds(self, arms: list[tuple[str, Callable[[], np.ndarray]]], lo_r: int, hi_r: int,
                label: str, done: Callable[[dict[str, list[np.ndarray]]], bool] | None = None,
                ) -> dict[str, list[np.ndarray]]:
        """Run every arm once per round, rotating the order (A B, B A, ... so drift on the
        machine hits all arms alike) until ``done`` says the result is decided."""
        res: dict[str, list[np.ndarray]] = {name: [] for name, _ in arms}
        for r in range(hi_r):
            self.progress(f"{label} (round {r + 1}/{hi_r})")
            i = r % len(arms)
            for name, fn in arms[i:] + arms[:i]:
                try:
                    res[name].append(fn())
                except Exception as e:
                    raise _ArmFailed(name, e, res) from e
            if r + 1 >= lo_r and done is not None and done(res):
                break
        return res

    def _interval(self, res: dict[str, list[np.ndarray]]) -> Interval:
        p = self.plan
        return speedup_interval(res["a"], res["b"], confidence=p.confidence,
                                resamples=p.resamples, seed=p.seed)

    def compare(self, a: TrainConfig, b: TrainConfig, label: str, *,
                rounds: tuple[int, int] | None = None, bound: bool = False,
                ) -> tuple[Comparison, Bound | None]:
        """Interleaved rounds of ``a`` (baseline) and ``b`` (candidate) until decided; with
        ``bound``, ``b``'s compute-only and input-only times are measured in the same rounds."""
        plan = self.plan
        lo_r, hi_r = rounds or (plan.min_rounds, plan.max_rounds)
        warmup, n, k = self._layout(a, b)
        try:
            ta, tb = self.trial_for(a), self.trial_for(b)
        except TuneError as e:
            return Comparison(None, None, None, 0, 0, ERROR, str(e)), None

        def arm(t: Trial, what: str) -> Callable[[], np.ndarray]:
            def run() -> np.ndarray:
                with t:
                    if what == "compute":
                        times = t.compute_only(plan.warmup, n)
                    elif what == "data":
                        times = t.data_only(warmup, n)
                    else:
                        times = t.run(warmup, n)
                return block_means(times, k)
            return run

        arms = [("a", arm(ta, "step")), ("b", arm(tb, "step"))]
        if bound:
            arms += [("compute", arm(tb, "compute")), ("data", arm(tb, "data"))]
        threshold = 1.0 + self.min_gain

        def decided(res: dict[str, list[np.ndarray]]) -> bool:
            iv = self._interval(res)
            return iv.above(threshold) or iv.below(threshold)

        failed: tuple[str, str, dict[str, list[np.ndarray]]] | None = None
        try:
            res = self._rounds(arms, lo_r, hi_r, label, decided)
        except _ArmFailed as f:
            e = f.error
            if is_oom(e):
                failed = (NO_FIT, _first_line(e), f.partial)
            elif f.arm != "a":
                failed = (ERROR, f"{type(e).__name__}: {e}"[:200], f.partial)
            else:
                raise e from None
            del e
        if failed is not None:  # the exception and the frames holding tensors are gone now
            status, note, res = failed
            release_memory(self.w)
            return Comparison(_ms(res["a"]), _ms(res["b"]), None, len(res["b"]), n, status,
                              note, tb.first_step_s), None
        c = Comparison(_ms(res["a"]), _ms(res["b"]), self._interval(res), len(res["b"]), n,
                       setup_s=tb.first_step_s)
        bnd = None
        if bound:
            bnd = Bound(_ms(res["compute"]) or 0.0, _ms(res["data"]) or 0.0, b)
        return c, bnd

    def bound_rounds(self, cfg: TrainConfig, rounds: int) -> tuple[float | None, Bound]:
        """``cfg``'s step time with its compute-only and input-only times, interleaved."""
        warmup, n, k = self._layout(cfg, cfg)
        t = self.trial_for(cfg)

        def arm(fn: Callable[[int, int], np.ndarray], warm: int) -> Callable[[], np.ndarray]:
            def run() -> np.ndarray:
                with t:
                    return block_means(fn(warm, n), k)
            return run

        res = self._rounds([("step", arm(t.run, warmup)),
                            ("compute", arm(t.compute_only, self.plan.warmup)),
                            ("data", arm(t.data_only, warmup))], rounds, rounds,
                           "speed of light: the step, compute alone, input alone")
        return _ms(res["step"]), Bound(_ms(res["compute"]) or 0.0, _ms(res["data"]) or 0.0, cfg)

    def bound(self, cfg: TrainConfig) -> Bound:
        """Compute-only and data-only step times of ``cfg`` (medians of blocks)."""
        warmup, n, k = self._layout(cfg, cfg)
        t = self.trial_for(cfg)
        with t:
            comp = t.compute_only(self.plan.warmup, n)
        with t:
            data = t.data_only(warmup, n)
        return Bound(1e3 * float(np.median(block_means(comp, k))),
                     1e3 * float(np.median(block_means(data, k))), cfg)

    def pilot(self, cfg: TrainConfig) -> float:
        """Seconds per step of ``cfg`` (sizes the rounds)."""
        warmup, n, _ = self._layout(cfg, cfg)
        with self.trial_for(cfg) as t:
            times = t.run(warmup, self.plan.min_steps)
        step = float(np.median(times))
        self.steps = int(min(self.plan.max_steps,
                             max(self.plan.min_steps, math.ceil(self.plan.round_s / step))))
        return step

    # ------------------------------------------------------------------ budget
    def out_of_budget(self) -> str | None:
        if self.trials >= self.max_trials:
            return f"max_trials={self.max_trials} reached"
        if time.perf_counter() - self.t0 >= self.budget_s:
            return f"budget of {self.budget_s:.0f} s used"
        return None

    # ------------------------------------------------------------------ one trial
    def trial(self, fix: Fix, best: TrainConfig, cand: TrainConfig, finding: str | None) -> bool:
        """Time ``cand`` against ``best``; record the decision; True if kept."""
        change = best.describe_change(cand)
        why = self.out_of_budget()
        if why:
            self.decisions.append(Decision(fix.id, change, SKIPPED, why, finding))
            return False
        self.trials += 1
        label = f"trial {self.trials}: {fix.id}: {change}"
        c, _ = self.compare(best, cand, label)
        threshold = 1.0 + self.min_gain
        if c.status != "ok" or c.interval is None:
            self.decisions.append(Decision(fix.id, change, c.status, c.note, finding,
                                           c.base_ms, c.cand_ms, None, c.rounds, c.steps,
                                           c.setup_s))
            return False
        iv = c.interval
        if iv.above(threshold):
            status, reason = KEPT, f"CI lower bound {iv.lo:.2f} > {threshold:.2f}"
        elif iv.hi < 1.0:
            status, reason = REVERTED, f"slower: CI upper bound {iv.hi:.2f} < 1"
        else:
            status = REVERTED
            reason = f"no gain shown: CI lower bound {iv.lo:.2f} ≤ {threshold:.2f}"
        if cand.compile and c.setup_s is not None and c.base_ms and c.cand_ms:
            # compile time is counted: the steps it takes to pay for itself
            saved = c.base_ms - c.cand_ms
            pays = f"pays back after {math.ceil(1e3 * c.setup_s / saved):,} steps" \
                if saved > 0 else "never pays back"
            reason += f"; first step (compile) {c.setup_s:.1f} s, {pays}"
        self.decisions.append(Decision(fix.id, change, status, reason, finding, c.base_ms,
                                       c.cand_ms, iv, c.rounds, c.steps, c.setup_s))
        return status == KEPT

    # ------------------------------------------------------------------ searches
    def search_workers(self, fix: Fix, best: TrainConfig, cands: list[TrainConfig],
                       estimate: int, finding: str | None) -> TrainConfig:
        """num_workers: start at the measured estimate, climb the ladder while each step is a
        measured gain; if the start is no gain, walk down until one is, then climb from there;
        refine once between the best and the first value above it that was no gain."""
        values = [c.num_workers for c in cands]
        start = next((i for i, v in enumerate(values) if v >= estimate), len(values) - 1)
        tried: set[tuple[int, int]] = set()  # (from, to): never the same comparison twice

        def attempt(v: int) -> bool | None:
            nonlocal best
            if (best.num_workers, v) in tried or v == best.num_workers:
                return None
            tried.add((best.num_workers, v))
            cand = best.replace(num_workers=v)
            if self.trial(fix, best, cand, finding):
                best = cand
                return True
            return False

        def climb(i: int) -> int | None:
            """Try values[i:] upwards while kept; the first value that was no gain."""
            for v in values[i:]:
                if v <= best.num_workers:
                    continue
                if attempt(v) is False:
                    return v
            return None

        if attempt(values[start]):
            failed = climb(start + 1)
            lower = [v for v in values[:start] if v > self.w_original_workers]
            if lower and best.num_workers == values[start]:
                attempt(lower[-1])  # as fast with fewer workers? (kept only if faster)
        else:
            failed = values[start]
            for i in range(start - 1, -1, -1):
                if attempt(values[i]):
                    failed = climb(i + 1)
                    break
        if failed is not None and failed - best.num_workers > 1:
            attempt((failed + best.num_workers) // 2)
        return best

    def search_workers_down(self, fix: Fix, best: TrainConfig, cands: list[TrainConfig],
                            finding: str | None) -> TrainConfig:
        """Too many workers (more than the CPUs, or CPUs saturated): each value of the
        descending ladder (the CPU count, one less, half, 1, 0) against the best so far.
        A value that is no gain does not end the search: the cost of workers is not
        monotone in their number (0 workers means no inter-process transfer at all)."""
        for c in cands:  # descending: every value is below the best so far
            cand = best.replace(num_workers=c.num_workers)
            if cand.num_workers < best.num_workers and self.trial(fix, best, cand, finding):
                best = cand
        return best

    def search_batch(self, cfg: TrainConfig, first_error: str) -> TrainConfig:
        """The largest micro-batch that fits, keeping the effective batch (binary search
        over the divisors of the effective batch; fitting is monotone in the batch)."""
        options = micro_batches(cfg)
        if not options:
            raise TuneError("the batch does not fit in memory and the DataLoader has no "
                            "batch_size autofix can split (custom batch_sampler)")
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


class _ArmFailed(Exception):
    def __init__(self, arm: str, error: BaseException, partial: dict[str, list[np.ndarray]]):
        super().__init__(arm)
        self.arm, self.error, self.partial = arm, error, partial


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:160] if str(e) else type(e).__name__


def _ms(rounds: Sequence[np.ndarray]) -> float | None:
    return 1e3 * pooled_median(rounds) if rounds else None


# ---------------------------------------------------------------------- planning
#: Fixes that search num_workers (one search serves both: IN004 names the cap, IN001 the
#: count; the second one named says it was searched above).
WORKER_FIXES = ("num_workers", "num_workers_cap")


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


def _requested(fixes: Iterable[str | Fix]) -> list[tuple[Fix, str]]:
    out = []
    for f in fixes:
        if isinstance(f, str):
            if f not in FIXES:
                raise TuneError(f"unknown fix {f!r}: known fixes are {', '.join(sorted(FIXES))}")
            f = FIXES[f]
        out.append((f, "requested"))
    return out


def _workers_estimate(b: Bound, cfg: TrainConfig, cpus: int) -> int:
    """Workers needed so input keeps up with compute: one worker's time per step's batches
    over the compute-only step time (both measured), within 1..cpus."""
    per_worker = b.data_ms * max(1, cfg.num_workers)
    est = math.ceil(per_worker / max(b.compute_ms, 1e-6))
    return max(1, min(cpus, est))


# ---------------------------------------------------------------------- entry point
#: Records ``steps`` profiled steps of a workload under a config and returns their analysis
#: (a Report, or None when nothing was recorded): ``capture(workload, config, steps=...,
#: out_dir=...)``. Autofix takes it as an argument so that it needs nothing from the layer
#: above it (``diagnose.session.capture_baseline`` is the one ``diagnose(...)`` passes).
Capture = Callable[..., Any]


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
) -> TuneReport:
    """Try the fixes the findings name, one trial each, and keep those that measurably help.

    ``loss_fn(model(x), y)`` for ``(x, y)`` batches, or ``step_fn(model, batch) -> loss``
    (the batch already on the device); autofix runs backward, the optimizer step and
    zero_grad itself. Findings come from ``report`` (e.g. ``d.report`` of an earlier
    ``with diagnose(...)``) or from ``capture``, which records and analyses the baseline
    (``diagnose(...).autofix()`` passes the session's; see :data:`Capture`); ``fixes``
    names the fixes to try instead. ``start`` states step settings the loop already uses (e.g.
    ``TrainConfig(amp_dtype="bfloat16")``; the DataLoader settings are read from ``loader``).
    A change is kept only if its speedup's confidence interval lies above ``1 + min_gain``.
    ``max_trials`` and ``budget_s`` bound the trials; ``compile=True`` lets autofix try
    ``torch.compile`` (compile time counted). Model, optimizer and RNG state are restored
    afterwards unless ``keep_tuned_state``; the user's DataLoader and optimizer objects are
    never modified.
    """
    w = Workload.from_user(model, loader, optimizer, loss_fn=loss_fn, step_fn=step_fn,
                           device=device)
    if min_gain < 0 or max_trials < 0 or budget_s <= 0:
        raise TuneError("autofix: need min_gain >= 0, max_trials >= 0 and budget_s > 0")
    plan = plan or Plan()
    steps_kw = {} if start is None else {
        k: v for k, v in start.to_json().items()
        if k not in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                     "batch_size")}
    original = TrainConfig.from_objects(loader, optimizer, **steps_kw)
    snap = take(model, loader)
    tuner = _Tuner(w, plan, min_gain, max_trials, budget_s, progress)
    notes: list[str] = []
    try:
        facts = live_facts(w, compile)
        # 1. a baseline that runs: search the micro-batch when it does not fit
        tuner.progress("baseline: checking that a step fits")
        base = original
        ok, msg = fits(tuner.trial_for(base))
        if not ok:
            base = tuner.search_batch(base, msg)
            notes.append(f"the DataLoader's batch ({original.batch_size}) does not fit; "
                         f"baseline: micro-batch {base.batch_size} x {base.grad_accum_steps} "
                         "accumulation steps (same effective batch)")
        # 2. findings -> fixes
        named: list[tuple[Fix, str]]
        if fixes is not None:
            named = _requested(fixes)
        else:
            if report is None and capture is None:
                raise TuneError("autofix needs the baseline's findings: pass report= (a "
                                "diagnosis), fixes=, or capture= (diagnose(model, loader, "
                                "optimizer=..., loss_fn=...).autofix() does this for you)")
            if report is None:
                tuner.progress("baseline: capturing profiled steps for the diagnosis")
                report = capture(w, base, steps=diagnose_steps, out_dir=out_dir)
            if report is None:
                raise TuneError("the baseline capture produced no report: nothing to fix from")
            named = planned_fixes(report.findings)
            metrics = getattr(report, "metrics", {}) or {}
            facts = {**{k: v for k, v in metrics.items() if v is not None}, **facts}
        # 3. the baseline's pace and bound
        tuner.progress("baseline: timing the step, compute alone and input alone")
        tuner.pilot(base)
        bound_before = tuner.bound(base)
        estimate = _workers_estimate(bound_before, base, facts["cpu_count"])
        tuner.w_original_workers = base.num_workers
        # 4. one trial per candidate
        best = base
        for fix, finding in named:
            if not fix.auto:
                tuner.decisions.append(Decision(fix.id, "", ADVICE, fix.title, finding))
                continue
            if fix.id in WORKER_FIXES and tuner.workers_searched_by is not None:
                tuner.decisions.append(Decision(
                    fix.id, "", NO_CHANGE, f"searched above, as {tuner.workers_searched_by}",
                    finding))
                continue
            why = fix.why_not(best, facts)
            if why is not None:
                tuner.decisions.append(Decision(fix.id, "", NOT_APPLICABLE, why, finding))
                continue
            cands = fix.candidates(best, facts)
            if not cands:
                tuner.decisions.append(Decision(fix.id, "", NO_CHANGE,
                                                "already in place", finding))
                continue
            if fix.id in WORKER_FIXES:
                tuner.workers_searched_by = fix.id
                if cands[0].num_workers < best.num_workers:  # the ladder goes down
                    best = tuner.search_workers_down(fix, best, cands, finding)
                else:
                    best = tuner.search_workers(fix, best, cands, estimate, finding)
                continue
            for cand in cands:
                if fix.why_not(best, facts) is not None or cand == best:
                    break
                if tuner.trial(fix, best, cand, finding):
                    best = cand
        # 5. before/after and the bound of the winner
        final: Comparison | None = None
        bound: Bound | None = None
        tuned_ms: float | None = None
        if best != base:
            final, bound = tuner.compare(
                base, best, "before/after: baseline, tuned, compute alone, input alone",
                rounds=(plan.final_rounds, plan.final_rounds), bound=True)
            tuned_ms = final.cand_ms
            iv = final.interval
            if final.status != "ok" or iv is None or iv.lo <= 1.0:
                # the winner must also win its own before/after: else the machine changed
                # between the trials and now (another process), and the baseline stays
                why = (f"before/after {iv} does not confirm it (the machine's load changed?)"
                       if final.status == "ok" and iv is not None
                       else f"before/after failed: {final.note}")
                tuner.decisions[:] = [
                    dataclasses.replace(d, status=REVERTED, reason=f"{d.reason}; not confirmed")
                    if d.status == KEPT else d for d in tuner.decisions]
                tuner.decisions.append(Decision(
                    "confirmation", base.describe_change(best), REVERTED, why, None,
                    final.base_ms, final.cand_ms, iv, final.rounds, final.steps))
                notes.append(f"the kept fixes were reverted: {why}")
                best, final, bound = base, None, None
        if bound is None:
            tuned_ms, bound = tuner.bound_rounds(best, plan.final_rounds)
    finally:
        if not keep_tuned_state:
            restore(snap)
    code_str = _code(original, best, loader, optimizer)
    opt_changed = (best.optimizer_foreach, best.optimizer_fused) != (
        original.optimizer_foreach, original.optimizer_fused)
    return TuneReport(
        original=original, baseline=base, best=best, decisions=tuner.decisions, final=final,
        bound=bound, bound_before=bound_before, tuned_ms=tuned_ms,
        named={f.id: r for f, r in named},
        diagnosis=report, loader=build_loader(loader, best),
        optimizer=build_optimizer(optimizer, best) if opt_changed else None, code=code_str,
        trials=tuner.trials, elapsed_s=time.perf_counter() - tuner.t0,
        device=str(w.device), cpus=int(facts["cpu_count"]), min_gain=min_gain, notes=notes,
    )


def _code(original: TrainConfig, best: TrainConfig, loader: Any, optimizer: Any) -> str:
    from ..fixes.code import render_change

    return render_change(original, best, loader=loader, optimizer=optimizer)


__all__ = ["Bound", "Capture", "Decision", "Plan", "TuneError", "TuneReport", "autofix",
           "planned_fixes"]
