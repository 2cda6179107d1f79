"""Where text goes: one console policy for every command and report.

On a terminal rich's own behaviour stands (its width, colours unless ``NO_COLOR``). Into a
pipe, a file or a CI log there are no colours (unless ``FORCE_COLOR``), no live displays,
and the width is ``COLUMNS`` or :data:`LOG_WIDTH`, so a table keeps each row on a line
instead of being squeezed into rich's 80-column default. Progress (a spinner with what is
being done) goes to stderr, and only when stderr is a terminal: stdout stays the report.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Console

LOG_WIDTH = 160  # wide enough for the findings and autofix tables; a log does not wrap


class _Console(Console):
    """rich's console, but a closed pipe (``python train.py | head``) silences it instead
    of ending the process: rich raises SystemExit(1), which inside a training script
    would end the user's run (and lose its report) over a reader that went away."""

    def on_broken_pipe(self) -> None:
        self.quiet = True


def make_console(file: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """A console for output people read: rich's defaults on a terminal, log-friendly
    elsewhere (see the module doc). ``COLUMNS``, ``NO_COLOR`` and ``FORCE_COLOR`` are
    honoured as rich honours them."""
    c = _Console(file=file, stderr=stderr, highlight=False)
    if not c.is_terminal and not os.environ.get("COLUMNS"):
        c = _Console(file=file, stderr=stderr, highlight=False, width=LOG_WIDTH)
    return c


_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)


def plain_text(text: str) -> str:
    """``text`` without the spaces rich pads its tables' lines with to the console's width
    (a file, a pipe or a diff should not carry them)."""
    return _TRAILING.sub("", text)


def emit(renderable: Any, console: Console | None = None) -> None:
    """Print ``renderable``: on a terminal or in a notebook as rich does; into a pipe, a
    file or a log, without trailing spaces (:func:`plain_text`)."""
    c = console or make_console()
    if c.is_terminal or c.is_jupyter:
        c.print(renderable)
        return
    with c.capture() as cap:
        c.print(renderable)
    c.file.write(plain_text(cap.get()))


class _Quiet:
    """Stands in for a status display where there is no terminal to show it on."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextlib.contextmanager
def progress(text: str) -> Iterator[Any]:
    """A spinner on stderr with ``text`` (``.update(new_text)`` changes it) while the block
    runs; nothing at all when stderr is not a terminal."""
    err = Console(stderr=True, highlight=False)
    if not err.is_terminal:
        yield _Quiet()
        return
    with err.status(text) as status:
        yield status
