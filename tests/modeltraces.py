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
