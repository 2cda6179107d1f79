"""Writing in a child Python what would leave the plotting library in the training process.

The HTML page and the TensorBoard run a session writes at its exit draw their plots with
matplotlib, whose import leaves tens of thousands of objects in the process for the rest
of its life for every full garbage collection to walk (``benchmarks/gc_footprint.py``
measures it). So a session starts a child Python that imports the writers while the
report prints, then hands it the report, pickled on its stdin (the only thing this package
unpickles: its own data, over a pipe between a parent and the child it started); the
writers' paths come back as JSON on its stdout. Where no child can run (no interpreter, a
report that does not pickle, a child that cannot import this package) the writers run in
this process.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

#: what a child may be asked to call ("module:function"), and nothing else
TARGETS = frozenset({
    "diagnose.report.html:write_html",
    "diagnose.report.tensorboard:write_session_logdir",
})
#: a child that takes longer than this is stopped (a page of a very large report takes
#: seconds; this is only a guard against a child that hangs the user's exit)
TIMEOUT_S = 600.0


class ApartError(RuntimeError):
    """A writer failed in the child: the message is its error's one line."""


def _check(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"not a writer that runs apart: {target!r}")


def _resolve(target: str) -> Any:
    _check(target)
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def _env() -> dict[str, str]:
    """The parent's environment, with this copy of ``diagnose`` first on the child's path
    (a job that put it on ``sys.path`` itself runs the same code in the child)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


Call = tuple[str, tuple[Any, ...]]


def _here(calls: list[Call]) -> list[Any]:
    out: list[Any] = []
    for target, args in calls:
        try:
            out.append(_resolve(target)(*args))
        except Exception as e:  # each writer fails alone
            out.append(e)
    return out


class Apart:
    """Writers started in one child Python (one interpreter's start and one import of the
    plotting library for all of them); :meth:`results` hands them their arguments and
    waits. Started before the parent prints its report, the child imports the writers
    while it does."""

    def __init__(self, calls: list[Call]) -> None:
        for target, _ in calls:
            _check(target)
        self.calls = calls
        self._child: subprocess.Popen[bytes] | None = None
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-m", __name__, *(t for t, _ in calls)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=_env())
        except (OSError, ValueError):  # no interpreter to start (embedded, frozen)
            self._child = None

    def results(self) -> list[Any]:
        """Each writer's return value (a path), or the exception it failed with (an
        :class:`ApartError` with the child's own message where it failed there)."""
        if self._child is None:
            return _here(self.calls)
        try:
            payload = pickle.dumps([args for _, args in self.calls],
                                   protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            payload = None  # a report that does not pickle: the child is told to stop
        try:
            out, _ = self._child.communicate(payload or b"", timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.communicate()
            return [ApartError(f"the child writing it ran past {TIMEOUT_S:.0f} s and was "
                               "stopped")] * len(self.calls)
        if payload is None or self._child.returncode != 0:
            # the child could not run the writers (a writer's own error comes back as its
            # result): the page is still wanted, so it is written here
            return _here(self.calls)
        got = json.loads(out)
        return [Path(v) if ok else ApartError(v) for ok, v in got]


def main() -> int:
    """The child: import the writers named on its command line, then read their arguments
    from stdin (pickled by the parent, which started it: nothing else writes there), call
    them, and write each one's result (a path) or its error's one line to stdout as JSON;
    anything a writer prints goes to stderr, so that stdout holds only the results."""
    writers = [_resolve(t) for t in sys.argv[1:]]
    data = sys.stdin.buffer.read()
    if not data:
        return 1
    arguments: list[tuple[Any, ...]] = pickle.loads(data)
    out = sys.stdout
    sys.stdout = sys.stderr
    got: list[tuple[bool, str]] = []
    for write, args in zip(writers, arguments, strict=True):
        try:
            got.append((True, str(write(*args))))
        except Exception as e:  # each writer fails alone; the parent shows this line
            got.append((False, f"{type(e).__name__}: {e}"))
    out.write(json.dumps(got))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
