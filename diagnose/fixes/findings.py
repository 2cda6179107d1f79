"""What a fix is predicted to do: each fix unit carries its transform of the step model
(``Fix.transform``, a :class:`~diagnose.stepmodel.transforms.Transform` in its module), and predicts
through it for each config autofix would measure (``Fix.candidates``): the change is
exactly what autofix applies, the step time comes from replaying the transformed graph.
Where the model cannot tell, the answer is the reason, never an invented number.

:func:`predict_findings` puts a prediction on every fix of every finding, orders the fixes
by predicted effect, keeps a fix predicted to slow the job from being offered first (a
hint says why), and takes each finding's time at stake from its best prediction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..metrics.context import cpu_wait_holders, pool_clash, worker_pool
from ..stepmodel.calibration import BUSY, FIXES_TIE, HELPS, SATURATED_PCT, SLOWER, TIE
from ..stepmodel.facts import Facts
from ..stepmodel.prediction import CANNOT_TELL, Prediction, Predictor
from ..stepmodel.transforms import AT_MOST, as_transform
from .config import TrainConfig
from .unit import Fix, setting_words

_SEVERITIES = ("info", "warning", "critical")  # engine.SEVERITIES (a layer above)
#: how :func:`predict_findings` begins the reason of a fix that does not apply to the run
DOES_NOT_APPLY = "does not apply to this run"
#: how it begins the reason of a fix that may apply, where the run does not say enough
#: (``Fix.unknown``): offered as advice, without a number
NOT_KNOWN = "not predicted: this run does not say"
#: how it begins the reason of a change of CPU work not predicted because other processes
#: held the CPUs (:func:`_withheld_why`)
ON_A_BUSY_MACHINE = "not predicted: other processes held the CPU"
#: a prediction withheld where the process's own thread pools took turns on the CPUs
OWN_POOLS = "not predicted: this process's own thread pools took turns on the CPUs"
#: a prediction withheld where the loader's workers each ran a thread pool (IN006)
WORKER_POOLS = "not predicted: the model counts a DataLoader worker as one thread, and"
#: a setting whose change moves CPU work though no transform declares it: the workers'
#: start-up a persistent_workers saving takes off (the transforms declare ``moves_cpu``)
_STARTUP_WORK = frozenset({"persistent_workers"})


def predict_findings(findings: Iterable[Any], predictor: Predictor | str,
                     config: TrainConfig, metrics: Mapping[str, Any],
                     fixes: Mapping[str, Fix]) -> None:
    """Predict each fix of each finding (``predictor``: the run's, or why there is none;
    ``metrics``: the run's, read as :class:`Facts`; ``fixes``: the registry,
    :data:`diagnose.fixes.FIXES`)."""
    findings = list(findings)
    facts = Facts.from_metrics(metrics)
    cpu_work = _cpu_work(fixes)
    if not isinstance(predictor, str):
        withheld = _withheld_why(metrics)
        if withheld is not None:
            predictor.withhold(cpu_work, withheld)
        pools = _worker_pools_hold(metrics)
        if pools is not None:
            predictor.withhold(cpu_work, *pools)
    for f in findings:
        preds: dict[str, Prediction | str] = {}
        off: list[str] = []  # unpredicted fixes that do not apply to the run as it is
        for x in f.fixes:
            fix = fixes.get(x)
            if fix is None:
                preds[x] = "no such fix"
                continue
            # without a model the fix still says where it does not apply to the run
            p = predictor if isinstance(predictor, str) else fix.predict(predictor, config, facts)
            why = fix.why_not(config, facts) if fix.auto else None
            if isinstance(p, str) and why is not None and not why.startswith("needs opt-in"):
                unknown = fix.unknown(facts)
                if unknown is not None:  # may apply: advice, without a number
                    p = f"{NOT_KNOWN} {unknown}"
                else:
                    p = f"{DOES_NOT_APPLY}: {why}"
                    off.append(x)
            preds[x] = p
        _order(f, preds, off, {x: fixes[x].title_for(_change(p)) for x, p in preds.items()
                               if x in fixes})
        _no_cpu_spare(f, preds, off, metrics)
        lead = preds.get(f.fixes[0]) if f.fixes else None
        if isinstance(lead, Prediction) and lead.assumed:
            f.hints.append(f"{f.fixes[0]}: predicted on what this capture could not time, "
                           f"assumed: {'; '.join(lead.assumed)}")
        busy = metrics.get("step_cpu_wait_unprofiled_share")
        # a finding whose own evidence is that wait (CF010's) has said it already
        said = "step_cpu_wait_unprofiled_share" in f.evidence
        if isinstance(busy, float) and busy >= BUSY and not said and any(
                isinstance(p, Prediction) and cpu_work & set(p.change)
                for p in preds.values()):
            _, holders = cpu_wait_holders(metrics)
            f.hints.append(
                f"predicted beside the run's own use of the CPUs: the training thread waited "
                f"{busy:.0%} of the timed steps for a CPU {holders}; a change of workers or "
                f"threads changes that wait too ({_measure(metrics)})")
    _grade_sure(findings, fixes)


def _grade_sure(findings: list[Any], fixes: Mapping[str, Fix]) -> None:
    """Raise an info finding to warning (``Finding.grade_up``) whose first fix is sure to
    help: a ranged point on measured inputs (nothing assumed) whose range's slow end, which
    holds the model's error and the inputs' noise, saves at least :data:`HELPS`. A rule's
    threshold on its symptom can miss what the fix also frees (a 9% wait for the loader
    whose threads split frees CPUs for every op). A change that a warning already leads
    with is not raised again: the report names it once."""
    led = [p.change for f in findings if f.severity != "info" and (p := _lead(f)) is not None]
    for f in findings:
        p = _lead(f)
        if f.severity != "info" or p is None or p.assumed or p.floor < HELPS or p.change in led:
            continue
        f.grade_up(f"its first fix ({fixes[f.fixes[0]].title_for(p.change)}) is predicted "
                   f"{p.speedup:.2f}x, at least {p.floor:.2f}x within its range")
        led.append(p.change)


def _no_cpu_spare(f: Any, preds: Mapping[str, Prediction | str], off: list[str],
                  metrics: Mapping[str, Any]) -> None:
    """Grade ``f`` by no time at stake where every fix of it that applies was withheld on
    a busy machine (:func:`_withheld_why`: each moves CPU work) and the usable CPUs were
    saturated (:data:`SATURATED_PCT`): with no CPU spare, moving work between the
    training process and its workers cannot shorten the step as the machine is."""
    ours = [x for x in f.fixes if x not in off]
    pct = metrics.get("host_cpu_mean_pct")
    if f.category == "memory" or f.severity == "info" or not ours or not isinstance(
            pct, int | float) or pct < SATURATED_PCT or not all(
            isinstance(p := preds.get(x), str) and p.startswith(ON_A_BUSY_MACHINE)
            for x in ours):
        return
    f.take_gain(0.0, by=f"the CPUs' load: {pct:.0f}% busy, with other processes holding "
                        "them, leaves no CPU for the work its fixes move; capture again when "
                        "the machine is quieter, or let autofix measure")


def _cpu_work(fixes: Mapping[str, Fix]) -> frozenset[str]:
    """The settings whose change moves CPU work between torch's threads and processes: what
    the fixes' transforms declare (``moves_cpu``), and :data:`_STARTUP_WORK`."""
    return frozenset().union(_STARTUP_WORK, *(as_transform(f.transform).moves_cpu
                                              for f in fixes.values()
                                              if f.transform is not None))


