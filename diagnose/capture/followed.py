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
        self.gone_s = 0.0

    def _left(self, pid: int) -> None:
        self._procs.pop(pid, None)
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
                    self._used[pid] = cpu_s(proc)
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
    job's own CPU, not other processes'. Counted tick to tick: what this process's
    children times grew by (those it reaped) less the CPU the followed workers that left
    had used, and what each live descendant (listed again once a second) used since its
    last reading; one that left is taken off at its last reading, its whole time coming
    back in the children times once it is reaped. A descendant first seen is counted from
    its start where it started after this one, else from its first reading."""

    def __init__(self, psutil: Any, proc: Any) -> None:
        self._psutil, self._proc = psutil, proc
        self._pids: list[int] = []
        self._listed = 0.0
        self._seen: dict[int, float] = {}  # pid -> CPU s at its last reading
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process
        self._owed = 0.0
        self._reaped, self._gone = self._own_children_s(0.0), 0.0
        self._since = time.time()
        self._at = time.monotonic()

    def _own_children_s(self, last: float) -> float:
        try:
            t = self._proc.cpu_times()
        except self._psutil.Error:
            return last
        return t.children_user + t.children_system

    def sample(self, workers: Followed) -> float:
        """Their CPU % of one core since the last tick (``workers``: the DataLoader
        workers followed, left out); never below 0."""
        psutil, now = self._psutil, time.monotonic()
        if now - self._listed >= 1.0:
            self._listed = now
            mine = workers.pids
            try:
                self._pids = [c.pid for c in self._proc.children(recursive=True)
                              if c.pid not in mine]
            except psutil.Error:
                self._pids = []
        reaped = self._own_children_s(self._reaped)
        took = (reaped - self._reaped) - (workers.gone_s - self._gone)
        self._reaped, self._gone = reaped, workers.gone_s
        seen: dict[int, float] = {}
        for pid in self._pids:
            try:
                proc = self._procs.get(pid) or psutil.Process(pid)
                with proc.oneshot():
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    used = cpu_s(proc)
                    if pid in self._seen:
                        took += used - self._seen[pid]
                    elif proc.create_time() >= self._since:
                        took += used
                seen[pid], self._procs[pid] = used, proc
            except psutil.Error:
                continue
        took -= sum(v for p, v in self._seen.items() if p not in seen)
        self._seen = seen
        self._procs = {p: self._procs[p] for p in seen}
        # a descendant gone but not yet reaped is taken off before its time comes back:
        # what goes below 0 is carried to the ticks after, so that the sum holds
        took, self._owed = took + self._owed, 0.0
        if took < 0:
            took, self._owed = 0.0, took
        wall, self._at = now - self._at, now
        return round(100.0 * took / wall, 2) if wall > 0 else 0.0


def peer_pids(me: Any, root: Any, psutil: Any) -> list[int]:
    """The job's processes on this host that are neither ``me`` nor its descendants:
    ``root`` (torchrun's agent) and its descendants (the other ranks, their workers)."""
    try:
        mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
        return [p for p in (root.pid, *(c.pid for c in root.children(recursive=True)))
                if p not in mine]
    except psutil.Error:
        return []
