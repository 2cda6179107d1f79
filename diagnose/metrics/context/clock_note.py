"""What the report says of the session's step clock: when its step time cannot be trusted
(too few steps, a wide spread, a busy machine, the collector's pauses) and how to get a
better one, and when the machine's load moved between the profiled window and the steps
timed after it. Reads the metrics of :mod:`.step_clock`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .cpu_holders import OTHERS_BUSY_CPUS, cpu_wait_holders
from .step_clock import ENOUGH_STEPS, MIN_CLOCK_STEPS, MIN_OVERHEAD_RATIO, UNRELIABLE_SPREAD

#: from this share of the timed steps waiting for a CPU other processes held, a steady
#: step time is still said to be the busy machine's (the share from which a change of CPU
#: work gets no number: diagnose.fixes.findings.BUSY)
BUSY_NOTE = 0.10


def _busy_note(m: Mapping[str, object], rank: int | None) -> str | None:
    """A step time the clock found steady, timed while other processes held the CPUs the
    training thread waited for in :data:`BUSY_NOTE` or more of the steps: the words that
    say so (the step and the profiler's cost read high); else None."""
    busy = m.get("step_cpu_wait_unprofiled_share")
    if not isinstance(busy, float) or busy < BUSY_NOTE:
        return None
    elsewhere, holders = cpu_wait_holders(m)
    if not elsewhere:
        return None
    whose = "the" if rank is None else f"rank {rank}'s"
    return (f"{whose} steps were timed on a busy machine: the training thread waited "
            f"{busy:.0%} of them for a CPU {holders}; the step time and the profiler's "
            "overhead are this moment's and read high: capture again when it is quieter")


def load_shift_note(m: Mapping[str, object]) -> str | None:
    """Where other processes' work moved by :data:`OTHERS_BUSY_CPUS` or more between the
    profiled window (the host samples) and the steps timed after it (the clock's own
    measure): the words that say the two were timed under different loads; else None."""
    window, after = m.get("host_cpu_others_cpus"), m.get("step_others_cpus_unprofiled")
    if not (isinstance(window, float) and isinstance(after, float)
            and abs(window - after) >= OTHERS_BUSY_CPUS):
        return None
    return (f"the machine's load changed during the capture: other processes took "
            f"{window:.2f} CPUs while the window was profiled and {after:.2f} while the "
            "steps after it were timed, so the profiled steps and the step time without the "
            "profiler come from different loads: capture again when it is steady")


def _options(m: Mapping[str, object]) -> str:
    """Where the capture's options go: ``diagnose(...``, or a trainer's callback."""
    return ("DiagnoseCallback(..., " if m.get("run_trainer") in ("transformers", "lightning")
            else "diagnose(..., ")


def _ms(x: object) -> str:  # a step time as the report's step line prints it
    return f"{x:,.2f} ms" if isinstance(x, int | float) else "n/a ms"


def clock_note(m: dict[str, object], rank: int | None = None) -> str | None:
    """What the report says when the unprofiled step time cannot be trusted, and how to get
    a better one (None when it can, or when there is none). ``rank``: the steps are that
    rank's own (under torch.distributed the report's headline is over every rank)."""
    if m.get("step_time_unprofiled_reliable") is not False:
        return _busy_note(m, rank)
    n, spread = m.get("step_time_unprofiled_steps"), m.get("step_time_unprofiled_spread")
    why = []
    if isinstance(n, int) and n < MIN_CLOCK_STEPS:
        why.append(f"only {n} step{'s' if n != 1 else ''} were timed")
    if isinstance(spread, float) and spread > UNRELIABLE_SPREAD:
        who = "they" if why else "the steps timed"
        why.append(f"{who} vary widely (p10 {_ms(m.get('step_time_unprofiled_p10_ms'))}, p90 "
                   f"{_ms(m.get('step_time_unprofiled_p90_ms'))}, median "
                   f"{_ms(m.get('step_time_unprofiled_median_ms'))})")
    prof, free = m.get("step_time_profiled_clock_median_ms"), m.get(
        "step_time_unprofiled_median_ms")
    if isinstance(prof, float) and isinstance(free, float) and free > 0 and (
            prof / free < MIN_OVERHEAD_RATIO):
        few = isinstance(n, int) and n < MIN_CLOCK_STEPS
        # a few steps are early ones (warm-up, first batches): they say nothing of the host
        why.append(f"the profiled steps came out faster ({_ms(prof)} against {_ms(free)}), " + (
            "as a few early steps can" if few else
            "which a profiler cannot do: something else changed the pace"))
    extra, extra_ms = m.get("step_extra_calls_steps"), m.get("step_extra_calls_ms")
    if isinstance(extra, int) and extra > 0 and isinstance(extra_ms, float) and isinstance(
            free, float) and extra_ms >= UNRELIABLE_SPREAD * free:
        why.append(f"{extra} of them called the model more often than the others (an "
                   f"evaluation every few steps?) and took {extra_ms:.0f} ms longer")
    gc_share, gc_max = m.get("gc_pause_share"), m.get("gc_pause_max_ms")
    if isinstance(gc_share, float) and gc_share >= 0.03 and isinstance(gc_max, float):
        why.append(f"Python's garbage collector paused some of them (up to {gc_max:.0f} ms in "
                   "one step; see CF006)")
    busy = m.get("step_cpu_wait_unprofiled_share")
    # a busy machine is named where the training thread waited for a CPU, or where the
    # clock could not tell (no schedstat)
    elsewhere = not isinstance(busy, float)
    if isinstance(busy, float) and busy >= 0.05:
        elsewhere, holders = cpu_wait_holders(m)
        why.append(("the machine was busy: " if elsewhere else "")
                   + f"the training thread waited {busy:.0%} of these steps for a CPU "
                   + holders)
    # more steps than were timed (at least 30, else twice as many, in tens) where fewer than
    # ENOUGH_STEPS were: beyond that more steps steady the median but leave the spread
    # that made the figure unreliable as it is
    few = not isinstance(n, int) or n < ENOUGH_STEPS
    more = 30 if not isinstance(n, int) or n < 15 else -(-2 * n // 10) * 10
    ask = [f"time more steps ({_options(m)}clock_steps={more}))"] if few else []
    ask += ["run when the machine is less busy"] if elsewhere else []
    whose = "the" if rank is None else f"rank {rank}'s"
    return (f"{whose} step time without the profiler is unreliable: "
            + "; ".join(why or ["noisy"])
            + (f". For a better figure, {' or '.join(ask)}" if ask else "")
            + ("" if few else f"; more steps than the {n} timed would steady the median, "
               "not narrow their spread")
            + "; the profiler's overhead is not stated")
