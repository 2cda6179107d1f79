"""AutofixReport: the autofix result (:class:`~diagnose.autofix.decisions.AutofixResult`), printable."""

from __future__ import annotations

from typing import Any

from .decisions import AutofixResult


class AutofixReport(AutofixResult):
    """What autofix did and found, with its text rendering (``print``, ``render_text``)."""

    def render_text(self, *, width: int = 120, color: bool = False) -> str:
        from .render import render

        return render(self, width=width, color=color)

    def print(self, console: Any = None) -> None:
        from .render import print_report

        print_report(self, console)

    def __str__(self) -> str:
        return self.render_text()
