"""The session's cheap measurements for the threads and workers predictions
(diagnose/capture/threads.py): they time real work and leave the run as it was."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from diagnose.capture.threads import (
    ForwardTimer,
    time_cpu_capacity,
    time_inprocess_batch,
    time_threads,
    time_threads_beside_busy,
    time_work_after_fetches,
    time_worker_batches,
    time_worker_handover,
)

ROOT = Path(__file__).resolve().parents[2]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Dropout(0.5),
                         nn.Linear(64, 4)).train()


def test_forward_timer_times_every_call_and_keeps_the_first_inputs():
    m, seen = _model(), []
    timer = ForwardTimer(m, seen.append)
    x1, x2 = torch.randn(8, 32), torch.randn(8, 32)
    m(x1)
    m(x2)
    timer.remove()
    m(x1)  # removed: not timed
    assert len(seen) == 2 and all(s > 0 for s in seen)
    assert timer.inputs is not None and timer.inputs[0][0] is x1


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_thread_timing_leaves_the_run_as_it_was():
    """Gradients, buffers (BatchNorm's running statistics), the RNG and the thread count are
    what they were; the timings are real (positive) and cover forward and backward."""
    m = _model()
    x = torch.randn(16, 32)
    m(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    bufs = [b.clone() for b in m.buffers()]
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    out = time_threads(m, ((x,), {}))
    assert out is not None and out["backward"] is True
    assert out["work_ms"] > 0 and out["work_1thread_ms"] > 0 and out["forward_ms"] > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads, strict=True))
    assert all(torch.equal(b, s) for b, s in zip(m.buffers(), bufs, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_the_work_beside_busy_processes_is_timed_and_they_are_gone():
    """Torch's threads beside one and two busy processes more than the CPUs they leave:
    real processes (this one's children while they run, none after), each ratio the work
    beside them over the same work alone, and the run left as it was (buffers, RNG,
    threads). With threads and busy processes over the CPUs the ops wait for descheduled
    threads: on the development VM the ratios were 1.5-2.3 and 2.2-10; here only that the
    work took longer beside two of them than the floor a ratio can have."""
    import psutil

    m = _model()
    x = torch.randn(256, 32)
    bufs = [b.clone() for b in m.buffers()]
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    cpus = threads  # the busy processes then always oversubscribe torch's threads
    out = time_threads_beside_busy(m, ((x,), {}), cpus)
    assert out is not None and out["torch_threads"] == threads and out["work_ms"] > 0
    assert set(out["busy_ratio"]) == {"1", "2"}
    assert all(r > 0.5 for r in out["busy_ratio"].values())
    assert not psutil.Process().children()
    assert all(torch.equal(b, s) for b, s in zip(m.buffers(), bufs, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_stopped_busy_processes_go_with_a_killed_parent(tmp_path: Path) -> None:
    """A training process killed with SIGKILL while its busy processes are stopped (the
    timing pauses them between rounds) takes them with it: the kernel kills them with
    their parent."""
    import os
    import signal
    import subprocess

    import psutil

    script = tmp_path / "parent.py"
    script.write_text("import sys, time\n"
                      "from diagnose.capture.threads import _spinners\n"
                      "print(*[p.pid for p in _spinners(2)], flush=True)\n"
                      "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
    assert parent.stdout is not None
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert len(pids) == 2
    stopped = [psutil.Process(p).status() for p in pids]
    assert stopped == [psutil.STATUS_STOPPED] * 2
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_the_work_beside_busy_processes_is_not_timed_where_it_cannot_tell():
    """One thread (no parallel ops to wait in), no inputs, or so many CPUs beyond torch's
    threads that the busy processes would be too many: None."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert time_threads_beside_busy(_model(), ((torch.randn(4, 32),), {}), 2) is None
    finally:
        torch.set_num_threads(before)
    assert time_threads_beside_busy(_model(), None, 2) is None
    assert time_threads_beside_busy(_model(), ((torch.randn(4, 32),), {}), 64) is None


def test_thread_timing_does_not_apply_on_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert time_threads(_model(), ((torch.randn(4, 32),), {})) is None
    finally:
        torch.set_num_threads(before)
    assert time_threads(_model(), None) is None


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_the_work_after_each_kind_of_fetch_is_timed_in_turn_and_changes_nothing():
    """The model's work after a per-sample batch and after a batched fetch of a real
    TensorDataset loader: real timings, in rounds of both, and the run as it was
    (gradients, buffers, the RNGs, the thread count). A loader whose batches cannot be
    fetched with one call, one intra-op thread, or no inputs: None."""
    m = _model()
    x = torch.randn(16, 32)
    m(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    bufs = [b.clone() for b in m.buffers()]
    loader = DataLoader(TensorDataset(torch.randn(4000, 32), torch.randint(0, 4, (4000,))),
                        batch_size=256, shuffle=True)
    rng, py, threads = torch.get_rng_state(), random.getstate(), torch.get_num_threads()
    out = time_work_after_fetches(m, ((x,), {}), loader)
    assert out is not None and out["rounds"] >= 6
    assert out["after_per_sample_ms"] > 0 and out["after_batched_ms"] > 0
    assert out["ratio"] > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads, strict=True))
    assert all(torch.equal(b, s) for b, s in zip(m.buffers(), bufs, strict=True))
    assert torch.equal(torch.get_rng_state(), rng) and random.getstate() == py
    assert torch.get_num_threads() == threads
    own = DataLoader(TensorDataset(torch.randn(64, 32)), batch_size=8,
                     collate_fn=lambda rows: torch.stack([r[0] for r in rows]))
    assert time_work_after_fetches(m, ((x,), {}), own) is None
    assert time_work_after_fetches(m, None, loader) is None
    torch.set_num_threads(1)
    try:
        assert time_work_after_fetches(m, ((x,), {}), loader) is None
    finally:
        torch.set_num_threads(threads)


def test_worker_hand_over_is_timed_with_a_real_worker():
    batch = (torch.randn(256, 256), torch.arange(256))
    rng = torch.get_rng_state()
    timed = time_worker_handover(batch)
    assert timed is not None
    ms, start, fork, stop = timed
    assert ms > 0
    assert start > ms  # a process started, and its first batch made and handed over
    assert 0 < fork < start  # of it, the fork in iter(); the child's start-up follows
    assert stop > 0  # the epoch's end: the worker shut down and joined
    assert torch.equal(torch.get_rng_state(), rng)


def test_in_process_batch_is_timed_and_the_rngs_put_back():
    class Noisy(TensorDataset):
        def __getitem__(self, i):  # draws from every RNG, as augmentations do
            random.random(), np.random.rand(), torch.rand(1)
            return super().__getitem__(i)

    loader = DataLoader(Noisy(torch.randn(100, 8), torch.arange(100)), batch_size=10,
                        num_workers=2)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    ms = time_inprocess_batch(loader)
    assert ms is not None and ms > 0
    assert torch.equal(torch.get_rng_state(), states[0])
    assert random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])


