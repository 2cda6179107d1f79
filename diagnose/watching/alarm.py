"""What the watch tells: an :class:`Alarm` (a sustained change of a signal, or a spike),
with the capture taken for it and what changed against the baseline window.

Signals: ``step_time`` (ms), ``loader_wait`` (ms a step), ``gpu_util`` (%), ``memory``
(GPU memory used, bytes), ``energy`` (J/step), ``rank`` (a straggler: its step time against
the other ranks' median, ms). ``kind`` is ``change`` (in :attr:`Watch.alarms`) or
``spike`` (one slow step, in :attr:`Watch.spikes`: never an alarm) or ``shift`` (a change
for the better, or back to the reference level, in :attr:`Watch.shifts`: never an alarm).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SIGNALS", "Alarm", "alarm_lines"]

#: each signal's unit
SIGNALS = {"step_time": "ms", "loader_wait": "ms", "gpu_util": "%", "memory": "bytes",
           "energy": "J/step", "rank": "ms"}


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "?"
    if unit == "bytes":
        return f"{v / 2**30:.2f} GiB"
    if unit == "%":
        return f"{v:.0f}%"
    return f"{v:.4g} {unit}"


@dataclass
class Alarm:
    """A change detected at ``step`` (it began about ``start``): ``signal`` went from
    ``before`` to ``after`` (in ``unit``). ``capture`` is the diagnosis Report of the
    profiled window taken for it, or None with ``capture_why`` (``"pending"`` while its
    analysis runs); ``changed`` leads with what differs from the baseline window;
    ``host_line`` says what the machine did around it (filled a few seconds after)."""

    step: int
    signal: str
    kind: str
    before: float | None
    after: float | None
    unit: str
    t: float
    start: int | None = None
    rank: int | None = None  # the rank it is about: the straggler, or this rank
    capture: Any = None
    capture_why: str | None = None
    capture_dir: str | None = None
    changed: list[str] = field(default_factory=list)
    comparison: dict[str, Any] | None = None
    host: dict[str, Any] | None = None  # the machine around it (diagnose.watching.host)
    host_line: str | None = None
    neighbours: bool = False  # the machine explains it as its neighbours' (host.neighbours)
    passed: bool = False  # its window found the pace back: the change did not last

    @property
    def ratio(self) -> float | None:
        b, a = self.before, self.after
        return a / b if a is not None and b else None

    def line(self) -> str:
        """``step 1,234: step_time 12.1 ms -> 15.0 ms (x1.24)`` (and the rank)."""
        who = f" (rank {self.rank})" if self.rank is not None and self.signal == "rank" else ""
        r = self.ratio
        times = f" (x{r:.2f})" if r is not None and self.unit != "%" else ""
        return (f"step {self.step:,}: {self.signal}{who} {_fmt(self.before, self.unit)} -> "
                f"{_fmt(self.after, self.unit)}{times}")

    def capture_json(self) -> dict[str, Any] | None:
        """The capture's headline: where, its step time, its findings (rule, category,
        severity, title, message)."""
        rep = self.capture
        if rep is None:
            return None
        return {"dir": self.capture_dir, "step_time": rep.step_time(),
                "findings": [{k: getattr(f, k) for k in ("rule", "category", "severity",
                                                          "title", "message")}
                             for f in rep.findings]}

    def __str__(self) -> str:
        """What the watch's summary says of it (:func:`alarm_lines`): the change, the
        machine around it, its capture and what changed; not the capture's whole report."""
        return "\n".join(alarm_lines(self.to_json()))

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "start": self.start, "signal": self.signal,
                "kind": self.kind, "before": self.before, "after": self.after,
                "unit": self.unit, "ratio": None if self.ratio is None else round(self.ratio, 4),
                "t": self.t, "rank": self.rank, "capture": self.capture_json(),
                "capture_why": self.capture_why, "capture_dir": self.capture_dir,
                "changed": list(self.changed), "comparison": self.comparison,
                "host": self.host, "host_line": self.host_line,
                "neighbours": self.neighbours, "passed": self.passed}


def alarm_lines(a: dict[str, Any], same_capture: bool = False) -> list[str]:
    """An alarm (its JSON, :meth:`Alarm.to_json`) as the summary prints it: the change,
    then, indented, what the machine did, its capture (or why none), and up to six lines of
    what changed against the baseline. ``same_capture``: the alarm before it at this step
    was the same capture's, said once: only the change, and that."""
    who = f" (rank {a['rank']})" if a["signal"] == "rank" and a.get("rank") is not None else ""
    ratio = f" (x{a['ratio']:.2f})" if a.get("ratio") and a["unit"] != "%" else ""
    head = (f"step {a['step']:,}: {a['signal']}{who} {_fmt(a['before'], a['unit'])} -> "
            f"{_fmt(a['after'], a['unit'])}{ratio}")
    if same_capture:
        return [head + ": the same capture as the alarm above"]
    out = [head]
    if a.get("host_line"):
        out.append(f"  {a['host_line']}")
    out.append(f"  capture: {a['capture_dir']}" if a.get("capture") is not None
               else f"  capture: {a.get('capture_why') or 'none'}")
    out.extend(f"  {line}" for line in (a.get("changed") or [])[:6])
    return out
