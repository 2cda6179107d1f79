"""A worker's batch against this process's (diagnose/capture/probes/worker_batch.py):
real forked workers, the run left as it was."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from diagnose.capture.probes.worker_batch import (
    paired_medians,
    time_batches_in_turn,
    time_worker_batches,
)
from diagnose.metrics.context import WORKER_POOL_CPUS


def test_a_workers_batch_is_timed_in_forked_processes():
    """A forked process set up as a worker (one intra-op thread) makes the loader's second
    batch: its time, and the CPUs' worth of batches one process per CPU made at once; the
    parent's thread count is untouched. Not for a loader whose workers are spawned, nor
    an iterable dataset, nor one CPU."""
    import multiprocessing as mp

    from torch.utils.data import IterableDataset

    class Noisy(TensorDataset):
        def __getitem__(self, i):
            random.random(), np.random.rand(), torch.rand(1)
            return super().__getitem__(i)

    before = torch.get_num_threads()
    loader = DataLoader(Noisy(torch.randn(100, 8), torch.arange(100)), batch_size=10)
    got = time_worker_batches(loader, 2)
    assert got is not None
    ms, cap = got
    assert ms > 0 and 1.0 <= cap <= 2.0
    assert torch.get_num_threads() == before
    assert time_worker_batches(loader, 1) is None
    spawned = DataLoader(loader.dataset, batch_size=10, num_workers=1,
                         multiprocessing_context=mp.get_context("spawn"))
    assert time_worker_batches(spawned, 2) is None

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert time_worker_batches(DataLoader(Stream(), batch_size=2), 2) is None


class _SlowerInWorkers(torch.utils.data.Dataset):
    """4 ms a sample in a DataLoader worker, 1 ms in the training process; draws from
    every RNG, as augmentations do."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        import time

        from torch.utils.data import get_worker_info

        random.random(), np.random.rand(), torch.rand(1)
        time.sleep(0.004 if get_worker_info() is not None else 0.001)
        return torch.full((4,), float(i))


def test_a_workers_batch_and_this_processs_are_timed_in_turn():
    """A forked process set up as a worker and this process make the same batches in
    turn (:func:`paired_medians`; 4 samples: about 16 and 4 ms, and never less: the sleeps
    see to that, and keep the worker's over twice this process's however busy the host;
    the upper bounds, ~15x, only catch a wrong unit). This process's RNGs,
    thread count and collector are as before, and the worker is gone; a spawned loader or
    an iterable dataset gives None."""
    import gc
    import multiprocessing as mp

    import psutil

    kids = {p.pid for p in psutil.Process().children(recursive=True)}
    before = torch.get_num_threads()
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    got = time_batches_in_turn(DataLoader(_SlowerInWorkers(), batch_size=4))
    assert got is not None
    worker, mine, on_cpu, cpus = got
    assert 16.0 <= worker < 250.0 and 4.0 <= mine < 60.0, got
    # the worker's batch mostly sleeps: its CPU time is a small part of it
    assert 0.0 <= on_cpu < 0.5 * worker and 0.0 <= cpus < 0.5, got
    assert worker > 2 * mine, got  # each side timed as its own: 4 ms a sample against 1
    assert torch.get_num_threads() == before and gc.isenabled()
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])
    # no child left, not even a zombie
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= kids
    spawned = DataLoader(_SlowerInWorkers(), batch_size=4, num_workers=1,
                         multiprocessing_context=mp.get_context("spawn"))
    assert time_batches_in_turn(spawned) is None

    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert time_batches_in_turn(DataLoader(Stream(), batch_size=2)) is None


def test_batches_timed_in_turn_are_set_against_each_other_turn_by_turn():
    """The worker's batch is this process's median at the median of the turns' ratios: a
    pace that moved between the two sides of a turn for a few turns (the host busier while
    this process made its batch) leaves the ratio as the other turns give it, where the
    sides' own medians would have said the worker's batch is half this process's."""
    mine = [0.010, 0.010, 0.020, 0.020, 0.020]
    theirs = [0.011, 0.011, 0.011, 0.022, 0.022]
    worker, own = paired_medians(theirs, mine)
    assert own == 20.0 and worker == pytest.approx(22.0)  # 1.1x, not 11/20
    assert paired_medians([0.010] * 3, [0.010] * 3) == (10.0, 10.0)


class _Slow(torch.utils.data.Dataset):
    """0.6 s a sample; counts the samples made in this process (a fork counts its own)."""

    def __init__(self) -> None:
        self.made: list[int] = []

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        self.made.append(i)
        time.sleep(0.6)
        return torch.zeros(2)


def test_batches_over_half_a_second_are_not_timed_in_turn():
    """The exit stays quick: a batch over half a second ends the timing after the first,
    untimed one (made by both sides at once), and gives None."""
    ds = _Slow()
    assert time_batches_in_turn(DataLoader(ds, batch_size=1)) is None
    assert ds.made == [0]  # this process made the first batch only


