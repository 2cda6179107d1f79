"""Cutting a trace's event array into runs of whole events without parsing it.

Two layouts, two cutters:

- torch.profiler and Kineto write each event on its own line at one indentation
  (``\\n<indent>{``). A raw newline cannot occur inside a JSON string, so a cut just
  before such a line never splits a string: ``LineCutter``, a plain ``rfind``.
- Any other layout, such as one long line (``json.dump(obj, f)``: traces re-exported
  or merged by other tools and scripts): ``ScanCutter`` cuts after the values that a
  vectorised scan of the bytes (``Scanner``) finds at the top level of the array.

Neither cut is trusted. Every run of events is decoded by the typed decoder, which
validates it, and between two runs there must be exactly one comma (``event_array``).
Runs that all decode are the document's own events wherever the cuts fell (JSON has one
parse: pieces that are each a valid list of values, joined by single commas, form a
valid list of those same values); a wrong cut can only make a run fail to decode, and
the caller then reads the whole document.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from .decode import EVENTS

#: Bytes per numpy pass of the scan: a few arrays of this size stay in the CPU's cache.
SCAN_WINDOW = 2**20
# white space is JSON's own (space, tab, line feed, carriage return): text a cut leaves out
# must be exactly what the whole read would have skipped
_ARRAY_START = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_FIRST = re.compile(rb"([ \t\r\n]*)(.)", re.DOTALL)
_CLOSE = re.compile(rb"\}[ \t\r\n]*\]")
_COMMA = re.compile(rb"[ \t\r\n]*,")
_WS = b" \t\r\n"
_QUOTE, _BACKSLASH, _COMMA_BYTE = ord('"'), ord("\\"), ord(",")
_NONE = np.zeros(0, np.intp)


class NotStreamable(Exception):
    """The file's layout does not allow a chunked read: use the whole-document decode."""


