"""What analysis takes from the step model: the replay's accuracy (``step_model`` in the
JSON) and, for each finding's fixes, a prediction of the step time the fix gives.

A prediction is a ratio of two replays of the same graph, the fix's transform against
the unmodified one, applied to the step time the report leads with (the unprofiled one
where the capture timed it). Its range widens the point by the replay's own error and
the spread of the measured steps, and, for a change that moves CPU work (as its transform
declares), holds the step at the least and the most of the CPUs' capacity timings; a change
that reads what one thread costs is made at the busier of the two thread timings too, and a
change that reads a probe's value at both ends of that value's noise (:func:`noise_ends`). In a
live capture the host's work is first scaled so that the replay gives the unprofiled step
(the profiler's per-op cost taken out: :mod:`.calibrate`). The Predictor knows no fix and no config field: what
a change does beyond the graph, its transform declares (:mod:`diagnose.stepmodel.transforms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .calibrate import calibrate, fed_step_ms, replayed_step_ms
from .calibration import (
    CALIBRATE_WITHIN,
    EFFECT_ERROR,
    EFFECT_FLOOR,
    HELPS,
    THREADS_NOISE_MAX,
)
from .epochs import ready_at_start, run_epoch_ms
from .facts import Facts
from .graph import DEVICE_TASKS, Graph
from .host import cpu_bound_ms, loading_ms, loop_contention
from .step import StepModel
from .transforms import AT_MOST, GraphChange, Transform, as_transform

# The analysis is typed in a layer above this one (result): it is taken as it comes, and
# only its step_model attributes are set.
Analysis = Any



@dataclass(frozen=True)
class Prediction:
    """What a fix is predicted to do: the exact change, the step time, the speedup."""

    change: dict[str, Any]
    step_ms: float
    speedup: float
    range: tuple[float, float]  # step_ms, low and high
    base_ms: float
    # True: the model gives the least the fix can do (e.g. torch's ops taken to scale fully
    # with their threads); the fix may do better, so nothing is skipped on it
    at_least: bool = False
    # every config the fix's search would try, as (sorted change items, speedup): autofix
    # predicts each trial of a ladder from these, not from the best one alone
    candidates: tuple[tuple[tuple[tuple[str, Any], ...], float], ...] = ()
    # where the change runs the loading in worker processes: the time between their
    # batches over the step (1: the step waits for them; None: no workers modelled)
    loader_share: float | None = None
    # what the prediction assumed where the capture measured nothing (a saved trace)
    assumed: tuple[str, ...] = ()
    # what the range is made of (:meth:`Predictor._range`): the model's ends ``low_ms`` and
    # ``high_ms``, its own error ``model_error`` (log, each side) and the inputs' noise
    # ``noise`` (relative, one standard error)
    range_parts: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"change": self.change, "step_ms": round(self.step_ms, 3),
               "speedup": round(self.speedup, 3),
               "range": [round(self.range[0], 3), round(self.range[1], 3)]}
        lo, hi = self.range
        if self.base_ms > 0 and lo > 0 and hi > 0:  # the same range as speedups, low first
            out["speedup_range"] = [round(self.base_ms / hi, 3), round(self.base_ms / lo, 3)]
        if self.at_least:
            out["at_least"] = True
            if (0 < self.base_ms <= hi) or self.speedup < HELPS:  # as its line says
                out["may_not_help"] = True
        elif self.may_not_help:
            out["may_not_help"] = True
            if lo >= self.base_ms:  # even the range's fast end is no faster than now
                out["slower"] = True
        if self.assumed:
            out["assumed"] = list(self.assumed)
        if self.range_parts:
            out["range_parts"] = {k: round(v, 4) for k, v in self.range_parts.items()}
        return out

    @property
    def reach(self) -> float:
        """The speedup at the fast end of the range (the point for a bound, ``at_least``)."""
        return self.speedup if self.at_least or self.range[0] <= 0 else max(
            self.speedup, self.base_ms / self.range[0])

    @property
    def floor(self) -> float:
        """The speedup at the slow end of the range (the point for a bound, ``at_least``)."""
        return self.speedup if self.at_least or self.range[1] <= 0 else min(
            self.speedup, self.base_ms / self.range[1])

    @property
    def model_reach(self) -> float:
        """The speedup at the model's own fast end (``range_parts["low_ms"]``: the ends its
        inputs give, before the model's error and the inputs' noise widen them): what the
        evidence says the fix could save. Noise widens a range both ways and says no time
        is at stake. The point where the parts are not known, or for a bound."""
        low = (self.range_parts or {}).get("low_ms")
        if self.at_least or not isinstance(low, int | float) or low <= 0:
            return self.speedup
        return max(self.speedup, self.base_ms / low)

    @property
    def may_not_help(self) -> bool:
        """Whether the range reaches the step as it is: the fix may give no gain."""
        return not self.at_least and self.range[1] >= self.base_ms

    def line(self) -> str:
        if self.at_least:
            return _bound_line(self.base_ms, self.step_ms, self.speedup, self.range)
        return _line(self.base_ms, self.step_ms, self.speedup, self.range)


#: how a prediction's place says the model cannot predict a change for this run, and why
#: (the report shows why)
CANNOT_TELL = "cannot tell:"


def cannot_tell(why: str) -> str:
    """The reason the model gives in place of a prediction: :data:`CANNOT_TELL` and why."""
    return f"{CANNOT_TELL} {why}"


def _bound_line(base: float, step: float, speedup: float,
                rng: Sequence[float] | None = None) -> str:
    """"predicted at least 1.30x (25.2 -> at most 19.4 ms; at least 1.12x over its
    range)": a bound's range has a slow end only (its inputs' noise and the model's error
    below the point). "may not help" where that end reaches 1.00x, as for a point, or
    where the bound is under :data:`HELPS`."""
    out = f"predicted at least {speedup:.2f}x ({base:.1f} -> at most {step:.1f} ms"
    if rng is not None and len(rng) == 2 and rng[1] > 0 and base > 0:
        floor = min(speedup, base / rng[1])
        out += f"; at least {floor:.2f}x over its range)"
        return out + (": may not help" if floor <= 1.0 or speedup < HELPS else "")
    return out + ")" + (": may not help" if speedup < HELPS else "")


def _line(base: float, step: float, speedup: float, rng: Sequence[float] | None,
          said: Mapping[str, Any] | None = None) -> str:
    """"predicted 25.2 -> 14.1 ms (1.79x; 1.52-2.10x over its range)", and "may not help"
    where the range reaches the step as it is (its slow end is no gain), "slower" where even
    its fast end is no faster (the JSON's ``slower``). ``said``: a JSON prediction's own
    ``slower`` and ``may_not_help``, which decide where given (its base is rebuilt from
    rounded figures)."""
    out = f"predicted {base:.1f} -> {step:.1f} ms ({speedup:.2f}x"
    if rng is not None and len(rng) == 2 and rng[0] > 0 and rng[1] > 0 and base > 0:
        out += f"; {base / rng[1]:.2f}-{base / rng[0]:.2f}x over its range"
        slower, maybe = ((said.get("slower") is True, said.get("may_not_help") is True)
                         if said is not None else (rng[0] >= base, rng[1] >= base))
        if slower:
            return out + "): slower"
        if maybe:
            return out + "): may not help"
    return out + ")"


def device_only(why: str, touched: Callable[[Graph], np.ndarray], what: str) -> Transform:
    """The transform of a fix the trace cannot show that changes only the device work
    ``touched`` selects (e.g. the convolutions' kernels): its reason ``why``; but where the
    step replayed with that work taking no time at all is shorter by less than
    :data:`HELPS` (the host, or other work, sets the pace), the most it could do:
    "at most 1.01x: ..." (:data:`~.transforms.AT_MOST`)."""
    def graph(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
        mask = touched(g) & g.is_kind(*DEVICE_TASKS)
        if not mask.any():
            return why
        free = g.copy()
        free.dur[mask] = 0.0
        now, best = replayed_step_ms(g), replayed_step_ms(free)
        if best > 0 and now / best < HELPS:
            return (f"{AT_MOST} {now / best:.2f}x: with no time in {what} the step would "
                    "stay (the device does not set its pace)")
        return why
    graph.__name__ = f"device_only_{what.replace(' ', '_')}"
    return Transform(graph, cannot=why)


class Predictor:
    """Predictions for one run, from one rank's model and the run's facts."""

    def __init__(self, model: StepModel, facts: Facts) -> None:
        assert model.graph is not None
        self.facts = facts
        prof = facts.step_time_median_ms
        # the job's pace: the mean unprofiled step (a pause that hits some steps is time);
        # where the run's workers start at every epoch and the clock saw such a start, the
        # steady steps' mean is replayed (the clock's few steps hold epoch starts at their
        # own rate, not at the epoch's). The run's epoch start and end, spread over its
        # steps, are added to every prediction's both sides (:func:`run_epoch_ms`: the
        # clock's where it saw one, else as the session timed a start), so that every fix
        # starts from one step
        clock = facts.epoch_boundary_per_step_ms or 0.0
        self.epoch_ms = run_epoch_ms(facts) or clock
        un = (facts.step_time_steady_mean_ms if clock else None) or \
            facts.step_time_unprofiled_mean_ms or facts.step_time_unprofiled_median_ms
        # a saved trace's steps are the host's: where the host ran ahead of the GPU, the
        # job runs at the GPU's pace once its queue fills (the replay's steady step agrees)
        pace = facts.device_step_ms
        if prof is not None and pace is not None and pace > prof:
            prof = pace
        # the replay's step, and the job's pace the predictions' speedups start from
        self.steady_ms = un or prof or (model.measured_ms or 0.0)
        self.gap_ms = facts.epoch_gap_per_step_ms  # between epochs: on both sides, as is
        self.base_ms = self.steady_ms + self.epoch_ms + self.gap_ms
        g = model.graph
        fetch, collate = facts.input_fetch_ms, facts.input_collate_ms
        loaded = fetch + collate if fetch is not None and collate is not None else None
        opt, waited = facts.optimizer_unprofiled_ms, facts.input_worker_wait_ms
        if clock and waited is not None and un and facts.dataloader_wait_steady_share is not None:
            # the steady steps' own wait: the mean wait holds each epoch's start's
            waited = facts.dataloader_wait_steady_share * un
        self.g = calibrate(g, un, None if loaded is None else loaded / un,
                           None if opt is None else opt / un,
                           None if waited is None else waited / un) if un else g
        self.base_replay = replayed_step_ms(self.g)
        # the loop's own contention, from the run as captured (host.free_contention)
        self.facts = facts = facts.replace(
            loop_contention=loop_contention(self.g, facts, un, self.base_replay),
            window_pace=self.base_replay / self.steady_ms
            if self.base_replay > 0 and self.steady_ms > 0 else None)
        # the noise of the mean the predictions start from: the unprofiled steps' standard
        # error where the clock timed them (a live capture), else the profiled steps'
        err = facts.step_time_unprofiled_mean_error
        if err is None:
            err = (facts.step_time_cv or 0.0) / math.sqrt(max(int(facts.step_count or 1), 1))
        self.rel = abs(model.error or 0.0) + err
        self.cache: dict[Any, Prediction | str] = {}
        # the changes not predicted on this run, and why (withhold)
        self.holds: list[tuple[frozenset[str], str, Callable[[Mapping[str, Any]], bool] | None]] = []

    def withhold(self, fields: Iterable[str], why: str,
                 when: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
        """Predict no change of ``fields`` (where ``when``, given the change's values, says
        so): each gives ``why`` instead. The diagnosis' reasons: its inputs were timed while
        other processes, or the run's own pools, held the CPUs; a worker's batch kept a
        thread pool busy that the model counts as one thread. Every prediction reads them
        here: the report's, and autofix's trials, which share this predictor."""
        self.holds.append((frozenset(fields), why, when))
        self.cache.clear()

    def withholds(self, change: Mapping[str, Any] | Iterable[str]) -> str | None:
        """Why ``change`` (its settings and values; or only the names of the settings, for
        which each hold's condition reads no value) is not predicted on this run
        (:meth:`withhold`); None where it is."""
        values = dict(change) if isinstance(change, Mapping) else dict.fromkeys(change)
        for fields, why, when in self.holds:
            if fields & set(values) and (when is None or when(
                    {k: v for k, v in values.items() if v is not None})):
                return why
        return None

    def add_capacity_timings(self, timings: Sequence[float]) -> dict[str, float] | None:
        """Fold later timings of the CPUs' capacity into the run's facts (autofix times it
        again before the trials that move CPU work, minutes after the capture): the point
        at the most of all the timings, the range at both ends, as after the loop. The facts
        that changed (the cached predictions are dropped with them); None where nothing
        changed, or the capture did not time the capacity (one CPU: nothing to fold in)."""
        f = self.facts
        cap = f.cpu_capacity
        got = [float(t) for t in timings if isinstance(t, int | float) and math.isfinite(t)
               and t > 0]
        if cap is None or not got:
            return None
        ends = [v for v in (f.cpu_capacity_min, f.cpu_capacity_max) if v is not None]
        every = [cap, *ends, *got]
        new = {"cpu_capacity": max(every), "cpu_capacity_min": min(every),
               "cpu_capacity_max": max(every)}
        changed = {k: v for k, v in new.items() if getattr(f, k) != v}
        if not changed:
            return None
        self.facts = f.replace(**changed)
        self.cache.clear()
        return changed

    def predict_change(self, transform: Transform | GraphChange, change: Mapping[str, Any]
                       ) -> Prediction | str:
        """The step ``change`` (a TrainConfig change, exactly what autofix applies) gives,
        through ``transform`` (a fix unit's :class:`~.transforms.Transform`); the reason
        where the model cannot tell."""
        return self.predict_steps([(transform, change)])

    def per_step_saving(self, change: Mapping[str, Any], saved_ms: float,
                        moves_cpu: bool = False) -> Prediction | str:
        """A change that takes ``saved_ms`` off the job's mean step: a cost the window's
        steps do not hold but the job pays now and then (an epoch's start), spread over the
        steps it is paid for. The step is the mean one the predictions start from.
        ``moves_cpu``: the cost is CPU work beside the training on the CPUs it shares, so
        the range takes the model's error on such changes (:data:`EFFECT_FLOOR`,
        :data:`EFFECT_ERROR`)."""
        why = self.withholds(change)
        if why is not None:
            return why
        ms = max(self.base_ms - max(saved_ms, 0.0), 1e-9)
        rng, parts = self._range(ms, ms, self.base_ms / ms, moves_cpu)
        return Prediction(dict(change), ms, self.base_ms / ms, rng, self.base_ms,
                          range_parts=parts)

    def _range(self, lo: float, hi: float, speedup: float, moves_cpu: bool
               ) -> tuple[tuple[float, float], dict[str, float]]:
        """The changed step's range (ms) from the model's ends ``lo``-``hi`` (where they
        hold the probes' noise, :func:`noise_ends`), and its parts (:func:`widened`): the
        model's own error on a change (:data:`EFFECT_FLOOR` and :data:`EFFECT_ERROR`, a
        share of the effect's log), then the noise of the base (the replay's error, the
        base mean's standard error)."""
        w = model_error(speedup, moves_cpu)
        return (widened(lo, hi, w, self.rel),
                {"low_ms": lo, "high_ms": hi, "model_error": w, "noise": self.rel})

    def predict_steps(self, steps: Sequence[tuple[Transform | GraphChange, Mapping[str, Any]]]
                      ) -> Prediction | str:
        """The step several changes give together: each transform applied in turn to the
        graph the ones before it gave (a change kept by autofix, then the one it tries
        next), the changes merged, and what each transform declares beyond the graph
        (:meth:`_predict`). No steps: the baseline."""
        made = [(as_transform(t), c) for t, c in steps]
        key = tuple((t.name, tuple(sorted((k, repr(v)) for k, v in c.items())))
                    for t, c in made)
        if key in self.cache:
            return self.cache[key]
        why = self.withholds({k: v for _, c in made for k, v in c.items()})
        if why is not None:
            self.cache[key] = why
            return why
        noise = self.facts.threads_noise_rel
        if (noise is not None and noise > THREADS_NOISE_MAX
                and any("threads_one_thread_ratio" in t.assumes for t, _ in made)):
            self.cache[key] = cannot_tell(
                f"the thread timings after the loop varied by {noise:.0%} round "
                "to round (another process held a CPU while they ran); capture again on a "
                "quieter host")
            return self.cache[key]
        got = self._predict(made, self.facts)
        if isinstance(got, str):
            self.cache[key] = got
            return got
        change, base, ms, share, raw = got
        # where the CPU bound's inputs put the run as it is above its own step (see
        # _predict), the slow end keeps the bound as they give it
        lo, hi = ms, max(ms, raw)
        # a change that moves CPU work between torch's threads and workers is made at each
        # end of the CPUs' capacity timings too (the point is at the most of them: timings
        # of one capture on a shared host lie far apart)
        ends: list[Facts] = []
        span = (self.facts.cpu_capacity_min, self.facts.cpu_capacity_max)
        moves = _moves_cpu(made, change)
        if moves and None not in span:
            ends += [self.facts.replace(cpu_capacity=cap) for cap in span]
        # and at the loop's own loading pace (the worker's batch put at it)
        if moves:
            ends += pace_ends(self.facts)
        # a change that reads what one thread costs is made at the busier thread timing
        # too: how the ops ran while something else held a CPU, as the job may meet it
        reads = {f for t, _ in made for key in t.assumes for f in key.split("|")}
        least = self.facts.threads_one_thread_ratio_min
        if least is not None and "threads_one_thread_ratio" in reads:
            ends.append(self.facts.replace(threads_one_thread_ratio=least))
        # not timed, the point reads the CPU torch's threads used as their work (a bound:
        # :attr:`Prediction.at_least`); the range spans the physical ends, ops that scale
        # fully with their threads and ops that do not scale at all
        n = self.facts.torch_num_threads
        if ("threads_one_thread_ratio" in reads and self.facts.threads_one_thread_ratio is None
                and n is not None and n >= 2):
            ends += [self.facts.replace(threads_one_thread_ratio=r) for r in (1.0, float(n))]
        ends += noise_ends(self.facts, reads)
        for facts in ends:
            at = self._predict(made, facts)
            if not isinstance(at, str):
                lo, hi = min(lo, at[2] * base / at[1]), max(hi, at[2] * base / at[1])
        assumed = tuple(dict.fromkeys(a for t, part in made for a in t.assumed(self.facts, part)))
        rng, parts = self._range(lo, hi, base / ms if ms > 0 else 1.0, _moves_cpu(made, change))
        p = Prediction(change, ms, base / ms if ms > 0 else math.inf, rng, base,
                       loader_share=share, assumed=assumed, range_parts=parts)
        self.cache[key] = p
        return p

    def _own_settings_scale(self, steps: Sequence[tuple[Transform, Mapping[str, Any]]],
                            facts: Facts) -> float:
        """The run's step over what the same transforms replay at the run's own settings
        (each changed field as the facts hold it now), for a change of the worker count
        that keeps workers and torch's threads as they are: the same parts of the model
        (workers beside the run's threads) on both sides, so that their error on the run
        itself is not read as the change's effect. 1 for any other change (no workers on
        one side, another thread count: those parts on one side only), where a setting now
        is not known, the replay at them cannot tell, or it lies outside
        :data:`CALIBRATE_WITHIN` of the step."""
        merged = {k: v for _, c in steps for k, v in c.items()}
        if (not any(f in merged for t, _ in steps for f in t.moves_cpu)
                or not merged.get("num_workers") or not facts.dataloader_num_workers
                or merged.get("intra_op_threads", facts.torch_num_threads)
                != facts.torch_num_threads):
            return 1.0
        own = []
        for t, c in steps:
            now = {}
            for k in c:
                names = t.sets.get(k)
                v = getattr(facts, names[0], None) if names else None
                if v is None:
                    return 1.0
                now[k] = v
            own.append((t, now))
        g2 = self.g
        for t, now in own:
            made = t(g2, now, facts)
            if isinstance(made, str):
                return 1.0
            g2, facts = made, t.now(facts, now)
        at = replayed_step_ms(g2) / self.base_replay * self.steady_ms if self.base_replay else 0.0
        lo, hi = CALIBRATE_WITHIN
        return self.steady_ms / at if at > 0 and lo < self.steady_ms / at < hi else 1.0

    def _predict(self, steps: Sequence[tuple[Transform, Mapping[str, Any]]], facts: Facts
                 ) -> tuple[dict[str, Any], float, float, float | None, float] | str:
        """(the changes merged, the base step, the changed step, the loader's share: see
        :class:`Prediction`; and the changed step at the CPU bound as its inputs give it)
        with ``facts``; the reason where the model cannot tell. The replayed ratio is taken
        per old step where a transform says how many one changed step is (``per_step``); a
        change that moves CPU work is held at the CPU bound, which the run as it is meets
        too; the costs outside the window a transform declares (``outside``) are added to
        both sides. Each declaration counts once, whichever transforms share it."""
        scale = self._own_settings_scale(steps, facts)
        g2 = self.g
        change: dict[str, Any] = {}
        given = facts
        for transform, part in steps:
            made = transform(g2, part, facts)
            if isinstance(made, str):
                return made
            g2 = made
            change.update(part)
            # the next transform starts from the run this one made: its settings are now
            facts = transform.now(facts, part)
        step2 = replayed_step_ms(g2) if steps else 0.0
        ratio = step2 / self.base_replay if self.base_replay > 0 and steps else 1.0
        for per_step in _declared(steps, "per_step"):
            old_steps = per_step(change, given)
            if old_steps is not None:
                ratio /= old_steps
        ms = raw = self.steady_ms * ratio * scale
        bound = cpu_bound_ms(self.g, g2, change, given) if _moves_cpu(steps, change) else None
        if bound is not None:
            to_ms = self.steady_ms / max(self.base_replay, 1e-9)
            raw = max(ms, bound * to_ms)
            # the run as it is meets its own bound: where the bound's inputs put it above
            # the measured step (torch's threads not busy all through the ops, CPUs that
            # gave more than timed), the CPUs did at least that run's work in its step
            now = cpu_bound_ms(self.g, self.g, {}, given)
            if now is not None and now > self.base_replay > 0:
                bound *= self.base_replay / now
            ms = max(ms, bound * to_ms)
        # the costs outside the replayed step: as a transform declares them before and
        # after (the run's own epoch start among them), else the run's epoch start on both
        base, paid_any, steady = self.steady_ms + self.gap_ms, False, (ms, raw)
        ms, raw = ms + self.gap_ms, raw + self.gap_ms
        for outside in _declared(steps, "outside"):
            paid = outside(given, change)
            if paid is not None:
                base, ms, raw = base + paid[0], ms + paid[1], raw + paid[1]
                paid_any = True
        if not paid_any:
            base, ms, raw = base + self.epoch_ms, ms + self.epoch_ms, raw + self.epoch_ms
        elif (ready := ready_at_start(given, change)) > 0:
            # the epoch's start as paid made its first batches: the steps that take them
            # wait for none (the changed step with every batch ready)
            fed = fed_step_ms(g2) * self.steady_ms / max(self.base_replay, 1e-9)
            ms -= ready * max(steady[0] - fed, 0.0)
            raw -= ready * max(steady[1] - fed, 0.0)
        period = g2.producer_period
        share = (None if math.isnan(period) or not steps or step2 <= 0
                 else min(1.0, period / 1e3 / step2))
        return change, base, ms, share, raw


def model_error(speedup: float, moves_cpu: bool) -> float:
    """The model's own error on a change predicted at ``speedup``, in log, on each side of
    a range: :data:`EFFECT_FLOOR` plus :data:`EFFECT_ERROR` of the effect's log, of the
    change's kind (``moves_cpu``: CPU work between torch's threads and processes)."""
    kind = "cpu" if moves_cpu else "other"
    return EFFECT_FLOOR[kind] + EFFECT_ERROR[kind] * abs(math.log(max(speedup, 1e-9)))


def widened(lo: float, hi: float, model_err: float, noise: float) -> tuple[float, float]:
    """A range from the model's ends ``lo``-``hi`` (ms): widened on each side by the
    model's error ``model_err`` (log), then by the inputs' relative noise ``noise`` as a
    factor ``1 + noise``: a relative error of a ratio, so no noise makes a step zero."""
    f = 1 + max(noise, 0.0)
    return lo * math.exp(-model_err) / f, hi * math.exp(model_err) * f


#: a probe's value a transform may read -> the fact holding its noise (the relative standard
#: error of its median)
NOISE_OF = {"threads_one_thread_ratio": "threads_noise_rel",
            "input_batched_fetch_work_ratio": "input_batched_fetch_work_noise_rel",
            "cpu_autocast_ratio": "cpu_autocast_noise_rel",
            "input_worker_fork_copy_loop_ms": "input_worker_fork_copy_loop_noise_rel"}


def noise_ends(facts: Facts, reads: Iterable[str]) -> list[Facts]:
    """``facts`` with each probe's value in ``reads`` (the fields the change's transforms
    read) at both ends of its noise, ``value / (1 + noise)`` and ``value x (1 + noise)``:
    the noise reaches the predicted step as far as the replay carries it (a timing of work
    off the critical path moves it little), not as a factor on the whole step."""
    out = []
    for name in sorted(set(reads) & set(NOISE_OF)):
        v, n = getattr(facts, name), getattr(facts, NOISE_OF[name])
        if v is not None and n:
            out += [facts.replace(**{name: v / (1 + n)}), facts.replace(**{name: v * (1 + n)})]
    return out


def pace_ends(facts: Facts) -> list[Facts]:
    """``facts`` with the in-process batch timed after the loop at the loop's own loading
    (``loading_ms``), so that the worker's batch timed in turn with it stands about as timed
    (the loop's pauses added; the window's fetch against the clock's may differ a little): the
    workers' transform puts that batch at the loop's pace (the two in-process timings'
    ratio), and a host whose pace moves for seconds may meet the change at either; none
    where any of the three was not measured."""
    loop, timed = loading_ms(facts), facts.input_inprocess_batch_ms
    if loop is None or timed is None or facts.input_worker_batch_ms is None:
        return []
    return [facts.replace(input_inprocess_batch_ms=loop)]


def _moves_cpu(steps: Sequence[tuple[Transform, Mapping[str, Any]]],
               change: Mapping[str, Any]) -> bool:
    """Whether the merged ``change`` sets a field a transform says moves CPU work."""
    return any(f in change for t, _ in steps for f in t.moves_cpu)


def _declared(steps: Sequence[tuple[Transform, Mapping[str, Any]]], what: str) -> list[Any]:
    """The transforms' declarations ``what`` (``per_step``, ``outside``), each once, in
    the order of the steps."""
    return list(dict.fromkeys(h for t, _ in steps if (h := getattr(t, what)) is not None))


def _pick(models: list[tuple[int | None, StepModel | None]]) -> tuple[int | None, StepModel | None]:
    """The rank whose replay is furthest from its measured step (the error a prediction
    must own up to), else the first rank's reason for having no model."""
    built = [(r, m) for r, m in models if m is not None and m.graph is not None]
    if built:
        return max(built, key=lambda x: abs(x[1].error or 0.0))
    return next(((r, m) for r, m in models if m is not None), (None, None))


def attach_models(a: Analysis, models: list[tuple[int | None, StepModel | None]]
                  ) -> Predictor | str:
    """Put the step model's replay accuracy on the analysis (``step_model`` or
    ``step_model_why``) and return the Predictor for its findings' fixes (or why there is
    none: a many-rank run, or no model)."""
    rank, m = _pick(models)
    if m is None:
        a.step_model, a.step_model_why = None, "no trace analysed"
        return cannot_tell("no trace analysed")
    js: dict[str, Any] | None = m.to_json()
    if js is not None and len(models) > 1:
        js["rank"] = rank
    a.step_model, a.step_model_why = js, m.why
    if len(models) > 1:
        return cannot_tell("predictions are made for one rank's run, not across ranks")
    return predictor_for(m, a.metrics)


def predictor_for(m: StepModel | None, metrics: Mapping[str, Any]) -> Predictor | str:
    """The Predictor of one rank's run from its step model and its metrics (read as
    :class:`Facts`); why there is none where the model was not built."""
    if m is None:
        return cannot_tell("no trace analysed")
    if m.graph is None:
        return cannot_tell(f"no step model ({m.why})")
    return Predictor(m, Facts.from_metrics(metrics))


def prediction_line(p: Any) -> str:
    """A fix's prediction as the reports show it ("predicted 25.2 -> 14.1 ms (1.79x)"), from
    a Prediction or its JSON; empty when there is none."""
    if isinstance(p, Prediction):
        return p.line()
    if isinstance(p, dict) and isinstance(p.get("step_ms"), int | float) and isinstance(
            p.get("speedup"), int | float) and p["speedup"] > 0:
        base = p["step_ms"] * p["speedup"]
        rng = p.get("range")
        ok = rng if isinstance(rng, list) and all(isinstance(x, int | float) for x in rng) \
            else None
        if p.get("at_least") is True:
            return _bound_line(base, p["step_ms"], p["speedup"], ok)
        return _line(base, p["step_ms"], p["speedup"], ok, said=p)
    return ""