def test_cpu_capacity_is_between_one_cpu_and_all_of_them():
    """Forked processes run a Python loop alone and one per CPU at once: the ratio is
    clipped to [1, CPUs]; one CPU has nothing to measure."""
    assert time_cpu_capacity(1) is None
    cap = time_cpu_capacity(2, loops=100_000)
    assert cap is not None and 1.0 <= cap <= 2.0


def test_cpu_capacity_takes_each_sides_least_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPUs that give both: one process alone 10 ms, two at once 10 ms, but a busy
    moment slowed a different side in each round. Each side's least time gives the two
    CPUs; the median of the rounds' own ratios (2, 1.25, 1.33) gave 1.33. Two SMT
    siblings (two at once always 16 ms) stay at 1.25."""
    import diagnose.capture.threads as th

    def fake(times):
        it = iter(times)
        return lambda k, work: next(it)

    busy = [0.010, 0.010, 0.010, 0.016, 0.015, 0.015]  # (one, many) by round
    monkeypatch.setattr(th, "CAPACITY_S", 0.0)  # exactly the rounds asked for
    monkeypatch.setattr(th, "_concurrent_s", fake(busy))
    assert th._capacity(2, lambda: 0.0, 3) == (0.010, 2.0)
    monkeypatch.setattr(th, "_concurrent_s", fake([0.010, 0.016] * 3))
    assert th._capacity(2, lambda: 0.0, 3) == (0.010, 1.25)


def test_the_work_alone_is_its_median_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch alone is its typical (median) round, as the loop's batches are typical
    times; the capacity still comes from each side's least time (a busy moment only adds
    to a side). Alone 10, 14 and 12 ms, two at once 10 ms each time: 12 ms, 2 CPUs."""
    import diagnose.capture.threads as th

    it = iter([0.010, 0.010, 0.014, 0.010, 0.012, 0.010])  # (one, many) by round
    monkeypatch.setattr(th, "CAPACITY_S", 0.0)
    monkeypatch.setattr(th, "_concurrent_s", lambda k, work: next(it))
    assert th._capacity(2, lambda: 0.0, 3) == (0.012, 2.0)