class Scanner:
    """Finds where the values of a JSON array end, a window of bytes at a time.

    Per window, with numpy (no loop over bytes in Python): the quotes; of those, the
    ones escaped (after an odd run of backslashes) are dropped; the brackets (``{[]}``),
    each inside a string when an odd number of quotes precedes it (counted between
    brackets with one ``reduceat``); the depth after each bracket outside strings (a
    cumulative sum of +1/-1). A value ends where a closing bracket brings the depth back
    to 0; the array ends where one takes it below 0. The state (in a string or not, the
    depth, whether the window ended in an odd run of backslashes) carries over to the
    next window, so a window may end anywhere: inside a string, an escape sequence, a
    run of backslashes. ``depth`` starts at 0 just inside the array (and at 0 before a
    document, whose top-level object then is depth 1).
    """

    def __init__(self) -> None:
        self.in_string = False
        self.depth = 0
        self.escape = False  # the next byte is escaped (the last window ended in an odd run of \)
        self._work: tuple[np.ndarray, ...] = ()  # reused per window: new ones would page-fault

    def scan(self, buf: bytes | bytearray, start: int, end: int) -> tuple[np.ndarray, int]:
        """Scan ``buf[start:end]``, the bytes right after those already scanned.
        Returns (offsets just past each closing bracket that ends a value of the array;
        the offset of the bracket that closes the array, or -1). The scan stops at the
        array's closing bracket: the state is then that of the bytes before it."""
        ends: list[np.ndarray] = []
        close = -1
        for s in range(start, end, SCAN_WINDOW):
            found, close = self._window(buf, s, min(s + SCAN_WINDOW, end))
            ends.append(found)
            if close >= 0:
                break
        return (np.concatenate(ends) if ends else _NONE), close

    def _window(self, buf: bytes | bytearray, s: int, e: int) -> tuple[np.ndarray, int]:
        n = e - s
        if len(self._work) == 0 or len(self._work[0]) < n:
            self._work = (np.empty(n, bool), np.empty(n, np.uint8), np.empty(n, bool),
                          np.empty(n, bool))
        quote, folded, opens, closes = (w[:n] for w in self._work)
        a = np.frombuffer(buf, np.uint8, n, s)
        np.equal(a, _QUOTE, out=quote)
        if self.escape or buf.find(b"\\", s, e) >= 0:
            self._drop_escaped(a, quote)
        np.bitwise_and(a, 0xDF, out=folded)  # "{" -> "[", "}" -> "]": nothing else lands there
        np.equal(folded, 0x5B, out=opens)
        np.equal(folded, 0x5D, out=closes)
        brackets = np.flatnonzero(np.logical_or(opens, closes, out=opens))
        if not brackets.size:
            self.in_string ^= bool(np.count_nonzero(quote) & 1)
            return _NONE, -1
        # quotes before each bracket (mod 2): [0, b0), [b0, b1), ... [b_last, e) summed up
        # (a bracket is not a quote, so a repeated index counts 0)
        runs = np.add.reduceat(quote.view(np.uint8), np.concatenate(([0], brackets)),
                               dtype=np.uint8)
        odd = np.cumsum(runs, dtype=np.uint8) & 1
        outside = brackets[odd[:-1] == self.in_string]
        self.in_string ^= bool(odd[-1])
        if not outside.size:
            return _NONE, -1
        step = (a[outside] & 2).astype(np.int64) - 1  # "{" "[" have bit 1 set: +1; "}" "]": -1
        depth = np.cumsum(step)
        depth += self.depth
        below = np.flatnonzero(depth < 0)
        if below.size:  # the array ends here: the values before it, then stop
            j = int(below[0])
            self.depth = int(depth[j - 1]) if j else self.depth
            found = outside[:j][(depth[:j] == 0) & (step[:j] < 0)]
            return found + (s + 1), s + int(outside[j])
        self.depth = int(depth[-1])
        return outside[(depth == 0) & (step < 0)] + (s + 1), -1

    def _drop_escaped(self, a: np.ndarray, quote: np.ndarray) -> None:
        """Clear the quotes that a backslash escapes: those right after an odd run of
        backslashes (counting a run that began in the window before)."""
        n = len(a)
        slashes = np.flatnonzero(a == _BACKSLASH)
        if not slashes.size:
            quote[0] &= not self.escape
            self.escape = False
            return
        gaps = np.flatnonzero(np.diff(slashes) != 1)
        starts = slashes[np.concatenate(([0], gaps + 1))]
        stops = slashes[np.concatenate((gaps, [len(slashes) - 1]))] + 1
        odd = ((stops - starts) & 1).astype(bool)
        if self.escape:
            if starts[0] == 0:
                odd[0] = not odd[0]  # the run goes on from the window before
            else:
                quote[0] = False  # the first byte is the escaped one
        escaped = stops[odd]
        self.escape = bool(escaped.size) and int(escaped[-1]) == n
        quote[escaped[escaped < n]] = False


def array_start(text: bytes | bytearray) -> re.Match[bytes] | None:
    """The first ``"traceEvents": [`` in ``text`` that is a key of the top-level object
    (not inside a string or a nested value), or None."""
    scanner = Scanner()
    pos = 0
    for m in _ARRAY_START.finditer(text):
        _, close = scanner.scan(text, pos, m.start())
        pos = m.start()
        if close >= 0:
            return None
        if scanner.depth == 1 and not scanner.in_string and not scanner.escape:
            return m
    return None


def first_event(text: bytes | bytearray, pos: int) -> tuple[int, bytes | None]:
    """Where the events begin in ``text`` (the array's content starts at ``pos``), and
    the separator before each event when they stand on their own lines (``\\n<indent>{``;
    the offset is then that of the line break), else None. NotStreamable when the
    array is empty or starts with something other than an object."""
    m = _FIRST.match(text, pos)
    if m is None or m.group(2) != b"{":
        raise NotStreamable  # empty array, or not a list of objects
    space = m.group(1)
    if b"\n" not in space:
        return m.start(2), None
    indent = space.rsplit(b"\n", 1)[1]
    if indent.strip():
        raise NotStreamable
    return m.start(2) - len(indent) - 1, b"\n" + indent + b"{"


