"""What the benchmarks that run the project's own jobs share: finding the jobs, and the
header every table of theirs starts with (machine, load, date, command)."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import platform
import sys
from pathlib import Path
from typing import Any

JOBS = Path(__file__).resolve().parent
#: the demo and the CPU samples as jobs (``--samples``)
SAMPLE_JOBS = JOBS.parent / "sample_jobs"
if str(SAMPLE_JOBS) not in sys.path:
    sys.path.append(str(SAMPLE_JOBS))


def job_names(given: list[str], samples: bool = False) -> list[str]:
    """``given``, else every job module in benchmarks/jobs (``samples``: in
    benchmarks/sample_jobs)."""
    return given or sorted(p.stem for p in (SAMPLE_JOBS if samples else JOBS).glob("[!_]*.py"))


def make(name: str) -> dict[str, Any]:
    """A fresh job: ``make_job()`` of benchmarks/jobs/<name>.py."""
    return importlib.import_module(name).make_job()


def print_header(title: str, script: str) -> None:
    import torch

    print(f"# {title}")
    print(f"# machine: {platform.machine()}, {len(os.sched_getaffinity(0))} CPUs usable, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, torch {torch.__version__}, "
          f"Python {platform.python_version()}")
    print(f"# date:    {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"# command: python benchmarks/{script} {' '.join(sys.argv[1:])}")
    print()


def offered_fixes(finding: dict[str, Any]) -> list[dict[str, Any]]:
    """A finding's (JSON) fixes the report offers, in its order: those that the step model
    does not predict to slow the job and that apply to the run as it is
    (diagnose.fixes.findings.offered)."""
    from diagnose.fixes.findings import DOES_NOT_APPLY
    from diagnose.stepmodel.calibration import SLOWER

    out = []
    for fix in finding.get("fixes") or []:
        pred = fix.get("predicted")
        if not pred and str(fix.get("predicted_why") or "").startswith(DOES_NOT_APPLY):
            continue
        if not pred or pred.get("at_least") or pred["speedup"] >= SLOWER:
            out.append(fix)
    return out


def first_offered(finding: dict[str, Any]) -> dict[str, Any] | None:
    """A finding's (JSON) first fix the report offers as the one to try (:func:`offered_fixes`)."""
    fixes = offered_fixes(finding)
    return fixes[0] if fixes else None
