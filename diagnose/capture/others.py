"""What other processes took of the usable CPUs between two moments: the CPUs' busy time
(``/proc/stat``) less the run's own (this process, its descendants, its reaped workers).
The step clock snapshots it as the steps after the window begin and end: the host samples
cover the profiled window only, and the training thread's waits for a CPU are those steps'.
"""

from __future__ import annotations

import contextlib
import os
import time

from .samplers import parse_proc_stat, usable_cpus


def cpu_snapshot() -> tuple[float, float, float] | None:
    """(wall s, the usable CPUs' busy s, this process's CPU s with its descendants') now:
    busy is a CPU's time less idle, iowait and steal (/proc/stat); this process's own
    counts its reaped children (DataLoader workers an epoch's end joined) and its live
    descendants. Two snapshots give what other processes took in between
    (:func:`others_cpus`). None where /proc/stat or psutil cannot say."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        with open("/proc/stat", "rb") as f:
            per = parse_proc_stat(f.read())
        tick = os.sysconf("SC_CLK_TCK")
        busy = sum(per[c][0] - per[c][1] - per[c][3] for c in usable_cpus() if c in per)
        me = psutil.Process()
        own = sum(me.cpu_times()[:4])  # user, system, children_user, children_system
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                own += sum(child.cpu_times()[:2])
        return time.time(), busy / tick, own
    except (OSError, ValueError, psutil.Error):
        return None


def others_cpus(start: tuple[float, float, float] | None,
                end: tuple[float, float, float] | None) -> float | None:
    """Other processes' mean CPUs between two :func:`cpu_snapshot` s (the usable CPUs' busy
    time less this process's and its descendants'); None without both or a wall time."""
    if start is None or end is None or end[0] - start[0] <= 0:
        return None
    return max(0.0, ((end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0]))