def _withheld_why(metrics: Mapping[str, Any]) -> str | None:
    """Why the changes of CPU work get no number on this run (the Predictor withholds
    them: :meth:`~diagnose.stepmodel.prediction.Predictor.withhold`); None where they are
    predicted. Where the training thread waited for a CPU other processes held in
    :data:`BUSY` or more of the timed steps, every input of such a prediction (the thread
    timings, the CPUs' capacity, the step itself) was timed under a
    load the run does not own and cannot foresee; the fix is still offered, as advice. A
    wait for the run's own workers is the run's doing and stays predicted; one for its
    own thread pools (:func:`~diagnose.metrics.context.pool_clash`) slowed every input
    alike, and its fix comes first (CF007)."""
    busy = metrics.get("step_cpu_wait_unprofiled_share")
    if not isinstance(busy, float) or busy < BUSY:
        return None
    elsewhere, pools = cpu_wait_holders(metrics)[0], pool_clash(metrics)
    if not elsewhere and pools is None:
        return None
    return (f"{ON_A_BUSY_MACHINE} in {busy:.0%} of the timed steps; predict again when it is "
            f"quieter, or {_measure(metrics, 'let ')}" if elsewhere else
            f"{OWN_POOLS} in {busy:.0%} of the timed steps ({pools}): give the other pool "
            "one thread (CF007), then capture again")


