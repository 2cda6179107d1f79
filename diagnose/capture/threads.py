"""How the model's own work scales with torch's intra-op threads, measured by the session.

Two cheap measurements for the threads and workers predictions (diagnose.stepmodel.transforms):

- **in the loop**: the model's forward calls are timed by a pair of module hooks on every
  step (the clock's ``forward_ms`` column). On the unprofiled steps that is the forward as
  the job runs it: beside its DataLoader workers and whatever else holds the CPUs.
- **after the loop** (the ``with`` block has ended, so no step is on the clock): the first
  batch the model saw, run forward alone and forward with backward, alternately on torch's
  threads and on one thread. The inputs are kept from the first forward call (one
  batch). Gradients come from ``torch.autograd.grad`` (no ``.grad`` is written); the RNG
  state, the model's buffers (BatchNorm's running statistics) and the thread count are put
  back afterwards: the run's results do not change. Only a CPU model with more than one
  intra-op thread is timed; anything else gives None.

Also after the loop: how many CPUs' worth of Python work the usable CPUs do at once
(:func:`time_cpu_capacity`: one forked process per CPU against one alone), which is what
the cores give workers and the training process together where CPUs share a core.

``work_1thread_ms / work_ms`` is what one thread costs the model's ops (Amdahl: the part
that does not scale stays); ``forward_unprofiled_ms / forward_ms`` is how much slower the
loop's forward ran than the same forward alone (other work on the cores: workers, other
processes).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from .runinfo import batch_indexable

#: rounds of (torch's threads, one thread) after one warm-up forward of each: ROUNDS at
#: least, up to MAX_ROUNDS while they took under ROUNDS_S seconds in all. On a shared
#: 2-CPU machine what two threads give drifts within a second: the one-thread ratio of 5
#: rounds ranged 1.27-1.58 from one run to the next for a 5 ms forward and backward, and
#: ten timings back to back of 0.3 s each gave a standard deviation of 0.09-0.23 (three
#: jobs of benchmarks/jobs), of 1 s each 0.06-0.12
ROUNDS = 5
MAX_ROUNDS = 40
ROUNDS_S = 1.0
#: rounds stop once one takes 3x this (s): the exit must stay quick
#: idle time before each timed forward and backward (s): in a training loop torch's thread
#: pool sleeps while the step does other work (loading, the optimizer, Python), and waking
#: it is part of what its threads cost; timed back to back they would look better
IDLE_S = 0.005
SLOW_FORWARD_S = 0.5


class ForwardTimer:
    """Times every forward call of ``model`` into ``on_forward(seconds)`` and keeps the
    first call's inputs (CPU models only) for :func:`time_threads`."""

    def __init__(self, model: Any, on_forward: Callable[[float], None]) -> None:
        self.model = model
        self.on_forward = on_forward
        self.inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._keep = _on_cpu(model)
        self._t0: list[float] = []
        self._handles = [model.register_forward_pre_hook(self._pre, with_kwargs=True),
                         model.register_forward_hook(self._post, always_call=True)]

    def _pre(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._keep and self.inputs is None:
            self.inputs = (tuple(args), dict(kwargs))
        self._t0.append(time.perf_counter())

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._t0:
            self.on_forward(time.perf_counter() - self._t0.pop())

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _on_cpu(model: Any) -> bool:
    try:
        p = next(iter(model.parameters()), None)
    except Exception:
        return False
    return p is not None and p.device.type == "cpu"


def _first_tensor(out: Any) -> Any:
    """The first floating-point tensor in a forward's output (a tensor, or nested in a
    tuple, list or dict), else None."""
    import torch

    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    items = out.values() if isinstance(out, dict) else out if isinstance(
        out, tuple | list) else ()
    for v in items:
        t = _first_tensor(v)
        if t is not None:
            return t
    return None


@contextmanager
def _model_work(model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]],
                idle_s: float = IDLE_S
                ) -> Iterator[tuple[Callable[[], float], Callable[[], float]]]:
    """(the forward alone, the forward with its backward) on ``inputs``, each returning
    its seconds after ``idle_s`` asleep; the backward goes through
    ``torch.autograd.grad`` (no ``.grad`` is written). The RNG state, the model's buffers
    and torch's thread count are put back on the way out."""
    import torch

    args, kwargs = inputs
    params = [p for p in model.parameters() if p.requires_grad]
    n = torch.get_num_threads()
    rng = torch.get_rng_state()
    buffers = [(b, b.detach().clone()) for b in model.buffers()]

    def forward() -> float:
        if idle_s:  # as in the loop: the pool has been idle while a batch loaded
            time.sleep(idle_s)
        t0 = time.perf_counter()
        with torch.enable_grad():  # as the loop's forward runs: recording for backward
            model(*args, **kwargs)
        return time.perf_counter() - t0

    def work() -> float:
        if idle_s:  # the pool's threads go idle between steps in a real loop too
            time.sleep(idle_s)
        t0 = time.perf_counter()
        with torch.enable_grad():
            out = _first_tensor(model(*args, **kwargs))
            if params and out is not None and out.requires_grad:
                torch.autograd.grad(out.float().sum(), params, allow_unused=True)
        return time.perf_counter() - t0

    try:
        yield forward, work
    finally:
        torch.set_num_threads(n)
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng)


