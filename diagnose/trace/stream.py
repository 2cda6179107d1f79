"""Streaming read of large traces: the event array is decoded a chunk at a time.

A trace file is mostly one JSON array, ``traceEvents``. The text is cut into runs of
whole events without parsing it (``cut.py``: just before each ``\\n<indent>{`` line where
events stand on their own lines, as torch.profiler writes them; after the values that a
vectorised, string-aware scan finds at the top level of the array in any other layout,
such as one long line). Every chunk is decoded by the typed decoder, which validates it.
Each chunk becomes columns and its structs are freed, so peak memory is the columns plus
one chunk, not the whole file as Python objects (nor, for .gz, the whole decompressed
text).

Anything unexpected (an odd layout, a value the typed decoder refuses) raises
NotStreamable and the caller falls back to the whole-document decode, which has the
lenient path and the precise error messages.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ..errors import TraceError
from . import inflate
from .columns import ColumnBuilder, Trace
from .cut import NotStreamable, array_start, cutter, event_array, first_event
from .decode import (
    BOM,
    CHUNK_EVENTS,
    CHUNK_EVENTS_BY_PHASE,
    ChunkEvent,
    Decoded,
    Document,
    _props,
)

__all__ = ["ChunkDecoder", "EventSplitter", "NotStreamable", "read_streaming", "text_blocks"]

CHUNK_BYTES = 8 * 2**20  # decoded per step: ~40-80k events
BLOCK_BYTES = 2**20  # read from disk per step
_HEADER_SCAN_LIMIT = 64 * 2**20
_DOC = msgspec.json.Decoder(Document)


def _plain_blocks(path: Path, limit: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise TraceError(path, f"larger than the {limit} byte limit "
                                   "(set TORCH_DIAGNOSE_MAX_TRACE_BYTES to raise it)")
        while block := f.read(BLOCK_BYTES):
            yield block


def _gzip_blocks(path: Path, limit: int) -> Iterator[bytes]:
    """Decompressed blocks of every gzip member, within ``limit`` bytes in all."""
    size = 0
    d = inflate.gzip_member()
    fed = False  # the current member has had input but has not ended yet
    pending = b""  # compressed input not yet consumed by the decompressor
    with open(path, "rb") as f:
        while True:
            if not pending:
                pending = f.read(BLOCK_BYTES)
                if not pending:
                    break
            try:
                out = d.decompress(pending, BLOCK_BYTES * 4)  # bounded output: no bombs
            except inflate.ERRORS as e:
                raise TraceError(path, f"corrupt gzip data ({e})") from None
            pending = d.unconsumed_tail
            fed = True
            size += len(out)
            if size > limit:
                raise TraceError(path, f"decompresses past the {limit} byte limit "
                                       "(set TORCH_DIAGNOSE_MAX_TRACE_BYTES to raise it)")
            if out:
                yield out
            if d.eof:
                pending = d.unused_data
                if len(pending) < 2:  # the next member's magic may begin in the next block
                    pending += f.read(BLOCK_BYTES)
                d, fed = inflate.gzip_member(), False
                if pending and pending[:2] != inflate.MAGIC:
                    break  # trailing garbage after the last member: ignored, as gzip(1) does
    if fed:
        raise TraceError(path, "truncated gzip file (compressed stream ends early)")


class ChunkDecoder:
    """Decodes runs of events, by phase (flows come out field-less, see decode.py) until a
    chunk has an event without a known phase; from then on as plain events. Each event's
    ``ts`` stays text (``ChunkEvent``) until the chunk becomes columns."""

    def __init__(self) -> None:
        self.by_phase = True

    def __call__(self, buf: bytearray, end: int, start: int = 0) -> list[ChunkEvent]:
        """Decode the events in ``buf[start:end]`` (whole events, then a comma)."""
        return self.decode(event_array(buf, end, start))

    def decode(self, payload: bytes | bytearray | memoryview) -> list[ChunkEvent]:
        """Decode ``[...]``; NotStreamable when it is not a valid list of events."""
        try:
            if self.by_phase:
                try:
                    return CHUNK_EVENTS_BY_PHASE.decode(payload)
                except msgspec.ValidationError:
                    self.by_phase = False
            return CHUNK_EVENTS.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError,
                RecursionError):
            raise NotStreamable from None


class EventSplitter:
    """Cuts a trace's text, given as blocks, into JSON arrays of whole events (each about
    CHUNK_BYTES) without parsing it; what comes before the event array (``header``) and
    after it (``trailer``) is kept for the document's other fields."""

    def __init__(self, chunk_bytes: int | None = None) -> None:
        self.chunk_bytes = chunk_bytes
        self.header = b""
        self.trailer: bytes | None = None

    def arrays(self, blocks: Iterator[bytes]) -> Iterator[bytearray]:
        """The event arrays; NotStreamable when the layout does not allow the cut."""
        buf = bytearray()
        # 1. the header, up to the start of the event array
        m = None
        for block in blocks:
            buf += block
            m = array_start(buf)
            if m or len(buf) > _HEADER_SCAN_LIMIT:
                break
        if m is None:
            raise NotStreamable
        self.header = bytes(buf[: m.start()])
        del buf[: m.end()]
        # 2. the layout: events on their own lines, or not
        while not buf.strip():
            more = next(blocks, None)
            if more is None:
                break
            buf += more
        start, sep = first_event(buf, 0)
        del buf[:start]
        cut = cutter(sep)
        # 3. the events, a chunk at a time; the buffer always starts at an event
        chunk = self.chunk_bytes or CHUNK_BYTES
        for block in blocks:
            buf += block
            if len(buf) < chunk:
                continue
            k = cut.cut(buf, len(buf))
            if k <= 0:
                continue
            yield event_array(buf, k)
            del buf[:k]
            cut.moved(k)
        # 4. the last events, the end of the array, and the rest of the document
        k = cut.cut(buf, len(buf))
        if k > 0:
            yield event_array(buf, k)
            del buf[:k]
            cut.moved(k)
        end, rest = cut.last(buf, len(buf))
        last = event_array(buf, end, comma=False)
        self.trailer = bytes(buf[rest:])
        yield last

    def finish(self, builder: ColumnBuilder, path: Path) -> Trace:
        """The Trace: the builder's columns and the document's other fields."""
        try:
            doc = _DOC.decode(self.header.removeprefix(BOM) + b'"traceEvents": []'
                              + (self.trailer or b""))
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError,
                RecursionError):
            raise NotStreamable from None
        if b'"traceEvents"' in (self.trailer or b""):
            raise NotStreamable  # a second event array: the whole read takes the last one
        dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
        return builder.finish(path, Decoded([], _props(doc), dist, doc.schemaVersion))


def text_blocks(path: Path, limit: int) -> Iterator[bytes]:
    """The file's text in blocks, decompressed when gzipped (within ``limit`` bytes)."""
    gz = inflate.is_gzip(path)
    return _gzip_blocks(path, limit) if gz else _plain_blocks(path, limit)


def read_streaming(path: Path, limit: int) -> Trace:
    """Read ``path`` chunk by chunk in this process; NotStreamable when its layout does
    not allow it."""
    split = EventSplitter()
    builder = ColumnBuilder()
    decode = ChunkDecoder()
    for array in split.arrays(text_blocks(path, limit)):
        builder.add(decode.decode(array))
    return split.finish(builder, path)
