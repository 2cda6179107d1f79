"""Vectorised interval arithmetic on sorted, disjoint interval sets.

An interval set is a pair of float arrays ``(starts, ends)``, sorted and
non-overlapping (what :func:`union` returns). ``covered(U, x)`` is the total
length of ``U`` in ``(-inf, x]`` for many ``x`` at once; every measure of an
overlap below is a difference of it, so no Python loop runs per interval.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.zeros(0), np.zeros(0))


def union(starts: np.ndarray, ends: np.ndarray, own_ends: bool = False) -> Intervals:
    """Merge possibly overlapping intervals into a sorted disjoint set. ``own_ends``: the
    caller gives up ``ends`` (a float64 array of its own), which is then worked on in
    place: one array the size of the input fewer."""
    if len(starts) == 0:
        return EMPTY
    s = np.asarray(starts, dtype=np.float64)
    if bool(np.all(s[1:] >= s[:-1])):  # already in order (events in file order mostly are)
        run_end = ends if own_ends and ends.dtype == np.float64 else np.array(
            ends, dtype=np.float64)
    else:
        order = np.argsort(starts, kind="stable")
        s = s[order]
        run_end = np.asarray(ends, dtype=np.float64)[order]
        del order  # temporaries the size of the input, one at a time (large traces)
    np.maximum(run_end, s, out=run_end)
    np.maximum.accumulate(run_end, out=run_end)
    # a new group starts where an interval begins after everything before it ended
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    last = np.append(first[1:] - 1, len(s) - 1)  # run_end only grows: a group's end is its last
    return s[first], run_end[last]


def union_taken(pair: list[np.ndarray]) -> Intervals:
    """:func:`union` of ``[starts, ends]`` (float64 arrays no one else holds), taken out of
    ``pair`` and freed as soon as they are used: two arrays the size of the input fewer at
    the peak than the caller holding them."""
    ends = pair.pop()
    starts = pair.pop()
    if len(starts) == 0 or bool(np.all(starts[1:] >= starts[:-1])):
        return union(starts, ends, own_ends=True)
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    ends = ends[order]
    del order
    return union(starts, ends, own_ends=True)


def measure(u: Intervals) -> float:
    return float(np.sum(u[1] - u[0]))


def covered(u: Intervals, x: np.ndarray | float) -> np.ndarray:
    """Length of ``u`` within ``(-inf, x]``, for each x."""
    s, e = u
    x = np.asarray(x, dtype=np.float64)
    if len(s) == 0:
        return np.zeros_like(x)
    cum = np.concatenate(([0.0], np.cumsum(e - s)))
    k = np.searchsorted(s, x, side="right")  # intervals starting at or before x
    total = cum[k]
    # the last of those may extend past x: take off the part after x
    last_end = e[np.maximum(k - 1, 0)]
    over = np.where(k > 0, np.maximum(last_end - x, 0.0), 0.0)
    return total - over


def measure_between(u: Intervals, lo: np.ndarray | float, hi: np.ndarray | float) -> np.ndarray:
    """Length of ``u`` inside each window [lo, hi]."""
    return np.maximum(covered(u, hi) - covered(u, lo), 0.0)


def overlap(a: Intervals, b: Intervals) -> float:
    """Total length of the intersection of two disjoint sets."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0.0
    return float(np.sum(measure_between(b, a[0], a[1])))


def reaching(u: Intervals, lo: float, hi: float) -> Intervals:
    """The intervals of ``u`` that reach into [lo, hi] (views: ``u`` is sorted and disjoint,
    so its ends are sorted too)."""
    s, e = u
    i, j = np.searchsorted(e, lo, side="left"), np.searchsorted(s, hi, side="right")
    return s[i:j], e[i:j]


def clip(u: Intervals, lo: float, hi: float) -> Intervals:
    s, e = u
    keep = (e > lo) & (s < hi)
    return np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi)


def gaps(u: Intervals, lo: float, hi: float) -> Intervals:
    """The complement of ``u`` within [lo, hi]."""
    s, e = clip(u, lo, hi)
    gs = np.concatenate(([lo], e))
    ge = np.concatenate((s, [hi]))
    keep = ge > gs
    return gs[keep], ge[keep]


def contains(u: Intervals, x: np.ndarray) -> np.ndarray:
    """For each point x: is it inside (start < x <= end) some interval of u?"""
    s, e = u
    x = np.asarray(x, dtype=np.float64)
    if len(s) == 0:
        return np.zeros(x.shape, dtype=bool)
    k = np.searchsorted(s, x, side="left") - 1
    ok = k >= 0
    kk = np.maximum(k, 0)
    return ok & (x <= e[kk]) & (x > s[kk])


def inside(u: Intervals, x: np.ndarray) -> np.ndarray:
    """For each point x: is it inside (start <= x < end) some interval of u?"""
    s, e = u
    x = np.asarray(x, dtype=np.float64)
    if len(s) == 0:
        return np.zeros(x.shape, dtype=bool)
    k = np.searchsorted(s, x, side="right") - 1
    kk = np.maximum(k, 0)
    return (k >= 0) & (x < e[kk])


def merge(*sets: Intervals) -> Intervals:
    if not sets:
        return EMPTY
    return union(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))
