"""The timeline files: written as the run goes, read back whole, and a torn end (a killed
run) costs only the torn line or record."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnose.watching.timeline import STEP_DTYPE, TimelineWriter, read_timeline, timeline_files


def _write(tmp_path: Path, rank: int | None = None) -> TimelineWriter:
    w = TimelineWriter(tmp_path, rank)
    w.record("meta", version=1, rank=rank)
    w.steps(0, np.arange(5, dtype=float), np.full(5, 10.0), np.full(5, 1.0))
    w.record("alarm", step=3, signal="step_time", kind="change", before=10.0, after=12.0)
    w.record("block", first=0, count=5, ms_median=10.0)
    w.flush()
    return w


def test_records_and_steps_round_trip(tmp_path: Path) -> None:
    w = _write(tmp_path)
    w.steps(5, np.array([5.0]), np.array([float("nan")]), np.array([2.0]))
    w.record("end", steps=6)
    w.close()
    tl = read_timeline(tmp_path)
    assert tl is not None and tl["complete"]
    assert tl["steps"]["ms"][:5].tolist() == [10.0] * 5 and len(tl["steps"]["t"]) == 6
    assert tl["alarms"][0]["kind"] == "change" and tl["alarms"][0]["type"] == "alarm"
    assert tl["blocks"][0]["count"] == 5
    assert tl["end"]["steps"] == 6


def test_a_torn_end_is_skipped(tmp_path: Path) -> None:
    _write(tmp_path)  # never closed: the process "died" after its flush
    jsonl, steps = timeline_files(None)
    with open(tmp_path / jsonl, "a") as fh:
        fh.write('{"type": "alarm", "step": 9')  # half a line
    with open(tmp_path / steps, "ab") as fh:
        fh.write(b"\x00" * (STEP_DTYPE.itemsize // 2))  # half a record
    tl = read_timeline(tmp_path)
    assert tl is not None and not tl["complete"] and tl["end"] is None
    assert len(tl["steps"]["ms"]) == 5 and len(tl["alarms"]) == 1


def test_ranks_have_files_of_their_own(tmp_path: Path) -> None:
    _write(tmp_path, rank=2).close()
    assert timeline_files(2) == ("watch.rank2.jsonl", "watch.rank2.steps.bin")
    assert read_timeline(tmp_path) is None
    assert read_timeline(tmp_path, rank=2) is not None


def test_lost_steps_keep_their_positions(tmp_path: Path) -> None:
    w = TimelineWriter(tmp_path)
    w.record("meta", version=1)
    w.steps(0, np.zeros(2), np.ones(2), np.zeros(2))
    w.steps(4, np.zeros(1), np.full(1, 7.0), np.zeros(1))  # steps 2 and 3 never came
    w.close()
    tl = read_timeline(tmp_path)
    assert tl is not None
    assert tl["steps"]["ms"].tolist() == [1.0, 1.0, 0.0, 0.0, 7.0]
    assert np.isnan(tl["steps"]["t"][2]) and "2 steps" in tl["notes"][0]["text"]
