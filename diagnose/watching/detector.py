"""A change-point detector for one signal: two-sided CUSUM on robustly standardised values.

The model (Page's CUSUM, 1954, on a robust scale): values ``x`` (log step time, or another
signal in its own transform) are standardised against a baseline level ``mu`` (median of a
reference window) and scale ``sigma`` (1.4826 x the median distance below ``mu`` of the
values below it, at least ``sigma_floor``: slow steps stretch only the upper side, so the
lower one measures the job's own spread), winsorised at +-``clip`` so that one slow step
counts no more than any step above the level, then centred and scaled by the winsorised
scores' own mean and long-run spread over the reference window (so a skewed baseline does
not drift the sums, and neighbouring steps that are alike, AR(1)-wise, do not add up as
if they were independent: the spread is scaled by sqrt((1 + r) / (1 - r)), r the scores'
lag-1 autocorrelation), and summed: ``S+ = max(0, S+ + u - k)``, ``S- = max(0, S- - u - k)``.
A sum past ``h`` says the level moved; the change is taken to start the step after the
sum last stood at 0. So does a run of ``min_len`` values in a row above the baseline's
90th percentile (or below its 10th): a large change saturates the winsorised scores, and
the run says so sooner than their sum.
It is called a change only when it is sustained and large enough: it has held for
``min_len`` values (and, given ``hold_s`` and the values' times, for that many seconds:
a change of short steps that slows them is held in time, not in steps of the old pace),
and the median of the values since it began differs from ``mu`` by at least
``min_change`` (else the sums restart: a burst, or a shift too small to matter). Then the baseline is
learnt again from the new level; where that level is not the one the change was called at
(the pace moved on while it settled), that is a change too. Between changes the baseline
is refreshed every ``refresh`` values from the last ``refresh`` (0: kept until the next
change).

A value more than ``spike_z`` scales and ``spike_min`` above the baseline is a spike
candidate; once ``confirm`` more values came without a change starting at or before it,
it is a spike (one slow step: a checkpoint, an eval), recorded apart, never an alarm.

The parameters' false-alarm rate and detection delay are measured in docs/watch.md
(tests/watching/test_detector.py, benchmarks/watch_false_alarms.py).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Change", "Detector", "Params", "Spike"]

#: MAD x this estimates a normal distribution's standard deviation
MAD_TO_SIGMA = 1.4826
#: the winsorised scores' spread is taken as at least this share of ``clip`` (a baseline
#: of equal values has none)
MIN_SCORE_SD = 0.5
#: the lag-1 autocorrelation taken into the scores' long-run spread is at most this
MAX_RHO = 0.9
#: a median of n normal values has a standard error of this x sigma / sqrt(n)
MEDIAN_SE = math.sqrt(math.pi / 2)
#: standard errors of a new level's estimate that a change must clear beyond
#: ``min_change`` (about 97.5% one-sided: a change at the floor is not called on noise)
MARGIN = 2.0
#: the normal quantile of the median's distribution-free interval (:func:`_median_span`):
#: a two-sided 95% interval, the same ~97.5% one-sided as :data:`MARGIN`
MEDIAN_Z = 1.96
#: a baseline learnt over ``learn_s`` seconds has at least this many ``min_len`` values
#: (the defaults' own count: 64 = 4 x 16)
LEARN_LENS = 4


def _at(srt: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values (linear between neighbours, numpy's default)."""
    pos = q * (len(srt) - 1)
    i = int(pos)
    j = min(i + 1, len(srt) - 1)
    return srt[i] + (srt[j] - srt[i]) * (pos - i)


def _median_span(srt: list[float]) -> tuple[float, float]:
    """The median's distribution-free 95% interval over sorted values: the order
    statistics of ranks floor((n - z sqrt(n)) / 2) and n + 1 less that (the binomial's
    normal approximation; z = :data:`MEDIAN_Z`). It holds for any shape of noise: where
    the values gather at two paces near half each (steps that alternate between them),
    the median may fall at either from one window to the next, and the interval spans
    both."""
    n = len(srt)
    j = max(int((n - MEDIAN_Z * math.sqrt(n)) / 2), 1)
    return srt[j - 1], srt[max(n - j, j - 1)]


