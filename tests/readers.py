"""Every way of reading one file must agree: helpers for the reader tests and the fuzzers.

The whole-document read (``read_trace(stream=False)``) is the reference. The chunked
readers (streaming; byte ranges as the parallel reader cuts them; arrays as the
pipelined .gz reader hands them out) must each give the same Trace, give up with
NotStreamable (the caller then reads the whole document), or refuse a file the whole
read refuses too. The parallel readers run here on an executor that does the work in
this process, so a fuzzer can try thousands of files without forking for each.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.errors import DiagnoseError
from diagnose.trace import Trace, cut, parallel, read_trace, stream
from diagnose.trace.decode import max_bytes

COLUMNS = ("ts", "dur", "kind", "correlation")
SPARSE = ("device", "nbytes", "mem_allocated", "mem_reserved", "mem_delta", "mem_device_type")


def trace_difference(a: Trace, b: Trace) -> str | None:
    """The first way ``a`` and ``b`` differ, None when they hold the same events."""
    if len(a) != len(b):
        return f"{len(a)} events vs {len(b)}"
    for k in COLUMNS:
        if not np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True):
            return f"column {k}"
    for k in SPARSE:
        x, y = getattr(a, k), getattr(b, k)
        if not (np.array_equal(x.idx, y.idx) and np.array_equal(x.val, y.val)):
            return f"column {k}"
    for ids, table in (("name_id", "names"), ("pid_id", "pids"), ("tid_id", "tids")):
        if ([getattr(a, table)[i] for i in getattr(a, ids)]
                != [getattr(b, table)[i] for i in getattr(b, ids)]):
            return f"column {ids}"
    for k in ("device_properties", "distributed_info", "schema_version", "n_events_total",
              "dropped_events"):
        if getattr(a, k) != getattr(b, k):
            return k
    return None


class InProcessExecutor(Executor):
    """Runs each task at once, in this process (the parallel readers' logic, no fork)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)
        return f


#: (chunk, window, scan) sizes in bytes: chunks, the parallel reader's windows, the scan's
#: numpy passes (odd sizes, so that boundaries fall anywhere in strings and escapes)
TINY = (512, 1024, 61)


@contextmanager
def small_chunks(chunk: int = TINY[0], window: int = TINY[1],
                 scan: int = TINY[2]) -> Iterator[None]:
    """Cut into many small pieces, so that even a tiny file takes every chunk boundary
    (and pieces shorter than one event, or than one string)."""
    names = ((stream, "CHUNK_BYTES"), (stream, "BLOCK_BYTES"), (parallel, "CHUNK_BYTES"),
             (parallel, "_WINDOW"), (cut, "SCAN_WINDOW"))
    saved = [getattr(m, n) for m, n in names]
    for (m, n), v in zip(names, (chunk, chunk, chunk, window, scan), strict=True):
        setattr(m, n, v)
    try:
        yield
    finally:
        for (m, n), v in zip(names, saved, strict=True):
            setattr(m, n, v)


def chunked_readers() -> dict[str, Callable[[Path, int], Trace]]:
    ex = InProcessExecutor()
    return {
        "streaming": stream.read_streaming,
        "byte ranges": lambda p, limit: parallel.read_parallel(p, limit, 3, pool=ex),
        "pipelined": lambda p, limit: parallel.read_pipelined(p, limit, 2, pool=ex),
        "text ranges": lambda p, limit: parallel.read_text_ranges(p, limit, 2, pool=ex),
    }


def check_chunked_reads(path: Path, sizes: tuple[int, int, int] = TINY
                        ) -> tuple[list[str], list[str]]:
    """(outcomes, problems) of every chunked reader on ``path`` against the whole read,
    cut into pieces of ``sizes`` (see small_chunks)."""
    try:
        whole: Trace | None = read_trace(path, stream=False)
        refused: DiagnoseError | None = None
    except DiagnoseError as e:
        whole, refused = None, e
    outcomes: list[str] = []
    problems: list[str] = []
    with small_chunks(*sizes):
        for name, read in chunked_readers().items():
            try:
                got = read(path, max_bytes())
            except stream.NotStreamable:
                outcomes.append(f"{name}: whole read instead")
                continue
            except DiagnoseError as e:
                if refused is None:
                    problems.append(f"{name} refused a file the whole read takes: {e}")
                else:
                    outcomes.append(f"{name}: refused too")
                continue
            except Exception:  # the one thing that must never happen
                problems.append(f"{name} raised:\n{traceback.format_exc(limit=4)}")
                continue
            if whole is None:
                if len(got):  # read_trace refuses an empty result itself
                    problems.append(f"{name} took a file the whole read refuses ({refused})")
                else:
                    outcomes.append(f"{name}: refused too")
                continue
            diff = trace_difference(whole, got)
            if diff:
                problems.append(f"{name} differs from the whole read: {diff}")
            else:
                outcomes.append(f"{name}: same trace")
    return outcomes, problems
