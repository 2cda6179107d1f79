"""JSON number texts into a float64 column, exactly as msgspec decodes them, in numpy.

The chunked readers take an event's ``ts`` as its JSON text (``msgspec.Raw``): a time in
microseconds since the epoch has 16 integer digits, and with a fraction msgspec often
leaves its fast path for it (an exactly representable value such as ``...936.5`` goes
to its slow, exact fallback). The texts of a chunk are joined, one space apart, and read
here a column of digits at a time (a chunk's texts usually share one layout):

- the integer digits make ``I``, the ``k`` fraction digits ``F`` (uint64, exact); the
  value is ``x = I + F / 10**k``, correctly rounded to float64 as msgspec rounds it;
- ``M = I * 10**k + F < 2**53``: ``M / 10**k``, two exact float64s divided, rounds once
  (msgspec's own fast path);
- ``2 * 10**k <= I < 2**53``: ``I + F / 10**k`` in float64. The quotient is off by at most
  2**-54, and every point where rounding to float64 changes (halfway between two
  float64s near ``x``, a multiple of 2**-t with ``2**t * 10**k < 2**54`` for such ``I``)
  is at least ``1 / (2**t * 10**k)`` from ``x`` unless it is ``x`` itself, which is then a
  float64 the quotient holds exactly: the sum rounds as ``x`` does;
- otherwise: ``M / 10**k`` in extended precision (64-bit mantissa, where numpy has it),
  then float64; rounding twice differs from rounding once only where the first result is
  exactly halfway between two float64s: those are left to msgspec.

msgspec decodes whatever else there is (an exponent, over 19 digits, ``-0`` written as an
integer, which msgspec reads as the integer 0), so every value is the float msgspec gives;
a value that is not a number raises ``NotNumbers`` (a NotStreamable). An empty text (no field) is NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from .cut import NotStreamable

__all__ = ["NotNumbers", "floats"]


class NotNumbers(NotStreamable):
    """A text that msgspec does not decode as a float: the chunk does not validate as
    typed events, and the caller reads the whole document (as for any NotStreamable)."""


_FLOATS = msgspec.json.Decoder(list[float])
_SPACE, _DOT, _MINUS, _ZERO, _NINE = b" ."[0], b" ."[1], b"-"[0], b"0"[0], b"9"[0]
_MAX_DIGITS = 19  # below 10**19 < 2**64: exact in uint64
_WIDEST = _MAX_DIGITS + 2  # a sign, 19 digits and a point
_POW10 = np.array([10.0**i for i in range(_MAX_DIGITS + 1)])  # exact in float64 (<= 1e22)
_POW10_INT = np.array([10**i for i in range(_MAX_DIGITS + 1)], dtype=np.uint64)
_EXTENDED = np.finfo(np.longdouble).nmant >= 63  # every M < 2**64 and 10**19 exact
_POW10_EXT = np.array([10**i for i in range(_MAX_DIGITS + 1)], dtype=np.longdouble)
_EXACT = 2**53
_SPLIT_DIGITS = 15  # F < 10**15 < 2**53: exact in float64


def floats(texts: Sequence[Any]) -> np.ndarray:
    """The float64 values of ``texts`` (JSON values as bytes-like objects; ``b""``, no
    value: NaN). NotNumbers where one is not a number."""
    n = len(texts)
    out = np.full(n, np.nan)
    if not n:
        return out
    joined = b" ".join(texts)
    a = np.frombuffer(joined, np.uint8)
    w = len(texts[0])
    if (0 < w <= _WIDEST and len(a) == n * (w + 1) - 1
            and np.count_nonzero(a == _SPACE) == n - 1
            and bool((a[w::w + 1] == _SPACE).all())):
        # the n - 1 spaces fall every w + 1 bytes: every text is w wide (the usual case)
        left = _read(a, n, w, w + 1, np.arange(n), out)
    else:
        left = _by_width(a, n, out)
    if len(left):
        _by_msgspec(texts, left, out)
    return out


def _by_width(a: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """Texts of several widths: each width's rows gathered and read; the rows left."""
    seps = np.flatnonzero(a == _SPACE)
    if len(seps) != n - 1:  # a space inside a value: no number
        return np.arange(n)
    starts = np.concatenate(([0], seps + 1))
    width = np.concatenate((seps, [len(a)])) - starts
    left = [np.flatnonzero(width > _WIDEST)]
    for w in np.unique(width[(width > 0) & (width <= _WIDEST)]).tolist():
        rows = np.flatnonzero(width == w)
        text = a[starts[rows, None] + np.arange(w)].ravel()  # one text a row, w wide
        left.append(rows[_read(text, len(rows), w, w, rows, out)])
    return np.concatenate(left)


