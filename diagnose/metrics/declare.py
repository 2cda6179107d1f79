"""How a metric is declared: its name, unit, one line of documentation, and what it needs.

Every area module (window, breakdown, idle, transfers, ...) lists its metrics as
:class:`Metric` declarations next to the function that computes them; the catalog is the
union of those lists, built without running anything. A metric whose needs the input does
not meet is ``None``, never 0, and :func:`missing_reason` tells why from its declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..values import as_number


@dataclass(frozen=True)
class Need:
    """Something the input must hold for a metric to have a value.

    ``missing`` is the reason a rule gives when it is absent: one short cause, the same
    string for every metric with this need, so that reasons group. ``present`` tells
    from the metrics whether the input holds it (None: the metrics cannot tell).
    """

    what: str
    missing: str
    present: Callable[[Mapping[str, Any]], bool | None] = field(
        default=lambda m: None, compare=False, repr=False)


def _flag(name: str) -> Callable[[Mapping[str, Any]], bool | None]:
    def present(m: Mapping[str, Any]) -> bool | None:
        v = m.get(name)
        return v if isinstance(v, bool) else None

    return present


def _known(name: str) -> Callable[[Mapping[str, Any]], bool | None]:
    """Present where the metric ``name`` has a value; absent where the trace gives it None."""

    def present(m: Mapping[str, Any]) -> bool | None:
        return None if name not in m else m[name] is not None

    return present


def _ranks(m: Mapping[str, Any]) -> bool | None:
    n = as_number(m.get("rank_count"))
    return None if n is None else n >= 2


GPU = Need("GPU activity in the trace", "the trace has no GPU activity", _flag("has_gpu"))
LIVE = Need("a live capture", "only known from a live capture (with diagnose(...))",
            _flag("context_available"))
EPOCH_START = Need("an epoch's start among the timed steps",
                   "no epoch began among the steps timed without the profiler (none was "
                   "timed in the loop: a capture whose timed steps cross an epoch's end "
                   "would), or the workers persist",
                   _known("dataloader_epoch_boundary_ms"))
MAP_STYLE = Need("a map-style dataset",
                 "an IterableDataset: the session cannot make one of its batches apart "
                 "from the loop", lambda m: None if m.get("dataloader_iterable") is None
                 else m.get("dataloader_iterable") is False)
WORKER_TIMED = Need("a worker's batch timed after the loop",
                    "no worker's batch was timed after the loop (context.json's probes.skipped "
                    "says why: no finding it serves could be a warning, or its budget)",
                    _known("input_worker_batch_ms"))
SAMPLES = Need("the run's samples", "only known from the samples of a live capture "
               "(GPU and host sampling)")
RANKS = Need("2+ ranks", "needs 2 or more ranks analysed together (one trace per rank)", _ranks)


def _beside_device(name: str) -> Callable[[Mapping[str, Any]], bool | None]:
    """Present where the metric ``name`` has a value, or where the trace has no device work
    (which needs no launches)."""

    def present(m: Mapping[str, Any]) -> bool | None:
        return True if m.get("has_gpu") is False else _known(name)(m)

    return present


#: What a trace recorded with device activity alone lacks: host operators, runtime calls,
#: and the correlation ids that tie a device op to the call that launched it. A metric
#: that reads them is None there, not 0.
HOST_OPS = Need("host operators in the trace",
                "the trace records no host operators (device activity alone)",
                _known("share_cpu_exec"))
RUNTIME = Need("runtime calls in the trace",
               "the trace records no runtime calls (launches, syncs, copies): device "
               "activity alone", _beside_device("launches_per_step"))
LINKS = Need("device work tied to its launches",
             "the trace ties no device work to the runtime call that launched it (no "
             "correlation ids)", _beside_device("idle_launch_frac"))
COPY_BYTES = Need("copy sizes", "the trace's copies carry no byte counts (args.bytes)")
DATALOADER = Need("a DataLoader in the trace", "no DataLoader activity in the trace",
                  _known("dataloader_share"))
OPTIMIZER = Need("optimizer.step() in the trace",
                 "no optimizer.step()/zero_grad() annotations in the trace",
                 _known("optimizer_ms_per_step"))
ZERO_GRAD = Need("optimizer.zero_grad() in the trace",
                 "no optimizer.step()/zero_grad() annotations in the trace",
                 _known("zero_grad_fill_ops_per_step"))


def _optimizer_stepped(m: Mapping[str, Any]) -> bool | None:
    """Where steps were profiled: an optimizer's ``step()`` among them."""
    return None if not m.get("step_count") else _known("optimizer_ms_per_step")(m)


