"""The signals the watch tests for changes: how each is transformed and its detector's
parameters (:class:`~diagnose.watching.detector.Params`).

Per step (training thread): ``step_time`` as log ms, so a change is a ratio and the scale
a relative spread; ``loader_wait`` as log(wait + a fifth of the baseline step), so a
loader that never made the loop wait does not alarm on microseconds, and a change must
move the wait by a tenth of a step or more (from no wait; more from a long one). Per ~1 Hz sample (sampler thread):
``gpu_util`` as a fraction (a change of 10 points or more), ``memory`` as log bytes (5% or
more; the baseline is never refreshed, so a slow leak is seen), and per energy window
(~10 s) ``energy`` as log J/step (10% or more).

Each signal has a worse direction (:data:`WORSE`: slower steps, a longer wait, a lower
utilisation, more memory, more energy). A change is an alarm only when it leaves the
signal worse than its reference level by at least the signal's ``min_change`` and the
new level's own uncertainty (:class:`Reference`); a change for the better (a neighbour leaving the CPUs) is a shift,
recorded but not an alarm, and it becomes the reference only once it held ``hold``
values, so that a pace that briefly improved and came back is not taken for a slowdown.
The step signals' first baseline, learnt just after the warm-up, is the exception: a run
that starts slow (a cold cache, the first epoch's decoding, autotuning) and then speeds up,
in one or more steps, within its first ``hold`` values is measured from the pace it then
keeps, once it has been faster for as long as the slow start lasted.
"""

from __future__ import annotations

import dataclasses
import math

from .detector import MARGIN, MEDIAN_SE, Change, Params

__all__ = ["HOLD", "HOLD_S", "LOADER_OFFSET", "MARGIN", "PARAMS", "WORSE", "Reference",
           "from_x", "paced", "to_x"]

#: the loader wait is tested as log(wait + this x the baseline's median step)
LOADER_OFFSET = 0.2

PARAMS: dict[str, Params] = {
    "step_time": Params(),
    "loader_wait": Params(min_change=math.log(1.5), sigma_floor=0.02),
    "gpu_util": Params(learn=30, relearn=15, refresh=120, min_len=10, sigma_floor=0.02,
                       min_change=0.10, spike_z=1e9, confirm=12),
    "memory": Params(learn=30, relearn=15, refresh=0, min_len=10, sigma_floor=0.005,
                     min_change=math.log(1.05), spike_z=1e9, confirm=12),
    "energy": Params(learn=6, relearn=4, refresh=0, min_len=4, sigma_floor=0.02,
                     min_change=math.log(1.10), spike_z=1e9, confirm=6),
}

#: +1: a higher value is worse; -1: a lower one is
WORSE: dict[str, int] = {"step_time": 1, "loader_wait": 1, "gpu_util": -1, "memory": 1,
                         "energy": 1}
#: values a change for the better holds before a slowdown is measured from it: a few
#: baseline refreshes (a level that lasts this long is the job's pace, not a lull); as
#: long as a slow start lasted, where the run sped up within its first HOLD values
HOLD = 1000

#: the least time (s) a change of a step signal holds before it is called (the step
#: detectors' ``hold_s``, timed on the steps themselves: a slowdown of short steps holds
#: this long at its own pace), and the time the detector's baseline counts are scaled to
#: (:func:`paced`): the watch reads the machine's
#: context once a second (its tick: the CPU wait, the other processes), so a change
#: shorter than that cannot be told from the host's own moments; on a shared host those
#: come and go in fractions of a second, and a loop of sub-millisecond steps holds
#: thousands of them (16 steps of 0.4 ms are 6 ms). Too long, and a real change of a
#: fast loop is called a second late: steps of 62 ms or more are not scaled at all
HOLD_S = 1.0


_TINY = 1e-9


def paced(p: Params, step_s: float) -> tuple[Params, float]:
    """``p`` for steps of ``step_s`` seconds: its baseline counts (learn, relearn,
    refresh) and spike confirmation scaled alike, by as much as ``min_len`` steps fall
    short of :data:`HOLD_S`; the scale (1: steps long enough, or no pace known).
    ``min_len`` stays a count: the least values a change holds, its time held apart
    (the detector's ``hold_s``)."""
    f = HOLD_S / (p.min_len * step_s) if step_s > 0 and math.isfinite(step_s) else 1.0
    if f <= 1.0:
        return p, 1.0

    def n(k: int) -> int:
        return math.ceil(k * f)

    return dataclasses.replace(p, learn=n(p.learn), relearn=n(p.relearn),
                               refresh=n(p.refresh), confirm=n(p.confirm)), f