def _read(flat: np.ndarray, m: int, w: int, stride: int, rows: np.ndarray,
          out: np.ndarray) -> np.ndarray:
    """Write the values of ``m`` texts ``w`` bytes wide, ``stride`` bytes apart in
    ``flat`` (a space between two when the stride is w + 1), to ``out[rows]``; returns
    the row numbers (into ``rows``) left for msgspec. Passes are over ``flat`` or one
    column of it (a numpy loop over short rows costs more per row than per byte)."""
    dots = flat[:w] == _DOT
    p = int(np.argmax(dots)) if dots.any() else w
    below = (m - 1 if stride > w else 0) + (m if p < w else 0)  # the spaces and points
    if not (np.count_nonzero(flat > _NINE) == 0 and np.count_nonzero(flat < _ZERO) == below
            and (p == w or bool((flat[p::stride] == _DOT).all()))):
        text = np.lib.stride_tricks.as_strided(flat, (m, w), (stride, 1), writeable=False)
        return _any_layout(text, rows, out)
    # every row: digits, and the point in column p (no sign)
    if w - (p < w) > _MAX_DIGITS:
        return np.arange(m)
    digit = flat - np.uint8(_ZERO)
    whole = _horner(digit, range(p), stride, m)
    frac = _horner(digit, range(p + 1, w), stride, m)
    k = max(w - 1 - p, 0)
    value = np.empty(m)
    _combine(whole, frac, np.full(m, k), value, left := np.zeros(m, bool))
    out[rows] = value
    return np.flatnonzero(left)


def _horner(digit: np.ndarray, cols: range, stride: int, m: int) -> np.ndarray:
    """The integer the digits in columns ``cols`` of each row make (uint64)."""
    if not len(cols):
        return np.zeros(m, np.uint64)
    acc = digit[cols[0]::stride].astype(np.uint64)
    for j in cols[1:]:
        acc *= np.uint64(10)
        acc += digit[j::stride]
    return acc


def _combine(whole: np.ndarray, frac: np.ndarray, k: np.ndarray, value: np.ndarray,
             left: np.ndarray) -> None:
    """``value = whole + frac / 10**k`` correctly rounded (see the module's docstring);
    ``left`` marks the rows that need msgspec."""
    mant = whole * _POW10_INT[k] + frac  # exact: at most 19 digits in all
    small = mant < _EXACT
    if small.all():
        np.divide(mant.astype(np.float64), _POW10[k], out=value)
        return
    value[small] = mant[small].astype(np.float64) / _POW10[k[small]]
    split = ~small & (k <= _SPLIT_DIGITS) & (whole < _EXACT) & (whole >= 2 * _POW10_INT[k])
    if split.all():
        np.add(whole.astype(np.float64), frac.astype(np.float64) / _POW10[k], out=value)
        return
    value[split] = whole[split].astype(np.float64) + frac[split] / _POW10[k[split]]
    rest = np.flatnonzero(~small & ~split)
    if not _EXTENDED:
        left[rest] = True
        return
    r = mant[rest].astype(np.longdouble) / _POW10_EXT[k[rest]]
    d = r.astype(np.float64)
    back = d.astype(np.longdouble)
    below = (back + np.nextafter(d, -np.inf).astype(np.longdouble)) / 2
    above = (back + np.nextafter(d, np.inf).astype(np.longdouble)) / 2
    value[rest] = d
    left[rest[(r == below) | (r == above)]] = True


def _any_layout(text: np.ndarray, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
    """As _read, for texts of one width in any layout (a sign, the point anywhere); when
    one is no plain number every row is left, for msgspec to read the numbers written
    with an exponent and to refuse what is no number."""
    m, w = text.shape
    digit = text - np.uint8(_ZERO)  # below 10 exactly for the digits
    is_digit = digit < 10
    is_dot = text == _DOT
    neg = text[:, 0] == _MINUS
    plain = is_digit | is_dot
    plain[:, 0] |= neg
    if not plain.all():
        return np.arange(m)
    has_dot = is_dot.any(axis=1)
    k = np.where(has_dot, w - 1 - np.argmax(is_dot, axis=1), 0)
    whole = np.zeros(m, np.uint64)
    frac = np.zeros(m, np.uint64)
    for j in range(w):
        in_frac = is_digit[:, j] & has_dot & (j > w - 1 - k)
        in_whole = is_digit[:, j] & ~in_frac
        whole = np.where(in_whole, whole * np.uint64(10) + digit[:, j], whole)
        frac = np.where(in_frac, frac * np.uint64(10) + digit[:, j], frac)
    # over 19 digits; "-0", which msgspec reads as the integer 0 (no negative zero)
    left = ((w - has_dot - neg) > _MAX_DIGITS) | (neg & (whole == 0) & ~has_dot)
    value = np.empty(m)
    _combine(whole, frac, k, value, left)
    np.negative(value, out=value, where=neg)
    out[rows] = value
    return np.flatnonzero(left)


def _by_msgspec(texts: Sequence[Any], rows: np.ndarray, out: np.ndarray) -> None:
    """msgspec's own decode of ``texts[rows]`` (empty ones stay NaN)."""
    keep = [i for i in rows.tolist() if len(texts[i])]
    if not keep:
        return
    try:
        vals = _FLOATS.decode(b"[" + b",".join([texts[i] for i in keep]) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise NotNumbers(str(e)) from None
    out[keep] = vals
