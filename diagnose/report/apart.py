"""Writing in a child Python what would leave the plotting library in the training process.

The HTML page and the TensorBoard run a session writes at its exit draw their plots with
matplotlib. Its import leaves 96 modules and about 43,000 objects in the process for the
rest of its life, and Python's garbage collector walks them all in every full collection:
after a session on benchmarks/jobs/tensor_rows.py, 341,000 objects where the job alone has
288,000, and ``gc.collect()`` 1.08-1.13x as long (``benchmarks/gc_footprint.py``; the
job's own step did not measurably change on the 2-CPU machine: a full collection every
7-9 of its steps, and its pace varies more than that).

So a session hands the report to a child Python (pickled in a temporary file) that
imports and calls the writers there; their return values come back pickled on its stdout.
The training process never imports matplotlib. Where no child can run (no interpreter, a report that
does not pickle, a child that cannot import this package) the writers run here, as
before.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import subprocess
import sys
import tempfile
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
    """The child ran and failed: the message is its last line of error output."""


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
    plotting library for all of them); :meth:`results` waits for them. Started before
    the parent prints its report, the child works while it does."""

    def __init__(self, calls: list[Call]) -> None:
        for target, _ in calls:
            _check(target)
        self.calls = calls
        self._child: subprocess.Popen[bytes] | None = None
        self._path: str | None = None
        try:  # the calls in a file the child reads at once (a pipe would hold us up)
            payload = pickle.dumps(calls, protocol=pickle.HIGHEST_PROTOCOL)
            fd, self._path = tempfile.mkstemp(prefix="diagnose-apart-", suffix=".pkl")
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            self._child = subprocess.Popen(
                [sys.executable, "-m", __name__, self._path], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        except (pickle.PicklingError, TypeError, AttributeError, OSError, ValueError):
            self._child = None  # a report that does not pickle, no interpreter to start

    def results(self) -> list[Any]:
        """Each writer's return value, or the exception it failed with (an
        :class:`ApartError` with the child's own message where it failed there)."""
        try:
            if self._child is None:
                return _here(self.calls)
            try:
                out, _ = self._child.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.communicate()
                return [ApartError(f"the child writing it ran past {TIMEOUT_S:.0f} s and "
                                   "was stopped")] * len(self.calls)
        finally:
            if self._path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self._path)
                self._path = None
        if self._child.returncode != 0:
            # the child itself failed (a writer's error comes back as its result): the
            # page is still wanted, so it is written here
            return _here(self.calls)
        got: list[tuple[bool, Any]] = pickle.loads(out)
        return [v if ok else ApartError(v) for ok, v in got]


def main() -> int:
    """The child: read the calls from the file named on its command line, make them, write
    each one's result (or its error's one line) to stdout; anything a writer prints goes to
    stderr, so that stdout holds only the results."""
    calls: list[Call] = pickle.loads(Path(sys.argv[1]).read_bytes())
    out = sys.stdout.buffer
    sys.stdout = sys.stderr
    got = [(False, f"{type(v).__name__}: {v}") if isinstance(v, Exception) else (True, v)
           for v in _here(calls)]
    out.write(pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
