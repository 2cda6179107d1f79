"""Who held the CPUs the training thread waited for while the clock timed its steps: other
processes, the run's own DataLoader workers, or its own thread pools beside torch's."""

from __future__ import annotations

from collections.abc import Mapping

#: CPUs' worth of work by processes other than the run's under which a run with DataLoader
#: workers is taken to have waited for a CPU its own processes held, not a busy machine
#: (between the other work seen beside runs whose workers oversubscribed the CPUs, well
#: under half a CPU, and beside a busy machine, a CPU or more)
OTHERS_BUSY_CPUS = 0.5


#: a wait for a CPU beyond what other processes explain (their CPUs over the CPUs: a
#: thread that wants a CPU all the time loses about that share to them), at least this
#: share of the steps' time, is the run's own pools' (CF007's threshold: 5%, the least
#: share a rule fires at on the step's time)
POOL_WAIT_BEYOND = 0.05


def others_during_clock(m: Mapping[str, object]) -> object:
    """Other processes' CPUs while the clock timed the steps whose CPU waits it read: as the
    clock measured them (``step_others_cpus_unprofiled``), else the host samples' (the
    window's: a capture made before the clock measured them)."""
    own = m.get("step_others_cpus_unprofiled")
    return own if isinstance(own, float) else m.get("host_cpu_others_cpus")


def workers_used(m: Mapping[str, object]) -> tuple[float | None, str]:
    """The DataLoader workers' CPUs over the steps the clock timed after the window, the
    steps whose CPU waits it read (``step_workers_cpus_unprofiled``), else the profiled
    window's (``workers_cpus``: where the profiler slows the loop, its workers idle), with
    the words for where that came from ("" for the unprofiled steps)."""
    clock = m.get("step_workers_cpus_unprofiled")
    if isinstance(clock, int | float) and not isinstance(clock, bool):
        return float(clock), ""
    window = m.get("workers_cpus")
    if isinstance(window, int | float) and not isinstance(window, bool):
        return float(window), " in the profiled window"
    return None, ""


def pool_clash(m: Mapping[str, object]) -> str | None:
    """Where the training process's own thread pools oversubscribe its CPUs: a pool that is
    not torch's (``thread_pool_beside_torch``, 2 threads or more) beside torch's threads,
    more threads than CPUs between them, while the DataLoader's workers leave torch its
    CPUs (workers that oversubscribe them are the likelier holders: IN004) and other
    processes took under :data:`OTHERS_BUSY_CPUS` over those same steps (the clock's own
    measure; the host samples cover another stretch), and the training thread's wait for a
    CPU exceeds what they explain by :data:`POOL_WAIT_BEYOND`: the words that say so; else
    None."""
    pool, n = m.get("thread_pool_beside_torch"), m.get("thread_pool_beside_torch_threads")
    torch_threads, cpus = m.get("torch_num_threads"), m.get("cpu_count")
    others = m.get("step_others_cpus_unprofiled")  # over the timed steps themselves
    workers, wait = m.get("dataloader_num_workers"), m.get("step_cpu_wait_unprofiled_share")
    if not (isinstance(n, int) and n >= 2 and isinstance(torch_threads, int)
            and isinstance(cpus, int) and n + torch_threads > cpus
            and (workers if isinstance(workers, int) else 0) + torch_threads <= cpus
            and isinstance(others, float) and others < OTHERS_BUSY_CPUS
            and isinstance(wait, float) and wait - others / cpus >= POOL_WAIT_BEYOND):
        return None
    return (f"the {pool} pool's {n} threads beside torch's {torch_threads} on {cpus} CPUs; "
            f"other processes took {others:.2f} CPUs")


def cpu_wait_holders(m: Mapping[str, object]) -> tuple[bool, str]:
    """Who held the CPUs the training thread waited for (``step_cpu_wait_unprofiled_share``):
    (whether the machine was busy with other work, the words that say who). A run with
    DataLoader workers beside less than :data:`OTHERS_BUSY_CPUS` of other processes' work
    (:func:`others_during_clock`) waited for its own processes: its workers and threads
    oversubscribe the CPUs, which is the run's doing, not the machine's; so did one whose
    own thread pools oversubscribe them (:func:`pool_clash`)."""
    others = others_during_clock(m)
    workers = m.get("workers_count") or m.get("dataloader_num_workers")
    used, where = workers_used(m)
    threads, cpus = m.get("torch_num_threads"), m.get("cpu_count")
    if (isinstance(others, float) and others < OTHERS_BUSY_CPUS and isinstance(workers, int)
            and workers > 0):
        if (isinstance(used, int | float) and isinstance(cpus, int) and cpus > 0
                and used / cpus < POOL_WAIT_BEYOND and isinstance(threads, int)
                and threads >= cpus):
            # idle workers explain no wait; torch's threads on every CPU wait for any other
            return False, (f"this run's own threads held: torch's {threads} threads fill the "
                           f"{cpus} CPUs, so the least other work keeps one of them waiting "
                           f"(here its {workers} DataLoader workers' {used:.2f} CPUs{where} "
                           f"and other processes' {others:.2f})")
        return False, (f"this run's own processes held (its {workers} DataLoader workers "
                       f"beside it; other processes took {others:.2f} CPUs)")
    pool = pool_clash(m)
    if pool is not None:
        return False, f"this run's own threads held ({pool})"
    ranks, here = m.get("world_size"), m.get("step_others_leave_out_ranks")
    if isinstance(here, int) and here >= 2:  # the other processes leave out the job's ranks
        if isinstance(others, float) and others < OTHERS_BUSY_CPUS:
            return False, (f"this job's own processes held (its {here} ranks on this host "
                           f"and their workers; other processes took {others:.2f} CPUs)")
    elif isinstance(ranks, int) and ranks >= 2:  # a capture that counted its rank alone
        return True, "other processes held (this job's other ranks on this host among them)"
    return True, "other processes held"
