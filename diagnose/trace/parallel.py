"""Parallel read of one large plain-JSON trace: byte ranges decoded in worker processes.

The file is cut into byte ranges without parsing it, each starting at an event: found by
reading a small window around a target offset, and looking there for the start of an
event (``\\n<indent>{`` where events stand on their own lines; ``}, {`` in any other
layout). In the second case the place may lie inside a string: each worker takes its
range to start at an event, cuts it into chunks as the streaming reader does
(``cut.py``), and every chunk is validated by the decoder, so a range that did not start
at an event fails to decode and the file is read by the streaming reader instead (a
chunk that decodes is the document's own events wherever the cut fell). Each worker reads
its own range from the file, decodes it into columns (with its own intern tables) and
sends the columns back; the parent maps the workers' name/pid/tid ids onto one table.
Decoding and column building, most of the time on a large file, then run on every CPU.
"""

from __future__ import annotations

import multiprocessing
import re
import sys
import threading
from collections import deque
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from .columns import ColumnBuilder, Trace
from .cut import Cutter, array_start, cutter, event_array, first_event
from .stream import CHUNK_BYTES, ChunkDecoder, EventSplitter, NotStreamable, text_blocks

__all__ = ["BrokenProcessPool", "fork_pool", "read_parallel", "read_pipelined"]

#: Plain files at least this large are read in parallel when there are 2+ CPUs.
PARALLEL_MIN_BYTES = 64 * 2**20
#: Gzipped files at least this large (compressed; ~10x that as text) are decoded by
#: worker processes while this one decompresses.
PIPELINE_MIN_GZ_BYTES = 4 * 2**20
#: Text sent to a worker per task by the pipelined read (smaller than CHUNK_BYTES: each
#: array exists in this process, in the pipe and in the worker).
PIPELINE_CHUNK_BYTES = 4 * 2**20
_WINDOW = 2**20
#: Text a worker of the parallel read decodes at a time (its buffer): the events of one
#: chunk, decoded, take several times its size until they are columns. Workers live while
#: this process gathers their columns, so what they hold counts with it: on the ~300 MB
#: benchmark trace (2 workers) with CHUNK_BYTES (8 MB) each held 30-45 MiB of its own and
#: all three processes together came to 0.55-0.58x the file at the most, above this
#: process's own peak (0.45-0.49x, later, when the workers are gone); with 4 MB, 21-31 MiB
#: each and 0.48-0.49x together (this process's own peak), in the same time
#: (benchmarks/analyze_speed.py's "all its processes at once")
RANGE_CHUNK_BYTES = 4 * 2**20


def _layout(path: Path) -> tuple[bytes, int, bytes | None]:
    """(header, offset where the events begin, separator before each event or None:
    see cut.first_event)."""
    with open(path, "rb") as f:
        head = f.read(8 * _WINDOW)
    m = array_start(head)
    if m is None:
        raise NotStreamable
    start, sep = first_event(head, m.end())
    return head[: m.start()], start, sep


#: Where an event may start in a layout without line breaks: after the comma that
#: follows a closing brace (perhaps inside a string: the decoder tells).
_NEXT_EVENT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


def _event_in(window: bytes, sep: bytes | None) -> int:
    """Offset in ``window`` where an event (as laid out) may start, or -1."""
    if sep is not None:
        return window.find(sep)
    m = _NEXT_EVENT.search(window)
    return m.end() - 1 if m else -1


def _cuts(path: Path, start: int, size: int, sep: bytes | None, parts: int) -> list[int]:
    """Offsets, each just before an event, dividing [start, size) into about ``parts``.
    Each is found by reading a small window at the target offset, doubled until it holds
    the start of an event (one very long event merges two ranges)."""
    cuts = [start]
    step = (size - start) // parts
    with open(path, "rb") as f:
        for k in range(1, parts):
            target = start + k * step
            if target <= cuts[-1]:
                continue
            width = 64 * 1024
            while True:
                f.seek(target)
                window = f.read(width)
                i = _event_in(window, sep)
                if i >= 0 or len(window) < width or width >= 16 * _WINDOW:
                    break
                width *= 4
            if i >= 0:
                cuts.append(target + i)
    return cuts


