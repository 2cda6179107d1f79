"""An epoch whose last batch is short (diagnose/metrics/context/settings.py's
``dataloader_batch_fill``, diagnose/stepmodel/epochs.py's ``mean_batch``): the probes time
a full batch, and an epoch of 4 batches over 200 samples of 64 makes 3.125 full batches'
work; answers worked out by hand."""

from __future__ import annotations

import pytest

from diagnose.fixes import TrainConfig
from diagnose.metrics.context.settings import settings_metrics
from diagnose.stepmodel.epochs import mean_batch
from diagnose.stepmodel.facts import Facts
from diagnose.stepmodel.prediction import Prediction
from tests import modeltraces as mt
from tests.fixes.steps import _model, _predict


def _fill(**loader) -> object:
    return settings_metrics({"dataloader": loader})["dataloader_batch_fill"]


def test_the_fill_is_the_epochs_samples_over_its_batches_full_size() -> None:
    """200 samples in batches of 64: 4 batches, the last of 8, 200 / 256 = 0.78125. The
    last dropped (3 batches), or 256 samples (4 full ones): 1. A count the sampler sets
    (a distributed sampler's share, a custom batch sampler) is not the dataset's batches:
    None, as where any of the three is missing."""
    assert _fill(dataset_len=200, batch_size=64, len=4, drop_last=False) == \
        pytest.approx(0.7812, abs=1e-4)
    assert _fill(dataset_len=200, batch_size=64, len=3, drop_last=True) == 1.0
    assert _fill(dataset_len=256, batch_size=64, len=4, drop_last=False) == 1.0
    assert _fill(dataset_len=200, batch_size=64, len=2, drop_last=False) is None
    assert _fill(dataset_len=200, batch_size=64, len=625_000, drop_last=False) is None
    assert _fill(dataset_len=200, len=4, drop_last=False) is None


def test_the_timed_batches_are_put_at_the_epochs_mean_batch() -> None:
    """A worker's batch timed at 100 ms (90 of it on a CPU), in process 80 ms, at a fill
    of 0.75: 75, 67.5 and 60 ms. A full epoch, or a fill not known: as timed."""
    f = Facts(input_worker_batch_ms=100.0, input_worker_batch_cpu_ms=90.0,
              input_inprocess_batch_ms=80.0)
    got = mean_batch(f.replace(dataloader_batch_fill=0.75))
    assert (got.input_worker_batch_ms, got.input_worker_batch_cpu_ms,
            got.input_inprocess_batch_ms) == pytest.approx((75.0, 67.5, 60.0))
    assert mean_batch(f.replace(dataloader_batch_fill=1.0)) == f.replace(
        dataloader_batch_fill=1.0)
    assert mean_batch(f) == f


def test_persistent_workers_make_the_epochs_work_ahead_at_its_mean_batch(tmp_path) -> None:
    """As tests/fixes/test_workers.py's shared-CPU case: the clock saw each epoch's start
    300 ms beyond a steady step, once per 24 steps, 4 workers beside torch's 2 threads on
    2 CPUs, 8 batches made ahead at 10 ms over 2 CPUs: 300 - 40 = 260 ms saved. With the
    epoch's batches half full on the mean, the work ahead is 8 x 5 ms: 280 ms saved."""
    m = _model(mt.cpu_loader(), tmp_path)
    kw = dict(dataloader_num_workers=4, input_inprocess_batch_ms=10.0,
              dataloader_epoch_batches=24, dataloader_epoch_boundary_ms=300.0,
              step_time_steady_mean_ms=3.0, input_worker_start_ms=32.0,
              input_worker_handover_ms=2.0, dataloader_prefetch_factor=2, cpu_count=2,
              torch_num_threads=2)
    full = _predict("persistent_workers", m, TrainConfig(num_workers=4), **kw)
    half = _predict("persistent_workers", m, TrainConfig(num_workers=4),
                    dataloader_batch_fill=0.5, **kw)
    assert isinstance(full, Prediction) and isinstance(half, Prediction)
    assert full.base_ms - full.step_ms == pytest.approx(260 / 24, rel=1e-3)
    assert half.base_ms - half.step_ms == pytest.approx(280 / 24, rel=1e-3)
