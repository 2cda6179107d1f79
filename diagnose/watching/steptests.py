"""The watch's tests of its steps: the step time's and the loader wait's detectors fed
from the step store, in batches, off the training thread's per-step path.

The watcher calls :meth:`StepTests.test` at most every few hundred milliseconds (and
before a capture starts, and at the end); each call tests the steps stored since the
last one, so an alarm's step is the step its detector called it at, as if each step were
tested as it ended. Log step time goes to one detector from the first step after the
warm-up; once its baseline is learnt (settled), the loader wait, offset by a share of the
step (``LOADER_OFFSET``: a wait of 0 has a log), goes to a second. A change holds
``HOLD_S`` on the steps' own clock (the store's step ends) however short the steps, and
their baseline counts are scaled to the pace: at the first test by the median step so
far, and again at each change of the step time by its new level
(:func:`~.signals.paced`), so that a loop slowed from 0.5 ms to 18 ms a step learns its
new level in seconds, not minutes. While the watch's own
analysis runs the detectors rest: those steps are skipped (:attr:`rests`), and their sums
start again when it is done (after the baseline window, their baselines are learnt again).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np

from .detector import Change, Detector, Params, Spike
from .signals import HOLD_S, LOADER_OFFSET, Reference, paced
from .store import StepStore

__all__ = ["StepTests"]

#: ``on_change(signal, change, step)``: a detector called a change at ``step``
OnChange = Callable[[str, Change, int], None]


class StepTests:
    """``on_change`` gets each change; ``judge_again(step)`` runs while ``waiting()`` says
    a change waits to be judged again (step by step then, as that needs). ``pace``: the
    detectors' counts scaled to the steps' pace (:meth:`_pace`)."""

    def __init__(self, params: dict[str, Params], warmup_steps: int, on_change: OnChange,
                 waiting: Callable[[], bool], judge_again: Callable[[int], None],
                 pace: bool = True) -> None:
        self.params = params
        self.det = Detector(params["step_time"])
        self.wait_det: Detector | None = None
        self.wait_off = 0.0
        self.on_change, self.waiting, self.judge_again = on_change, waiting, judge_again
        self.test_from = warmup_steps  # no step before this one is tested
        self.tested = 0  # the steps before this one were tested (or skipped)
        self.resting = False
        self.rest_from = 0
        self.rests: deque[tuple[int, int]] = deque(maxlen=1000)  # (first, stop) untested
        self.relearn = False  # learn the baselines again when the detectors wake
        self.settled = False
        self.step_s: float | None = None  # the median step at the first test (s)
        self.scale = 1.0  # the detectors' counts over their parameters' (:func:`paced`)
        self.pace = pace  # False: the counts as given (the caller's own parameters)
        self._store: StepStore | None = None  # the steps' ends: a change's time held

    def skip(self, upto: int, test_from: int | None = None) -> None:
        """The steps before ``upto`` are not tested (a window's), nor those before
        ``test_from``."""
        self.tested = max(self.tested, upto)
        if test_from is not None:
            self.test_from = test_from

    def rest(self, step: int) -> None:
        """The detectors rest from ``step`` (a window or an analysis of the watch's own)."""
        if not self.resting:
            self.resting, self.rest_from = True, step

    def settle(self, loader_hooked: bool, refs: Iterable[Reference] = ()) -> None:
        """The step time's first baseline is learnt: the loader's detector starts (where
        the loader's wait is timed); a better pace holds as long, in time, on short steps
        for the step signals' ``refs``."""
        for ref in refs:
            ref.paced(self.scale)
        self.settled = True
        mu = self.det.mu
        if loader_hooked and mu is not None:
            self.wait_off = LOADER_OFFSET * math.exp(mu)
            self.wait_det = self._detector("loader_wait", math.exp(mu) / 1e3 if self.step_s
                                           else 0.0)  # the pace now (it may have moved)

    def _detector(self, signal: str, step_s: float) -> Detector:
        """A step signal's detector: paced to steps of ``step_s`` s, each change held
        :data:`~.signals.HOLD_S` on the steps' clock and a baseline learnt over at most
        the time its counts span at that pace (not for the caller's own parameters:
        their counts as given); a slower tail of a first baseline's values is a change."""
        p = self.params[signal]
        if not self.pace:
            return Detector(p, split_first=True)
        return Detector(paced(p, step_s)[0], hold_s=HOLD_S, time_of=self._end_of,
                        pace_of=self._step_pace if signal == "step_time" else None,
                        learn_s=HOLD_S * p.learn / p.min_len, split_first=True)

    def _step_pace(self, level: float) -> Params:
        """The step time's counts for steps at ``level`` (log ms)."""
        return paced(self.params["step_time"], math.exp(level) / 1e3)[0]

    def _end_of(self, step: int) -> float | None:
        """When step ``step`` ended (s on the store's clock; 0 before the first step);
        None where the store's ring no longer holds it."""
        store = self._store
        if step < 0:
            return 0.0
        if store is None or not store.n - store.cap <= step < store.n:
            return None
        return float(store.t[step % store.cap])

    def _repace(self, level: float) -> None:
        """The step time changed to ``level`` (log ms): the loader wait's counts to that
        pace (:meth:`Detector.pace`; the step time's own detector paced itself as it
        called the change)."""
        if self.pace and self.wait_det is not None:
            self.wait_det.pace(paced(self.params["loader_wait"], math.exp(level) / 1e3)[0])

    def test(self, store: StepStore, upto: int, busy: bool,
             on_settle: Callable[[], None]) -> None:
        """Feed the stored steps not tested yet, before step ``upto``, to the detectors
        (``busy``: an analysis runs, they rest). Once settled and with no change waiting
        to be judged again, each detector takes them at once
        (:meth:`Detector.update_many`); else step by step. ``on_settle`` runs once, when
        the step time's first baseline is learnt."""
        first = max(self.tested, self.test_from)
        self.tested = max(self.tested, upto)
        if first >= upto:
            return
        if busy:
            self.rest(first)
            return
        if self.resting:
            self._wake(first)
        self._store = store
        if self.step_s is None:
            self._pace(store, upto)
        _, ms_a, wait_a = store.span(first, upto)
        log, off = math.log, self.wait_off
        xs = [log(v) if v > 0.0 else -20.0 for v in ms_a.tolist()]
        if self.settled and not self.waiting():
            events = [(c.index, 0, "step_time", c) for c in self.det.update_many(xs, first)]
            wd = self.wait_det
            if wd is not None:
                ws = [log(v + off) for v in wait_a.tolist()]
                events += [(c.index, 1, "loader_wait", c) for c in wd.update_many(ws, first)]
            for _, _, signal, c in sorted(events, key=lambda e: e[:2]):
                self.on_change(signal, c, c.index)
                if signal == "step_time":
                    self._repace(c.after)
            if self.waiting():
                self.judge_again(upto - 1)
            return
        waits = wait_a.tolist()
        for i, x in enumerate(xs):
            n = first + i
            got = self.det.update(x, n)
            if got is not None:
                self.on_change("step_time", got, n)
                self._repace(got.after)
            elif not self.settled and self.det.ready:
                on_settle()
            if self.waiting():
                self.judge_again(n)
            wd = self.wait_det
            if wd is not None:
                got = wd.update(log(waits[i] + self.wait_off), n)
                if got is not None:
                    self.on_change("loader_wait", got, n)

    def _pace(self, store: StepStore, upto: int) -> None:
        """The first test: the step time's detector scaled to the steps so far (their
        median, the warm-up's included)."""
        _, ms_a, _ = store.span(0, upto)
        self.step_s = float(np.median(ms_a)) / 1e3 if len(ms_a) and self.pace else 0.0
        self.scale = paced(self.params["step_time"], self.step_s)[1]
        if self.pace:
            self.det = self._detector("step_time", self.step_s)

    def _wake(self, n: int) -> None:
        """The detectors rested: their sums start again; after the baseline window their
        baselines are learnt again (the run's first steps, which the first baseline came
        from, can still carry its start-up: threads starting, caches filling)."""
        self.resting = False
        self.rests.append((self.rest_from, n))
        for det in (self.det, self.wait_det):
            if det is None:
                continue
            if self.relearn:
                det.relearn(n)
            else:
                det.restart(n)
        self.relearn = False

    @property
    def under_way(self) -> bool:
        """A slowdown of either signal may be under way (:attr:`Detector.under_way`)."""
        return any(d is not None and d.under_way for d in (self.det, self.wait_det))

    def spikes(self, final: bool = False) -> list[tuple[str, Spike]]:
        """The spikes the detectors confirmed since the last call (``final``: their
        candidates too), with their signal."""
        out = []
        for signal, det in (("step_time", self.det), ("loader_wait", self.wait_det)):
            if det is not None:
                out += [(signal, sp) for sp in (det.flush_spikes() if final else det.spikes)]
                det.spikes.clear()
        return out

    def end(self, steps: int) -> None:
        """The loop ended (while the detectors rested: that rest ends here)."""
        if self.resting:
            self.rests.append((self.rest_from, steps))
