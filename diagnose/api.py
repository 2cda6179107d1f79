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
from .engine import Rule
from .result import Analysis, RankResult

__all__ = ["RankResult", "Report", "analyze", "as_report"]


class Report(Analysis):
    """What analysis found (see :class:`~diagnose.result.Analysis`), printable."""

    def render_text(self, *, width: int = 110, color: bool = False) -> str:
        from .report.text import render

        return render(self, width=width, color=color)

    def print(self, console: Any = None) -> None:
        from .report.text import print_report

        print_report(self, console)

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
) -> Report:
    """Analyze trace files (a file, a folder, a run folder, or several) into a Report.

    ``context``/``samples``: a run's context.json and host/GPU samples when they are not
    in the folder; ``extra_rules``: your own rule files; ``rules``: the whole rule list.
    """
    report = as_report(analysis.analyze(source, context=context, samples=samples,
                                        extra_rules=extra_rules, rules=rules))
    assert report is not None
    return report
