"""Other processes of the job a host sampler follows tick by tick: its DataLoader workers,
and under torchrun the other ranks on this host with theirs (the elastic agent's tree
less this process's own: :func:`peer_pids`). Each is read through a psutil ``Process``
kept from tick to tick, whose first CPU reading is only the baseline of the next."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any


def local_ranks() -> int:
    """How many of the job's ranks run on this host as one process tree: torchrun's
    (``TORCHELASTIC_RUN_ID`` set) ``LOCAL_WORLD_SIZE``, whose elastic agent, this process's
    parent, started each of them; 1 otherwise (this process's own tree is the job's)."""
    try:
        n = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return 1
    return n if n >= 2 and os.environ.get("TORCHELASTIC_RUN_ID") else 1


class Followed:
    """A set of processes whose CPU and memory are summed each tick; ``gone_s``: the CPU
    seconds each had used (its reaped children's included) when last read, summed over
    those gone or no longer followed (a child reaped adds its time to this process's
    children times, which :class:`Descendants` reads less this)."""

    def __init__(self, psutil: Any) -> None:
        self._psutil = psutil
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process (cpu_percent primed)
        self._used: dict[int, float] = {}  # pid -> its CPU s when last read
        self._reaped: dict[int, float] = {}  # pid -> its reaped children's CPU s, then
        self.gone_s = 0.0
        #: what the followed processes' own reaped children used while followed (CPU s)
        self.reaped_s = 0.0

    def _left(self, pid: int) -> None:
        self._procs.pop(pid, None)
        self._reaped.pop(pid, None)
        self.gone_s += self._used.pop(pid, 0.0)

    @property
    def pids(self) -> set[int]:
        """The processes followed now."""
        return set(self._procs)

    def sample(self, pids: Iterable[int]) -> tuple[int, float | None, int, int]:
        """(live processes, summed CPU % of those read twice, how many those are, summed
        RSS) of ``pids``; the ones gone since the last tick are dropped."""
        psutil = self._psutil
        want = set(pids)
        for gone in [p for p in {*self._procs, *self._used} if p not in want]:
            self._left(gone)
        count = n_cpu = 0
        cpu_sum: float | None = None
        rss_sum = 0
        for pid in want:
            proc = self._procs.get(pid)
            primed = proc is not None
            try:
                if proc is None:
                    proc = psutil.Process(pid)
                    self._procs[pid] = proc
                with proc.oneshot():
                    if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                        self._left(pid)
                        continue
                    cpu = proc.cpu_percent(None)
                    rss = int(proc.memory_info().rss)
                    t = proc.cpu_times()
                    kids = t.children_user + t.children_system
                    self._used[pid] = t.user + t.system + kids  # as cpu_s() reads it
                    self.reaped_s += kids - self._reaped.get(pid, kids)
                    self._reaped[pid] = kids
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._left(pid)
                continue
            count += 1
            rss_sum += rss
            if primed:  # a first reading is only the baseline
                cpu_sum = (cpu_sum or 0.0) + cpu
                n_cpu += 1
        return count, (round(cpu_sum, 2) if cpu_sum is not None else None), n_cpu, rss_sum


def cpu_s(proc: Any) -> float:
    """A process's CPU seconds, user and system, its reaped children's included."""
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class Descendants:
    """This process's descendants other than its DataLoader workers: ``torch.compile``'s
    compile workers and the short processes its checks start, a tool the loop runs. The
    job's own CPU, not other processes'. Read once a second (the counts are cumulative, and
    a read costs a few µs a descendant), its rate held for the ticks between: what this
    process's children times grew by (those it reaped) less what the followed workers
    that left had used when last read, what the workers' own reaped children used, and
    what each live descendant used since its last reading; one that left is taken off at
    its last reading, its whole time coming back in a parent's children times once it is
    reaped (what goes below 0 meanwhile is carried); one that became a followed worker
    keeps what it used so far. A descendant first seen is counted from its start where it
    started after this one, else from its first reading."""

    def __init__(self, psutil: Any, proc: Any) -> None:
        self._psutil, self._proc = psutil, proc
        self._seen: dict[int, tuple[Any, float]] = {}  # pid -> (Process, CPU s then)
        self._owed = 0.0
        self._reaped, self._gone, self._workers_reaped = self._own_children_s(0.0), 0.0, 0.0
        # psutil's start times count from the boot time in whole seconds: a process
        # started after this one may read up to a second early
        self._since = time.time() - 1.0
        self._at = time.monotonic()
        self.pct = 0.0

    def _own_children_s(self, last: float) -> float:
        try:
            t = self._proc.cpu_times()
        except self._psutil.Error:
            return last
        return t.children_user + t.children_system

    def sample(self, workers: Followed) -> float:
        """Their CPU % of one core over the last second read (``workers``: the
        DataLoader workers followed, left out); never below 0."""
        psutil, now = self._psutil, time.monotonic()
        if now - self._at < 1.0:
            return self.pct
        reaped = self._own_children_s(self._reaped)
        took = ((reaped - self._reaped) - (workers.gone_s - self._gone)
                + (workers.reaped_s - self._workers_reaped))
        self._reaped, self._gone, self._workers_reaped = (reaped, workers.gone_s,
                                                          workers.reaped_s)
        seen: dict[int, tuple[Any, float]] = {}
        mine = workers.pids
        try:
            listed = [c for c in self._proc.children(recursive=True) if c.pid not in mine]
        except psutil.Error:
            listed = []
        for child in listed:
            proc, last = self._seen.get(child.pid, (child, None))
            try:
                with proc.oneshot():
                    if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                        continue  # gone (a pid taken again: is_running checks its start)
                    used = cpu_s(proc)
                    if last is not None:
                        took += used - last
                    elif proc.create_time() >= self._since:
                        took += used
                seen[child.pid] = (proc, used)
            except psutil.Error:
                continue
        # gone: taken off at its last reading; become a followed worker (its pid learnt
        # late): its time so far stays here, the worker's own is counted from now on
        took -= sum(v for p, (_, v) in self._seen.items() if p not in seen and p not in mine)
        self._seen = seen
        took, self._owed = took + self._owed, 0.0
        if took < 0:
            took, self._owed = 0.0, took
        wall, self._at = now - self._at, now
        self.pct = round(100.0 * took / wall, 2) if wall > 0 else 0.0
        return self.pct


def peer_pids(me: Any, root: Any, psutil: Any) -> list[int]:
    """The job's processes on this host that are neither ``me`` nor its descendants:
    ``root`` (torchrun's agent) and its descendants (the other ranks, their workers)."""
    try:
        mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
        return [p for p in (root.pid, *(c.pid for c in root.children(recursive=True)))
                if p not in mine]
    except psutil.Error:
        return []