class _SlowInWorkers(_Slow):
    """0.6 s a sample in a DataLoader worker, none in the training process."""

    def __getitem__(self, i: int) -> torch.Tensor:
        from torch.utils.data import get_worker_info

        self.made.append(i)
        if get_worker_info() is not None:
            time.sleep(0.6)
        return torch.zeros(2)


def test_a_worker_batch_over_half_a_second_is_timed_once():
    """A worker's batch over half a second (a pool that spins in every worker, say) is
    timed in one turn, and that turn is the last: the exit stays quick, and the slow
    worker is still measured."""
    ds = _SlowInWorkers()
    got = time_batches_in_turn(DataLoader(ds, batch_size=1))
    assert got is not None and got[0] >= 600.0, got
    assert ds.made == [0, 1]  # the untimed batch and one turn, in this process


class _CollectorSlowed(torch.utils.data.Dataset):
    """Each sample takes 50 ms while the garbage collector is on: a stand-in for a full
    collection of the forked heap, which every timing would otherwise meet alike."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        import gc
        import time

        if gc.isenabled():
            time.sleep(0.05)
        return torch.full((4,), float(i))


def test_a_workers_batch_is_timed_without_the_collector():
    """The model adds the loop's own collector pauses to a worker's batch, so the batch is
    timed without them; the training process's collector is left on."""
    import gc

    got = time_worker_batches(DataLoader(_CollectorSlowed(), batch_size=2), 2)
    assert got is not None and got[0] < 50.0  # two samples: 100 ms with the collector on
    assert gc.isenabled()


class _Busy(torch.utils.data.Dataset):
    """3 ms of Python work a sample: a batch that holds a CPU all through."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.thread_time() + 0.003
        while time.thread_time() < end:
            pass
        return torch.full((4,), float(i))


def test_a_workers_batch_on_a_cpu_against_one_that_waits():
    """The worker's time on or waiting for a CPU over its batch's time: a batch of CPU
    work wants one all through (a busy host that takes the CPU from it leaves it runnable,
    which counts); one that sleeps (``_SlowerInWorkers``, in the test above) for a
    sliver."""
    got = time_batches_in_turn(DataLoader(_Busy(), batch_size=4))
    assert got is not None
    worker, _mine, on_cpu, cpus = got
    assert 0.8 * worker <= on_cpu <= worker, got
    # one thread keeps at most one CPU busy (a busy host lowers it): no pool beside it
    assert cpus < WORKER_POOL_CPUS, got


def test_a_pool_beside_a_workers_thread_shows_as_more_than_one_cpu(
        monkeypatch: pytest.MonkeyPatch):
    """The CPUs a worker's batch kept busy are its process's CPU time, every thread of it,
    over the batch's time, the median of the turns: a process clock that runs at twice the
    wall clock (as two threads busy all through would make it) reads 2 CPUs. The clock is
    injected (a real pool's share depends on how busy the host is)."""
    from diagnose.capture.probes import worker_batch

    monkeypatch.setattr(worker_batch, "_PROCESS_CPU_S", lambda: 2 * time.perf_counter())
    got = time_batches_in_turn(DataLoader(_Busy(), batch_size=4))
    assert got is not None
    assert got[3] == pytest.approx(2.0, abs=0.05), got


def test_a_workers_batch_runs_the_loaders_worker_init_fn():
    """The forked worker runs the loader's ``worker_init_fn`` as a DataLoader worker does
    (one that holds a pool to one thread is then timed with it); this process does not."""
    seen: list[int] = []

    def init(worker_id: int) -> None:
        seen.append(worker_id)
        torch.utils.data.get_worker_info().dataset.inited = True

    class Marks(_Busy):
        inited = False

        def __getitem__(self, i: int) -> torch.Tensor:
            in_worker = torch.utils.data.get_worker_info() is not None
            if in_worker and not self.inited:
                raise RuntimeError("worker_init_fn did not run first")
            return super().__getitem__(i)

    ds = Marks()
    got = time_batches_in_turn(DataLoader(ds, batch_size=2, worker_init_fn=init))
    assert got is not None and seen == [] and not ds.inited
    assert time_batches_in_turn(DataLoader(ds, batch_size=2)) is None  # it did not run


class _StuckInAWorker(torch.utils.data.Dataset):
    """Samples made at once in this process, never in a forked one (a lock another thread
    held at the fork, a library that hangs after it)."""

    def __init__(self) -> None:
        import os

        self.parent = os.getpid()

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        import os

        if os.getpid() != self.parent:
            time.sleep(3600)
        return torch.zeros(4)


def test_a_worker_stuck_in_the_jobs_code_fails_the_timing_instead_of_hanging(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-turn probe's forked worker never answers: the probe gives up after
    RESULT_WAIT_S (TimeoutError: it fails alone, as any probe's error does) and the stuck
    child is ended, not waited for."""
    import os

    import diagnose.capture.probes.capacity as cap

    monkeypatch.setattr(cap, "RESULT_WAIT_S", 0.5)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        time_batches_in_turn(DataLoader(_StuckInAWorker(), batch_size=4))
    assert time.perf_counter() - t0 < 10.0
    with pytest.raises(ChildProcessError):  # the child reaped
        os.waitpid(-1, os.WNOHANG)