OPTIMIZER_STEPS = Need("a torch optimizer stepped by the loop",
                       "the loop stepped no torch optimizer (a hand-written update): the "
                       "session's clock times the loop's own work between an optimizer's "
                       "steps", _optimizer_stepped)
MEMORY_EVENTS = Need("[memory] events", "the trace has no [memory] events with allocator totals "
                     "(profile with profile_memory=True on a recent PyTorch)")
DEVICE_PROPERTIES = Need("deviceProperties", "the trace has no deviceProperties for its GPU",
                         _known("device_name"))


def _nvidia(m: Mapping[str, Any]) -> bool | None:
    vendor = m.get("device_vendor")
    return None if vendor is None else vendor == "nvidia"


NVIDIA = Need("an NVIDIA GPU", "not an NVIDIA GPU (no CUDA compute capability)", _nvidia)
DISTRIBUTED_INFO = Need("distributedInfo", "the trace has no distributedInfo")
CPU_OPS = Need("20+ CPU ops in the window", "too few CPU ops in the window to tell")
KERNEL_NAMES = Need("GEMM/conv kernels named by precision",
                    "no GEMM/conv kernel whose name tells its precision")
COPIES = Need("copies of this kind", "no copies of this kind in the window")
COLLECTIVES = Need("collectives in the trace", "no collectives in the trace",
                   _known("comm_source"))


@dataclass(frozen=True)
class Metric:
    """One documented measurement: ``name`` (unit) -- ``doc``; ``needs``: see :class:`Need`."""

    name: str
    unit: str
    doc: str
    needs: tuple[Need, ...] = ()


def catalog(*groups: Iterable[Metric]) -> dict[str, tuple[str, str]]:
    """name -> (unit, doc) of the declarations, in order (a name declared twice is a bug)."""
    out: dict[str, tuple[str, str]] = {}
    for group in groups:
        for m in group:
            if m.name in out:
                raise ValueError(f"metric {m.name} declared twice")
            out[m.name] = (m.unit, m.doc)
    return out


def declared(groups: Iterable[Mapping[str, tuple[str, str]]], *needs: Need) -> list[Metric]:
    """Declarations for plain (unit, doc) catalogs that share one set of needs."""
    return [Metric(k, unit, doc, needs) for g in groups for k, (unit, doc) in g.items()]


def missing_reason(metric: Metric, metrics: Mapping[str, Any]) -> str | None:
    """The cause of ``metric`` having no value: the first of its needs the metrics show
    absent, else the first one they cannot tell about (None: no need explains it)."""
    unknown = None
    for need in metric.needs:
        present = need.present(metrics)
        if present is False:
            return need.missing
        if present is None and unknown is None:
            unknown = need.missing
    return unknown


@dataclass
class MetricSet:
    """Flat name -> value mapping, per-step series, and notes on what was missing."""

    values: dict[str, Any]
    series: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tables: dict[str, Any] = field(default_factory=dict)  # e.g. top_kernels, for reports


def rnd(x: Any, nd: int = 6) -> float | None:
    """``x`` rounded to ``nd`` decimals; None for None, NaN and infinities."""
    if x is None:
        return None
    x = float(x)
    return round(x, nd) if np.isfinite(x) else None


def per_step_ms(values: np.ndarray) -> list[float]:
    """A per-step series in ms (from us), as stored in MetricSet.series."""
    return [round(x, 4) for x in (values / 1e3).tolist()]