def time_threads(model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]] | None
                 ) -> dict[str, Any] | None:
    """The model's work on ``inputs`` timed on torch's threads and on one thread (ms, the
    median of :data:`ROUNDS` to :data:`MAX_ROUNDS` alternating rounds): the forward alone
    (``forward_ms``, to set beside the loop's own forward), and the forward with its
    backward (``work_ms``, ``work_1thread_ms``), as :func:`_model_work` runs them (nothing
    of the run changes). None where it does not apply (no inputs, a GPU model, one thread
    already)."""
    if inputs is None or model is None or not _on_cpu(model):
        return None
    import torch

    n = torch.get_num_threads()
    if n < 2:
        return None
    times: dict[str, list[float]] = {"forward": [], "work": [], "work_1thread": []}
    backward = any(p.requires_grad for p in model.parameters())
    start = time.perf_counter()
    with _model_work(model, inputs) as (forward, work):
        for k in range(MAX_ROUNDS + 1):
            if k > ROUNDS and time.perf_counter() - start > ROUNDS_S:
                break
            torch.set_num_threads(n)
            t0 = time.perf_counter()
            times["forward"].append(forward())
            times["work"].append(work())
            torch.set_num_threads(1)
            times["work_1thread"].append(work())
            if k == 0:  # the first round warms both thread counts up
                for v in times.values():
                    v.clear()
            if time.perf_counter() - t0 > 3 * SLOW_FORWARD_S:
                break
    if not times["work"]:
        return None
    out: dict[str, Any] = {"torch_threads": n, "backward": backward}
    for name, v in times.items():
        out[f"{name}_ms"] = round(statistics.median(v) * 1e3, 4)
    return out


#: rounds of time_work_after_fetches: at least AFTER_FETCH_ROUNDS, more while they took
#: under AFTER_FETCH_S seconds in all, at most AFTER_FETCH_MAX_ROUNDS; at least 3 where
#: they took that long (huge batches)
AFTER_FETCH_ROUNDS = 6
AFTER_FETCH_MAX_ROUNDS = 24
AFTER_FETCH_S = 1.0


def time_work_after_fetches(model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]] | None,
                            loader: Any) -> dict[str, Any] | None:
    """The model's forward and backward on ``inputs`` timed right after a batch fetched
    as the loader does now (a ``__getitem__`` a sample, then collated) and right after the
    same batch fetched with one ``dataset[indices]`` call, in turn (ms, the medians, and
    the median of the rounds' ratios, ``ratio``): what the batched-fetch prediction needs
    besides the fetch itself. A long stretch of single-threaded loading leaves torch's
    thread pool asleep (OpenMP's threads stop spinning after a short wait and block), and
    the ops that follow pay for waking it: on the 2-vCPU development VM,
    benchmarks/jobs/tensor_rows.py's forward, backward and optimizer took 1.10-1.25x as
    long after its ~20 ms per-sample batches as after its ~2.5 ms batched ones (blocks of
    each in turn in one process, benchmarks/work_after_fetch.py); with the threads kept
    spinning (OMP_WAIT_POLICY=ACTIVE) or on one thread mostly less (0.98-1.12x), and with
    20 ms asleep before the batched blocks' ops none (0.93-0.99x). This timing read
    0.99-1.32 after loops that gave 1.10-1.25: noisier than the loop, which times blocks.
    The fetched batches are dropped (``inputs`` is what runs, as in :func:`time_threads`);
    their indices come from a generator of this timing's own. Nothing of the run changes
    (:func:`_model_work`). None where it does not apply: no inputs, a GPU model, one
    intra-op thread (no pool to wake), batches that cannot be fetched with one call."""
    if inputs is None or model is None or not _on_cpu(model):
        return None
    import torch
    from torch.utils.data import BatchSampler, DataLoader

    if torch.get_num_threads() < 2 or not batch_indexable(loader):
        return None
    ds, bs = loader.dataset, int(loader.batch_size)
    n = len(ds)
    if n < 1:
        return None
    gen = torch.Generator().manual_seed(1)
    order = torch.randint(n, ((AFTER_FETCH_MAX_ROUNDS + 1) * bs,), generator=gen).tolist()
    after: tuple[list[float], list[float]] = ([], [])
    with _rng_kept(), _model_work(model, inputs, idle_s=0.0) as (_, work):
        # the loaders' own seeds come from that generator too, not the user's RNG
        batched = iter(DataLoader(ds, sampler=BatchSampler(order, bs, drop_last=False),
                                  batch_size=None, generator=gen))
        per_sample = iter(DataLoader(ds, sampler=order, batch_size=bs, generator=gen))
        next(batched), next(per_sample)
        work()  # warm
        start = time.perf_counter()
        for k in range(AFTER_FETCH_MAX_ROUNDS):
            took = time.perf_counter() - start
            if (k >= AFTER_FETCH_ROUNDS and took > AFTER_FETCH_S) or (
                    k >= 3 and took > 2 * AFTER_FETCH_S):
                break
            # the order turns each round: neither side always follows the other's work
            pair = ((per_sample, after[0]), (batched, after[1]))
            for it, out in (pair if k % 2 == 0 else pair[::-1]):
                next(it)
                out.append(work())
    if not after[1] or min(after[1]) <= 0:
        return None
    ratio = statistics.median(a / b for a, b in zip(*after, strict=True))
    return {"after_per_sample_ms": round(statistics.median(after[0]) * 1e3, 4),
            "after_batched_ms": round(statistics.median(after[1]) * 1e3, 4),
            "ratio": round(ratio, 4), "rounds": len(after[1])}