def _events_in_place(buf: bytearray, filled: int, cut: Cutter,
                     decode: ChunkDecoder) -> tuple[list | None, int]:
    """Decode the whole events in ``buf[:filled]`` (``buf[0]`` is ``[``) without copying the
    text: the comma after the last whole event is overwritten with ``]`` and the decoder reads
    the buffer in place. Returns (events or None when no whole event is there yet, the
    offset where the rest begins)."""
    k = cut.cut(buf, filled)  # the rest: from the start of an event, or white space before it
    if k < 0:
        return None, 0
    close = k - 1
    while buf[close] in b" \t\r\n":
        close -= 1
    if buf[close] != ord(","):
        raise NotStreamable
    buf[close] = ord("]")
    with memoryview(buf) as mv:
        return decode.decode(mv[: close + 1]), k


def _decode_range(args: tuple[str, int, int, bool, bytes | None]) -> dict[str, Any]:
    """Worker: columns of the events in [start, end) (``sep``: as _layout gives it). The text
    is read into one buffer of about RANGE_CHUNK_BYTES, decoded there in place, and the partial
    event at its end moved to its front for the next read: a worker holds one chunk of text
    at a time and copies it once (from the file). The last range also returns the
    document's trailer (what follows the event array)."""
    path, start, end, last, sep = args
    b = ColumnBuilder()
    decode_events = ChunkDecoder()
    trailer = None
    buf = bytearray(b"[") + bytearray(RANGE_CHUNK_BYTES)
    filled = 1
    cut = cutter(sep, lo=1)
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(start)
            left = end - start
            while left > 0:
                with memoryview(buf) as mv:
                    n = f.readinto(mv[filled: filled + min(len(buf) - filled, left)])
                if not n:
                    break
                left -= n
                filled += n
                if filled < len(buf):
                    continue
                evs, k = _events_in_place(buf, filled, cut, decode_events)
                if evs is None:  # one event longer than the buffer: grow it
                    buf += bytearray(len(buf))
                    continue
                b.add(evs)
                del evs
                rest = bytes(buf[k:filled])  # at most one event
                buf[1: 1 + len(rest)] = rest
                filled = 1 + len(rest)
                cut.moved(k - 1)
        if last:
            k = cut.cut(buf, filled)
            if k > 0:
                b.add(decode_events(buf, k, 1))
                buf[1: 1 + filled - k] = buf[k:filled]
                filled -= k - 1
                cut.moved(k - 1)
            stop, rest_at = cut.last(buf, filled)
            b.add(decode_events.decode(event_array(buf, stop, 1, comma=False)))
            trailer = bytes(buf[rest_at:filled])
        elif buf[1:filled].strip():
            b.add(decode_events(buf, filled, 1))
    except (NotStreamable, ValueError):
        return {"ok": False}
    return _columns_of(b, trailer)


def _columns_of(b: ColumnBuilder, trailer: bytes | None = None) -> dict[str, Any]:
    """What a worker sends back: its columns and its own intern tables."""
    return {"ok": True, "parts": b.parts, "names": b.names.in_order(), "pids": b.pids.in_order(),
            "tids": b.tids.in_order(), "n": b.n_total, "trailer": trailer}


def _merge(g: ColumnBuilder, r: dict[str, Any]) -> None:
    """Append a worker's columns to ``g``, mapping its name/pid/tid ids onto g's tables."""
    if not r["ok"]:
        raise NotStreamable
    maps = {}
    for key, local in (("name_id", r["names"]), ("pid_id", r["pids"]), ("tid_id", r["tids"])):
        table = {"name_id": g.names, "pid_id": g.pids, "tid_id": g.tids}[key]
        maps[key] = np.fromiter(map(table.__getitem__, local), np.int32, len(local))
    for part in r["parts"]:
        for key, remap in maps.items():
            if len(part[key]):
                part[key] = remap[part[key]]
        g.parts.append(part)
    g.n_total += r["n"]


