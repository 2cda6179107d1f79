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


@pytest.mark.parametrize("seed", range(4))
def test_union_of_taken_arrays_equals_the_union(seed):
    """The union that frees its inputs as it goes gives the union, sorted or not, and
    takes the arrays out of the list it was given."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 1000, 300).astype(float)
    if seed % 2:
        s = np.sort(s)
    e = s + rng.integers(0, 30, 300)
    want = iv.union(s, e)
    pair = [s.copy(), e.copy()]
    got = iv.union_taken(pair)
    assert pair == []
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert iv.union_taken([np.zeros(0), np.zeros(0)])[0].size == 0


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


def _metrics(path):
    from diagnose.metrics.core import analyse
    from diagnose.trace import read_trace

    m = analyse(read_trace(path)).metrics
    return m.values, m.series


@pytest.mark.parametrize("scenario", ["zero_grad_fill", "dataloader_bound", "launch_bound",
                                      "cpu_only"])
def test_metrics_made_a_few_events_or_steps_at_a_time_are_the_same(tmp_path, monkeypatch,
                                                                   scenario):
    """The areas that work a chunk of events (or a group of steps) at a time, so that a
    large trace's temporaries stay small, give what one pass gives: here with chunks of 7
    events, one step a group, and the GPU's idle gaps 2 at a time."""
    from diagnose.metrics import breakdown, idle, optimizer, window
    from tests import tracebuilder as tb

    path = getattr(tb, scenario)().write(tmp_path / "t.json.gz")
    whole = _metrics(path)
    for module in (breakdown, optimizer, window):
        monkeypatch.setattr(module, "CHUNK", 7)
    monkeypatch.setattr(idle, "GAP_CHUNK", 2)
    chunked = _metrics(path)
    assert chunked[0].keys() == whole[0].keys() and chunked[1].keys() == whole[1].keys()
    for k, v in whole[0].items():
        assert chunked[0][k] == (pytest.approx(v, rel=1e-9, nan_ok=True)
                                 if isinstance(v, float) else v), k
    for k, v in whole[1].items():
        assert chunked[1][k] == pytest.approx(v, rel=1e-9), k