#: busy processes beyond the CPUs torch's threads leave, timed by time_threads_beside_busy
#: (1, then 2: a worker more, where two are busy at once)
BUSY_EXCESS = (1, 2)
#: rounds of each (a quiet work, then the work beside the busy processes), more while all
#: of them took under BUSY_S seconds
BUSY_ROUNDS = 3
BUSY_MAX_ROUNDS = 8
BUSY_S = 1.0
#: no more busy processes than this (torch on few threads of many CPUs: not timed)
BUSY_MAX_PROCS = 8
#: timed works beside each set of busy processes (after an untimed one)
BUSY_REPEAT = 2


#: a busy process: Python work until its parent (this process) is gone. Linux kills it
#: with its parent even while it is stopped (PR_SET_PDEATHSIG): a training process
#: killed with SIGKILL during the timing leaves none behind. It says when it is set up.
_SPIN = """import os, sys
p = os.getppid()
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, 9)
except Exception:
    pass
sys.stdout.write("r")
sys.stdout.flush()
while os.getppid() == p:
    sum(range(1000))
"""


def _spinners(k: int) -> list[Any]:
    """``k`` processes, stopped, that keep one CPU each busy with Python once continued (as
    a worker making a batch does). Fresh interpreters, not forks: a fork shares this
    process's pages, and each of its writes after it copies one (the model's work timed
    right after forking took 3-8x as long)."""
    import signal
    import subprocess
    import sys

    procs = []
    for _ in range(k):
        p = subprocess.Popen([sys.executable, "-S", "-c", _SPIN],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        procs.append(p)
        assert p.stdout is not None
        p.stdout.read(1)  # set up (stopped earlier, it could outlive a killed parent)
        p.stdout.close()
        p.send_signal(signal.SIGSTOP)
    return procs


def _run(procs: list[Any], k: int) -> None:
    """The first ``k`` of ``procs`` running, the others stopped."""
    import signal

    for i, p in enumerate(procs):
        p.send_signal(signal.SIGCONT if i < k else signal.SIGSTOP)


def _stop(procs: list[Any]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def time_threads_beside_busy(model: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]]
                             | None, cpus: int) -> dict[str, Any] | None:
    """The model's forward and backward on torch's threads beside processes that keep a
    CPU busy each, as DataLoader workers making batches do: one more of them than the CPUs
    torch's threads leave, then two (:data:`BUSY_EXCESS`). Torch's parallel ops wait for
    their descheduled threads, at every op: on the 2-vCPU development VM one busy process
    beside 2 threads made four jobs' forward and backward 2.1-2.5x as long, two of them
    5.3-7.2x (benchmarks/jobs, busy processes forked; the CPUs' share, threads / CPUs
    left, says 2x and 2x), and
    a step model that took 2x predicted 2 workers beside 2 threads 1.23-1.37x where
    0.89-0.96x was timed (augment_cnn, tensor_rows). Timed so, 1.5-2.3x and 2.2-10x
    (the second moves most: which threads the scheduler leaves waiting is chance). Returns
    ``{"torch_threads", "cpus", "work_ms", "busy_ratio": {excess: the work's time beside
    them / work_ms}}`` (the medians of :data:`BUSY_ROUNDS` to :data:`BUSY_MAX_ROUNDS`
    alternating rounds); None where it does not apply (no inputs, a GPU model, one thread,
    no SIGSTOP to pause the busy processes with, more of them than
    :data:`BUSY_MAX_PROCS`)."""
    import signal

    if (inputs is None or model is None or not _on_cpu(model)
            or not hasattr(signal, "SIGSTOP")):
        return None
    import torch

    n = torch.get_num_threads()
    left = max(0, cpus - n)
    if n < 2 or cpus < 1 or left + max(BUSY_EXCESS) > BUSY_MAX_PROCS:
        return None
    quiet: list[float] = []
    busy: dict[int, list[float]] = {e: [] for e in BUSY_EXCESS}
    procs = _spinners(left + max(BUSY_EXCESS))
    start = time.perf_counter()
    try:
        with _model_work(model, inputs) as (_, work):
            work()  # warm
            for k in range(BUSY_MAX_ROUNDS):
                if k >= BUSY_ROUNDS and time.perf_counter() - start > BUSY_S:
                    break
                t0 = time.perf_counter()
                for e in BUSY_EXCESS:
                    _run(procs, 0)
                    quiet.append(work())
                    _run(procs, left + e)
                    busy[e].extend(work() for _ in range(BUSY_REPEAT))
                _run(procs, 0)
                if time.perf_counter() - t0 > 3 * SLOW_FORWARD_S:
                    break
    finally:
        _stop(procs)
    if not quiet:
        return None
    base = statistics.median(quiet)
    return {"torch_threads": n, "cpus": cpus, "work_ms": round(base * 1e3, 4),
            "busy_ratio": {str(e): round(statistics.median(v) / base, 4)
                           for e, v in busy.items() if v}}