def _other_threads() -> bool:
    """Does another Python thread run in this process?"""
    return threading.active_count() > 1


def fork_pool(workers: int) -> ProcessPoolExecutor | None:
    """A pool of ``workers`` forked processes, or None where forking is not safe, and the
    caller then works in this one process.

    Fork: workers start in milliseconds with the code already imported, and nothing of the
    caller's ``__main__`` runs again (spawn and forkserver import it anew: a training script
    without an ``if __name__ == "__main__"`` guard would start training in every worker).
    Not safe: off Linux; in a daemonic process (which may not have children); and while other
    Python threads run (a training loop's loader or sampler threads, a notebook kernel's), as
    a lock another thread holds at the fork stays locked forever in the child."""
    if sys.platform != "linux" or multiprocessing.current_process().daemon or _other_threads():
        return None
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))


def _pool(workers: int) -> ProcessPoolExecutor:
    pool = fork_pool(workers)
    if pool is None:
        raise NotStreamable  # read in this one process instead
    return pool


def _using(pool: Executor | None, workers: int) -> AbstractContextManager[Executor]:
    """The given executor (left open), else a new fork pool (closed after)."""
    return nullcontext(pool) if pool is not None else _pool(workers)


def read_parallel(path: Path, limit: int, workers: int, pool: Executor | None = None) -> Trace:
    """Read a large plain-JSON trace with ``workers`` processes, each reading its own byte
    range of the file (NotStreamable if the layout does not allow it, or where
    ``fork_pool`` gives no pool). ``pool``: run the ranges on this executor instead (the
    fuzz tests use one that runs them in this process)."""
    size = path.stat().st_size
    if size > limit:
        raise NotStreamable  # the whole-document path gives the clear error
    header, start, sep = _layout(path)
    cuts = _cuts(path, start, size, sep, workers * 4)
    bounds = [*cuts, size]
    tasks = [(str(path), bounds[i], bounds[i + 1], i == len(cuts) - 1, sep)
             for i in range(len(cuts))]
    g = ColumnBuilder()
    with _using(pool, workers) as ex:
        for r in ex.map(_decode_range, tasks):
            _merge(g, r)
    split = EventSplitter()
    split.header, split.trailer = header, r["trailer"]
    return split.finish(g, path)


def _decode_array(array: bytes) -> dict[str, Any]:
    """Worker: the columns of one JSON array of events."""
    b = ColumnBuilder()
    try:
        b.add(ChunkDecoder().decode(array))
    except NotStreamable:
        return {"ok": False}
    return _columns_of(b)


def read_pipelined(path: Path, limit: int, workers: int, pool: Executor | None = None) -> Trace:
    """Read a trace whose text only this process can produce (a .json.gz: decompression
    is serial) with ``workers`` processes: this process decompresses and cuts the text
    into arrays of whole events, the workers decode them into columns, in order. At most
    two arrays per worker are in flight, so memory stays bounded whatever the file size.
    ``pool``: as for read_parallel."""
    split = EventSplitter(min(CHUNK_BYTES, PIPELINE_CHUNK_BYTES))
    g = ColumnBuilder()
    pending: deque[Future] = deque()
    with _using(pool, workers) as ex:
        ex.submit(int).result()  # start the workers now, while this process is small
        try:
            for array in split.arrays(text_blocks(path, limit)):
                pending.append(ex.submit(_decode_array, bytes(array)))
                del array
                while len(pending) > 2 * workers:
                    _merge(g, pending.popleft().result())
            while pending:
                _merge(g, pending.popleft().result())
        finally:
            for f in pending:
                f.cancel()
    return split.finish(g, path)