def event_array(buf: bytes | bytearray, end: int, start: int = 0, *,
                comma: bool = True) -> bytearray:
    """``[`` + the events in ``buf[start:end]`` + ``]``: one copy. ``comma``: the events
    are followed by the comma before the next event (and white space), which is left
    out. NotStreamable when that comma is not there or there are no events: two values
    not separated by exactly one comma are not a JSON list."""
    while end > start and buf[end - 1] in _WS:
        end -= 1
    if comma:
        if end <= start or buf[end - 1] != _COMMA_BYTE:
            raise NotStreamable
        end -= 1
        while end > start and buf[end - 1] in _WS:
            end -= 1
    if end <= start:
        raise NotStreamable
    payload = bytearray(b"[")
    with memoryview(buf) as mv:
        payload += mv[start:end]
    payload += b"]"
    return payload


class ScanCutter:
    """Cuts after the last top-level value (followed by its comma) that ``Scanner`` has
    found; knows where the array ends. The buffer holds the array's content from offset
    ``lo`` (a value starts there); each call scans only the bytes added since the last."""

    def __init__(self, lo: int = 0) -> None:
        self.lo = lo
        self.scanner = Scanner()
        self.pos = lo  # buf[:pos] is scanned
        self.ends: list[int] = []  # the last value ends found (at most two)
        self.close = -1  # the array's closing bracket, once found

    def _scan(self, buf: bytes | bytearray, end: int) -> None:
        if self.close < 0 and end > self.pos:
            found, self.close = self.scanner.scan(buf, self.pos, end)
            self.pos = end
            self.ends = (self.ends + found[-2:].tolist())[-2:]

    def cut(self, buf: bytes | bytearray, end: int) -> int:
        """An offset k (> lo) such that ``buf[lo:k]`` holds whole values and the comma
        after the last of them; -1 when ``buf[:end]`` has none yet."""
        self._scan(buf, end)
        limit = end if self.close < 0 else self.close
        for e in reversed(self.ends):
            m = _COMMA.match(buf, e, limit)
            if m:
                return m.end()
        return -1

    def moved(self, n: int) -> None:
        """The buffer's content after ``lo + n`` moved to ``lo`` (the cut part went)."""
        self.pos -= n
        if self.close >= 0:
            self.close -= n
        self.ends = [e - n for e in self.ends if e - n > self.lo]

    def last(self, buf: bytes | bytearray, end: int) -> tuple[int, int]:
        """(where the last events end, where the rest of the document begins)."""
        self._scan(buf, end)
        if self.close < 0:
            raise NotStreamable  # the array does not end
        return self.close, self.close + 1


class LineCutter:
    """Cuts just before the last ``sep`` (``\\n<indent>{``) in the buffer, whose content
    starts with one at ``lo``. Where a whole buffer has none after the first (events not
    on their own lines after all, or one event longer than the buffer), it scans from
    there on, as ScanCutter (``lo`` is the start of an event)."""

    def __init__(self, sep: bytes, lo: int = 0) -> None:
        self.sep = sep
        self.lo = lo
        self.scan: ScanCutter | None = None

    def cut(self, buf: bytes | bytearray, end: int) -> int:
        if self.scan is None:
            k = buf.rfind(self.sep, self.lo + 1, end)
            if k > 0:
                return k
            self.scan = ScanCutter(self.lo)
        return self.scan.cut(buf, end)

    def moved(self, n: int) -> None:
        if self.scan is not None:
            self.scan.moved(n)

    def last(self, buf: bytes | bytearray, end: int) -> tuple[int, int]:
        """As ScanCutter.last: the closing bracket is the first ``]`` after a ``}`` at
        which the last event decodes (a ``]`` inside the event cannot leave it decodable)."""
        if self.scan is not None:
            return self.scan.last(buf, end)
        for m in _CLOSE.finditer(buf, self.lo, end):
            try:
                EVENTS.decode(event_array(buf, m.start() + 1, self.lo, comma=False))
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError,
                    RecursionError, NotStreamable):
                continue
            return m.start() + 1, m.end()
        raise NotStreamable


Cutter = LineCutter | ScanCutter


def cutter(sep: bytes | None, lo: int = 0) -> Cutter:
    """The cutter for events separated by ``sep`` (None: any layout)."""
    return ScanCutter(lo) if sep is None else LineCutter(sep, lo)
