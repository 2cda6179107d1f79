"""Streaming read of large traces: the event array is decoded a chunk at a time.

A trace file is mostly one JSON array, ``traceEvents``. Kineto and torch.profiler
write each event as its own block starting on a new line at a fixed indentation
(``\\n  {``). A raw newline cannot occur inside a JSON string, so cutting the array
just before such a line never cuts a string; every chunk is then decoded by the
typed decoder, which validates it. Each chunk becomes columns and its structs are
freed, so peak memory is the columns plus one chunk, not the whole file as Python
objects (nor, for .gz, the whole decompressed text).

Anything unexpected (no newline-separated events, an odd layout, a value the
typed decoder refuses) raises NotStreamable and the caller falls back to the
whole-document decode, which has the lenient path and the precise error messages.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ..errors import TraceError
from .decode import Decoded, Document, Event, _props
from .model import ColumnBuilder, Trace

CHUNK_BYTES = 8 * 2**20  # decoded per step: ~40-80k events
BLOCK_BYTES = 2**20  # read from disk per step
_HEADER_SCAN_LIMIT = 64 * 2**20
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_CLOSE = re.compile(rb"\}\s*\]")
_EVENTS = msgspec.json.Decoder(list[Event])
_DOC = msgspec.json.Decoder(Document)


class NotStreamable(Exception):
    """The file's layout does not allow a chunked read: use the whole-document decode."""


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
    d = zlib.decompressobj(wbits=31)
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
            except zlib.error as e:
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
                d, fed = zlib.decompressobj(wbits=31), False
                if pending and pending[:2] != b"\x1f\x8b":
                    break  # trailing garbage after the last member: ignored, as gzip(1) does
    if fed:
        raise TraceError(path, "truncated gzip file (compressed stream ends early)")


def _decode_events(buf: bytearray, end: int) -> list[Event]:
    """Decode the events in ``buf[:end]`` (a run of `{...},` blocks) with one copy."""
    while end > 0 and buf[end - 1] in b" \t\r\n,":
        end -= 1
    payload = bytearray(b"[")
    with memoryview(buf) as mv:
        payload += mv[:end]
    payload += b"]"
    try:
        return _EVENTS.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise NotStreamable from None


def read_streaming(path: Path, limit: int) -> Trace:
    """Read ``path`` chunk by chunk; NotStreamable when its layout does not allow it."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    blocks = _gzip_blocks(path, limit) if gz else _plain_blocks(path, limit)
    buf = bytearray()
    # 1. the header, up to the start of the event array
    m = None
    for block in blocks:
        buf += block
        m = _ARRAY_START.search(buf)
        if m or len(buf) > _HEADER_SCAN_LIMIT:
            break
    if m is None:
        raise NotStreamable
    header = bytes(buf[: m.start()])
    del buf[: m.end()]
    # 2. the indentation of the first event tells where events start
    while not buf.strip():
        block = next(blocks, None)
        if block is None:
            break
        buf += block
    first = re.match(rb"(\s*)\{", buf)
    if first is None or b"\n" not in first.group(1):
        raise NotStreamable  # empty array, or events not on their own lines
    indent = first.group(1).rsplit(b"\n", 1)[1]
    if indent.strip():
        raise NotStreamable
    sep = b"\n" + indent + b"{"
    builder = ColumnBuilder()
    # 3. the events, a chunk at a time; the buffer always starts at an event
    del buf[: first.start(1) + len(first.group(1)) - len(indent) - 1]
    for block in blocks:
        buf += block
        if len(buf) < CHUNK_BYTES:
            continue
        cut = buf.rfind(sep, 1)
        if cut <= 0:
            continue
        builder.add(_decode_events(buf, cut))
        del buf[:cut]
    # 4. the last events, the end of the array, and the rest of the document
    cut = buf.rfind(sep, 1)
    if cut > 0:
        builder.add(_decode_events(buf, cut))
        del buf[:cut]
    # The buffer now holds one event, then the array's closing bracket, then the rest of
    # the document. The closing bracket is the first `]` after a `}` at which the event
    # decodes (a `]` inside the event cannot leave it decodable).
    trailer = None
    for m in _CLOSE.finditer(buf):
        try:
            last = _EVENTS.decode(b"[" + bytes(buf[: m.start() + 1]) + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError,
                RecursionError):
            continue
        builder.add(last)
        trailer = bytes(buf[m.end():])
        break
    if trailer is None:
        raise NotStreamable
    del buf
    try:
        doc = _DOC.decode(header + b'"traceEvents": []' + trailer)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise NotStreamable from None
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
    return builder.finish(path, Decoded([], _props(doc), dist, doc.schemaVersion))