def _worker_pools_hold(metrics: Mapping[str, Any]
                       ) -> tuple[str, Callable[[Mapping[str, Any]], bool]] | None:
    """(why, for which changes) no change of CPU work gets a number where a DataLoader
    worker's batch kept a thread pool busy beside its own thread
    (:func:`~diagnose.metrics.context.worker_pool`): those whose workers' threads outnumber
    the CPUs, as the run is or after the change. The model counts a worker as one thread,
    so it would under-count what they take from the CPUs. The fix is still offered; the
    pools' fix (``worker_pools``) comes first. None where no pool was seen."""
    pool, cpus = worker_pool(metrics), metrics.get("input_worker_batch_cpus")
    n_cpus, now = metrics.get("cpu_count"), metrics.get("dataloader_num_workers")
    if pool is None or not isinstance(cpus, float) or not isinstance(n_cpus, int):
        return None
    workers_now = now if isinstance(now, int) else 0

    def outnumbered(change: Mapping[str, Any]) -> bool:
        after = change.get("num_workers", workers_now)
        return max(workers_now, after if isinstance(after, int) else 0) * cpus > n_cpus

    return (f"{WORKER_POOLS} {pool}; held to one thread (threadpool_limits(1) in a "
            "worker_init_fn; OpenCV's own: cv2.setNumThreads(1)), the model predicts again",
            outnumbered)


def _measure(metrics: Mapping[str, Any], let: str = "") -> str:
    """Who can measure a change of workers or threads: autofix, except for an
    IterableDataset (it splits its samples among the workers itself, and autofix leaves
    them as they are: the user times it by hand)."""
    if metrics.get("dataloader_iterable") is True:
        return "time it by hand: autofix leaves an IterableDataset's workers as they are"
    return f"{let}autofix measure" if let else "autofix measures it"


