"""Parallel read of one large trace: ranges of its text decoded in worker processes.

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

A gzipped file's text exists only as it is decompressed, serially: each worker decompresses
it from the start up to its own range's end (fast with ISA-L) and finds its range's ends
by the same rule on the same text, so ranges meet at one event (``read_text_ranges``).
Where that fails, this process decompresses and cuts the text and the workers decode its
arrays (``read_pipelined``).
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import re
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TraceError
from . import inflate
from .columns import ColumnBuilder, Trace, give_back_freed
from .cut import Cutter, array_start, cutter, event_array, first_event
from .stream import CHUNK_BYTES, ChunkDecoder, EventSplitter, NotStreamable, text_blocks

__all__ = ["BrokenProcessPool", "fork_pool", "read_parallel", "read_pipelined",
           "read_text_ranges"]

#: Plain files at least this large are read in parallel when there are 2+ CPUs.
PARALLEL_MIN_BYTES = 64 * 2**20
#: Gzipped files at least this large (compressed; ~10x that as text) are decoded by
#: worker processes while this one decompresses.
PIPELINE_MIN_GZ_BYTES = 4 * 2**20
#: Text sent to a worker per task by the pipelined read (smaller than CHUNK_BYTES: each
#: array exists in this process, in the pipe and in the worker).
PIPELINE_CHUNK_BYTES = 4 * 2**20
_WINDOW = 2**20
#: Ranges per worker of read_text_ranges. A range's worker decompresses the text from its
#: start to the range's end, so more ranges cost more decompression; each range's columns
#: come back in one message, which this process holds twice while it unpickles them, so
#: fewer cost memory (this process's peak: the columns it holds and the last message's
#: twice). 4 shrinking ranges a worker: the peak under half the text on a large trace
#: (the timings: benchmarks/NOTES.md, "the .gz read")
TEXT_RANGES_PER_WORKER = 4
#: Ranges per worker of read_parallel. A worker builds its range's columns whole before it
#: sends them, and this process holds the last message twice while it unpickles it: both
#: peaks shrink with the range, while each range adds a message and a task (a few ms).
#: 8 ranges a worker: every process's peak together on a large trace lies in the
#: analysis after the read, not in the read (benchmarks/NOTES.md, "The read's ranges")
RANGES_PER_WORKER = 8
#: Text a worker of the parallel read decodes at a time (its buffer): the events of one
#: chunk, decoded, take several times its size until they are columns, beside a gzipped
#: file's inflated blocks. Workers live while this process gathers their columns, so what
#: they hold counts with it: larger chunks raise every process's peak, smaller ones add
#: per-chunk overhead (the same time at 1-8 MB: benchmarks/NOTES.md, "the .json.gz read")
RANGE_CHUNK_BYTES = 2 * 2**20


def _layout(path: Path) -> tuple[bytes, int, bytes | None]:
    """(header, offset where the events begin, separator before each event or None:
    see cut.first_event)."""
    with open(path, "rb") as f:
        return _layout_of(f.read(8 * _WINDOW))


def _layout_of(head: bytes) -> tuple[bytes, int, bytes | None]:
    """:func:`_layout` of a document's first bytes."""
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
    """Worker: columns of the events in [start, end) of a plain file (``sep``: as _layout
    gives it); the last range also returns the document's trailer (what follows the
    event array)."""
    path, start, end, last, sep = args
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        left = end - start

        def readinto(mv: memoryview) -> int:
            nonlocal left
            n = f.readinto(mv[: min(len(mv), left)]) if left > 0 else 0
            left -= n or 0
            return n or 0

        return _decode_text(readinto, last, sep)


def _decode_text(readinto: Callable[[memoryview], int], last: bool | Callable[[], bool],
                 sep: bytes | None) -> dict[str, Any]:
    """Columns of the events in a span of text that starts at an event (``readinto`` fills
    a buffer from it; 0: the span's end). The text is read into one buffer of about
    RANGE_CHUNK_BYTES, decoded there in place, and the partial event at its end moved to its
    front for the next read: a worker holds one chunk of text at a time and copies it once.
    ``last``: the span runs to the document's end, whose trailer is returned too (a
    callable: asked once the span is read). A worker runs several spans: what the last
    one's freed goes back to the system first, so its memory is this span's."""
    give_back_freed()
    b = ColumnBuilder()
    decode_events = ChunkDecoder()
    trailer = None
    buf = bytearray(b"[") + bytearray(RANGE_CHUNK_BYTES)
    filled = 1
    cut = cutter(sep, lo=1)
    try:
        while True:
            with memoryview(buf) as mv:
                n = readinto(mv[filled:])
            if not n:
                break
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
        if last() if callable(last) else last:
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
            "tids": b.tids.in_order(), "n": b.n_total, "trailer": trailer,
            "unread": sorted(b.unread), "n_unread": b.n_unread}


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
    g.unread.update(r.get("unread") or ())
    g.n_unread += int(r.get("n_unread") or 0)


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
    cuts = _cuts(path, start, size, sep, workers * RANGES_PER_WORKER)
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