def quieter_threads(first: dict[str, Any] | None, second: dict[str, Any] | None
                    ) -> dict[str, Any] | None:
    """Of two :func:`time_threads` timings made seconds apart, the one in which one thread
    cost the most against torch's threads: a busy moment on a shared host slows the
    threads' parallel ops (they wait for descheduled threads) more than one thread, so it
    only lowers that ratio. On the 2-vCPU development VM one timing in five or so of the
    tokenizing job's model gave 1.04-1.16 where the others gave 1.25-1.40, and the loop
    itself 1.28; a prediction made from 1.04 was 1.42x where 1.2x was timed."""
    def ratio(t: dict[str, Any] | None) -> float:
        if not t or not t.get("work_ms"):
            return -1.0
        return float(t["work_1thread_ms"]) / float(t["work_ms"])

    return first if ratio(first) >= ratio(second) else second


def _clone(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, tuple | list):
        return type(x)(_clone(v) for v in x) if not hasattr(x, "_fields") else type(x)(
            *(_clone(v) for v in x))
    return x


class _Repeat:
    """A map-style dataset whose every item is a fresh copy of one batch (made in the
    worker, as a worker makes its batches)."""

    def __init__(self, batch: Any, n: int) -> None:
        self.batch, self.n = batch, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return _clone(self.batch)


#: batches handed over (after the first, which pays for the worker's start)
HANDOVERS = 5


