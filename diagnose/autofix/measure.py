"""Measuring: the plan of a trial's rounds, interleaved arms, and the interval they give.

Rounds alternate the arms (A B, B A, ...) so that drift on the machine hits every arm
alike. In each round an arm runs ``warmup`` discarded steps, then its timed steps in
*blocks* (:meth:`diagnose.autofix.trial.Trial.run`: one synchronisation per block, as the
user's loop runs). A trial's rounds follow the sequential rule of
:mod:`diagnose.autofix.stats`: looks at round counts fixed before it starts (sized by a power
calculation from the measured noise and the predicted effect), stopping when the interval
excludes the keep threshold on either side, or when the trial's share of the budget ends.
Fixed-size comparisons (the before/after, the speed of light) use the bootstrap interval.

Time is read from :attr:`Measurer.clock` (tests put a fake clock there). No arm starts
that is expected to end past :attr:`Measurer.hard_end` once every arm has
:data:`HARD_END_MIN_ROUNDS` whole rounds: the rounds end there and the comparison is
decided on them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DiagnoseError
from ..fixes import TrainConfig
from .decisions import ERROR, NO_FIT, Bound, Comparison
from .stats import (
    Interval,
    SequentialRule,
    SequentialTrial,
    look_schedule,
    pooled_mean,
    round_log_ratios,
    rounds_for,
    speedup_interval,
)
from .trial import (
    Trial,
    TuneError,
    Workload,
    build_loader,
    build_optimizer,
    epoch_steps_of,
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
    block: int = 4  # steps per block (at least 2 x the workers of either arm)
    min_rounds: int = 4  # the earliest look of a trial
    max_rounds: int = 20  # the last look (and fewer when the trial's budget share ends)
    looks: int = 4  # the most looks a trial takes: its error is split over them
    alpha: float = 0.05  # error of a trial's intervals, all looks together (two-sided)
    power: float = 0.9  # the first look is sized to decide the predicted effect this often
    noise: float = 0.05  # prior SD of one round's log ratio, until trials measure it
    # a kept change is measured on to this half-width (stats.SequentialTrial), None: stop
    precision: float | None = 0.10
    final_rounds: int = 10  # before/after and speed of light (fixed: nothing is decided)
    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0

    @classmethod
    def quick(cls) -> Plan:
        """Short rounds: for tests and `torch-diagnose demo --quick` (wider intervals)."""
        return cls(warmup=2, round_s=0.1, min_steps=8, max_steps=80, min_rounds=3,
                   max_rounds=6, looks=2, precision=None, final_rounds=4, resamples=1000)

    @property
    def rule(self) -> SequentialRule:
        return SequentialRule(alpha=self.alpha, looks=self.looks, power=self.power)


#: a trial whose budget share has ended still runs this many rounds before its last look:
#: from 2 rounds the interval has one degree of freedom (t = 12.7, wide enough to revert
#: a large gain); a third round puts t at 4.3
DEADLINE_MIN_ROUNDS = 3

#: the before/after (:meth:`Measurer.compare` with ``confirm``) looks at most this often,
#: each time after ``final_rounds`` more rounds, while its interval leaves the tuned config's
#: gain open. Only a winner of its trials gets there: a change is kept only where its own
#: trial and the before/after both say faster, so looking twice cannot keep a change the
#: trial's rule would not (its false-keep bound holds, stats). One look of a short plan can
#: leave a real gain open on a noisy host
CONFIRM_LOOKS = 2

#: past the hard end of the budget, rounds stop once each arm has this many whole rounds:
#: the fewest that give an interval at all (one degree of freedom)
HARD_END_MIN_ROUNDS = 2


@dataclass(frozen=True)
class Looks:
    """A trial's sequential schedule: the round counts at which the rule looks (fixed before
    the trial starts) and the time its share of the budget ends."""

    at: tuple[int, ...]
    deadline: float | None = None


class _ArmFailed(Exception):
    def __init__(self, arm: str, error: BaseException, partial: dict[str, list[np.ndarray]]):
        super().__init__(arm)
        self.arm, self.error, self.partial = arm, error, partial


def first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:160] if str(e) else type(e).__name__


def _ms(rounds: Sequence[np.ndarray]) -> float | None:
    return 1e3 * pooled_mean(rounds) if rounds else None


Rounds = dict[str, list[np.ndarray]]


class Measurer:
    """Times configs of one workload against each other (see the module docstring)."""

    #: seconds, monotonic: when rounds started and deadlines end (tests patch it)
    clock: Callable[[], float] = staticmethod(time.perf_counter)

    def __init__(self, w: Workload, plan: Plan, min_gain: float,
                 progress: Callable[[str], None] | None) -> None:
        self.w, self.plan, self.min_gain = w, plan, min_gain
        self.progress = progress or (lambda s: None)
        self.steps = plan.min_steps
        self.step_s: float | None = None  # the baseline's seconds per step (pilot)
        self._residuals: list[tuple[float, int]] = []  # (variance of d_r, dof) per trial
        self._optimizers: dict[tuple[bool | None, bool | None], Any] = {}
        self.hard_end: float | None = None  # clock time past which no new arm starts
        self._epochs: dict[TrainConfig, int | None] = {}  # cfg -> epoch steps timed whole

    def trial_for(self, cfg: TrainConfig) -> Trial:
        """A Trial of ``cfg``; trials with the same optimizer settings share one rebuilt
        optimizer (one copy of the state on the device, not one per trial)."""
        key = (cfg.optimizer_foreach, cfg.optimizer_fused)
        if key not in self._optimizers:
            self._optimizers[key] = build_optimizer(self.w.optimizer, cfg)
        return Trial(self.w, cfg, self._optimizers[key])

    # ------------------------------------------------------------------ noise and size
    @property
    def noise(self) -> float:
        """SD of one round's log ratio: pooled over the trials so far (each around its own
        mean), the plan's prior before any."""
        dof = sum(k for _, k in self._residuals)
        if dof < 4:
            return self.plan.noise
        return math.sqrt(sum(v * k for v, k in self._residuals) / dof)

    def schedule(self, predicted: float | None, share_s: float | None,
                 a: TrainConfig, b: TrainConfig) -> Looks:
        """The looks of one trial: the first sized by :func:`~diagnose.autofix.stats.rounds_for`,
        the last at ``max_rounds`` or the rounds the trial's budget share affords."""
        p = self.plan
        last = p.max_rounds
        per_round = self.round_s(a, b)
        if share_s is not None and per_round:
            last = max(p.min_rounds, min(last, int(share_s / max(per_round, 1e-9))))
        first = rounds_for(self.noise, predicted, 1.0 + self.min_gain, p.rule, p.min_rounds)
        deadline = None if share_s is None else self.clock() + share_s
        return Looks(tuple(look_schedule(first, last, p.looks)), deadline)

    def round_s(self, a: TrainConfig, b: TrainConfig, *, bound: bool = False) -> float | None:
        """Expected seconds of one round of ``a`` against ``b`` (with ``bound``: and ``b``'s
        compute-only and input-only arms), from the pilot's step time; None before it."""
        if not self.step_s:
            return None
        arms = self.arm_steps(a) + self.arm_steps(b) + (
            2 * sum(self.layout(b)[:2]) if bound else 0)  # compute alone, input alone
        return arms * self.step_s

    def arm_steps(self, cfg: TrainConfig) -> int:
        """The steps one arm of ``cfg`` runs in a round: a whole epoch where its loader is
        timed in whole epochs (:func:`~.trial.epoch_steps_of`), else its warmup and timed
        steps (:meth:`layout`)."""
        if cfg not in self._epochs:
            loader = getattr(self.w, "loader", None)
            try:
                self._epochs[cfg] = None if not cfg.num_workers or loader is None else (
                    epoch_steps_of(build_loader(loader, cfg), cfg.grad_accum_steps))
            except DiagnoseError:  # a loader it cannot build: the trial itself says so
                self._epochs[cfg] = None
        epoch = self._epochs[cfg]
        warmup, n, _ = self.layout(cfg)
        return epoch if epoch is not None else warmup + n

    # ------------------------------------------------------------------ rounds
    def layout(self, cfg: TrainConfig) -> tuple[int, int, int]:
        """(warmup, timed steps, block) of ``cfg``'s arm in one round: its own workers start
        inside its warmup (one step each), and its blocks hold at least 2 x its workers (a
        block spans their round-robin). Each arm has its own, so a baseline without workers
        does not pay for the candidate's many workers in every round."""
        workers = cfg.num_workers
        k = max(self.plan.block, 2 * workers)
        n = max(k, math.ceil(self.steps / k) * k)
        return self.plan.warmup + workers, n, k

    def _rounds(self, arms: list[tuple[str, Callable[[], np.ndarray]]], looks: Sequence[int],
                label: str, done: Callable[[Rounds], bool] | None = None,
                deadline: float | None = None, arm_s: float = 0.0) -> Rounds:
        """Run every arm once per round, rotating the order, and ask ``done`` at each look
        (and once more when the ``deadline`` ends the rounds, after DEADLINE_MIN_ROUNDS,
        before the last look). Where the next arm (``arm_s`` seconds, the longest's:
        :meth:`arm_steps`) would end past :attr:`hard_end`, the rounds end before it and the
        round in progress is dropped, once every arm has HARD_END_MIN_ROUNDS rounds."""
        res: Rounds = {name: [] for name, _ in arms}
        last = looks[-1]
        for r in range(last):
            self.progress(f"{label} (round {r + 1}/{last})")
            i = r % len(arms)
            for name, fn in arms[i:] + arms[:i]:
                if r >= HARD_END_MIN_ROUNDS and self.near_hard_end(arm_s):
                    return {k: v[:r] for k, v in res.items()}
                try:
                    res[name].append(fn())
                except Exception as e:
                    raise _ArmFailed(name, e, res) from e
            late = (deadline is not None and self.clock() >= deadline
                    and r + 1 >= DEADLINE_MIN_ROUNDS)
            if done is not None and (r + 1 in looks or late) and done(res):
                break
            if late:
                break
        return res

    def near_hard_end(self, arm_s: float) -> bool:
        """An arm of ``arm_s`` seconds started now is expected to end past :attr:`hard_end`."""
        return self.hard_end is not None and self.clock() + arm_s >= self.hard_end

    def arms_s(self, *steps: int) -> float:
        """The longest of arms of ``steps`` steps each, at the pilot's step (0 before it)."""
        return max(steps) * (self.step_s or 0.0)

    def _arm(self, t: Trial, what: str, warmup: int, n: int, k: int) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            with t:
                if what == "compute":
                    return t.compute_only(self.plan.warmup, n, block=k)
                if what == "data":
                    return t.data_only(warmup, n, block=k)
                return t.run(warmup, n, block=k)
        return run

    def compare(self, a: TrainConfig, b: TrainConfig, label: str, *,
                rounds: int | Looks | None = None, bound: bool = False,
                confirm: float | None = None,
                deadline: float | None = None) -> tuple[Comparison, Bound | None]:
        """Interleaved rounds of ``a`` (baseline) and ``b`` (candidate). ``rounds``: a
        trial's :class:`Looks` (the sequential rule decides when to stop), or a fixed number
        of rounds (default ``final_rounds``) with the bootstrap interval. With ``bound``,
        ``b``'s compute-only and input-only times are measured in the same rounds.

        ``confirm`` (fixed rounds only): where the interval leaves it open whether ``b`` is
        faster than ``confirm`` x ``a`` (its lower end at or below, its estimate above),
        as many rounds again, and the interval of all of them (:data:`CONFIRM_LOOKS`), but
        only where those rounds are expected to end before ``deadline`` (clock time)."""
        plan = self.plan
        wb, n, k = self.layout(b)
        try:
            ta, tb = self.trial_for(a), self.trial_for(b)
        except TuneError as e:
            return Comparison(None, None, None, 0, 0, ERROR, str(e)), None
        arms = [("a", self._arm(ta, "step", *self.layout(a))),
                ("b", self._arm(tb, "step", wb, n, k))]
        if bound:
            arms += [("compute", self._arm(tb, "compute", wb, n, k)),
                     ("data", self._arm(tb, "data", wb, n, k))]
        looked = SequentialTrial(plan.rule, 1.0 + self.min_gain, plan.precision)

        def decided(res: Rounds) -> bool:
            return bool(looked.look(round_log_ratios(res["a"], res["b"])))

        def settled(res: Rounds) -> bool:
            iv = self._interval(res, None)
            if deadline is not None and len(res["a"]) < schedule[-1]:  # may look again:
                more = self.round_s(a, b, bound=bound)  # if its rounds end in time
                if more is not None and self.clock() + more * len(res["a"]) > deadline:
                    return True
            return confirm is None or iv.lo > confirm or iv.ratio <= confirm

        sequential = isinstance(rounds, Looks)
        if isinstance(rounds, Looks):  # a trial: its rounds end with its share of the budget
            schedule, rounds_end = list(rounds.at), rounds.deadline
        else:
            n0 = rounds or plan.final_rounds
            schedule = [n0 * (i + 1) for i in range(CONFIRM_LOOKS if confirm else 1)]
            rounds_end = None  # the looks' rounds all run (settled checks the deadline)
        failed: tuple[str, str, Rounds] | None = None
        arm_s = self.arms_s(self.arm_steps(a), self.arm_steps(b), wb + n if bound else 0)
        try:
            res = self._rounds(arms, schedule, label, decided if sequential else settled,
                               rounds_end, arm_s)
        except _ArmFailed as f:
            err = f.error
            if is_oom(err):
                failed = (NO_FIT, first_line(err), f.partial)
            elif f.arm != "a":
                failed = (ERROR, f"{type(err).__name__}: {err}"[:200], f.partial)
            else:
                raise err from None
            del err
        if failed is not None:  # the exception and the frames holding tensors are gone now
            status, note, res = failed
            release_memory(self.w)
            return Comparison(_ms(res["a"]), _ms(res["b"]), None, len(res["b"]), n, status,
                              note, tb.first_step_s), None
        c = Comparison(_ms(res["a"]), _ms(res["b"]), self._interval(res, looked if sequential
                                                                    else None),
                       len(res["b"]), n, setup_s=tb.first_step_s)
        bnd = None
        if bound:
            bnd = Bound(_ms(res["compute"]) or 0.0, _ms(res["data"]) or 0.0, b)
        return c, bnd

    def _interval(self, res: Rounds, looked: SequentialTrial | None) -> Interval:
        """A trial's interval: the intersection of its looks (``looked``); a fixed-size
        comparison's: the bootstrap."""
        p = self.plan
        if looked is None or len(res["a"]) < 2:
            return speedup_interval(res["a"], res["b"], confidence=p.confidence,
                                    resamples=p.resamples, seed=p.seed)
        d = round_log_ratios(res["a"], res["b"])
        if len(d) >= 3:
            self._residuals.append((float(np.var(d, ddof=1)), len(d) - 1))
        if int(looked.rounds) != len(d):  # rounds past the last look (none today)
            looked.look(d)
        return looked.interval()

    def bound_rounds(self, cfg: TrainConfig, rounds: int) -> tuple[float | None, Bound]:
        """``cfg``'s step time with its compute-only and input-only times, interleaved."""
        warmup, n, k = self.layout(cfg)
        t = self.trial_for(cfg)
        res = self._rounds([("step", self._arm(t, "step", warmup, n, k)),
                            ("compute", self._arm(t, "compute", warmup, n, k)),
                            ("data", self._arm(t, "data", warmup, n, k))], [rounds],
                           "speed of light: the step, compute alone, input alone",
                           arm_s=self.arms_s(self.arm_steps(cfg), warmup + n))
        return _ms(res["step"]), Bound(_ms(res["compute"]) or 0.0, _ms(res["data"]) or 0.0, cfg)

    def bound(self, cfg: TrainConfig) -> Bound:
        """Compute-only and data-only step times of ``cfg`` (means of blocks)."""
        warmup, n, k = self.layout(cfg)
        t = self.trial_for(cfg)
        with t:
            comp = t.compute_only(self.plan.warmup, n, block=k)
        with t:
            data = t.data_only(warmup, n, block=k)
        return Bound(1e3 * float(np.mean(comp)), 1e3 * float(np.mean(data)), cfg)

    def pilot(self, cfg: TrainConfig) -> float:
        """Seconds per step of ``cfg`` (sizes the rounds)."""
        warmup, _, k = self.layout(cfg)
        n = max(k, math.ceil(self.plan.min_steps / k) * k)
        with self.trial_for(cfg) as t:
            times = t.run(warmup, n, block=k)
        step = float(np.median(times))
        self.step_s = step
        self.steps = int(min(self.plan.max_steps,
                             max(self.plan.min_steps, math.ceil(self.plan.round_s / step))))
        return step


__all__ = ["Looks", "Measurer", "Plan", "first_line"]
