"""The budget of one autofix run: everything autofix times, the before/after included,
fits in ``budget_s`` from the run's start. A trial starts only where its fewest rounds fit
beside the before/after's fewest (:meth:`Budgeted.too_long`); how long it then runs keeps
the whole before/after (:meth:`Budgeted.share_s`); the before/after takes the rounds left
(:meth:`Budgeted.final_rounds`); no round starts past ``OVERRUN`` over the budget
(:attr:`~.measure.Measurer.hard_end`)."""

from __future__ import annotations

from collections.abc import Callable

from ..fixes import TrainConfig
from .decisions import Bound
from .measure import DEADLINE_MIN_ROUNDS, HARD_END_MIN_ROUNDS, Measurer, Plan
from .trial import Workload

#: how far past its budget autofix may run: a trial in flight finishes its rounds to here
#: (:attr:`Measurer.hard_end`), and nothing that would end later is started
OVERRUN = 0.10


class Budgeted(Measurer):
    """A Measurer with a budget of ``budget_s`` seconds from its creation and at most
    ``max_trials`` trials."""

    def __init__(self, w: Workload, plan: Plan, min_gain: float,
                 progress: Callable[[str], None] | None, max_trials: int,
                 budget_s: float) -> None:
        super().__init__(w, plan, min_gain, progress)
        self.max_trials, self.budget_s = max_trials, budget_s
        self.t0 = self.clock()
        self.hard_end = self.t0 + budget_s * (1.0 + OVERRUN)
        self.trials = 0
        self.fixes_left = 1  # fixes still to try (the runner counts down): budget shares
        self.original: TrainConfig | None = None  # the baseline config (ladders stay above it)
        self._first_bound: tuple[TrainConfig, Bound] | None = None  # (config, its bound)

    def left_s(self) -> float:
        """Seconds of the budget left (negative: overrun)."""
        return self.budget_s - (self.clock() - self.t0)

    @property
    def end(self) -> float:
        """Clock time at which the budget ends."""
        return self.t0 + self.budget_s

    def out_of_budget(self) -> str | None:
        if self.trials >= self.max_trials:
            return f"max_trials={self.max_trials} reached"
        if self.left_s() <= 0:
            return f"budget of {self.budget_s:.0f} s used"
        return None

    def reserve_s(self, cand: TrainConfig, rounds: int | None = None) -> float:
        """Expected seconds of ``rounds`` (default: its first look's) of the before/after,
        were ``cand`` the tuned config (4 arms a round; 0 before the pilot)."""
        base = self.original if self.original is not None else cand
        per_round = self.round_s(base, cand, bound=True)
        return 0.0 if per_round is None else (rounds or self.plan.final_rounds) * per_round

    def too_long(self, best: TrainConfig, cand: TrainConfig) -> str | None:
        """Why a trial of ``cand`` must not start: its fewest rounds would not end in the
        budget beside the before/after's fewest (None: it may; how long it then runs keeps
        the whole before/after, :meth:`share_s`)."""
        per_round = self.round_s(best, cand)
        if per_round is None:
            return None
        need = DEADLINE_MIN_ROUNDS * per_round
        left, keep = self.left_s(), self.reserve_s(cand, DEADLINE_MIN_ROUNDS)
        if need <= left - keep:
            return None
        return (f"budget: {max(left, 0.0):.0f} s of {self.budget_s:.0f} s left; the "
                f"before/after would take at least {keep:.0f} s of it and a trial at least "
                f"{need:.0f} s (budget_s / --budget of about "
                f"{self.budget_s - left + keep + need:.0f} s or more would try it)")

    def final_rounds(self, base: TrainConfig, best: TrainConfig) -> int:
        """The before/after's first look: ``final_rounds``, or the rounds the budget left
        holds, at least :data:`DEADLINE_MIN_ROUNDS`."""
        per_round = self.round_s(base, best, bound=True)
        fit = self.plan.final_rounds if per_round is None else int(
            max(0.0, self.left_s()) / per_round)
        return max(DEADLINE_MIN_ROUNDS, min(self.plan.final_rounds, fit))

    def bound(self, cfg: TrainConfig) -> Bound:
        """:meth:`Measurer.bound`, remembered with the pilot's step for :meth:`bound_rounds`."""
        b = super().bound(cfg)
        self._first_bound = (cfg, b)
        return b

    def bound_rounds(self, cfg: TrainConfig, rounds: int) -> tuple[float | None, Bound]:
        """The speed of light of ``cfg`` (see :meth:`Measurer.bound_rounds`) in at most
        ``rounds`` rounds, fewer where the budget left holds fewer; where it holds fewer
        than HARD_END_MIN_ROUNDS, the pilot's step and the bound timed before the trials
        (when they were of ``cfg``)."""
        if self.step_s:
            warmup, n, _ = self.layout(cfg)  # the step, compute alone, input alone:
            per_round = (self.arm_steps(cfg) + 2 * (warmup + n)) * self.step_s
            fit = int(max(0.0, self.left_s()) / per_round)
            first = self._first_bound
            if fit < HARD_END_MIN_ROUNDS and first is not None and first[0] == cfg:
                return 1e3 * self.step_s, first[1]
            rounds = max(HARD_END_MIN_ROUNDS, min(rounds, fit))
        return super().bound_rounds(cfg, rounds)

    def share_s(self, cand: TrainConfig | None = None) -> float:
        """This trial's share of the budget left (less the before/after's expected time
        with ``cand``): equal shares for the fixes still to try."""
        left = self.left_s() - (self.reserve_s(cand) if cand is not None else 0.0)
        return max(0.0, left) / max(1, self.fixes_left)


__all__ = ["OVERRUN", "Budgeted"]
