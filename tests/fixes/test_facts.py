"""The facts fixes read (diagnose/stepmodel/facts.py): one typed field per quantity, read
from the metric of its name, None where a value is missing or of another type."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from diagnose.fixes import FIXES
from diagnose.metrics import CATALOG
from diagnose.stepmodel.facts import FIELDS, Facts
from diagnose.stepmodel.transforms import transform

#: Facts no metric measures: what autofix knows on the live objects, what a change sets
#: (grad_accum_steps), two rates a caller may give (no capture measures them yet), and
#: what the Predictor sets from the replay (loop_contention, window_pace).
NOT_METRICS = {"device_type", "bf16_supported", "fused_supported", "allow_compile",
               "iterable_dataset", "grad_accum_steps", "memcpy_h2d_pinned_gbps",
               "worker_transfer_gbps", "loop_contention", "window_pace"}
#: A good value of each field type.
GOOD = {"float | None": 2.5, "int | None": 3, "bool | None": True, "str | None": "cuda"}
#: Values of another type than each field type's (or out of its range): all read as None.
BAD = {"float | None": [True, "2.5", math.nan, math.inf, None, [1.0]],
       "int | None": [True, 2.0, "3", None, 2.5, np.float64(3.0)],
       "bool | None": [1, 0, "true", None, np.bool_(True)],
       "str | None": [1, True, None, b"cuda"]}


def _types() -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(Facts)}


def test_each_field_is_read_from_its_own_name_only() -> None:
    """A metric sets the field of its name and no other; every field is a metric of the
    catalog (of a unit its type agrees with) or one of the few facts no metric measures."""
    types = _types()
    assert set(types) == FIELDS and set(GOOD) >= set(types.values())
    assert FIELDS - set(CATALOG) == NOT_METRICS
    for name, kind in types.items():
        f = Facts.from_metrics({name: GOOD[kind]})
        set_ = {n for n in FIELDS if getattr(f, n) is not None}
        assert set_ == {name}, name
        unit = CATALOG[name][0] if name in CATALOG else None
        assert (unit == "bool") == (kind == "bool | None") or unit is None, name
    # the names the same quantities went by before: gone, one name each
    for old in ("intra_op_threads", "batch_bytes", "dataloader_batch_bytes", "num_workers"):
        assert old not in FIELDS
        assert Facts.from_metrics({old: 4}) == Facts()


def test_a_value_of_another_type_is_none_never_zero_or_a_crash() -> None:
    for name, kind in _types().items():
        for bad in BAD[kind]:
            assert getattr(Facts.from_metrics({name: bad}), name) is None, (name, bad)
    assert Facts.from_metrics({"cpu_count": 0}).cpu_count is None  # no CPUs: not known
    assert Facts.from_metrics({"cpu_count": -2}).cpu_count is None
    # numpy's numbers are numbers, read as Python's
    f = Facts.from_metrics({"cpu_count": np.int64(4), "input_fetch_ms": np.float32(1.5),
                            "dataloader_num_workers": 0, "step_time_cv": 0})
    assert (f.cpu_count, f.input_fetch_ms) == (4, 1.5) and type(f.cpu_count) is int
    assert f.dataloader_num_workers == 0 and f.step_time_cv == 0.0  # zero is known
    assert type(f.step_time_cv) is float
    assert Facts.from_metrics({}) == Facts() and Facts.from_metrics({"no_such": 1}) == Facts()


def test_live_facts_win_where_they_are_known() -> None:
    metrics = {"cpu_count": 64, "torch_num_threads": 8, "oom": True, "gc_pause_ms": 0.3}
    live = Facts(cpu_count=4, oom=False, device_type="cpu")
    f = Facts.from_metrics(metrics, live=live)
    assert (f.cpu_count, f.oom, f.device_type) == (4, False, "cpu")  # live wins, False too
    assert (f.torch_num_threads, f.gc_pause_ms) == (8, 0.3)  # live does not know: metrics
    assert not f.on_cuda and Facts(device_type="cuda").on_cuda


def test_replace_reads_each_value_as_its_type_and_knows_its_fields() -> None:
    f = Facts(cpu_count=2).replace(dataloader_num_workers=3, cpu_capacity=np.float64(1.5),
                                   torch_num_threads=True)
    assert (f.cpu_count, f.dataloader_num_workers, f.cpu_capacity) == (2, 3, 1.5)
    assert f.torch_num_threads is None  # a flag is no count
    with pytest.raises(TypeError, match="intra_op_threads"):
        f.replace(intra_op_threads=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.cpu_count = 3  # type: ignore[misc]


def test_a_transform_sets_only_fields_of_facts() -> None:
    """What a change sets (``sets``) is checked when the transform is declared."""
    for fix in FIXES.values():
        if fix.transform is not None:
            assert {n for names in fix.transform.sets.values() for n in names} <= FIELDS
    threads = FIXES["threads"].transform
    assert threads is not None
    after = threads.now(Facts(torch_num_threads=4), {"num_workers": 2, "intra_op_threads": 1})
    assert (after.torch_num_threads, after.dataloader_num_workers) == (1, 2)
    with pytest.raises(ValueError, match="intra_op_threads"):
        transform(sets={"intra_op_threads": ("intra_op_threads",)})(lambda g, c, f: g)
