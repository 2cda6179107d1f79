"""Parallel read of one large plain-JSON trace: byte ranges decoded in worker processes.

The layout facts of the streaming reader (events start on their own line at a fixed
indentation, so a cut just before ``\\n<indent>{`` never splits a string or an event)
let the file be cut into byte ranges without parsing it: each cut point is found by
reading a small window around a target offset. Each worker reads its own range from
the file, decodes it into columns (with its own intern tables) and sends the columns
back; the parent maps the workers' name/pid/tid ids onto one table. Decoding and
column building, most of the time on a large file, then run on every CPU.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from .decode import Decoded, Document, _props
from .model import ColumnBuilder, Trace
from .stream import _ARRAY_START, _CLOSE, _EVENTS, CHUNK_BYTES, NotStreamable, _decode_events

#: Plain files at least this large are read in parallel when there are 2+ CPUs.
PARALLEL_MIN_BYTES = 64 * 2**20
_WINDOW = 2**20
_DOC = msgspec.json.Decoder(Document)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _layout(path: Path) -> tuple[bytes, int, bytes]:
    """(header, offset of the first event's line break, separator before each event)."""
    with open(path, "rb") as f:
        head = f.read(8 * _WINDOW)
    m = _ARRAY_START.search(head)
    if m is None:
        raise NotStreamable
    first = re.match(rb"(\s*)\{", head[m.end():])
    if first is None or b"\n" not in first.group(1):
        raise NotStreamable
    indent = first.group(1).rsplit(b"\n", 1)[1]
    if indent.strip():
        raise NotStreamable
    start = m.end() + first.end(1) - len(indent) - 1
    return head[: m.start()], start, b"\n" + indent + b"{"


def _cuts(path: Path, start: int, size: int, sep: bytes, parts: int) -> list[int]:
    """Offsets, each just before an event, dividing [start, size) into about ``parts``."""
    cuts = [start]
    step = (size - start) // parts
    with open(path, "rb") as f:
        for k in range(1, parts):
            target = start + k * step
            if target <= cuts[-1]:
                continue
            f.seek(target)
            window = f.read(16 * _WINDOW)
            i = window.find(sep)
            if i < 0:
                continue  # one very long event: merge this range into the next
            cuts.append(target + i)
    return cuts


def _decode_range(args: tuple[str, int, int, bool]) -> dict[str, Any]:
    """Worker: columns of the events in [start, end), read in blocks so that a worker
    holds one chunk of text at a time; the last range also returns the document's
    trailer (what follows the event array)."""
    path, start, end, last = args
    b = ColumnBuilder()
    trailer = None
    buf = bytearray()
    sep = b""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start
            while left > 0:
                block = f.read(min(_WINDOW, left))
                if not block:
                    break
                left -= len(block)
                buf += block
                if not sep:
                    sep = bytes(buf[: buf.index(b"{") + 1])  # a range starts at "\n<indent>{"
                if len(buf) >= CHUNK_BYTES:
                    cut = buf.rfind(sep, 1)
                    if cut > 0:
                        b.add(_decode_events(buf, cut))
                        del buf[:cut]
        if last:
            cut = buf.rfind(sep, 1) if sep else -1
            if cut > 0:
                b.add(_decode_events(buf, cut))
                del buf[:cut]
            for m in _CLOSE.finditer(buf):
                try:
                    b.add(_EVENTS.decode(b"[" + bytes(buf[: m.start() + 1]) + b"]"))
                except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError,
                        RecursionError):
                    continue
                trailer = bytes(buf[m.end():])
                break
            if trailer is None:
                raise NotStreamable
        elif buf.strip():
            b.add(_decode_events(buf, len(buf)))
    except (NotStreamable, ValueError):
        return {"ok": False}
    return {"ok": True, "parts": b.parts, "names": b.names.values(), "pids": b.pids.values(),
            "tids": b.tids.values(), "n": b.n_total, "trailer": trailer}


def read_parallel(path: Path, limit: int, workers: int) -> Trace:
    """Read a large plain-JSON trace with ``workers`` processes (NotStreamable if the
    layout does not allow it, or on a platform without fork)."""
    if sys.platform != "linux":
        raise NotStreamable
    size = path.stat().st_size
    if size > limit:
        raise NotStreamable  # the whole-document path gives the clear error
    header, start, sep = _layout(path)
    cuts = _cuts(path, start, size, sep, workers * 4)
    bounds = [*cuts, size]
    tasks = [(str(path), bounds[i], bounds[i + 1], i == len(cuts) - 1)
             for i in range(len(cuts))]
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        results = list(pool.map(_decode_range, tasks))
    if not all(r["ok"] for r in results):
        raise NotStreamable
    g = ColumnBuilder()
    for r in results:
        maps = {}
        for key, table in (("name_id", g.names), ("pid_id", g.pids), ("tid_id", g.tids)):
            local = r[{"name_id": "names", "pid_id": "pids", "tid_id": "tids"}[key]]
            maps[key] = np.fromiter(map(table.__getitem__, local), np.int32, len(local))
        for part in r["parts"]:
            for key, remap in maps.items():
                if len(part[key]):
                    part[key] = remap[part[key]]
            g.parts.append(part)
        g.n_total += r["n"]
    try:
        doc = _DOC.decode(header + b'"traceEvents": []' + (results[-1]["trailer"] or b""))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise NotStreamable from None
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
    return g.finish(path, Decoded([], _props(doc), dist, doc.schemaVersion))