def _order(f: Any, preds: dict[str, Prediction | str], off: list[str],
           titles: Mapping[str, str] | None = None) -> None:
    """Fixes by predicted effect, a tie (a range reaching the best point) led by a fix
    whose range's slow end is the highest (unless every tied slow end gains), one whose
    whole range gains, then by the fewest changed settings. Unpredicted ones keep their
    place after the predicted ones that help, and before those predicted to change
    nothing that matters; those that do not apply to
    the run as it is (e.g. worker settings with no workers) come after them; a fix predicted
    to slow the job down goes last and says so. The time at stake follows the best
    prediction."""
    f.predictions = preds
    helps = [x for x in f.fixes if isinstance(p := preds[x], Prediction) and p.speedup >= HELPS]
    helps.sort(key=lambda x: -_speedup(preds[x]))
    # a fix whose range reaches the best point (or within TIE of it) ties with the best: the
    # capture cannot tell them apart (but not one whose point lies further from the best
    # than the model's error on a pair of changes, FIXES_TIE: it orders those). Of a tie,
    # those whose range's slow end is the highest (within TIE) may lead: the change least
    # likely to slow the job (more workers beside torch's threads on few CPUs, say, against
    # the threads split); of those, one whose whole range gains, then the one that changes
    # the fewest settings, so that captures of one job agree. Where every tied slow end
    # gains (HELPS), none is likely to slow the job, and which slow end is higher is the
    # capture's noise: the fewest settings lead
    if helps:
        top = _speedup(preds[helps[0]])
        tied = [x for x in helps if _reach(preds[x]) * (1 + TIE) >= top
                and math.log(top / _speedup(preds[x])) <= FIXES_TIE]
        safest = max(_floor(preds[x]) for x in tied)
        if any(_floor(preds[x]) < HELPS for x in tied):
            tied = [x for x in tied if _floor(preds[x]) * (1 + TIE) >= safest]
        lead = min(tied, key=lambda x: (_may_not_help(preds[x]), len(_change(preds[x])),
                                        helps.index(x)))
        helps.remove(lead)
        helps.insert(0, lead)
    same = [x for x in f.fixes if isinstance(p := preds[x], Prediction)
            and SLOWER <= p.speedup < HELPS]
    # a bound below 1 says little: such a fix stays with those the model cannot tell; one
    # whose most is too little to matter (AT_MOST) goes with those that change nothing
    unknown = [x for x in f.fixes if x not in off and (
        (isinstance(p := preds[x], str) and not p.startswith(AT_MOST))
        or (isinstance(p, Prediction) and p.at_least and p.speedup < SLOWER))]
    same += [x for x in f.fixes if x not in off and isinstance(p := preds[x], str)
             and p.startswith(AT_MOST)]
    slower = [x for x in f.fixes if isinstance(p := preds[x], Prediction)
              and p.speedup < SLOWER and not p.at_least]
    f.fixes = helps + unknown + same + [x for x in f.fixes if x in off] + slower
    for x in slower:
        p = preds[x]
        assert isinstance(p, Prediction)
        what = ", ".join(setting_words(k, v) for k, v in p.change.items())
        # named by its title: an id alone ("threads") reads as a setting, and an id before
        # the title ("threads, split the CPUs ...") as a stray word
        named = titles[x] if titles and titles.get(x) else x
        named += "" if what in named else f" ({what})"  # a title for the change names it
        # a range whose fast end gains does not say slower: it says it may not help; a
        # prediction on inputs this capture did not time (its assumed) says so
        verdict = (f"may not help ({p.floor:.2f}-{p.reach:.2f}x over its range)"
                   if p.reach >= 1.0 else "slower")
        if p.assumed:
            verdict += ", on inputs this capture did not time (the JSON's assumed)"
        f.hints.append(f"Not offered: {named}, predicted {p.speedup:.2f}x "
                       f"({p.base_ms:.1f} -> {p.step_ms:.1f} ms): {verdict}")
    # the time at stake is the best prediction's saving; when the fixes the model predicts
    # do not help but others it cannot tell remain (unpredicted, a bound), the rule's own
    # estimate stands; where the model's own fast end helps (its inputs' ends: fixing it
    # could save that time), the rule's estimate capped by what that end saves. A fix
    # predicted slower is not offered, so its fast end puts no time at stake: a finding
    # whose every fix would slow the job has nothing to try. The noise that widens a range
    # both ways puts no time at stake. A hint says which
    points = [p for x, p in preds.items() if isinstance(p, Prediction) and not p.at_least]
    open_ = [x for x, p in preds.items() if x not in off and x not in slower and (
        (p.at_least or _model_reach(p) >= HELPS) if isinstance(p, Prediction)
        else not p.startswith(AT_MOST))]
    if points:
        best = max(points, key=lambda p: p.speedup)
        untold = [x for x in open_ if not isinstance(q := preds[x], Prediction) or q.at_least]
        if best.speedup >= HELPS or not open_:
            # a bound past the best point saves at least its own share: that is at stake
            bounds = [q.speedup for x in open_ if isinstance(q := preds[x], Prediction)
                      and q.at_least and q.speedup > best.speedup]
            saves = 1 - best.step_ms / best.base_ms
            beyond = max((1 - 1 / b for b in bounds), default=0.0)
            own = f.estimated_gain
            f.take_gain(max(0.0, saves, beyond),
                        change=best.change if saves > 0 and saves >= beyond else None)
            if own and saves > own * (1 + TIE) and saves >= beyond:  # past the symptom's share
                cpus = {"num_workers", "intra_op_threads"} & set(best.change)
                f.hints.append(f"the time at stake ({saves:.0%}) is the best prediction's "
                               f"saving, past the rule's own estimate ({own:.0%}): the change "
                               "also saves time outside the symptom's own measure"
                               + (" (the CPUs it frees for torch's ops)" if cpus else ""))
        elif untold:  # the rule's estimate stands beside a prediction that does not reach it
            whys = {q.removeprefix(CANNOT_TELL).strip().removeprefix("not predicted:").strip()
                    if isinstance(q := preds[x], str) else None
                    for x in untold}  # one reason for them all: said
            why = f": {whys.pop()}" if len(whys) == 1 and None not in whys else ""
            change = ", ".join(f"{k}={v}" for k, v in best.change.items())
            f.hints.append(f"the time at stake is the rule's own estimate: the best "
                           f"prediction is {best.speedup:.2f}x"
                           + (f" ({change})" if change else "")
                           + f", but the model cannot tell what {', '.join(untold)} would "
                           f"give{why}")
        else:  # a model end reaches a gain: at most the rule's estimate, at most what it saves
            reach = max(_model_reach(preds[x]) for x in open_)
            own = f.estimated_gain
            if own is None or 1 - 1 / reach < own:
                f.take_gain(1 - 1 / reach)
                f.hints.append(f"the time at stake is what the fix saves with its "
                               f"measured inputs at their best ({reach:.2f}x), beside a "
                               f"best prediction of {best.speedup:.2f}x (its printed range "
                               "also holds the model's own error)")
            else:  # the rule's own estimate is the lower: it stands, and the hint says why
                f.hints.append(f"the time at stake is the rule's own estimate ({own:.1%}), "
                               f"beside a best prediction of {best.speedup:.2f}x whose "
                               f"model end reaches {reach:.2f}x")
    elif not open_ and (most := [_most(p) for p in preds.values() if isinstance(p, str)
                                 and p.startswith(AT_MOST)]):
        f.take_gain(max(0.0, 1 - 1 / max(most)))  # the most any fix could do: too little


