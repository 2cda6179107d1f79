"""What a finished session writes: ``context.json``, then the analysis of the run folder,
``report.html`` next to the trace, the printed report and (if asked) a TensorBoard run.

The session hands over what it recorded; nothing here touches the user's objects, the
profiler or the hooks, which are all gone by now. The printed report stands apart from
the script's own output: its streams flushed first, then a blank line and a rule naming
it (:func:`print_apart`), with any tqdm progress bar cleared while it prints and drawn
again after (a Hugging Face Trainer's); where the steps could not be told, that is its
first line. Every step after ``context.json`` is allowed to fail alone: its problem becomes a note (and a line on stderr), never an
exception over the user's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.api import as_report
from diagnose.capture.others import local_ranks
from diagnose.capture.steps import Steps
from diagnose.runfolder import trace_files, write_context

#: the most characters of an exception's message a note quotes
RAISED_CHARS = 120


def raised(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` in a line: the message's first line, cut to
    :data:`RAISED_CHARS` (the type alone where it has none)."""
    lines = str(exc).strip().splitlines()
    msg = lines[0].strip() if lines else ""
    if len(msg) > RAISED_CHARS:
        msg = msg[:RAISED_CHARS - 3].rstrip() + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def window_notes(prof: Any, steps: Steps, schedule: tuple[int, int, int],
                 exc: BaseException | None = None) -> list[str]:
    """The profiler's own problems, and a window cut short: by the end of the loop, or by
    ``exc`` raised in it (then named, and no advice on the schedule)."""
    notes = list(prof.errors)
    wait, warmup, active = schedule
    if not prof.window_complete:
        whole = max(prof.steps - wait - warmup, 0)
        cause = "the end of the loop" if exc is None else f"{raised(exc)} raised in the loop"
        notes.append(
            f"the profiled window was cut short by {cause}: it ran "
            f"{steps.seen} step boundaries, the schedule needs {prof.total_steps} (wait="
            f"{wait}, warmup={warmup}, steps={active}); "
            + (f"only the {whole} whole step{'s' if whole != 1 else ''} are analysed"
               if whole else "no whole step was profiled, so the trace is not analysed")
            + ("" if exc is not None
               else ": use fewer wait/warmup/steps, or run the loop over more batches"))
    return notes


def capture_section(*, run_dir: Path, prof: Any, steps: Steps, schedule: tuple[int, int, int],
                    settings: dict[str, Any], traces: list[str], extra: dict[str, Any]
                    ) -> dict[str, Any]:
    """``context.json``'s ``capture`` part: schedule, settings, what the hooks saw, the step
    clock and the window's bounds. ``extra`` adds the session's own keys (notes, pids...)."""
    wait, warmup, active = schedule
    return {
        "run_dir": str(run_dir),
        "wait": wait,
        "warmup": warmup,
        "active": active,
        **settings,
        "activities": prof.activities if prof is not None else [],
        "step_mode": steps.mode,
        "steps_seen": steps.seen,
        "optimizer_steps": steps.opt_steps,
        "batches": steps.batches,
        "window_complete": bool(prof and prof.window_complete),
        "whole_steps": (None if prof is None else active if prof.window_complete
                        else max(prof.steps - wait - warmup, 0)),
        "settle_steps": steps.settle,
        "step_clock": steps.clock(),
        "step_clock_drain_ms": (None if steps.drain_ms is None
                                else round(steps.drain_ms, 4)),
        # other processes' mean CPUs over the steps timed after the window
        "after_others_cpus": (None if steps.after_others_cpus is None
                              else round(steps.after_others_cpus, 3)),
        # this process's DataLoader workers' mean CPUs over those same steps
        "after_workers_cpus": (None if steps.after_workers_cpus is None
                               else round(steps.after_workers_cpus, 3)),
        # the job's ranks on this host whose processes that leaves out (torchrun's)
        "after_own_local_ranks": local_ranks(),
        "loader_starts": steps.loader_starts,
        "active_start": prof.active_start if prof is not None else None,
        "active_end": prof.active_end if prof is not None else None,
        "profiler_close_ms": prof.close_ms if prof is not None else None,
        "ended": time.time(),
        "trace_files": traces,
        **extra,
    }


def own_traces(run_dir: Path, dist: Any) -> list[str]:
    return [p.name for p in (dist.own_traces(run_dir) if dist is not None
                             else trace_files(run_dir))]


#: the rule the printed report starts under
HEADER = "torch-diagnose report"