def _lag1(xs: np.ndarray, mean: float, sd: float) -> float:
    """Lag-1 autocorrelation of ``xs``, in [0, MAX_RHO] (negative taken as none)."""
    if sd <= 0 or len(xs) < 3:
        return 0.0
    d = xs - mean
    r = float(np.dot(d[:-1], d[1:])) / (len(d) * sd * sd)
    return min(max(r, 0.0), MAX_RHO)


def _split(seg: list[float], level: float, min_len: int) -> int:
    """Where in ``seg`` a new level begins: the split k (leaving at least ``min_len``
    values after it) that maximises |mean(seg[k:]) - level| x sqrt(len(seg) - k), which
    peaks at the change for a step in the level."""
    n = len(seg)
    if n <= min_len:
        return 0
    best, at, total = -1.0, 0, sum(seg[n - min_len:])
    for k in range(n - min_len, -1, -1):  # sums of seg[k:] built from the end
        if k < n - min_len:
            total += seg[k]
        m = n - k
        score = abs(total / m - level) * math.sqrt(m)
        if score > best:
            best, at = score, k
    return at


def _split_two(seg: list[float], min_len: int) -> int:
    """Where in ``seg`` its values move to a new level with no level known before them:
    the split k (``min_len`` values or more either side) that maximises |mean(seg[k:]) -
    mean(seg[:k])| x sqrt(k (n - k) / n), the two-sample form of :func:`_split`; 0 where
    ``seg`` is too short."""
    n = len(seg)
    if n < 2 * min_len:
        return 0
    c = np.cumsum(np.asarray(seg, dtype=np.float64))
    k = np.arange(min_len, n - min_len + 1)
    head = c[k - 1]
    score = np.abs((c[-1] - head) / (n - k) - head / k) * np.sqrt(k * (n - k) / n)
    return int(k[int(np.argmax(score))])


@dataclass(frozen=True)
class Params:
    """The detector's parameters, in the signal's own (transformed) units where they have
    units. Defaults are for log step time: see docs/watch.md for what they give."""

    k: float = 0.5  # reference value, in score spreads: half the shift the sums are tuned to
    h: float = 10.0  # decision threshold, in score spreads
    clip: float = 1.5  # standardised values are winsorised at +-clip
    learn: int = 64  # values that make the first baseline
    relearn: int = 64  # values that make the baseline after a change
    refresh: int = 256  # the baseline is refreshed from the last this-many values (0: never)
    min_len: int = 16  # a change holds for this many values before it is called
    sigma_floor: float = 0.01  # the scale is at least this (log units: 1%)
    min_change: float = math.log(1.10)  # smaller level changes are not alarms
    spike_z: float = 6.0  # a spike is this many scales above the baseline ...
    spike_min: float = math.log(1.5)  # ... and at least this far above it
    confirm: int = 20  # values after a spike candidate before it is called a spike


@dataclass(frozen=True)
class Change:
    """A sustained change: detected at value ``index``, started at ``start``; ``before``
    and ``after`` are levels (transformed units), ``sigma`` the baseline's scale."""

    index: int
    start: int
    before: float
    after: float
    sigma: float

    @property
    def up(self) -> bool:
        return self.after > self.before


@dataclass(frozen=True)
class Spike:
    """One value far above the baseline that no change followed."""

    index: int
    value: float
    baseline: float


