"""Reading torch.profiler / Kineto Chrome traces into columnar Traces."""

from .columns import (
    CHUNK_EVENTS,
    DEVICE_KINDS,
    HOST_KINDS,
    Kind,
    Trace,
    give_back_freed,
    kind_in,
)
from .reader import find_trace_files, read_trace

__all__ = ["CHUNK_EVENTS", "DEVICE_KINDS", "HOST_KINDS", "Kind", "Trace", "find_trace_files",
           "give_back_freed", "kind_in", "read_trace"]