def say(line: str) -> None:
    """``line`` on stderr; nothing where stderr is gone (a closed pipe: ``2>&1 | head``),
    so that the run's report and page are still made."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr)


def _bars(cls: Any) -> list[Any]:
    """The live bars of tqdm's class ``cls`` and of its subclasses (``tqdm.auto``'s own)."""
    got = list(getattr(cls, "_instances", None) or ())
    for sub in cls.__subclasses__():
        got += [b for b in _bars(sub) if b not in got]
    return got


@contextlib.contextmanager
def bars_aside() -> Iterator[None]:
    """The script's tqdm progress bars (where tqdm is loaded) cleared from the terminal
    while the block prints, and drawn again after it, as tqdm's own ``write`` does: the
    report does not start inside a bar's line, nor a bar inside the report."""
    std = sys.modules.get("tqdm.std")
    bars: list[Any] = []
    with contextlib.suppress(Exception):
        bars = [b for b in _bars(std.tqdm) if hasattr(b, "start_t")] if std else []
        for b in bars:
            b.clear()
    try:
        yield
    finally:
        for b in bars:
            with contextlib.suppress(Exception):
                b.refresh()


def print_apart(report: Any, *, first: str | None = None) -> None:
    """Print ``report`` apart from what the script printed: stdout and stderr flushed (its
    progress bars cleared: :func:`bars_aside`), a blank line, a rule naming it, ``first``
    (a line that must lead) and the report."""
    from diagnose.console import make_console

    with bars_aside():
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        try:
            console = make_console()
            console.print()
            console.rule(HEADER, align="left")
            if first:
                console.print(first, style="bold", markup=False)
            report.print()
            sys.stdout.flush()
        except Exception as e:
            say(f"torch-diagnose: could not print the report: {e}")


@dataclass
class Published:
    report: Any = None
    tensorboard_dir: Path | None = None
    notes: list[str] = field(default_factory=list)


def _why(e: Exception) -> str:
    """One line: a child's failure is already "Type: message"."""
    from diagnose.report.child_writer import ApartError

    return str(e) if isinstance(e, ApartError) else f"{type(e).__name__}: {e}"


def publish(run_dir: Path, ctx: dict[str, Any], *, dist: Any, analyze: bool,
            run_analysis: Callable[[Path], Any], print_report: bool,
            tensorboard: str | os.PathLike[str] | bool | None) -> Published:
    """Write ``ctx`` as the run's ``context.json`` (rank 0 of a process group writes it for
    all ranks), analyse the folder, write ``report.html``, print, write TensorBoard logs."""
    out = Published()
    if dist is not None:  # rank 0 writes context.json and reports on all ranks
        out.report = as_report(dist.finish(run_dir, ctx, analyze=analyze))
        if dist.rank != 0 or out.report is None:
            return out
    else:
        write_context(run_dir, ctx)
    if not analyze:
        return out
    if dist is None:
        try:
            out.report = run_analysis(run_dir)
        except Exception as e:
            msg = f"torch-diagnose: analysis of {run_dir} failed: {type(e).__name__}: {e}"
            out.notes.append(msg)
            say(msg)
            return out
    if out.report is None:
        return out
    as_json = getattr(out.report, "to_json", None)
    try:  # the report as data beside the page, as a watch capture's (docs/json.md)
        if callable(as_json):
            (run_dir / "report.json").write_text(json.dumps(as_json(), default=str),
                                                 encoding="utf-8")
    except Exception as e:  # never the user's run: the page and the printed report stand
        out.notes.append(f"could not write report.json: {_why(e)}")
    # the page people open (report.html next to the trace) and the TensorBoard run, written
    # by a child Python while the report prints, so that their plots' library never joins
    # the training process (diagnose.report.child_writer)
    from diagnose.report.child_writer import Apart

    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("diagnose.report.html:write_html", (out.report, run_dir / "report.html"))]
    if tensorboard:  # the same run as a TensorBoard run (scalars, findings, adapted trace)
        calls.append(("diagnose.report.tensorboard:write_session_logdir",
                      (out.report, run_dir, tensorboard)))
    child = Apart(calls)
    if print_report:
        cap = ctx.get("capture") or {}
        print_apart(out.report, first=cap.get("steps_untold"))
        say(f"torch-diagnose: run folder {run_dir}")
    page, *tb = child.results()
    if isinstance(page, Exception):
        out.notes.append(f"could not write report.html: {_why(page)}")
    if tb and isinstance(tb[0], Exception):
        msg = f"torch-diagnose: could not write TensorBoard logs: {_why(tb[0])}"
        out.notes.append(msg)
        say(msg)
    elif tb:
        out.tensorboard_dir = tb[0]
        if print_report:
            say(f"torch-diagnose: TensorBoard run {tb[0]} "
                f"(tensorboard --logdir {tb[0].parent})")
    return out