class _Text:
    """A document's text as the blocks ``text_blocks`` gives (decompressed where gzipped),
    read forward with a position; text read ahead is put back. Every process that reads
    a file gets the same blocks, so a search that starts at one offset sees the same
    pieces in each, and finds the same place. Text put back is a view of its block, not a
    copy."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.pos = 0
        self.back: list[bytes | memoryview] = []
        self.to_end = False  # the text read runs to the document's end (see reader)

    def next(self) -> bytes | memoryview | None:
        piece = self.back.pop() if self.back else next(self.blocks, None)
        if piece is not None:
            self.pos += len(piece)
        return piece

    def unread(self, piece: bytes | memoryview) -> None:
        if piece:
            self.back.append(piece)
            self.pos -= len(piece)

    def skip_to(self, off: int) -> None:
        """Drop the text before ``off``."""
        while self.pos < off and (piece := self.next()) is not None:
            if self.pos > off:
                self.unread(memoryview(piece)[len(piece) - (self.pos - off):])

    def event_at_or_after(self, sep: bytes | None) -> int | None:
        """The offset of the first event at or after the position (:func:`_event_in`, the
        rule of read_parallel's cuts), the text read to find it put back; None where none
        follows."""
        start, got, buf, at = self.pos, [], bytearray(), None
        while (piece := self.next()) is not None:
            got.append(piece)
            seen = max(0, len(buf) - 1024)  # a separator across two pieces is found too
            buf += piece
            i = _event_in(bytes(buf[seen:]), sep)
            if i >= 0:
                at = start + seen + i
                break
        for piece in reversed(got):
            self.unread(piece)
        return at

    def reader(self, hi: int | None, sep: bytes | None, end: float | None = None
               ) -> Callable[[memoryview], int]:
        """A ``readinto`` for :func:`_decode_text`: the text up to ``end``, else the first
        event at or after ``hi`` (found once the position reaches it), or to its end
        (``hi`` None, or no event follows ``hi``: the document's end lies in this range,
        ``to_end``)."""
        if end is None and hi is None:
            end = math.inf
        self.to_end = end == math.inf

        def readinto(mv: memoryview) -> int:
            nonlocal end
            if end is None and hi is not None and self.pos >= hi:
                end = self.event_at_or_after(sep)
                if end is None:
                    end, self.to_end = math.inf, True
            stop = end if end is not None else hi
            assert stop is not None
            room = int(min(len(mv), stop - self.pos))
            if room <= 0 or (piece := self.next()) is None:
                return 0
            n = min(room, len(piece))
            view = memoryview(piece)  # slices of a block, not copies of it
            mv[:n] = view[:n]
            self.unread(view[n:])
            return n
        return readinto


def _decode_text_range(args: tuple[str, int, int | None, int, bytes | None, int]
                       ) -> dict[str, Any]:
    """Worker: columns of the events from the first event at or after ``lo`` (``first``:
    the array's first event, for the range at offset 0) to the first event at or after
    ``hi`` (None, or no event follows it: to the document's end, whose trailer is returned
    too), in a file's text as ``text_blocks`` gives it: a gzipped file is decompressed by
    each worker up to its range's end, and only its range is decoded. Two ranges that meet
    at an offset find the same event there."""
    path, lo, hi, first, sep, limit = args
    try:
        text = _Text(text_blocks(Path(path), limit))
        text.skip_to(lo)
        start = first if lo == 0 else text.event_at_or_after(sep)
        if start is None:
            return _columns_of(ColumnBuilder())  # no event starts at or after lo
        end: float | None = None  # found once the read reaches hi
        if hi is not None and start >= hi:
            # the event found from lo lies at or past hi (in the one-line layout its
            # match may begin before hi): the end is still the search from hi itself
            text.skip_to(hi)
            at = text.event_at_or_after(sep)
            end = math.inf if at is None else at
            if end <= start:
                return _columns_of(ColumnBuilder())  # no event starts in this range
        text.skip_to(start)
        return _decode_text(text.reader(hi, sep, end), lambda: text.to_end, sep)
    except TraceError:
        return {"ok": False}  # corrupt, or past the limit: the read that follows says so


def _text_size(path: Path) -> int:
    """The text's size: a plain file's; a gzipped one's as its last member's trailer says
    (its size mod 2**32: exact for one member under 4 GiB; only the ranges' balance
    depends on it). NotStreamable where that is less than the file (an empty or small
    last member, padding): the ranges would all fall at the text's start."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if f.read(2) != inflate.MAGIC:
            return size
        f.seek(-4, os.SEEK_END)
        text = int.from_bytes(f.read(4), "little")
    if text < size:
        raise NotStreamable
    return text


def read_text_ranges(path: Path, limit: int, workers: int, pool: Executor | None = None
                     ) -> Trace:
    """Read a trace (a .json.gz above all: its text exists only as it is decompressed)
    with ``workers`` processes, each decompressing the text up to the end of its own range
    and decoding that range alone (:func:`_decode_text_range`): this process reads the
    header and merges the columns, and no text passes between processes. NotStreamable
    where the layout does not allow it (a range that does not start at an event fails to
    decode), or where ``fork_pool`` gives no pool. ``pool``: as for read_parallel."""
    head = bytearray()
    for block in text_blocks(path, limit):
        head += block
        if len(head) >= 8 * _WINDOW:
            break
    header, start, sep = _layout_of(bytes(head))
    del head
    # ranges shrinking through the text (weights n, n - 1, ..., 1): the last columns to
    # arrive, while this process holds all the others, come in the smallest messages
    n = max(workers, 1) * TEXT_RANGES_PER_WORKER
    span, whole = max(_text_size(path), start) - start, n * (n + 1) // 2
    ends = itertools.accumulate(range(n, 1, -1))
    bounds: list[int | None] = [0, *(start + span * e // whole for e in ends), None]
    tasks = [(str(path), bounds[k], bounds[k + 1], start, sep, limit)
             for k in range(len(bounds) - 1)]
    g = ColumnBuilder()
    trailer = None
    with _using(pool, workers) as ex:
        for r in ex.map(_decode_text_range, tasks):
            _merge(g, r)
            # the range that read to the document's end (those after it found no event)
            trailer = r["trailer"] if r["trailer"] is not None else trailer
    split = EventSplitter()
    split.header, split.trailer = header, trailer
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