class Detector:
    """Feed values in order with :meth:`update` (index = the value's step or sample
    number); it returns a :class:`Change` when one is called, else None. Confirmed spikes
    collect in :attr:`spikes` (the caller empties it). ``time_of(index)``: when the value
    at ``index`` ended (s; None: no longer known, long ago), so that a change also holds
    ``hold_s`` seconds before it is called. ``pace_of(level)``: the counts for values at a
    new level, taken as each change is called (:meth:`pace`). ``learn_s``: a baseline's
    values also end once they span that long, ``LEARN_LENS`` x ``min_len`` values or more
    (counts paced to short steps that then slowed would take minutes). ``split_first``:
    a baseline learnt with no level before it (the first, or after a rest that came
    before one was) is split too, where its values end slower (:meth:`_slower_tail`)."""

    def __init__(self, params: Params | None = None, keep: int = 256, hold_s: float = 0.0,
                 time_of: Callable[[int], float | None] | None = None,
                 pace_of: Callable[[float], Params] | None = None,
                 learn_s: float = 0.0, split_first: bool = False) -> None:
        p = params or Params()
        if p.learn < 3 or p.relearn < 3 or p.min_len < 1 or p.h <= 0 or p.clip <= p.k:
            raise ValueError(f"bad detector parameters: {p}")
        self.p = p
        self.keep = keep
        self.hold_s, self.time_of, self.pace_of = hold_s, time_of, pace_of
        self.learn_s, self.split_first = learn_s, split_first
        # the hot path reads these as plain attributes
        self._k, self._h, self._clip, self._confirm = p.k, p.h, p.clip, p.confirm
        self._spike_z, self._spike_min, self._refresh = p.spike_z, p.spike_min, p.refresh
        self._min_len = p.min_len
        self.recent: deque[float] = deque(
            maxlen=max(keep, p.refresh, p.min_len, p.learn, p.relearn))
        self.mu: float | None = None
        self.sigma = p.sigma_floor
        # the winsorised scores' mean and spread over the baseline: the sums use them so
        # that a skewed baseline (slow steps more common than fast ones) does not drift
        self.c_mean, self.c_sd = 0.0, 1.0
        self.rho = 0.0  # the scores' lag-1 autocorrelation over the baseline
        self.lo = self.hi = 0.0  # the baseline's 10th and 90th percentiles: the run's bounds
        #: the baseline's median's distribution-free 95% interval (:func:`_median_span`)
        self.mu_span = (0.0, 0.0)
        self.run_up = self.run_dn = 0  # values in a row above hi / below lo
        self.sp = self.sn = 0.0
        self.sp_zero = self.sn_zero = 0  # the last index where each sum stood at 0
        self.spikes: list[Spike] = []
        self.changes = 0
        self._called: float | None = None  # the level the last change was called at
        # the level before a relearn (the first baseline): a relearnt level that far slower
        # is a change the rest hid (a slowdown that began while the detector rested)
        self._before_rest: float | None = None
        self._learning: list[float] = []
        self._need = p.learn
        self._since_refresh = 0
        self._pending: deque[Spike] = deque()

    def pace(self, p: Params) -> None:
        """Counts for a new pace (``p``'s learn, relearn, refresh, min_len, confirm; its
        other parameters as they were given): the level, the scale and the sums are
        kept, a baseline being learnt needs the new count."""
        old, self.p = self.p, p
        self._confirm, self._refresh, self._min_len = p.confirm, p.refresh, p.min_len
        if p.refresh > 0:
            self._since_refresh = min(self._since_refresh, p.refresh - 1)
        maxlen = max(self.keep, p.refresh, p.min_len, p.learn, p.relearn)
        if maxlen != self.recent.maxlen:
            self.recent = deque(self.recent, maxlen=maxlen)
        if self.mu is None:
            self._need = p.learn if self._need == old.learn else p.relearn

    def _held(self, start: int, index: int) -> bool:
        """Has a change begun at value ``start`` held ``hold_s`` seconds at ``index``
        (from the end of the value before it to this one's)? True without times, or
        where its start is no longer known (long ago)."""
        if self.hold_s <= 0 or self.time_of is None:
            return True
        t0, t1 = self.time_of(start - 1), self.time_of(index)
        return t0 is None or t1 is None or t1 - t0 >= self.hold_s

    def _learnt_in_time(self, index: int) -> bool:
        """The values being learnt (the last at ``index``) span ``learn_s`` seconds, and
        are ``LEARN_LENS`` x ``min_len`` or more."""
        n = len(self._learning)
        if self.learn_s <= 0 or self.time_of is None or n < LEARN_LENS * self._min_len:
            return False
        t0, t1 = self.time_of(index - n), self.time_of(index)
        return t0 is not None and t1 is not None and t1 - t0 >= self.learn_s

    @property
    def under_way(self) -> bool:
        """A slowdown may be under way: half ``min_len`` values in a row above the
        baseline's 90th percentile, or the upper sum past half ``h``."""
        return self.mu is not None and (2 * self.run_up >= self._min_len
                                        or 2 * self.sp > self._h)

    @property
    def ready(self) -> bool:
        """A baseline is set: values are being tested."""
        return self.mu is not None

    def update(self, x: float, index: int) -> Change | None:
        """Take value ``x`` (transformed units) at ``index``."""
        self.recent.append(x)
        mu = self.mu
        if mu is None:
            self._learning.append(x)
            if len(self._learning) >= self._need or self._learnt_in_time(index):
                vals, self._learning = self._learning, []
                self._set_baseline(vals, index)
                return self._moved_on(index, vals)
            return None
        d = x - mu
        z = d / self.sigma
        clip = self._clip
        if z > clip:
            zc = clip
            if z > self._spike_z and d > self._spike_min:
                self._pending.append(Spike(index, x, mu))
        else:
            zc = -clip if z < -clip else z
        if self._pending and self._pending[0].index <= index - self._confirm:
            self.spikes.append(self._pending.popleft())
        zc = (zc - self.c_mean) / self.c_sd
        k = self._k
        sp = self.sp + zc - k
        if sp <= 0.0:
            sp, self.sp_zero = 0.0, index
        sn = self.sn - zc - k
        if sn <= 0.0:
            sn, self.sn_zero = 0.0, index
        self.sp, self.sn = sp, sn
        if sp > self._h or sn > self._h:
            return self._decide(index, self.sp_zero if sp > self._h else self.sn_zero)
        self.run_up = self.run_up + 1 if x > self.hi else 0
        self.run_dn = self.run_dn + 1 if x < self.lo else 0
        run = max(self.run_up, self.run_dn)
        if run >= self._min_len:
            return self._decide(index, index - run)
        self._since_refresh += 1
        if 0 < self._refresh <= self._since_refresh:
            self._set_baseline(list(self.recent)[-self._refresh:], None)
        return None

    def update_many(self, xs: list[float], first: int) -> list[Change]:
        """Take values ``xs`` at ``first``, ``first + 1``, ...; the changes called among
        them, in order. The same as :meth:`update` on each value in turn, at a third of
        its cost: the stretches where nothing happens (no sum past ``h``, no run, no
        refresh, no spike candidate) run in one loop over local names, and each value
        where something does happen, or while the baseline is learnt or a spike awaits
        confirmation, goes through :meth:`update`."""
        out: list[Change] = []
        n, i = len(xs), 0
        while i < n:
            if self.mu is not None and not self._pending:
                i += self._quiet_run(xs, i, first)
                if i >= n:
                    break
            c = self.update(xs[i], first + i)
            i += 1
            if c is not None:
                out.append(c)
        return out

    def _quiet_run(self, xs: list[float], start: int, first: int) -> int:
        """Take ``xs[start:]`` up to the first value where something happens (see
        :meth:`update_many`), with :meth:`update`'s arithmetic in its order; how many were
        taken."""
        mu = self.mu
        assert mu is not None
        sigma, clip, cm, csd, k, h = (self.sigma, self._clip, self.c_mean, self.c_sd,
                                      self._k, self._h)
        spike_z, spike_min, min_len, hi, lo = (self._spike_z, self._spike_min,
                                               self._min_len, self.hi, self.lo)
        sp, sn, run_up, run_dn = self.sp, self.sn, self.run_up, self.run_dn
        sp_zero = sn_zero = -1
        stop = len(xs)
        if self._refresh > 0:  # the value that refreshes the baseline is update()'s
            stop = min(stop, start + self._refresh - self._since_refresh - 1)
        i = start
        while i < stop:
            x = xs[i]
            d = x - mu
            z = d / sigma
            if z > clip:
                if z > spike_z and d > spike_min:
                    break
                zc = clip
            else:
                zc = -clip if z < -clip else z
            zc = (zc - cm) / csd
            a = sp + zc - k
            b = sn - zc - k
            if a > h or b > h:
                break
            up = run_up + 1 if x > hi else 0
            dn = run_dn + 1 if x < lo else 0
            if up >= min_len or dn >= min_len:
                break
            if a <= 0.0:
                a, sp_zero = 0.0, i
            if b <= 0.0:
                b, sn_zero = 0.0, i
            sp, sn, run_up, run_dn = a, b, up, dn
            i += 1
        m = i - start
        if m > 0:
            self.recent.extend(xs[start:i])
            self.sp, self.sn, self.run_up, self.run_dn = sp, sn, run_up, run_dn
            if sp_zero >= 0:
                self.sp_zero = first + sp_zero
            if sn_zero >= 0:
                self.sn_zero = first + sn_zero
            self._since_refresh += m
        return m

    def _decide(self, index: int, zero: int) -> Change | None:
        """A sum crossed ``h``: call a change when the values since it began hold a new
        level (see the module's docstring), else restart the sums."""
        p = self.p
        start = zero + 1
        n = index - start + 1
        if n < p.min_len or not self._held(start, index):
            return None  # not sustained long enough yet: keep summing
        before = self.mu
        assert before is not None
        seg = list(itertools.islice(reversed(self.recent), min(n, len(self.recent))))
        seg.reverse()
        # the sum may have started before the change (values a little above the level kept
        # it from zero): the new level begins where the split leaves the mean after it
        # furthest from the old level, by its standard error
        k = _split(seg, before, p.min_len)
        start = index - len(seg) + 1 + k
        if k and not self._held(start, index):
            return None  # the change itself began later: it has not held long enough
        after = statistics.median(seg[k:])
        if abs(after - before) < p.min_change:
            self.restart(index)
            return None
        self.changes += 1
        change = Change(index, start, before, after, self.sigma)
        self._pending = deque(s for s in self._pending if s.index < start)
        if self.pace_of is not None:
            self.pace(self.pace_of(after))
            p = self.p
        seg = seg[k:]
        self.mu = None  # learn the new level, starting from the values already at it
        self._learning = seg[-p.relearn:]
        self._need = p.relearn
        self._called = after
        if len(self._learning) >= self._need:
            self._set_baseline(self._learning, index)
            self._learning = []
            self._called = None
        return change

    def _moved_on(self, index: int, vals: list[float]) -> Change | None:
        """The level learnt after a change is not the one it was called at (the pace moved
        on while it settled: a GPU's launch queue filling, a second change): a change from
        that level to this one. Where the pace moved within the values learnt (a learning
        window of seconds, on short steps), the change begins where they split
        (:func:`_split`), and the new baseline is the values after it. After a rest the
        level learnt is compared with the one before it only where the old level lies
        below the new median's distribution-free interval (:attr:`mu_span`): two
        medians of one noise that gathers at two paces differ by a pace's gap."""
        called, self._called = self._called, None
        rest, self._before_rest = self._before_rest, None
        mu = self.mu
        if called is None and rest is not None and mu is not None:
            if mu - rest < self.p.min_change:  # slower only: a faster level is start-up gone
                return self._slower_tail(index, vals, rest)
            if self.mu_span[0] <= rest:  # the old level within the new median's interval
                return None
            called = rest
        if called is None and rest is None and self.split_first and mu is not None:
            return self._slower_tail(index, vals, None)
        if called is None or mu is None or abs(mu - called) < self.p.min_change:
            return None
        k = _split(vals, called, self.p.min_len)
        if k > 0 and len(vals) - k >= 3:
            self._set_baseline(vals[k:], index)
            mu = float(self.mu)  # type: ignore[arg-type]  # just set
        self.changes += 1
        return Change(index, index - len(vals) + 1 + k, called, mu, self.sigma)

    def _slower_tail(self, index: int, vals: list[float], level: float | None
                     ) -> Change | None:
        """Values learnt after a rest (the last at ``index``) whose median stayed within
        ``min_change`` of the level before it (``level``; None: no level before them, the
        values before their two-sample split, :func:`_split_two`) but that end slower by as much,
        and by :data:`MARGIN` standard errors of the tail's median, with ``level`` below
        that median's distribution-free interval (:func:`_median_span`), from where they split
        (:func:`_split`): a slowdown late in the learning, which a baseline learnt across
        both levels would take as its own spread (no sum would grow, each step at the new
        level a spike). The baseline is learnt from the values before the split and the
        sums take the values after it, as they would have come: what they call (a change
        starting where it began, held and judged as any other), else None."""
        if level is None:
            k = _split_two(vals, self.p.min_len)
            level = statistics.median(vals[:k]) if k else 0.0
        else:
            k = _split(vals, level, self.p.min_len)
        tail = vals[k:]
        # the tail is the most deviant of many: its median clears MARGIN standard errors
        if k <= 0 or statistics.median(tail) - level < self.p.min_change + (
                MARGIN * MEDIAN_SE * self.sigma / math.sqrt(len(tail))
        ) or _median_span(sorted(tail))[0] <= level:  # any shape of noise: its interval
            return None
        first = index - len(tail) + 1
        self._set_baseline(vals[:k], first - 1)
        for _ in range(min(len(tail), len(self.recent))):  # taken again below, by the sums
            self.recent.pop()
        called = None
        for j, x in enumerate(tail):
            got = self.update(x, first + j)
            called = called or got  # the first (a second in so few values: not seen)
        return called

    def relearn(self, index: int) -> None:
        """Forget the baseline: the next ``learn`` values make a new one. Where that one is
        slower than the one forgotten by ``min_change`` or more, the pace changed while the
        detector rested: a change (a faster one is the run's start-up gone, not called)."""
        self._before_rest = self.mu if self._before_rest is None else self._before_rest
        self.mu, self._learning, self._need, self._called = None, [], self.p.learn, None
        self.restart(index)

    def restart(self, index: int) -> None:
        """The sums start again from 0 at ``index`` (after a pause in the values)."""
        self.sp = self.sn = 0.0
        self.run_up = self.run_dn = 0
        self.sp_zero = self.sn_zero = index

    def _set_baseline(self, xs: list[float], index: int | None) -> None:
        """Level and scale from ``xs``; the sums restart at ``index`` (None: a refresh
        keeps them, so that a change under way is not forgotten)."""
        srt = sorted(xs)  # one sort gives the level, the run's bounds and the lower side
        n = len(srt)
        lo, mu, hi = _at(srt, 0.1), _at(srt, 0.5), _at(srt, 0.9)
        below = srt[:n // 2 + 1]  # the values at or below the median, ascending
        sigma = max(MAD_TO_SIGMA * (mu - _at(below, 0.5)), self.p.sigma_floor)
        a = np.asarray(xs, dtype=np.float64)
        c = self.p.clip
        scores = np.clip((a - mu) / sigma, -c, c)
        self.mu, self.sigma, self.lo, self.hi = mu, sigma, lo, hi
        self.mu_span = _median_span(srt)
        m = self.c_mean = float(scores.mean())
        sd = float(scores.std())
        self.rho = _lag1(scores, m, sd)
        self.c_sd = max(sd * math.sqrt((1 + self.rho) / (1 - self.rho)), MIN_SCORE_SD * c)
        self._since_refresh = 0
        if index is not None:
            self.restart(index)

    def flush_spikes(self) -> list[Spike]:
        """Spike candidates still waiting for confirmation, called spikes now (the end)."""
        self.spikes.extend(self._pending)
        self._pending.clear()
        out, self.spikes = self.spikes, []
        return out
