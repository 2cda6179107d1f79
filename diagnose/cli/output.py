"""Which format a report is written in: the one ``--format`` names, else the output file's.

``-o report.html`` writes HTML, ``-o report.json`` JSON, ``-o report.txt`` (or ``.log``,
or a name with no extension) text; another extension (``.pdf``) without ``--format`` is
an error, most likely a typo; ``--format`` without ``-o`` picks what goes to stdout. A ``--format`` that
contradicts a known extension is an error (one line, exit 2), as is an extension the
subcommand cannot write. Every report command writes all three; each file written is
announced in one line on stderr (:func:`wrote`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import DiagnoseError

#: File extensions that decide the format; a name without one is written as text.
EXTENSIONS: dict[str, str] = {".html": "html", ".htm": "html", ".json": "json",
                              ".txt": "text", ".text": "text"}
#: Extensions that say nothing of the format but read as text: written as text unless
#: ``--format`` says otherwise. Any other extension without ``--format`` is an error.
PLAIN = frozenset({".log", ".out"})


def format_of(path: str) -> str | None:
    """The format a file name asks for (``None``: its extension says nothing)."""
    return EXTENSIONS.get(Path(path).suffix.lower())


def choose_format(explicit: str | None, output: str | None,
                  allowed: tuple[str, ...] = ("text", "json", "html"),
                  said_by: str | None = None) -> str:
    """The format to write: ``explicit`` (the ``--format`` given, or None), else the one
    ``output``'s extension names, else text. Raises DiagnoseError on a contradiction;
    ``said_by`` is how the error names the explicit choice (default ``--format X``)."""
    by_name = format_of(output) if output else None
    suffix = Path(output).suffix if output else ""
    if output and by_name is None and suffix and explicit is None \
            and suffix.lower() not in PLAIN:
        raise DiagnoseError(f"-o {output}: {suffix} is not a format torch-diagnose writes "
                            f"(use {', '.join(_ext(a) for a in allowed)})")
    if explicit is not None and by_name is not None and explicit != by_name:
        said = said_by or f"--format {explicit}"
        raise DiagnoseError(f"{said} contradicts the file name {output} (a {by_name} file): "
                            f"drop {said.split()[0]} or rename the file")
    chosen = explicit or by_name or "text"
    if chosen not in allowed:
        raise DiagnoseError(f"-o {output}: this command writes {' or '.join(allowed)}, not "
                            f"{chosen} (use {', '.join(_ext(a) for a in allowed)})")
    return chosen


class FormatOption(argparse.Action):
    """``--format X``, and ``--json`` (``const``: the same as ``--format json``): given
    both, or twice, they must agree (exit 2 where they do not: the last one given would
    otherwise win unsaid)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        value = self.const if self.const is not None else values
        said = getattr(namespace, "_format_said", None)
        if said is not None and getattr(namespace, self.dest, None) != value:
            shown = option_string if self.const is not None else f"{option_string} {value}"
            parser.error(f"{shown} contradicts {said}: give one")
        setattr(namespace, self.dest, value)
        namespace._format_said = (option_string if self.const is not None
                                  else f"{option_string} {value}")


def check_writable(path: str) -> None:
    """A report file can be written at ``path`` (its folder exists and takes files, it is
    not a folder itself): a command that runs for minutes first says where it cannot
    write, in one line, rather than at its end."""
    p = Path(path)
    folder = p.parent
    if p.is_dir():
        raise DiagnoseError(f"{path}: is a folder (give a file name)")
    if not folder.is_dir():
        raise DiagnoseError(f"{path}: cannot write (no folder {folder})")
    if not os.access(folder, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise DiagnoseError(f"{path}: cannot write (permission denied)")


def wrote(path: str) -> None:
    """Say where a report went: one line on stderr (stdout stays the report's own)."""
    import sys

    print(f"wrote {path}", file=sys.stderr)


def _ext(fmt: str) -> str:
    return {"text": ".txt", "json": ".json", "html": ".html"}[fmt]


__all__ = ["EXTENSIONS", "PLAIN", "FormatOption", "check_writable", "choose_format",
           "format_of", "wrote"]
