"""A quiet terminal while a run is captured: torch's noise kept out of the user's output.

- :func:`quiet_stderr`: the C-level stderr (file descriptor 2) goes to a temporary file
  for a block (the profiler's start, step and stop, where libkineto writes a
  ``USDT: ... profiler_start`` / ``profiler_stop`` line each time), then everything in it
  but those lines (:func:`drop_noise`) is written back to fd 2.
- :class:`WarningsOnce`: while installed, each warning torch raises is shown once, per
  place in torch's code that raises it (a DataLoader made again and again, each time a
  filter changes, would otherwise repeat "This DataLoader will create N worker
  processes").
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: a line libkineto writes to stderr on every profiler start and stop (its USDT probes'
#: log), e.g. ``USDT:<date> <time> 123:123 SyncActivityProfilerHandler.cpp:52]
#: profiler_start``
NOISE = re.compile(rb"^USDT:[^\n]*(?:\n|$)", re.MULTILINE)


def drop_noise(data: bytes) -> bytes:
    """``data`` without the lines :data:`NOISE` matches."""
    return NOISE.sub(b"", data)


def _flush() -> None:
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            f.flush()


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Run the block with fd 2 in a temporary file, then write what it got back to fd 2,
    less :data:`NOISE`. Where fd 2 cannot be redirected (closed, no dup), the block runs
    as it is. Writes from other threads meanwhile come out after the block, not lost."""
    _flush()
    with contextlib.ExitStack() as stack:
        tmp: Any = None
        try:
            saved = os.dup(2)
            stack.callback(os.close, saved)
            tmp = stack.enter_context(tempfile.TemporaryFile())
            os.dup2(tmp.fileno(), 2)
        except OSError:
            tmp = None
        try:
            yield
        finally:
            if tmp is not None:
                _flush()
                os.dup2(saved, 2)
                tmp.seek(0)
                rest = drop_noise(tmp.read())
                if rest:
                    with contextlib.suppress(OSError):
                        os.write(2, rest)


def _torch_dir() -> str | None:
    try:
        import torch
    except ImportError:  # pragma: no cover - the session needs torch anyway
        return None
    return str(Path(torch.__file__).resolve().parent) + os.sep


class WarningsOnce:
    """Each warning raised from torch's own code shows once while installed: the first of
    each (category, file, line); the others are dropped. Other warnings pass as they are.
    Installed by replacing :func:`warnings.showwarning` (``catch_warnings`` blocks inside
    save and restore it); :meth:`remove` puts the one it replaced back."""

    def __init__(self) -> None:
        self.root = _torch_dir()
        self.seen: set[tuple[Any, str, int]] = set()
        self.dropped = 0
        self._orig: Any = None

    def install(self) -> WarningsOnce:
        if self._orig is None:
            self._orig = warnings.showwarning
            warnings.showwarning = self._show
        return self

    def remove(self) -> None:
        if self._orig is not None and warnings.showwarning == self._show:
            warnings.showwarning = self._orig
        self._orig = None

    def _show(self, message: Any, category: Any, filename: str, lineno: int,
              file: Any = None, line: str | None = None) -> None:
        key = self._torch_key(category, filename, lineno)
        if key is not None:
            if key in self.seen:
                self.dropped += 1
                return
            self.seen.add(key)
        show = self._orig if self._orig is not None else warnings.__dict__["_showwarning_orig"]
        show(message, category, filename, lineno, file, line)

    def _torch_key(self, category: Any, filename: str, lineno: int
                   ) -> tuple[Any, str, int] | None:
        """(category, file, line) of the ``warnings.warn`` call in torch's code that raised
        it (torch often names its caller's line instead, ``stacklevel=2``), or of the line
        the warning names where that is in torch; None: not torch's."""
        f = sys._getframe(1)
        while f is not None and (f.f_code.co_filename == warnings.__file__
                                 or f.f_code.co_filename == __file__):
            f = f.f_back  # type: ignore[assignment]
        if f is not None and self._in_torch(f.f_code.co_filename):
            return (category, f.f_code.co_filename, f.f_lineno)
        return (category, filename, lineno) if self._in_torch(filename) else None

    def _in_torch(self, filename: str) -> bool:
        if self.root is None:
            return False
        try:
            return str(Path(filename).resolve()).startswith(self.root)
        except (OSError, ValueError):
            return False


@contextlib.contextmanager
def warnings_once() -> Iterator[WarningsOnce]:
    """:class:`WarningsOnce` installed for the block."""
    w = WarningsOnce().install()
    try:
        yield w
    finally:
        w.remove()