def _most(why: str) -> float:
    """The speedup an "at most 1.01x: ..." reason names (1.0 where it names none)."""
    try:
        return float(why[len(AT_MOST):].split("x", 1)[0])
    except ValueError:
        return 1.0


def _change(p: Prediction | str) -> dict[str, Any]:
    return p.change if isinstance(p, Prediction) else {}


def _may_not_help(p: Prediction | str) -> bool:
    return isinstance(p, Prediction) and p.may_not_help


def _reach(p: Prediction | str) -> float:
    """The speedup at the fast end of a prediction's range (its point for a bound)."""
    return p.reach if isinstance(p, Prediction) else 0.0


def _floor(p: Prediction | str) -> float:
    """The speedup at the slow end of a prediction's range (its point for a bound)."""
    return p.floor if isinstance(p, Prediction) else 0.0


def _model_reach(p: Prediction | str) -> float:
    """The speedup at the model's own fast end (its point for a bound)."""
    return p.model_reach if isinstance(p, Prediction) else 0.0


def _speedup(p: Prediction | str) -> float:
    return p.speedup if isinstance(p, Prediction) else 0.0


def offered(f: Any) -> list[str]:
    """A finding's fixes in order, less those predicted to slow the job (a point below
    :data:`SLOWER`, not a bound) and those that do not apply to the run as it is (e.g.
    worker settings with no workers; not one whose memory what-if predicts a peak): what a
    report shows as the fix to try. A prediction is a :class:`Prediction`, its JSON, or the
    reason there is none."""
    out = []
    peaks = getattr(f, "peaks", None) or {}
    for x in f.fixes:
        p = (f.predictions or {}).get(x)
        if isinstance(p, str) and p.startswith(DOES_NOT_APPLY) and x not in peaks:
            continue
        if isinstance(p, Prediction):
            point, bound = p.speedup, p.at_least
        elif isinstance(p, dict) and isinstance(p.get("speedup"), int | float):
            point, bound = float(p["speedup"]), bool(p.get("at_least"))
        else:
            point, bound = None, False
        if point is None or bound or point >= SLOWER:
            out.append(x)
    return out


