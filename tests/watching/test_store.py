"""The step store keeps recent steps in full and the rest in fixed-size blocks: memory stays
bounded however many steps come, and every step reaches the writer before it is dropped."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from diagnose.watching.store import BLOCK_FIELDS, StepStore


def test_two_million_steps_keep_memory_bounded() -> None:
    handed = [0]

    def on_steps(first: int, t: np.ndarray, ms: np.ndarray, wait: np.ndarray) -> None:
        assert first == handed[0]  # continuous: no step lost, none twice
        handed[0] += len(t)

    s = StepStore(ring=4096, block=1000, max_blocks=256, on_steps=on_steps)
    size0 = s.nbytes
    rng = np.random.default_rng(0)
    ms = (10 + rng.random(2_000_000)).tolist()
    for i in range(1_900_000):
        s.add(i * 0.01, ms[i], 0.5)
    tracemalloc.start()  # the last 100k steps traced (tracing slows every allocation)
    for i in range(1_900_000, 1_950_000):
        s.add(i * 0.01, ms[i], 0.5)
    mid, _ = tracemalloc.get_traced_memory()
    for i in range(1_950_000, 2_000_000):
        s.add(i * 0.01, ms[i], 0.5)
    end, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    s.take_new()
    assert handed[0] == s.n == 2_000_000
    assert s.nbytes == size0  # arrays allocated once
    assert end - mid < 64 * 1024, (mid, end)  # no growth with the steps
    assert s.nblocks <= 256 and s.merges >= 3
    rows = s.block_rows()
    assert sum(r["count"] for r in rows) == 2_000_000  # counts are exact after merging
    assert rows[0]["first"] == 0 and rows[0]["t0"] == 0.0
    assert min(r["ms_min"] for r in rows) == pytest.approx(min(ms), abs=1e-3)
    assert max(r["ms_max"] for r in rows) == pytest.approx(max(ms), abs=1e-3)


def test_blocks_summarise_their_steps() -> None:
    got = []
    s = StepStore(ring=64, block=10, max_blocks=4, on_block=got.append)
    for i in range(35):
        s.add(float(i), float(i), float(i) / 10)
    assert len(got) == 3 and set(got[0]) == set(BLOCK_FIELDS)
    b = got[1]
    assert (b["first"], b["count"], b["t0"], b["t1"]) == (10, 10, 10.0, 19.0)
    assert b["ms_median"] == pytest.approx(14.5) and b["ms_min"] == 10 and b["ms_max"] == 19
    assert b["wait_p90"] == pytest.approx(np.percentile(np.arange(10, 20) / 10, 90), rel=1e-5)


def test_merging_halves_the_table_and_keeps_the_ends_exact() -> None:
    s = StepStore(ring=64, block=10, max_blocks=4)
    for i in range(50):  # five blocks into a table of four: one merge
        s.add(float(i), float(i), 0.0)
    rows = s.block_rows()
    assert s.merges == 1 and [r["count"] for r in rows] == [20, 20, 10]
    assert [r["first"] for r in rows] == [0, 20, 40]
    assert rows[0]["ms_min"] == 0 and rows[0]["ms_max"] == 19 and rows[0]["t1"] == 19
    assert rows[0]["ms_median"] == pytest.approx((4.5 + 14.5) / 2)  # the stated approximation


def test_recent_steps_read_back_in_order() -> None:
    s = StepStore(ring=32, block=10)
    for i in range(100):
        s.add(float(i), float(i), 2.0 * i)
    t, ms, wait = s.last(5)
    assert ms.tolist() == [95, 96, 97, 98, 99] and wait[-1] == 198
    t, ms, _ = s.span(90, 93)
    assert ms.tolist() == [90, 91, 92]
    _, ms, _ = s.span(0, 80)  # the ring holds only the last 32
    assert ms[0] == 68 and len(ms) == 12


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        StepStore(ring=10, block=10)
