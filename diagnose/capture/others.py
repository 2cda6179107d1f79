"""What other processes took of the usable CPUs between two moments: the CPUs' busy time
(``/proc/stat``) less the run's own (this process, its descendants, its reaped workers;
under torchrun, every rank on this host with theirs: :func:`local_ranks`). The step clock
snapshots it as the steps after the window begin and end: the host samples cover the
profiled window only, and the training thread's waits for a CPU are those steps'. The
same snapshots give the run's DataLoader workers' CPUs over those steps. And the calling
thread's own wait, runnable, for a CPU others held (:func:`cpu_wait_ns`, Linux schedstat).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

from .followed import local_ranks
from .samplers import parse_proc_stat, usable_cpus


def _job_root(psutil: Any) -> Any:
    """The root of the job's own processes on this host: torchrun's agent where it
    started :func:`local_ranks` ranks (the other ranks and their workers are the job's,
    not other processes), else this process."""
    me = psutil.Process()
    if local_ranks() >= 2:
        with contextlib.suppress(psutil.Error):
            parent = me.parent()
            if parent is not None:
                return parent
    return me


def _descendants_cpu(proc: Any, psutil: Any) -> float:
    """The CPU s of ``proc``'s live descendants, each with its reaped children (one that
    ends while read counts nothing)."""
    total = 0.0
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:4])
    return total


def cpu_snapshot() -> tuple[float, float, float, float] | None:
    """(wall s, the usable CPUs' busy s, the job's own CPU s, this process's descendants'
    CPU s) now: busy is a CPU's time less idle, iowait and steal (/proc/stat); the job's
    own is its root's (:func:`_job_root`) and its live descendants', each with its reaped
    children (DataLoader workers an epoch's end joined); the descendants' are this
    process's live and reaped children's alone (its DataLoader workers). Two snapshots give
    what other processes took in between (:func:`others_cpus`) and what the workers did
    (:func:`children_cpus`). None where /proc/stat or psutil cannot say."""
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
        root = _job_root(psutil)
        times = root.cpu_times()  # user, system, children_user, children_system
        live = _descendants_cpu(root, psutil)
        own = sum(times[:4]) + live
        if root.pid == me.pid:  # the job's root: its descendants are this process's
            kids = sum(times[2:4]) + live  # reaped children, then the live ones
        else:
            kids = sum(me.cpu_times()[2:4]) + _descendants_cpu(me, psutil)
        return time.time(), busy / tick, own, kids
    except (OSError, ValueError, psutil.Error):
        return None


def others_cpus(start: tuple[float, ...] | None,
                end: tuple[float, ...] | None) -> float | None:
    """Other processes' mean CPUs between two :func:`cpu_snapshot` s (the usable CPUs' busy
    time less this process's and its descendants'); None without both or a wall time."""
    if start is None or end is None or end[0] - start[0] <= 0:
        return None
    return max(0.0, ((end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0]))


def children_cpus(start: tuple[float, ...] | None,
                  end: tuple[float, ...] | None) -> float | None:
    """This process's descendants' mean CPUs (its DataLoader workers') between two
    :func:`cpu_snapshot` s; None without both (with their descendants' time) or a wall
    time."""
    if (start is None or end is None or len(start) < 4 or len(end) < 4
            or end[0] - start[0] <= 0):
        return None
    return max(0.0, (end[3] - start[3]) / (end[0] - start[0]))


def cpus_since(start: tuple[float, ...] | None) -> tuple[float | None, float | None]:
    """(:func:`others_cpus`, :func:`children_cpus`) from ``start`` to a snapshot now."""
    now = cpu_snapshot()
    return others_cpus(start, now), children_cpus(start, now)


_SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: this thread's CPU time, run-queue wait


class _Stat:
    """This thread's schedstat file, kept open (a read at offset 0 gives fresh figures;
    opening it each time costs several times the read); closed with the thread's storage."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.fd = os.open(_SCHEDSTAT, os.O_RDONLY)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


_local = threading.local()


def cpu_wait_ns() -> int | None:
    """Nanoseconds the calling thread has waited, runnable, for a CPU others held (the
    kernel's schedstat); None where the kernel does not say."""
    try:
        st = getattr(_local, "stat", None)
        if st is None or st.pid != os.getpid():  # a forked child reads its own thread
            st = _local.stat = _Stat()
        return int(os.pread(st.fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError, AttributeError):
        return None
