"""The probes' time budget: a share of the capture's wall time so far, spent in order of
what the predictions need.

Every probe after the loop serves the fixes of the input rules (``rules/input.toml``, and
IN004 in ``rules/config.toml``): the workers', the threads split's, the batched fetch's. A
loop that waited on its DataLoader for under :data:`LOADER_WAITED` of its steps, with no
more workers than CPUs, fires none of them, and nothing is timed (:func:`unneeded`), but
for the thread timing where torch's threads outnumbered the CPUs other processes left
(:func:`threads_short`: CF008's fix, torch's own thread count).
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

from . import common

R = TypeVar("R")

#: the probes' time, at most this share of the capture's wall time so far (enter to the
#: loop's end: the steps on and off the profiler, the capacity timing on enter included):
#: issue 48, "keep all the probes under 5% of the capture's wall time"; of the time so far,
#: so that neither the probes nor the analysis after them can raise it
PROBE_SHARE = 0.05
#: a loop that waits on its DataLoader for less than this share of its steps (the clock's
#: ``dataloader_ms`` over its ``ms``) fires no input rule: the least share one fires at is
#: 3% (IN003), and the profiled window's share may lie a little above the clock's
LOADER_WAITED = 0.02

#: the training thread waited, runnable, for a CPU in at least this share of the loop's
#: timed steps (the clock's ``cpu_wait_ms`` over its ``ms``): the least CF008 fires at
CPU_WAITED = 0.05
#: other processes held at least this many CPUs over the steps after the window: less is a
#: burst a thread's wait need not come from (CF008's own bound)
OTHERS_CPUS = 0.5

#: the probes after the loop, by the names they state their time under (``probes_ms``)
PROBES = ("workers_idle", "fetches", "work_after_fetch", "batches_in_turn", "inprocess_batch",
          "cpu_capacity", "worker_handover", "threads", "threads_busy", "worker_send",
          "worker_batches")


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


def loader_share(clock: Mapping[str, Any] | None) -> float | None:
    """The share of the loop's timed steps spent waiting on the DataLoader (the step
    clock's ``dataloader_ms`` over its ``ms``, every phase); None where it holds none."""
    return _share(clock, "dataloader_ms", unprofiled=False)


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


def unneeded(ctx: Mapping[str, Any], clock: Mapping[str, Any] | None,
             others_cpus: float | None = None) -> dict[str, str]:
    """{probe: why no prediction needs it} (module doc): every probe where the loop
    waited on its DataLoader for under :data:`LOADER_WAITED` of its steps and has no more
    workers than CPUs, but the thread timing where torch's threads were short of CPUs
    (:func:`threads_short`); none where the clock says nothing (every probe may be
    needed)."""
    share = loader_share(clock)
    dl = ctx.get("dataloader")
    workers = _num(dl.get("num_workers")) if isinstance(dl, Mapping) else None
    cpus = _num(ctx.get("cpu_count"))
    if share is None or share >= LOADER_WAITED or (
            workers is not None and cpus is not None and workers > cpus):
        return {}
    why = (f"the loop waited on its DataLoader for {share:.1%} of its steps: no input rule "
           "fires, no fix needs it")
    out = dict.fromkeys(PROBES, why)
    if threads_short(ctx, clock, others_cpus):
        del out["threads"]
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
