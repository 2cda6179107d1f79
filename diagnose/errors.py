"""The one error hierarchy of torch-diagnose.

Every error carries a message a person can act on. The CLI maps any
``DiagnoseError`` to one line on stderr and exit code 2; it never shows a
traceback for these.
"""

from __future__ import annotations


class DiagnoseError(Exception):
    """Base class: something the user can fix (bad input, missing piece)."""

    exit_code = 2


class TraceError(DiagnoseError):
    """A trace file could not be read: names the file and the problem."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # survive pickling across the per-rank process pool
        return (type(self), (self.path, self.problem))


class TraceNotFound(TraceError, FileNotFoundError):
    """No file or folder at the path given: a TraceError, and a FileNotFoundError for code
    that catches the standard one."""

    def __init__(self, path: object, problem: str = "no such file or folder") -> None:
        TraceError.__init__(self, path, problem)
        self.filename = str(path)

    def __str__(self) -> str:  # OSError's own would read "[Errno None] None: ..."
        return f"{self.path}: {self.problem}"


class RuleError(DiagnoseError):
    """A rule file or rule expression is invalid, or a rule id is unknown."""


class ExpressionError(RuleError):
    """A rule expression uses something the evaluator does not allow."""


class CaptureError(DiagnoseError):
    """Capture could not start (e.g. torch missing, output folder unwritable)."""


class OptionError(CaptureError, TypeError):
    """``diagnose()`` or ``watch()`` was given an option it does not have (a typo): a
    TypeError, as Python's own for an unknown keyword, that names the nearest option."""
