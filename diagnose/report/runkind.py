"""What kind of run a report is of, in the words every view uses for it.

A run captured on the CPU (``model_device`` "cpu", no GPU activity) is a CPU run: its views
say CPU, not "the trace has no GPU activity" (a saved trace without device work keeps that
wording: its job may have had a GPU the trace did not record). A run folder without a trace
(the run ended before the profiled window) says so, rather than what "the trace" lacks.
A CPU run's notes leave out that GPU sampling was not available.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..metrics.declare import GPU

if TYPE_CHECKING:
    from ..result import Analysis
    from ..rules.engine import NotEvaluated

#: the device row of a run captured on the CPU
CPU_DEVICE = "CPU (the run used no GPU)"
#: the device row of a trace without device activity
NO_GPU_IN_TRACE = "no GPU activity in the trace"
#: the same where the trace holds events no metric reads (an accelerator's, say)
UNREAD_GPU = "no GPU activity that this analysis reads"
#: why GPU rules were not evaluated on a CPU run
CPU_CAUSE = "a CPU run: there is no GPU to measure"
#: why trace rules were not evaluated on a run without a trace
NO_TRACE_CAUSE = "no trace: no step was profiled (the report's notes say why)"


def cpu_run(m: Mapping[str, Any]) -> bool:
    """A live capture whose model ran on the CPU and whose trace shows no GPU activity."""
    device = m.get("model_device")
    return (isinstance(device, str) and device.split(":")[0] == "cpu"
            and m.get("has_gpu") is not True)


def _unread(m: Mapping[str, Any]) -> int:
    """Events of categories no metric reads (another accelerator's, say); 0 where none."""
    n = m.get("trace_unread_events")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def device_line(m: Mapping[str, Any]) -> str | None:
    """The summary's device row: the GPU's name, the CPU for a CPU run, "no GPU activity
    in the trace" for a trace without any; None where nothing is known."""
    if m.get("device_name"):
        return str(m["device_name"])
    if cpu_run(m):
        return CPU_DEVICE
    if m.get("has_gpu") is False:
        if _unread(m):  # another accelerator's, say: the note names them
            return f"{UNREAD_GPU} ({_unread(m):,} events of categories it does not read: see the note)"
        return NO_GPU_IN_TRACE
    return None


def traced(report: Analysis) -> bool:
    """The report analysed at least one trace."""
    return bool(report.ranks)


def fit_not_evaluated(report: Analysis) -> list[NotEvaluated]:
    """The report's rules not evaluated, their causes (and reasons) in the run's words: a
    run without a trace says so for every cause about the trace; a CPU run says it had no
    GPU where the cause is the trace's missing GPU activity."""
    no_trace, cpu = not traced(report), cpu_run(report.metrics)
    out = []
    for n in report.not_evaluated:
        new = n.cause
        if no_trace and "trace" in n.cause:
            new = NO_TRACE_CAUSE
        elif cpu and n.cause == GPU.missing:
            new = CPU_CAUSE
        elif n.cause == GPU.missing and _unread(report.metrics):
            new = f"{UNREAD_GPU} (see the note)"
        if new == n.cause:
            out.append(n)
        else:
            reason = n.reason.replace(n.cause, new) if n.cause in n.reason else new
            out.append(dataclasses.replace(n, reason=reason, cause=new))
    return out


def fit_notes(report: Analysis) -> list[str]:
    """The report's notes less, on a CPU run, the one that GPU sampling was not available
    (there was no GPU to sample)."""
    if not cpu_run(report.metrics):
        return list(report.notes)
    unavailable = (report.samples or {}).get("unavailable")
    reason = unavailable.get("gpu") if isinstance(unavailable, dict) else None
    if reason is None:
        return list(report.notes)
    return [n for n in report.notes if n != f"GPU sampling not available: {reason}"]


__all__ = ["CPU_CAUSE", "CPU_DEVICE", "NO_GPU_IN_TRACE", "NO_TRACE_CAUSE", "UNREAD_GPU", "cpu_run",
           "device_line", "fit_not_evaluated", "fit_notes", "traced"]
