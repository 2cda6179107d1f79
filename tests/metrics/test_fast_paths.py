"""The shortcuts taken for speed on large traces give what the general code gives."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.metrics import intervals as iv
from diagnose.trace import Kind, kind_in


@pytest.mark.parametrize("seed", range(5))
def test_union_of_sorted_starts_equals_the_sorting_path(seed):
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, 1000, 400)).astype(float)
    e = s + rng.integers(0, 30, 400)
    shuffled = rng.permutation(400)
    a, b = iv.union(s, e), iv.union(s[shuffled], e[shuffled])
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    before = e.copy()
    iv.union(s, e)
    assert np.array_equal(e, before)  # the caller's ends are not changed in place


def test_kind_in_is_isin():
    kind = np.random.default_rng(0).integers(0, len(Kind), 10_000).astype(np.int8)
    for kinds in ([], [Kind.KERNEL], [Kind.CPU_OP, Kind.ANNOTATION, Kind.RUNTIME]):
        assert np.array_equal(kind_in(kind, kinds), np.isin(kind, [int(k) for k in kinds]))


@pytest.mark.parametrize("where", ["first", "late", "none", "empty"])
def test_shared_ids_equal_the_whole_intersection(where):
    from diagnose.metrics.window import _FEW_IDS, _shared

    rng = np.random.default_rng(1)
    a = rng.permutation(np.arange(0, 40_000, 2)).astype(float)  # even ids (runtime calls)
    b = np.arange(1, 2 * _FEW_IDS + 101, 2).astype(float)  # odd ids (device ops)
    a[::7], b[::5] = np.nan, np.nan  # calls and ops without an id
    if where == "first":
        b[3] = a[10]
    elif where == "late":  # only past the ids tried first: the whole intersection finds it
        b[-1] = a[-2]
    elif where == "empty":
        b = b[:0]
    got = _shared(a, b)
    whole = bool(len(np.intersect1d(a[~np.isnan(a)], b[~np.isnan(b)])))
    assert got is whole and got is (where in ("first", "late"))