def sort_findings(findings: list[Any]) -> None:
    """Worst first again (engine's order): predictions may have moved the grades; within a
    grade, by the time at stake. Two findings of a grade whose first fixes tie (the
    second's range reaches the first's point, and their points lie within the model's
    error on a pair of changes of one job, :data:`FIXES_TIE`, as :func:`_order` ties
    fixes) cannot be told apart by one capture, and their points trade places capture to
    capture: the one whose first fix's range is the narrower (:func:`range_width`) leads.
    A range's width comes from its inputs' noise and the model's error, which hold from
    capture to capture, while its ends move with its point (a slow end that saves more is
    a point that moved up). Widths within :data:`TIE` of each other do not decide (which
    is narrower is then a capture's noise), nor does the time at stake (it follows the
    tied points): the rules' own order (their ids) does, the same in every capture. A finding
    graded up by its sure fix (:func:`_grade_sure`) follows those its rule graded: its
    grade rests on a range's slow end, which captures of one job put on either side of
    the line, and it must not move the advice that leads."""
    findings.sort(key=lambda f: (-_SEVERITIES.index(f.severity), _raised(f),
                                 -(f.estimated_gain or 0.0), f.rule))
    for _ in range(len(findings)):  # adjacent swaps until none is left (a few findings)
        swapped = False
        for i in range(len(findings) - 1):
            a, b = findings[i], findings[i + 1]
            if (a.severity == b.severity and _raised(a) == _raised(b)
                    and (pa := _lead(a)) is not None
                    and (pb := _lead(b)) is not None
                    and _reach(pb) * (1 + TIE) >= pa.speedup
                    and abs(math.log(pa.speedup / pb.speedup)) <= FIXES_TIE
                    and (range_width(b) * (1 + TIE) < range_width(a)
                         or (range_width(a) * (1 + TIE) >= range_width(b)
                             and b.rule < a.rule))):
                findings[i], findings[i + 1] = b, a
                swapped = True
        if not swapped:
            return


def _raised(f: Any) -> bool:
    """Whether a sure fix graded ``f`` up (``Finding.graded_up_from``)."""
    return getattr(f, "graded_up_from", None) is not None


def _lead(f: Any) -> Prediction | None:
    """A finding's first fix's prediction, where it is a ranged point (not a bound)."""
    p = (f.predictions or {}).get(f.fixes[0]) if f.fixes else None
    return p if isinstance(p, Prediction) and not p.at_least and p.base_ms > 0 else None


def range_width(f: Any) -> float:
    """How wide a finding's first fix's predicted range is: log(slow end / fast end) of its
    step; inf without a ranged prediction."""
    p = _lead(f)
    return math.inf if p is None or p.range[0] <= 0 else math.log(p.range[1] / p.range[0])


__all__ = ["BUSY", "HELPS", "NOT_KNOWN", "ON_A_BUSY_MACHINE", "OWN_POOLS", "SLOWER",
           "WORKER_POOLS", "Prediction", "offered", "predict_findings", "range_width",
           "sort_findings"]
