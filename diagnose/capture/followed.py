"""Other processes of the job a host sampler follows tick by tick: its DataLoader workers,
and under torchrun the other ranks on this host with theirs (the elastic agent's tree
less this process's own: :func:`peer_pids`). Each is read through a psutil ``Process``
kept from tick to tick, whose first CPU reading is only the baseline of the next."""

from __future__ import annotations

import os
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
    """A set of processes whose CPU and memory are summed each tick."""

    def __init__(self, psutil: Any) -> None:
        self._psutil = psutil
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process (cpu_percent primed)

    def sample(self, pids: Iterable[int]) -> tuple[int, float | None, int, int]:
        """(live processes, summed CPU % of those read twice, how many those are, summed
        RSS) of ``pids``; the ones gone since the last tick are dropped."""
        psutil = self._psutil
        want = set(pids)
        for gone in [p for p in self._procs if p not in want]:
            del self._procs[gone]
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
                        self._procs.pop(pid, None)
                        continue
                    cpu = proc.cpu_percent(None)
                    rss = int(proc.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._procs.pop(pid, None)
                continue
            count += 1
            rss_sum += rss
            if primed:  # a first reading is only the baseline
                cpu_sum = (cpu_sum or 0.0) + cpu
                n_cpu += 1
        return count, (round(cpu_sum, 2) if cpu_sum is not None else None), n_cpu, rss_sum


def peer_pids(me: Any, root: Any, psutil: Any) -> list[int]:
    """The job's processes on this host that are neither ``me`` nor its descendants:
    ``root`` (torchrun's agent) and its descendants (the other ranks, their workers)."""
    try:
        mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
        return [p for p in (root.pid, *(c.pid for c in root.children(recursive=True)))
                if p not in mine]
    except psutil.Error:
        return []