class Reference:
    """The level a signal's changes are judged against (transformed units): the baseline
    first learnt, then each alarm's new level; after a change for the better that no
    other change followed for ``hold`` values, the detector's level then (its baseline,
    refreshed since). ``since`` (the step signals: where the first baseline's values began,
    after the warm-up) allows a slow start: a run faster than its first baseline from
    within its first ``hold`` values, through one or more changes for the better, for as
    long as that baseline had lasted, is measured from its pace then. :meth:`judge` says
    whether a detector's change is an alarm; a change
    for the worse judged too small is judged again on the level the detector learns after
    it (:attr:`waiting`, :meth:`settled`), which its first few values can understate."""

    def __init__(self, worse: int, min_change: float, hold: int = HOLD, n: int = 16,
                 since: int | None = None) -> None:
        self.worse, self.min_change, self.hold = worse, min_change, hold
        #: the new level is a median of ``n`` values: its standard error, in scales
        self.se = MEDIAN_SE / math.sqrt(n)
        self.level: float | None = None
        self.since = since or 0  # where the reference level began (values)
        self._first = since is not None  # a slow start may still be left behind
        self._left: int | None = None  # where the pace left the reference, for the better
        #: the reference the last change was judged against (an alarm's "before")
        self.judged_from: float | None = None
        #: a better level, where it began, and how long it must hold to be the reference
        self._better: tuple[float, int, int] | None = None
        #: the level before a change for the worse not (yet) an alarm: judged again on the
        #: detector's relearnt level
        self.waiting: float | None = None
        #: the level before the last alarm; and that level where the machine explained the
        #: alarm as its neighbours' (:meth:`neighbours`)
        self._prior: float | None = None
        self._machine: float | None = None

    def judge(self, before: float, after: float, index: int, sigma: float = 0.0,
              start: int | None = None) -> bool:
        """A change from ``before`` to ``after`` called at ``index``, begun at ``start``
        (``sigma``: the baseline's scale): True if an alarm, that is if the new level is
        worse than the reference by ``min_change`` plus :data:`MARGIN` standard errors of
        its estimate."""
        start = index if start is None else start
        if self.level is None:
            self.level = before
        b = self._better
        if b is not None and start - b[1] >= b[2]:
            # the pace held better: the level it has now (refreshed since) is the reference
            self.level, self.since, self._better, self._first = before, b[1], None, False
            self._left = None
        self.judged_from = self.level
        s = self.worse
        if s * (after - before) <= 0:  # for the better (or no direction): a shift
            if self._machine is not None:  # the neighbours left: the job's own level again
                self.level, self.since, self._machine = self._machine, start, None
                self._better = self._left = None
                return False
            left = self._left = start if self._left is None else self._left
            if self._first and left - self.since < self.hold:  # from a slow start
                self._better = (after, left, left - self.since)
            else:
                self._better = (after, start, self.hold)
            return False
        self._better = self._left = None
        if s * (after - self.level) >= self.min_change + MARGIN * self.se * sigma:
            self._prior, self._machine = self.level, None
            self.level, self.since, self.waiting, self._first = after, start, None, False
            return True
        self.waiting = before
        return False  # back to about the reference (it stays: small steps add up)

    def paced(self, scale: float) -> None:
        """The steps are short (:func:`paced`'s ``scale``): a better level holds ``hold``
        times that many steps before it is the reference."""
        self.hold = math.ceil(self.hold * max(scale, 1.0))

    def neighbours(self, passed: bool = False) -> None:
        """The last alarm was the machine's neighbours', not the job's (the watch's host
        line): when the pace leaves its level for the better, the reference is the level
        before it again at once, not after ``hold`` values, so that a change of the job's
        own soon after is judged against the job's own pace. Where it has left, now; and
        now where it ``passed`` (its window found the pace back: it has left)."""
        if self._prior is None:
            return
        self._machine = self._prior
        if self._better is not None or passed:
            since = self._better[1] if self._better is not None else self.since
            self.level, self.since, self._machine = self._machine, since, None
            self._better = self._left = None

    def measured_from(self, c: Change) -> Change:
        """The alarm's change as the user reads it: from the reference it was judged
        against, not from the detector's level before it (a short faster stretch between
        them would overstate the slowdown)."""
        ref = self.judged_from
        return c if ref is None else dataclasses.replace(c, before=ref)

    def settled(self, mu: float, index: int, span: tuple[float, float] | None = None
                ) -> bool:
        """The detector learnt its level ``mu`` after the change :attr:`waiting` holds: an
        alarm if that level is worse than the reference by ``min_change`` (a median of a
        whole baseline: no margin) and the reference lies outside ``span``, the median's
        distribution-free interval (the detector's ``mu_span``: a noise that gathers at
        two paces puts a baseline's median at either)."""
        before, self.waiting = self.waiting, None
        assert before is not None and self.level is not None
        self.judged_from = self.level
        near = None if span is None else (span[0] if self.worse > 0 else span[1])
        if self.worse * (mu - self.level) >= self.min_change and (
                near is None or self.worse * (near - self.level) > 0):
            self._prior, self._machine = self.level, None
            self.level, self.since, self._first = mu, index, False
            return True
        return False


def to_x(signal: str, v: float, offset: float = 0.0) -> float:
    """A value in the signal's units to the detector's (``offset``: the loader's)."""
    if signal == "gpu_util":
        return v / 100.0
    if signal == "loader_wait":
        return math.log(max(v, 0.0) + offset + _TINY)
    return math.log(max(v, _TINY))


def from_x(signal: str, x: float, offset: float = 0.0) -> float:
    """A detector level back in the signal's units."""
    if signal == "gpu_util":
        return x * 100.0
    if signal == "loader_wait":
        return max(math.exp(x) - offset, 0.0)
    return math.exp(x)