def holds_device_tensors(x: Any) -> bool:
    """True where a batch (tensors, nested in tuples, lists and dicts) holds a tensor off the
    CPU: a dataset that hands out batches already on the GPU. A forked DataLoader worker
    cannot make those (CUDA does not start in a forked child)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.device.type != "cpu"
    if isinstance(x, dict):
        return any(holds_device_tensors(v) for v in x.values())
    if isinstance(x, tuple | list):
        return any(holds_device_tensors(v) for v in x)
    return False


def _touch(x: Any) -> None:
    """Read one element of every memory page of the tensors in ``x``: a batch from a worker
    lives in shared memory that this process has only mapped, and its first use (the copy
    to the GPU, the forward) faults every page in. On an H200 machine, 25 MB batches from
    workers made the step 3-4x slower than making them in process (benchmarks/results/
    autofix_gpu_h200.txt), a cost that receiving alone (the mapping) does not show."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu" and x.numel():
            flat = x.detach().reshape(-1)
            flat[:: max(1, 4096 // max(1, x.element_size()))].sum()
    elif isinstance(x, dict):
        for v in x.values():
            _touch(v)
    elif isinstance(x, tuple | list):
        for v in x:
            _touch(v)


def time_worker_handover(batch: Any) -> tuple[float, float, float, float] | None:
    """What receiving one batch like ``batch`` from a DataLoader worker process costs the
    training process (ms, the least of :data:`HANDOVERS`: a busy moment only adds to it):
    a one-worker DataLoader whose
    dataset copies the batch, each batch taken once the worker has had time to make it,
    so the time is the hand-over alone (shared memory, file descriptors, unpickling, and
    the first touch of the batch's pages: :func:`_touch`).
    Also, for the stalls an epoch pays without persistent workers (ms): what starting that
    worker took (``iter()`` and its first batch, a copy), of which ``iter()`` alone (the
    fork: the training process forks its workers one after another, and each child's own
    start-up overlaps the next fork), and the end of the epoch (the ``next()`` that
    raises StopIteration: the loader shuts its workers down and joins them). Made after
    the loop; the RNG state the loader's seeding draws from is put back. Returns
    ``(hand_over, start, fork, stop)``."""
    import torch
    from torch.utils.data import DataLoader

    if batch is None:
        return None
    rng = torch.get_rng_state()
    try:
        ds: Any = _Repeat(batch, HANDOVERS + 1)  # map-style: __len__ and __getitem__
        loader: Any = DataLoader(ds, batch_size=None, num_workers=1,
                                 prefetch_factor=HANDOVERS + 1)
        t0 = time.perf_counter()
        it = iter(loader)
        try:
            fork = time.perf_counter() - t0
            next(it)
            start = time.perf_counter() - t0
            times = []
            for _ in range(HANDOVERS):
                time.sleep(0.02)  # the worker has the next batch ready
                t0 = time.perf_counter()
                _touch(next(it))
                times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in it:  # the epoch's end: the worker is shut down and joined
                pass
            stop = time.perf_counter() - t0
        finally:
            del it
    finally:
        torch.set_rng_state(rng)
    return (round(min(times) * 1e3, 4), round(start * 1e3, 4), round(fork * 1e3, 4),
            round(stop * 1e3, 4))


def _other_threads_cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds the threads of process ``pid`` other than its main one have used
    (Linux schedstat); None where the kernel does not say."""
    import os

    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            if int(tid) != pid:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


#: batches of :func:`time_worker_send`: SEND_WARM first, then up to SEND_BATCHES timed
#: while they take under SEND_S seconds
SEND_WARM = 1
SEND_BATCHES = 8
SEND_S = 0.4


def time_worker_send(loader: Any) -> float | None:
    """What sending its batches costs a DataLoader worker (ms a batch): a real one-worker
    loader over the run's dataset, batch size and collate_fn makes batches while this
    process takes them, and the CPU time of the worker's threads other than the one that
    makes batches is read over :data:`SEND_BATCHES` of them (after :data:`SEND_WARM`).
    Those threads are the queue's feeder, which pickles each batch, and the one that hands
    this process each tensor's file descriptor (a connection and a handshake a tensor).
    The batch timed as a worker makes it (:func:`time_batches_in_turn`) holds none of it,
    and a worker pays it beside making the next batch: tokenizing's batch of two tensors
    cost a real worker 2.5-2.8 ms so, beside 13-16 ms of making it (augment_cnn: 1.8 ms
    beside about 31). Timed with a batch copy and the worker idle it read 0.9-4.2 ms:
    the threads run beside the one making batches, and cost more so.

    None where no worker is forked (:func:`_forked_loader`), the kernel does not say
    (Linux schedstat), the epoch is too short, or a batch takes over half a second. The
    RNG states are put back; the worker is gone on return."""
    from torch.utils.data import DataLoader

    got = _forked_loader(loader)
    if got is None:
        return None
    ds, bs, collate, size = got
    if size // bs < SEND_WARM + 3:
        return None
    import warnings

    with _rng_kept(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. fork in a threaded process
        dl: Any = DataLoader(ds, batch_size=bs, collate_fn=collate, num_workers=1,
                             prefetch_factor=2)
        it: Any = iter(dl)
        try:
            workers = getattr(it, "_workers", None) or [None]
            pid = getattr(workers[0], "pid", None)
            if not pid:
                return None
            for _ in range(SEND_WARM + 1):  # the first pays for the worker's start
                t0 = time.perf_counter()
                next(it)
                if time.perf_counter() - t0 > SLOW_FORWARD_S:
                    return None
            a = _other_threads_cpu_ns(pid)
            start, n = time.perf_counter(), 0
            last = min(SEND_BATCHES, size // bs - SEND_WARM - 2)
            while n < last and (n < 2 or time.perf_counter() - start < SEND_S):
                t0 = time.perf_counter()
                next(it)
                n += 1
                if time.perf_counter() - t0 > SLOW_FORWARD_S:
                    return None
            z = _other_threads_cpu_ns(pid)
        finally:
            del it
    if a is None or z is None or n == 0:
        return None
    return round((z - a) / n / 1e6, 4)


def time_inprocess_batch(loader: Any, repeat: int = 5) -> float | None:
    """One batch made in the training process as an in-process loader would make it (the
    dataset's items for the first ``batch_size`` indices, then the loader's collate_fn),
    the median of ``repeat`` (ms): what a batch costs without workers, timed after the
    loop. The median, not the least: the loop's own batches are a typical time, and on a
    shared 2-vCPU host the least of a few timings was 0.55-0.6x their median one day
    (tokenizing, timed in turn with the loop's own next(): the median 11.0-12.6 ms, the
    loop's 11.3-13.0, the least 6.8-7.0), while a median lets one busy moment through
    (the best of 2 once read 20.7 ms where the others gave 10.2-11.1). The RNG states the
    dataset may draw from (torch, random, numpy) are put back. None for an iterable
    dataset, a custom batch sampler or a ``__getitems__`` dataset's failure."""
    ds, bs = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    collate = getattr(loader, "collate_fn", None)
    if ds is None or not isinstance(bs, int) or collate is None:
        return None
    try:
        n = len(ds)
    except TypeError:  # an IterableDataset
        return None
    idx = list(range(min(bs, n)))
    times: list[float] = []
    with _rng_kept():
        for _ in range(repeat):
            times.append(_make_batch(ds, collate, idx))
            if times[-1] > SLOW_FORWARD_S:
                break
    return round(statistics.median(times) * 1e3, 4)


@contextmanager
def _rng_kept() -> Iterator[None]:
    """The RNG states a dataset may draw from (torch, random, numpy), put back after."""
    import random

    import torch

    states: list[tuple[Callable[[Any], Any], Any]] = [
        (torch.set_rng_state, torch.get_rng_state()), (random.setstate, random.getstate())]
    try:
        import numpy as np

        states.append((np.random.set_state, np.random.get_state()))
    except ImportError:  # pragma: no cover
        pass
    try:
        yield
    finally:
        for put, state in states:
            put(state)


def _make_batch(ds: Any, collate: Callable[[Any], Any], idx: list[int]) -> float:
    """Seconds to make the batch of ``idx`` as the loader's fetcher does: the dataset's
    ``__getitems__`` where it has one, else its items one by one; then ``collate``."""
    t0 = time.perf_counter()
    many = getattr(ds, "__getitems__", None)
    collate(many(idx) if callable(many) else [ds[i] for i in idx])
    return time.perf_counter() - t0


#: the Python loop each process of :func:`time_cpu_capacity` runs (about 40 ms on the
#: 2-core development VM): interpreter work, like a DataLoader worker's per-sample code
CAPACITY_LOOP = 800_000
CAPACITY_ROUNDS = 3
#: more rounds, up to CAPACITY_MAX_ROUNDS, while all of them took under CAPACITY_S seconds:
#: a busy moment of some 50 ms covered all three rounds of a 6 ms batch (capacity 1.29
#: where ten other timings gave 1.82-2.0)
CAPACITY_MAX_ROUNDS = 12
CAPACITY_S = 0.25
#: at most this many processes at once (a big machine is measured on this many CPUs)
CAPACITY_MAX_PROCS = 16


def _spin(n: int) -> float:
    t0 = time.perf_counter()
    s = 0
    for i in range(n):
        s += i * i
    return time.perf_counter() - t0


def _concurrent_s(k: int, work: Callable[[], float]) -> float | None:
    """``k`` forked processes run ``work`` (which returns the seconds it took) at once,
    released together by a pipe once all exist (forking is not timed); the mean of their
    times (s), None where a child failed."""
    import os
    import struct
    import warnings

    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    pids: list[int] = []
    times: list[float] = []
    try:
        for _ in range(k):
            with warnings.catch_warnings():  # Python 3.12+: fork in a threaded process
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the child: the work, then out without any clean-up
                took = -1.0
                try:
                    os.close(go_w)
                    os.read(go_r, 1)
                    took = float(work())
                finally:
                    os.write(res_w, struct.pack("d", took))
                    os._exit(0)
            pids.append(pid)
        os.write(go_w, b"g" * k)
        times = [struct.unpack("d", os.read(res_r, 8))[0] for _ in range(k)]
    finally:
        for fd in (go_r, go_w, res_r, res_w):
            os.close(fd)
        for pid in pids:
            os.waitpid(pid, 0)
    if len(times) != k or min(times) <= 0:
        return None
    return statistics.fmean(times)


def _capacity(n: int, work: Callable[[], float], rounds: int) -> tuple[float, float] | None:
    """(the work's seconds alone; the CPUs' worth ``n`` processes did at once), from
    ``rounds`` (more while cheap: :data:`CAPACITY_S`) alternating rounds of one process and
    of ``n``. The work's time alone is its median round, a typical time as the loop's
    are (:func:`time_inprocess_batch` says why not the least). The capacity is a ratio of
    two sides timed apart: each side's least time, as a busy moment only adds to it, so
    ``n x least alone / least together``. The median of
    the rounds' own ratios let one disturbed side of a round through: on the 2-vCPU
    development VM it ranged 1.27-2.0 over ten timings of one loader (standard deviation
    0.13-0.22), the least times' ratio 1.79-2.0 (0.02-0.08)."""
    alone: list[float] = []
    together: list[float] = []
    start = time.perf_counter()
    for k in range(CAPACITY_MAX_ROUNDS):
        if k >= rounds and time.perf_counter() - start > CAPACITY_S:
            break
        one, many = _concurrent_s(1, work), _concurrent_s(n, work)
        if one is None or many is None:
            return None
        alone.append(one)
        together.append(many)
    return (statistics.median(alone),
            min(float(n), max(1.0, n * min(alone) / min(together))))


def time_cpu_capacity(cpus: int, loops: int = CAPACITY_LOOP) -> float | None:
    """How many CPUs' worth of Python work the usable CPUs do at once: one process per CPU
    running the same loop against one process alone, ``cpus x alone / together`` (the least
    times of :data:`CAPACITY_ROUNDS` alternating rounds, :func:`_capacity`). Under ``cpus`` where CPUs share a core (SMT
    siblings) or the host is busy; on the 2-vCPU development VM it measured 1.1-2.0
    minutes apart. None with one CPU or where ``os.fork`` is missing."""
    import os

    n = min(int(cpus), CAPACITY_MAX_PROCS)
    if n < 2 or not hasattr(os, "fork"):
        return None
    got = _capacity(n, lambda: _spin(loops), CAPACITY_ROUNDS)
    return None if got is None else round(got[1], 3)


def _as_worker(ds: Any) -> None:
    """This (forked) process set up as torch sets up a DataLoader worker."""
    import gc

    import torch
    from torch.utils.data._utils import worker

    # no collections in the timed batches: the child starts from the training
    # process's collector counts, so every round of one capture set off the same full
    # collection of the forked heap (tensor_rows: 226 ms a batch against 15 ms), and the
    # step model adds the loop's own pauses inside its loading to a worker's batch
    gc.disable()
    torch.set_num_threads(1)  # as in a DataLoader worker
    # as in a worker, default_collate writes the batch into shared memory (a new
    # segment per batch, its pages faulted in), which the hand-over then passes on
    worker._worker_info = worker.WorkerInfo(id=0, num_workers=1, seed=0, dataset=ds)


def _forked_loader(loader: Any) -> tuple[Any, int, Callable[[Any], Any], int] | None:
    """(dataset, batch size, collate_fn, len) of a map-style loader whose workers are
    forked; None for any other (an iterable dataset, no batch size, spawned workers)."""
    import os

    ds, bs = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    collate = getattr(loader, "collate_fn", None)
    ctx = getattr(loader, "multiprocessing_context", None)
    method = ctx.get_start_method() if ctx is not None and hasattr(ctx, "get_start_method") \
        else "fork"
    if ds is None or not isinstance(bs, int) or collate is None \
            or not hasattr(os, "fork") or method != "fork":
        return None
    try:
        size = len(ds)
    except TypeError:  # an IterableDataset
        return None
    return (ds, bs, collate, size) if size > 0 else None


#: batches made in turn by :func:`time_batches_in_turn`: PAIRS at least, up to MAX_PAIRS
#: while they took under PAIRS_S seconds in all
PAIRS = 7
MAX_PAIRS = 15
PAIRS_S = 1.5


def time_batches_in_turn(loader: Any) -> tuple[float, float] | None:
    """What a batch costs a DataLoader worker against what it costs this process, timed in
    turn: one forked process set up as a worker (:func:`_as_worker`) and this process make
    the same batch one after the other, a new batch each turn (the loader's 2nd, 3rd, ...
    ``batch_size`` indices, as a worker's next batch touches pages it has not touched
    yet), after one untimed batch each at once (imports, caches; the pages this process
    writes after the fork copied once). :data:`PAIRS` turns or more while cheap.

    Returns (ms a worker's batch, ms this process's batch: :func:`paired_medians` of the
    turns); None where :func:`time_worker_batches` gives None, or for a batch over half
    a second. The model sets the two against each other (a worker's batch at the loop's
    pace): timed in turn, a busy moment of the shared host falls on both. Timed seconds
    apart (a worker's batches, then this process's) the two gave 114 and 70 ms for the
    same numpy work once (slow_loader; 0.7-1.2 apart in other runs), and its workers were
    predicted no faster. The RNG states are put back; the child is gone on return."""
    import os
    import struct

    got = _forked_loader(loader)
    if got is None:
        return None
    ds, bs, collate, size = got
    batches = max(1, size // bs)

    def idx(j: int) -> list[int]:
        at = (j % batches) * bs
        return list(range(at, min(at + bs, size)))

    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    import warnings

    with warnings.catch_warnings():  # Python 3.12+: fork in a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the worker: a batch for each index it is sent, until -1 or EOF
        try:
            os.close(go_w)
            os.close(res_r)
            _as_worker(ds)
            os.write(res_w, struct.pack("d", _make_batch(ds, collate, idx(0))))
            while len(b := os.read(go_r, 4)) == 4 and (j := struct.unpack("i", b)[0]) >= 0:
                os.write(res_w, struct.pack("d", _make_batch(ds, collate, idx(j))))
        finally:
            os._exit(0)
    os.close(go_r)
    os.close(res_w)
    mine: list[float] = []
    theirs: list[float] = []

    def worker_batch(j: int | None) -> float | None:
        if j is not None:
            os.write(go_w, struct.pack("i", j))
        b = os.read(res_r, 8)
        return struct.unpack("d", b)[0] if len(b) == 8 else None

    try:
        with _rng_kept():
            # beside the worker's first (untimed) batch; a slow batch ends it (quick exit)
            warm = _make_batch(ds, collate, idx(0))
            if worker_batch(None) is None or warm > SLOW_FORWARD_S:
                return None
            start = time.perf_counter()
            for j in range(1, MAX_PAIRS + 1):
                if j > PAIRS and time.perf_counter() - start > PAIRS_S:
                    break
                mine.append(_make_batch(ds, collate, idx(j)))
                took = worker_batch(j)
                if took is None:
                    return None
                theirs.append(took)
                if max(mine[-1], took) > SLOW_FORWARD_S:
                    return None
    finally:
        with suppress(OSError):  # the child may be gone already
            os.write(go_w, struct.pack("i", -1))
        os.close(go_w)
        os.close(res_r)
        os.waitpid(pid, 0)
    return paired_medians(theirs, mine)


def paired_medians(theirs: list[float], mine: list[float]) -> tuple[float, float]:
    """(ms a worker's batch, ms this process's) from batches timed in turn (s): this
    process's median turn, and the worker's at the median of the turns' own ratios
    (worker / this process), so that the two stay paired: a busy moment of the host
    falls on both sides of a turn, and their ratio keeps. Each side's median alone lets a
    pace that moved for a few turns land on one side only. augment_cnn, six timings
    seconds apart: the sides' medians gave 0.93-1.16 (two of six within 1.00-1.06), the
    turns' ratios 0.98-1.17 (four of six). Five captures of it read 0.90-1.29 even so:
    the timing at the exit is not as quiet as at rest."""
    own = statistics.median(mine)
    ratio = statistics.median(t / m for t, m in zip(theirs, mine, strict=True) if m > 0)
    return round(own * ratio * 1e3, 4), round(own * 1e3, 4)


def time_worker_batches(loader: Any, cpus: int) -> tuple[float, float] | None:
    """What a batch costs a DataLoader worker, and how many CPUs' worth of them the usable
    CPUs make at once: forked processes set up as torch sets up a worker (one intra-op
    thread; the worker info set, so that default_collate builds the batch in shared
    memory as a worker's does) make the loader's second batch (the dataset's items for the second
    ``batch_size`` indices, then its collate_fn) after its first, one alone and one per
    CPU at once.
    Returns (ms a batch alone: the median of :data:`CAPACITY_ROUNDS` or more rounds; the
    capacity their least times give, :func:`_capacity`); None for an iterable
    dataset, a custom batch sampler, a loader whose workers are not forked, one CPU, or a
    batch over half a second (the exit must stay quick)."""
    got = _forked_loader(loader)
    n = min(int(cpus), CAPACITY_MAX_PROCS)
    if got is None or n < 2:
        return None
    ds, bs, collate, size = got
    first, second = list(range(min(bs, size))), list(range(bs, min(2 * bs, size)))

    def batch() -> float:
        """A warm worker's batch: the first one warms the process (imports, caches), the
        second (other samples, whose pages it copies on first touch as a worker does)
        is timed."""
        _as_worker(ds)
        took = 0.0
        for idx in (first, second or first):
            took = _make_batch(ds, collate, idx)
        return took

    one = _concurrent_s(1, batch)
    if one is None or one > SLOW_FORWARD_S:
        return None
    cap = _capacity(n, batch, CAPACITY_ROUNDS)
    return None if cap is None else (round(cap[0] * 1e3, 4), round(cap[1], 3))
