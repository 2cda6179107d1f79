"""The probes' time budget: a share of the capture's wall time so far, spent in order of
what the predictions need.

Every probe after the loop serves the fixes of the input rules (``rules/input.toml``, and
IN004 in ``rules/config.toml``): the workers', the threads split's, the batched fetch's.
A probe whose rules (:data:`SERVES`) the step clock shows cannot be graded warning
(:func:`may_warn`: the same clock metrics the rules read, against their warning
thresholds) is not run (:func:`unneeded`): an info finding's fixes need no measured
prediction. The thread timing still runs where torch's threads outnumbered the CPUs other
processes left (:func:`threads_short`: CF008's fix, torch's own thread count), and every
probe but the batched fetch's where they and the workers outnumbered the CPUs while the
training thread waited for one (:func:`workers_beside_threads`: CF010's threads split).
Otherwise the probes run in the session's order (:mod:`diagnose.session.after_loop`):
each needed probe takes its least rounds, and more only while the budget lasts (it stops
its rounds at the budget's end: :func:`~.common.until`); a second timing runs only with
budget left. The least rounds are not cut (a prediction's measured input, however few its
rounds, stands in place of an assumption), so on a short capture the probes may take more
than the share. What was not run is
recorded with why (``context["probes"]``); a prediction made without it says what it
assumed, and a probe cut short hands on its values' noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ...metrics.context.loading import epoch_start_metrics
from ...metrics.context.step_clock import clock_metrics
from . import common

R = TypeVar("R")

#: the probes' time, at most this share of the capture's wall time so far (enter to the
#: loop's end: the steps on and off the profiler, the capacity timing on enter included):
#: issue 48, "keep all the probes under 5% of the capture's wall time"; of the time so far,
#: so that neither the probes nor the analysis after them can raise it
PROBE_SHARE = 0.05
#: the least shares at which a rule whose fixes read the probes may be graded warning
#: (rules/input.toml; tests/capture/probes/test_budget.py holds them to the rules' own
#: conditions): IN001, IN002 and IN006 at this share of the unprofiled steps that began
#: no epoch waiting on the loader (``dataloader_wait_steady_share``) ...
STEADY_WARNS = 0.10
#: ... IN003 (and the others where the clock cannot tell the epochs' starts apart) at
#: this share of every unprofiled step (``dataloader_wait_unprofiled_share``), IN003 with
#: one wait BURST_WARNS times the median (+ 0.1 ms) ...
UNPROFILED_WARNS = 0.05
BURST_WARNS = 5.0
#: ... and IN005 at this share of the mean step for an epoch's start
#: (``dataloader_epoch_start_share``)
EPOCH_START_WARNS = 0.10

#: the training thread waited, runnable, for a CPU in at least this share of the loop's
#: timed steps (the clock's ``cpu_wait_ms`` over its ``ms``): the least CF008 fires at
CPU_WAITED = 0.05
#: ... and CF010 may be graded warning at this share of them (its own warning threshold)
CPU_WAITS = 0.10
#: other processes held at least this many CPUs over the steps after the window: less is a
#: burst a thread's wait need not come from (CF008's own bound)
OTHERS_CPUS = 0.5

#: the probes after the loop, by the names they state their time under (``probes_ms``)
PROBES = ("workers_idle", "fetches", "work_after_fetch", "batches_in_turn", "inprocess_batch",
          "cpu_capacity", "worker_handover", "threads", "fork_copy", "worker_send",
          "worker_batches", "optimizer_step", "threads_spin")


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _share(clock: Mapping[str, Any] | None, column: str, unprofiled: bool) -> float | None:
    """The clock's ``column`` (ms) over its ``ms`` summed over its steps (each capped at
    its step), every phase or, ``unprofiled``, the ``after`` steps (those the other
    processes' CPUs were read over; none: the ``wait`` steps, the first left out); None
    where no such step has both."""
    if not isinstance(clock, Mapping):
        return None
    ms = clock.get("ms") or []
    phases = clock.get("phase") or [None] * len(ms)
    rows = list(zip(phases, clock.get(column) or [], ms, strict=False))
    if unprofiled:  # the steps after the window, where the other processes were read
        rows = ([r for r in rows[1:] if r[0] == "after"]
                or [r for r in rows[1:] if r[0] == "wait"])
    pairs = [(w, s) for _, a, b in rows
             if (w := _num(a)) is not None and (s := _num(b)) is not None and s > 0]
    total = sum(s for _, s in pairs)
    return sum(min(w, s) for w, s in pairs) / total if total > 0 else None


def cpu_wait_share(clock: Mapping[str, Any] | None) -> float | None:
    """The share of the loop's unprofiled steps (those after the window, else the ``wait``
    ones, the first left out) the training thread spent runnable but off a CPU (the
    clock's ``cpu_wait_ms`` over its ``ms``); None where the clock holds no such steps."""
    return _share(clock, "cpu_wait_ms", unprofiled=True)


def threads_short(ctx: Mapping[str, Any], clock: Mapping[str, Any] | None,
                  others_cpus: float | None) -> bool:
    """torch's threads (2 or more) outnumbered the CPUs other processes left
    (``others_cpus``, at least :data:`OTHERS_CPUS`, over the steps after the window) while
    the training thread waited for a CPU in :data:`CPU_WAITED` of its steps, with no CPU
    quota under the CPUs (CF009's, which needs no timing): the thread timing then serves
    CF008's fix (torch's own thread count), with or without a DataLoader."""
    threads, cpus = _num(ctx.get("torch_num_threads")), _num(ctx.get("cpu_count"))
    quota = _num(ctx.get("cpu_quota"))
    if threads is None or threads < 2 or cpus is None or (quota is not None and quota < cpus):
        return False
    share = cpu_wait_share(clock)
    return (others_cpus is not None and others_cpus >= OTHERS_CPUS
            and threads > cpus - others_cpus and share is not None and share >= CPU_WAITED)


def workers_beside_threads(ctx: Mapping[str, Any], clock: Mapping[str, Any] | None,
                           others_cpus: float | None) -> bool:
    """torch's threads (2 or more) and the DataLoader's workers (at least one, no more than
    the CPUs: IN004's) outnumbered the CPUs, other processes under :data:`OTHERS_CPUS`
    (their CPUs unknown: taken as such), no CPU quota under the CPUs, and the training
    thread waited for a CPU in :data:`CPU_WAITS` of its steps: CF010 may be graded
    warning, and the threads split it names reads the thread and workers' timings."""
    threads, cpus = _num(ctx.get("torch_num_threads")), _num(ctx.get("cpu_count"))
    quota = _num(ctx.get("cpu_quota"))
    dl = ctx.get("dataloader")
    workers = _num(dl.get("num_workers")) if isinstance(dl, Mapping) else None
    if (threads is None or threads < 2 or cpus is None or workers is None or workers < 1
            or workers > cpus or threads + workers <= cpus
            or (quota is not None and quota < cpus)
            or (others_cpus is not None and others_cpus >= OTHERS_CPUS)):
        return False
    share = cpu_wait_share(clock)
    return share is not None and share >= CPU_WAITS


def loader_metrics(ctx: Mapping[str, Any], clock: Mapping[str, Any] | None,
                   loader_starts: Any = None) -> dict[str, object]:
    """The clock's metrics the loader rules read (``dataloader_wait_steady_share``,
    ``dataloader_wait_unprofiled_share``, its median and most, ``dataloader_epoch_start_share``),
    computed by the analysis' own functions from the step clock, the epochs' starts
    (``loader_starts``: their workers), and the loader's settings and the CPUs in ``ctx``."""
    cap = {"step_clock": clock, "loader_starts": loader_starts}
    m = clock_metrics(cap)
    m["cpu_count"] = ctx.get("cpu_count")
    dl = ctx.get("dataloader")
    if isinstance(dl, Mapping):
        m.update(dataloader_num_workers=dl.get("num_workers"),
                 dataloader_persistent_workers=dl.get("persistent_workers"),
                 dataloader_epoch_batches=dl.get("len"))
    m.update(epoch_start_metrics(m))
    return m


#: the input rules, whose fixes the probes serve; a probe named here serves only these
#: (the threads split and the workers' oversubscription read the thread timings; the
#: batched fetch, its fetch timings); the others serve every input rule
INPUT_RULES = frozenset({"IN001", "IN002", "IN003", "IN004", "IN005", "IN006"})
#: CF010 (rules/config.toml) names the threads split too, whose workers' side reads the
#: workers' timings: it is served by every probe but the batched fetch's
SPLIT_RULE = "CF010"
SERVES = {"threads": frozenset({"IN001", "IN002", "IN004", "IN006", SPLIT_RULE}),
          # the fork's copies: the fixes that change the worker count
          "fork_copy": frozenset({"IN001", "IN002", "IN004", "IN006", SPLIT_RULE}),
          "fetches": frozenset({"IN001", "IN002"}),
          "work_after_fetch": frozenset({"IN001", "IN002"})}


def may_warn(m: Mapping[str, Any]) -> frozenset[str] | None:
    """The input rules that may be graded warning, from the clock's :func:`loader_metrics`
    ``m`` and the loader's settings in it (IN004: more workers than ``cpu_count``); None
    where the clock cannot tell (every one may)."""
    steady = _num(m.get("dataloader_wait_steady_share"))
    unprofiled = _num(m.get("dataloader_wait_unprofiled_share"))
    if unprofiled is None:
        return None
    out: set[str] = set()
    workers = _num(m.get("dataloader_num_workers")) or 0
    cpus = _num(m.get("cpu_count"))
    if cpus is not None and workers > cpus:
        out.add("IN004")
    if (steady >= STEADY_WARNS if steady is not None
            else unprofiled >= UNPROFILED_WARNS):  # the rules' own fallback
        out |= {"IN001", "IN002", "IN006"}
    most, median = _num(m.get("dataloader_wait_unprofiled_max_ms")), _num(
        m.get("dataloader_wait_unprofiled_ms"))
    if (workers >= 1 and unprofiled >= UNPROFILED_WARNS and (
            most is None or median is None or most >= BURST_WARNS * (median + 0.1))):
        out.add("IN003")  # a wait far past the others
    start = _num(m.get("dataloader_epoch_start_share"))
    if start is not None and start >= EPOCH_START_WARNS:
        out.add("IN005")
    return frozenset(out)


def _waited(m: Mapping[str, Any]) -> str:
    """What the loop waited on its loader, as the gate read it."""
    steady = _num(m.get("dataloader_wait_steady_share"))
    unprofiled = _num(m.get("dataloader_wait_unprofiled_share")) or 0.0
    start = _num(m.get("dataloader_epoch_start_share"))
    waited = (f"{steady:.1%} of the steps that began no epoch" if steady is not None
              else f"{unprofiled:.1%} of its steps")
    said = f"; an epoch's start took {start:.1%} of the step" if start is not None else ""
    return f"the loop waited on its DataLoader for {waited}{said}"


def unneeded(ctx: Mapping[str, Any], clock: Mapping[str, Any] | None,
             others_cpus: float | None = None, loader_starts: Any = None) -> dict[str, str]:
    """{probe: why no prediction needs it} (module doc): each probe none of whose rules
    (:data:`SERVES`) may be graded warning (:func:`may_warn`, and CF010 where
    :func:`workers_beside_threads`), but the thread timing where torch's threads were short
    of CPUs (:func:`threads_short`); none where the clock says nothing (every probe may be
    needed)."""
    if not isinstance(clock, Mapping):
        return {}
    m = loader_metrics(ctx, clock, loader_starts)
    can = may_warn(m)
    if can is None:
        return {}
    out: dict[str, str] = {}
    if workers_beside_threads(ctx, clock, others_cpus):
        can = can | {SPLIT_RULE}
    for probe in PROBES:
        serves = SERVES.get(probe, INPUT_RULES | {SPLIT_RULE})
        if serves & can:
            continue
        out[probe] = (f"{_waited(m)}: no finding these timings serve can be a warning "
                      "(an info finding's fixes are not predicted from them)" if not can else
                      f"{_waited(m)}: of the findings it serves ({', '.join(sorted(serves))}) "
                      f"none can be a warning; {', '.join(sorted(can))} can")
    if threads_short(ctx, clock, others_cpus):
        out.pop("threads", None)
    return out


@dataclass
class ProbeBudget:
    """The probes' time (s) from ``start`` (the probes' clock), and what they left out:
    ``skipped`` {probe: why}, ``cut`` (probes stopped by the budget's end)."""

    total_s: float
    start: float
    unneeded: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    cut: list[str] = field(default_factory=list)

    @classmethod
    def of_capture(cls, spent_ms: Mapping[str, Any] | None,
                   unneeded: dict[str, str] | None = None) -> ProbeBudget:
        """:data:`PROBE_SHARE` of the capture's wall time so far (since the probes' clock
        was opened: :func:`~.common.capture_elapsed_s`) less what probes have spent in it
        already (``spent_ms``: the capacity timing on enter). No clock open: no
        budget."""
        elapsed = common.capture_elapsed_s()
        spent = sum(v for v in (spent_ms or {}).values() if isinstance(v, int | float))
        total = float("inf") if elapsed is None else max(
            PROBE_SHARE * elapsed - spent / 1e3, 0.0)
        return cls(total, common._CLOCK(), dict(unneeded or {}))

    @property
    def end(self) -> float:
        return self.start + self.total_s

    def left_s(self) -> float:
        return self.end - common._CLOCK()

    def run(self, name: str, probe: Callable[[], R], again: bool = False) -> R | None:
        """``probe()`` where it is needed: its least rounds always, more rounds only while
        budget is left; a timing made ``again`` (seconds after one that ran) only while
        budget is left. Else None, and why goes to ``skipped``."""
        if name in self.unneeded:
            self.skipped.setdefault(name, self.unneeded[name])
            return None
        if again and self.left_s() <= 0:
            return None
        with common.until(self.end if self.total_s != float("inf") else None, least=True):
            got = probe()
            need = common.gave_up()
        if need is not None:
            self.skipped.setdefault(name, f"its least rounds (about {need * 1e3:.0f} ms) "
                                          "would overrun the probes' budget left")
        elif self.left_s() <= 0 and name not in self.cut:
            self.cut.append(name)
        return got

    def record(self) -> dict[str, Any]:
        """``context["probes"]``: the budget (ms, null: none), what was skipped and why,
        what ran into the budget's end."""
        finite = self.total_s != float("inf")
        return {"budget_ms": round(self.total_s * 1e3, 1) if finite else None,
                "share": PROBE_SHARE, "skipped": dict(self.skipped), "cut": list(self.cut)}
