"""What the trace says about its device and its place in a distributed run (metadata only)."""

from __future__ import annotations

from typing import Any

from ..trace import Trace
from ..values import as_int
from .declare import DEVICE_PROPERTIES, DISTRIBUTED_INFO, GPU, NVIDIA, Metric

_PROPS = (GPU, DEVICE_PROPERTIES)
_CC = (GPU, DEVICE_PROPERTIES, NVIDIA)

METRICS = (
    Metric("device_name", "", "GPU name from deviceProperties", _PROPS),
    Metric("device_vendor", "", "nvidia, amd or other (from the device name)", _PROPS),
    Metric("device_cc_major", "", "CUDA compute capability, major", _CC),
    Metric("device_cc_minor", "", "CUDA compute capability, minor", _CC),
    Metric("device_memory_bytes", "bytes", "Device memory capacity", _PROPS),
    Metric("device_has_tensor_cores", "bool", "NVIDIA GPU with compute capability >= 7.0", _CC),
    Metric("rank", "", "Rank of this trace (distributedInfo, else the file name)",
           (DISTRIBUTED_INFO,)),
    Metric("world_size", "count", "World size from distributedInfo", (DISTRIBUTED_INFO,)),
    Metric("dist_backend", "", "torch.distributed backend from distributedInfo",
           (DISTRIBUTED_INFO,)),
)

#: Declared apart: it comes last in a trace's metrics.
DROPPED = (Metric("trace_dropped_events", "count",
                  "Events dropped because their fields had unusable types"),
           Metric("trace_unread_events", "count",
                  "Events of categories no metric reads (another accelerator's, say)"))


def _vendor(name: str | None) -> str | None:
    if not name:
        return None
    low = name.lower()
    if "amd" in low or "radeon" in low or "instinct" in low:
        return "amd"
    if any(k in low for k in ("nvidia", "tesla", "geforce", "quadro", "rtx")):
        return "nvidia"
    return "other"


def device_metrics(t: Trace) -> dict[str, Any]:
    """The METRICS above, from deviceProperties and distributedInfo."""
    props = t.device_properties
    p: dict[str, Any] = props[0] if props else {}
    name = p.get("name") if isinstance(p.get("name"), str) else None
    vendor = _vendor(name)
    major = as_int(p.get("computeMajor", p.get("major")))
    minor = as_int(p.get("computeMinor", p.get("minor")))
    nvidia = vendor == "nvidia"
    return {
        "device_name": name,
        "device_vendor": vendor,
        "device_cc_major": major if nvidia else None,
        "device_cc_minor": minor if nvidia else None,
        "device_memory_bytes": as_int(p.get("totalGlobalMem")),
        "device_has_tensor_cores": major >= 7 if nvidia and major is not None else None,
        "rank": t.rank,
        "world_size": t.world_size,
        "dist_backend": t.backend,
    }


def dropped_metrics(t: Trace) -> dict[str, Any]:
    return {"trace_dropped_events": t.dropped_events, "trace_unread_events": t.n_unread_events}


def unread_note(t: Trace) -> str | None:
    """What the analysis did not read of the trace, where it holds events of categories no
    metric reads (an accelerator other than a CUDA or ROCm GPU: MTIA's, say), or events
    whose negative durations it counted as 0."""
    said = []
    n = t.negative_durations
    if n:
        said.append(f"{n:,} {'event has a negative duration' if n == 1 else 'events have negative durations'}"
                    ": counted as taking no time (the file was edited or merged by another tool?)")
    if t.n_unread_events:
        share = t.n_unread_events / t.n_events_total if t.n_events_total else 0.0
        said.append(f"{t.n_unread_events:,} events ({share:.0%} of the trace) are of categories "
                    f"this analysis does not read ({', '.join(t.unread_categories)}): what they "
                    "record (another accelerator's work, say) is in no metric or finding")
    return "; ".join(said) or None
