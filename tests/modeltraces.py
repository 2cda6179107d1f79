"""Small builder traces for the step model's tests (tests/tracebuilder.py does the writing),
and a helper to read one back as a Trace."""

from __future__ import annotations

from pathlib import Path

from diagnose.trace import Trace, read_trace
from tests import tracebuilder as tb


def as_trace(b: tb.TraceBuilder, tmp: Path, name: str = "t.pt.trace.json") -> Trace:
    return read_trace(b.write(tmp / name))


def sync_loop(*, steps: int = 4, host_us: float = 100.0, kernel_us: float = 1000.0) -> tb.TraceBuilder:
    """Each step: ``host_us`` of host work, one kernel of ``kernel_us`` launched inside an
    ``aten::mm`` (3 us before the 5 us launch, 2 us after), then cudaStreamSynchronize,
    which returns 3 us after the kernel ends. By hand: the kernel starts when its launch
    returns, at 100 + 3 + 5 = 108 us into the step, ends at 108 + kernel_us; the sync
    returns 3 us later: a step of 111 + kernel_us us."""
    b = tb.TraceBuilder()
    for _ in range(steps):
        with b.step():
            b.cpu(host_us)
            b.kernel(tb.GEMM_FP32[0], dur=kernel_us, op="aten::mm")
            b.sync()
    return b


def pageable_behind_kernel(*, steps: int = 4) -> tb.TraceBuilder:
    """Each step: a 2000 us kernel A, then a blocking pageable copy of 1 MB (500 us) that
    queues behind A, 1500 us of host work, a 500 us kernel B and a stream sync.

    By hand (builder costs: op 3 us before its launch call, 2 after; launch 5 us; the copy
    call 19 us into the step): A runs 8-2008; the copy 2008-2508; the host is back at
    2514 (sync + op tails), works until 4014, launches B at 4017 (4022-4522) and its sync
    returns at 4525: a step of 4525 us. Pinned + non-blocking (50 GB/s on an H100: the copy
    takes 20 us): the host does not wait; B is launched at ~1528 and queues behind A and
    the copy (2008-2028), runs 2029-2529 and the sync returns ~2532: about 2532 us."""
    b = tb.TraceBuilder()
    for _ in range(steps):
        with b.step():
            b.kernel(tb.ELEMENTWISE_ADD, dur=2000.0)
            b.memcpy("HtoD", bytes=1_000_000, dur=500.0, pinned=False, blocking=True)
            b.cpu(1500.0)
            b.kernel(tb.ELEMENTWISE_ADD, dur=500.0)
            b.sync()
    return b


def fills(*, steps: int = 4, params: int = 10) -> tb.TraceBuilder:
    """zero_grad(set_to_none=False) of ``params`` gradients, 1000 us of host work, a sync.
    By hand: the zero_grad span is 5 + params x (1 + 3 + 5 + 2 + 1) + 3 us = 128 us for
    10 params (each fill's kernel, 2 us, runs while the host moves on)."""
    b = tb.TraceBuilder()
    for _ in range(steps):
        with b.step():
            b.zero_grad(params=params, set_to_none=False)
            b.cpu(1000.0)
            b.kernel(tb.ELEMENTWISE_ADD, dur=100.0)
            b.sync()
    return b


def per_param_optimizer(*, steps: int = 4, kernels: int = 320) -> tb.TraceBuilder:
    """An optimizer launching ``kernels`` 3 us kernels one by one (10 us of host each: op 3 +
    launch 5 + 2), inside a span of 10 + kernels x 10 + 5 us; then 3000 us of host work
    (the GPU catches up: no sync needed)."""
    b = tb.TraceBuilder()
    for _ in range(steps):
        with b.step():
            b.optimizer_step(kernels=kernels, foreach=False)
            b.cpu(3000.0)
    return b


def many_launches(*, steps: int = 4, kernels: int = 100) -> tb.TraceBuilder:
    """``kernels`` 2 us kernels, each 3 + 8 (launch) + 2 us of host, then a sync: the host
    sets the pace (13 us per 2 us kernel)."""
    b = tb.TraceBuilder()
    for _ in range(steps):
        with b.step():
            for _ in range(kernels):
                b.kernel(tb.ELEMENTWISE_ADD, dur=2.0, launch_dur=8.0)
            b.sync()
    return b


def cpu_loader(*, steps: int = 5, fetch_us: float = 2000.0, compute_us: float = 1000.0,
               workers: int = 0) -> tb.TraceBuilder:
    """CPU only: an in-process DataLoader taking ``fetch_us`` per batch, then ``compute_us``
    of compute: steps of fetch + compute. With ``workers``, each step waits ``fetch_us``
    for a worker's batch instead."""
    b = tb.TraceBuilder(device=None)
    for _ in range(steps):
        with b.step():
            b.dataloader(fetch_us, workers=workers)
            b.cpu(compute_us, "aten::addmm")
    return b


def cpu_no_loader(*, steps: int = 5, slice_us: float = 500.0, compute_us: float = 2500.0
                  ) -> tb.TraceBuilder:
    """CPU only, no DataLoader: the loop slices its batch from tensors (``slice_us``, host
    ops) then computes (``compute_us``): steps of host work alone."""
    b = tb.TraceBuilder(device=None)
    for _ in range(steps):
        with b.step():
            b.cpu(slice_us, "aten::index_select")
            b.cpu(compute_us, "aten::addmm")
    return b
