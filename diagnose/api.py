"""The public analysis entry point: ``analyze(path)`` returns a printable :class:`Report`.

:class:`Report` is the analysis result (:class:`diagnose.result.Analysis`: metrics,
findings, notes) with its text rendering. It lives here, above ``diagnose.report``,
so that the result type itself imports no renderer and the renderers import no facade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import analysis
from .result import Analysis, RankResult, Runs
from .rules.engine import Rule

__all__ = ["RankResult", "Report", "Runs", "analyze", "analyze_runs", "as_report"]


class Report(Analysis):
    """What analysis found (see :class:`~diagnose.result.Analysis`), printable."""

    def render_text(self, *, width: int = 110, color: bool = False,
                    detail: bool = False) -> str:
        """The report as text: what to act on, or with ``detail`` all of it (each of the
        probes' own times, every memory what-if, the rules not evaluated and why)."""
        from .report.text import render

        return render(self, width=width, color=color, detail=detail)

    def print(self, console: Any = None, detail: bool = False) -> None:
        from .report.text import print_report

        print_report(self, console, detail)

    def to_html(self, autofix: Any = None) -> str:
        """One self-contained HTML page (see :func:`diagnose.report.html.render_html`)."""
        from .report.html import render_html

        return render_html(self, autofix=autofix)

    def __str__(self) -> str:
        return self.render_text()


def as_report(a: Analysis | None) -> Report | None:
    """The same analysis as a printable Report (no copy of its contents)."""
    if a is None or isinstance(a, Report):
        return a
    return Report(**{f.name: getattr(a, f.name) for f in dataclasses.fields(Analysis)})


def analyze(
    source: str | Path | Iterable[str | Path],
    *,
    context: dict | None = None,
    samples: dict | None = None,
    extra_rules: Iterable[str | Path] | None = None,
    rules: list[Rule] | None = None,
    as_ranks: bool = False,
) -> Report:
    """Analyze trace files (a file, a folder, a run folder, or several) of one run into a
    Report; sources that hold several runs raise a DiagnoseError (see :func:`analyze_runs`).

    ``context``/``samples``: a run's context.json and host/GPU samples when they are not
    in the folder; ``extra_rules``: your own rule files; ``rules``: the whole rule list;
    ``as_ranks``: take the files outside run folders as ranks of one run (forced).
    """
    report = as_report(analysis.analyze(source, context=context, samples=samples,
                                        extra_rules=extra_rules, rules=rules,
                                        as_ranks=as_ranks))
    assert report is not None
    return report


def analyze_runs(
    source: str | Path | Iterable[str | Path],
    *,
    context: dict | None = None,
    samples: dict | None = None,
    extra_rules: Iterable[str | Path] | None = None,
    rules: list[Rule] | None = None,
    as_ranks: bool = False,
) -> Runs:
    """One Report per run that the sources hold (``Runs.runs``, in order): files are ranks
    of one run only when they say so; a folder of run folders gives its runs newest first.
    Arguments as for :func:`analyze`."""
    runs = analysis.analyze_runs(source, context=context, samples=samples,
                                 extra_rules=extra_rules, rules=rules, as_ranks=as_ranks)
    return Runs([r for r in map(as_report, runs) if r is not None], as_ranks=as_ranks)