def test_an_in_process_batch_is_its_median_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process batch is the median of its repeats, not the least: a loop's batches
    are typical times (the least of a few was 0.55-0.6x the median on a shared 2-vCPU
    host), and one busy repeat does not move a median."""
    import diagnose.capture.threads as th

    ticks = iter([0.0, 0.010, 1.0, 1.030, 2.0, 2.011, 3.0, 3.012, 4.0, 4.013])
    monkeypatch.setattr(th.time, "perf_counter", lambda: next(ticks))
    loader = DataLoader(TensorDataset(torch.randn(40, 4)), batch_size=10)
    assert th.time_inprocess_batch(loader, repeat=5) == 12.0


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
    turn (:func:`paired_medians`; 4 samples: about 16 and 4 ms). This process's RNGs,
    thread count and collector are as before, and the worker is gone; a spawned loader or
    an iterable dataset gives None."""
    import gc
    import multiprocessing as mp

    import psutil

    from diagnose.capture.threads import time_batches_in_turn

    kids = {p.pid for p in psutil.Process().children(recursive=True)}
    before = torch.get_num_threads()
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    got = time_batches_in_turn(DataLoader(_SlowerInWorkers(), batch_size=4))
    assert got is not None
    worker, mine = got
    assert 16.0 <= worker < 40.0 and 4.0 <= mine < 10.0, got
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
    from diagnose.capture.threads import paired_medians

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
    from diagnose.capture.threads import time_batches_in_turn

    ds = _Slow()
    assert time_batches_in_turn(DataLoader(ds, batch_size=1)) is None
    assert ds.made == [0]  # this process made the first batch only


def test_the_quieter_of_two_thread_timings_is_kept():
    """A busy moment slows torch's threads more than one thread: of two timings, the one
    where one thread cost the most against them is kept; a missing one gives the other."""
    from diagnose.capture.threads import quieter_threads

    busy = {"work_ms": 6.0, "work_1thread_ms": 6.3, "forward_ms": 2.5}
    quiet = {"work_ms": 5.0, "work_1thread_ms": 6.5, "forward_ms": 2.0}
    assert quieter_threads(busy, quiet) is quiet
    assert quieter_threads(quiet, busy) is quiet
    assert quieter_threads(None, quiet) is quiet and quieter_threads(busy, None) is busy


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


class _Tensors(torch.utils.data.Dataset):
    """Samples of ``n`` small tensors each (2 ms a sample): a batch of them is ``n``
    tensors, each sent from a worker with its own file descriptor."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        time.sleep(0.002)
        return {f"t{j}": torch.full((16,), float(i)) for j in range(self.n)}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux schedstat")
def test_what_sending_its_batches_costs_a_real_worker_is_timed():
    """A real one-worker loader: what its threads other than the one making batches spend
    a batch, which grows with the tensors sent (a file descriptor and a handshake each:
    24 tensors against 1). The RNGs are put back and no child is left; a spawned loader,
    an iterable dataset or an epoch too short for the steady batches give None."""
    import multiprocessing as mp

    import psutil

    from diagnose.capture.threads import SEND_WARM, time_worker_send

    kids = {p.pid for p in psutil.Process().children(recursive=True)}
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    few = time_worker_send(DataLoader(_Tensors(1), batch_size=4, shuffle=True))
    many = time_worker_send(DataLoader(_Tensors(24), batch_size=4, shuffle=True))
    assert few is not None and many is not None
    assert few > 0 and many > 3 * few, (few, many)
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= kids
    spawned = DataLoader(_Tensors(1), batch_size=4,
                         multiprocessing_context=mp.get_context("spawn"), num_workers=1)
    assert time_worker_send(spawned) is None
    assert time_worker_send(DataLoader(_Tensors(1), batch_size=64 // (SEND_WARM + 3) + 1)) \
        is None

    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert time_worker_send(DataLoader(Stream(), batch_size=2)) is None


def test_a_batch_on_a_device_is_told_from_one_on_the_cpu() -> None:
    """Batches (nested as loaders hand them out) holding a tensor off the CPU (the meta
    device stands in for a GPU here) are the ones no forked worker can make."""
    from diagnose.capture.threads import holds_device_tensors

    cpu = torch.zeros(2)
    assert not holds_device_tensors((cpu, {"y": [cpu, 3]}, "text"))
    assert holds_device_tensors((cpu, {"y": [torch.empty(2, device="meta")]}))
    assert not holds_device_tensors(None)
