"""TuneReport: the autofix result (:class:`~diagnose.tune.result.TuneResult`), printable."""

from __future__ import annotations

from typing import Any

from .result import TuneResult


class TuneReport(TuneResult):
    """What autofix did and found, with its text rendering (``print``, ``render_text``)."""

    def render_text(self, *, width: int = 120, color: bool = False) -> str:
        from .render import render

        return render(self, width=width, color=color)

    def print(self, console: Any = None) -> None:
        from .render import print_report

        print_report(self, console)

    def __str__(self) -> str:
        return self.render_text()
