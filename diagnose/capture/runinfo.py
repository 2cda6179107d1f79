"""What the run is: devices, loader, model, optimizer, threads; the facts rules need
besides the trace, written to ``context.json`` (``diagnose.metrics.context`` reads it).

Everything here only reads the user's objects (model, DataLoader, optimizer);
nothing is changed. Every value that cannot be found is None, never a guess.

context.json (version 1)::

    {
      "version": 1, "created": "YYYY-MM-DDTHH:MM:SS" (local), "python": "3.11.7",
      "torch_version": "2.13.0", "cuda_version": "12.8"|None, "cudnn_version": 90100|None,
      "device": {"type": "cuda"|"cpu", "index": 0|None, "name": str|None,
                 "capability": [9, 0]|None, "total_memory_bytes": int|None,
                 "device_count": int},
      "cudnn_benchmark": bool|None, "torch_num_threads": int,
      "thread_pools": [{"user_api": "blas"|"openmp", "internal_api": "openblas"|..., "prefix",
                        "num_threads", "torch": bool (torch's own)}] | None (threadpoolctl;
                       read again as the with block ends),
      "cpu_count": int,                # CPUs this process may use (sched_getaffinity)
      "cpu_count_logical": int|None,   # all CPUs of the machine
      "cpu_quota": float|None,         # CPUs' worth of time the cgroup may use (None: no quota)
      "cpu_capacity_on_enter": [capacity, q1, q3] | None,  # the CPUs' capacity timed
                                       # before the loop (a DataLoader's run; one process)
      "cpu_pace_ms": [median, least, most] | None,  # the same timing's fixed loop
                                       # alone (ms, its rounds): the host's own pace
      "dataloader": {"class", "num_workers", "pin_memory", "batch_size", "persistent_workers",
                     "prefetch_factor", "drop_last", "dataset_class", "dataset_len",
                     "len" (batches an epoch), "sampler_len" (its samples), "iterable_dataset",
                     "sampler_class", "batch_sampler_class",
                     "collate_fn", "worker_init_fn" (names; None: default), "generator"
                     (bool), "timeout", "multiprocessing_context",
                     "dataset_getitems" (the dataset has __getitems__: one call per batch),
                     "dataset_tensor_indexable" (batches fetch with one dataset[indices]
                     call and come out the same: see batch_indexable),
                     "batched_fetch_ms", "batched_fetch_per_sample_ms" (null here: an
                     in-process loader's fetches, timed after the loop),
                     "remade", "persistent_workers_set" (the loop made a new DataLoader
                     as this one each epoch: see remade_loader)}
                    | None,
      "model": {"class", "param_count", "trainable_param_count", "param_dtype" (the dtype
                holding most parameters), "param_dtypes": {dtype: count}, "device",
                "is_dataparallel", "has_conv", "conv_count", "parts" (several models:
                each one's own), "found" (true: none was given; these are the models
                the loop called)} | None,
      "optimizer": {"class", "foreach", "fused" (as set: None = torch's default),
                    "foreach_effective", "fused_effective" (what torch actually runs),
                    "param_count", "param_groups", "arguments" (lr and the
                    hyper-parameters set to other than the class's defaults)} | None:
                   the first optimizer whose steps counted,
      "optimizers": [the same, for each optimizer whose steps counted, in the order they
                     first stepped (a GAN: two)],
      "capture": {... filled in by the session: schedule, steps seen, step mode, window,
                  "clock_steps", "settle_steps", "dataloader_hooks" (bool),
                  "step_clock": {column: [one value a step]}: phase, ms, dataloader_ms,
                  fetch_ms, collate_ms, batches, batch_bytes (per-step sums; null where
                  unknown; see capture.steps),
                  "loader_starts": [{"iter_ms", "first_wait_ms", "workers", "gap_ms" (from
                  the last iterator running out to this iter(): the loop's own work
                  between epochs; null for the first, or after a break)}]: each new
                  iterator of the loader, or of one made as it was (an epoch's start):
                  the ms iter() took, the ms
                  its first batch was waited for, its worker processes,
                  "step_signals": what the loop showed (diagnose.capture.boundaries):
                  {"pulls", "forwards", "grad_forwards", "backwards", "optimizer_steps",
                  "other_steps", "other_optimizers": [{"class", "tensors", "values"}],
                  "grads_set_to_none" (the probe gradients were None when the next step
                  began: zero_grad(set_to_none=True) or a hand-written clear; null:
                  unknown)}, "steps_untold": why no step boundary was found, or null},
      "exception": {"type", "message"} | None,
      "oom": {"device", "requested_bytes", "in_use_bytes", "total_bytes", "free_bytes",
              "reserved_unallocated_bytes", "memory_allocated_bytes", "max_memory_allocated_bytes",
              "memory_reserved_bytes", "process_rss_bytes", "sources": {field: "message"|"torch"},
              "message"} | None
    }
"""

from __future__ import annotations

import os
import platform
import re
import time
from collections import Counter
from typing import Any

from diagnose.fixes.catalog.fetch import batch_indexable
from diagnose.fixes.code import loader_arguments, optimizer_arguments

from ..values import cpu_quota, usable_cpus
from .loader_shim import unwrap
from .probes import common
from .probes.capacity import Pace, time_cpu_capacity_pace
from .probes.common import probe_clock, until

CONTEXT_VERSION = 1


def _safe(fn: Any, default: Any = None) -> Any:
    try:
        return fn()
    except Exception:
        return default


cpu_count = usable_cpus  # CPUs this process may run on (affinity), not the machine's total


# ---------------------------------------------------------------------------- device


def device_info(device: Any = None) -> dict[str, Any]:
    """The device the model runs on: type, name, compute capability, memory."""
    import torch

    count = _safe(torch.cuda.device_count, 0) if _safe(torch.cuda.is_available, False) else 0
    dev = torch.device(device) if device is not None else None
    if dev is None:
        dev = (
            torch.device("cuda", _safe(torch.cuda.current_device, 0))
            if count
            else torch.device("cpu")
        )
    out: dict[str, Any] = {
        "type": dev.type,
        "index": dev.index,
        "name": None,
        "capability": None,
        "total_memory_bytes": None,
        "device_count": count,
    }
    if dev.type == "cuda" and count:
        idx = dev.index if dev.index is not None else _safe(torch.cuda.current_device, 0)
        out["index"] = idx
        props = _safe(lambda: torch.cuda.get_device_properties(idx))
        if props is not None:
            out["name"] = props.name
            out["capability"] = [props.major, props.minor]
            out["total_memory_bytes"] = int(props.total_memory)
            out["uuid"] = _safe(lambda: str(props.uuid))
            out["pci_bus_id"] = _safe(
                lambda: (
                    f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                )
            )
    elif dev.type == "cpu":
        out["name"] = platform.processor() or platform.machine() or None
    return out


# ---------------------------------------------------------------------------- objects


def dataloader_info(loader: Any) -> dict[str, Any] | None:
    """The DataLoader settings rules look at. None when there is no loader, or what was
    given is no loader (a ``range``, a tensor: it has neither a dataset nor a batch size).
    A wrapper's DataLoader (:func:`~.loader_shim.unwrap`) gives the settings."""
    loader = unwrap(loader)[0]
    if loader is None or not (hasattr(loader, "dataset") or hasattr(loader, "batch_size")):
        return None
    ds = getattr(loader, "dataset", None)
    iterable = None
    try:
        from torch.utils.data import IterableDataset

        iterable = isinstance(ds, IterableDataset) if ds is not None else None
    except ImportError:  # pragma: no cover
        pass
    nw = getattr(loader, "num_workers", None)
    pf = getattr(loader, "prefetch_factor", None)
    return {
        "class": type(loader).__name__,
        "num_workers": nw,
        "pin_memory": getattr(loader, "pin_memory", None),
        "batch_size": getattr(loader, "batch_size", None),
        "persistent_workers": getattr(loader, "persistent_workers", None),
        # torch stores None when num_workers == 0 (no prefetching happens at all)
        "prefetch_factor": pf,
        "drop_last": getattr(loader, "drop_last", None),
        "dataset_class": type(ds).__name__ if ds is not None else None,
        "dataset_len": _safe(lambda: len(ds)) if ds is not None and not iterable else None,
        "len": _safe(lambda: len(loader)) if ds is not None and not iterable else None,
        "sampler_len": _safe(lambda: len(loader.sampler))
        if ds is not None and not iterable else None,
        "iterable_dataset": iterable,
        # torch's automatic batching: a batch sampler (its own, from batch_size, or one
        # given); off (batch_size=None), each sampler key goes to dataset[key] whole
        "automatic_batching": (getattr(loader, "batch_sampler", None) is not None)
        if hasattr(loader, "batch_sampler") else None,
        "dataset_getitems": callable(getattr(ds, "__getitems__", None)) if ds is not None
        else None,
        "dataset_tensor_indexable": batch_indexable(loader),
        # timed after the loop where the batched fetch needs them (probes.after_fetch)
        "batched_fetch_ms": None, "batched_fetch_per_sample_ms": None,
        "sampler_class": type(getattr(loader, "sampler", None)).__name__
        if getattr(loader, "sampler", None) is not None
        else None,
        # what the fixes' code shows: batch_sampler_class, collate_fn, worker_init_fn, ...
        **_safe(lambda: loader_arguments(loader), {}),
    }


def remade_loader(info: Any, remade: int) -> Any:
    """``info`` (:func:`dataloader_info`) for a loop that took ``remade`` iterators from new
    DataLoaders made as the given one was (one an epoch): ``remade`` added, and
    ``persistent_workers`` False where there was one, since a new DataLoader starts its
    workers however it is set (``persistent_workers_set``: as it was set)."""
    if not isinstance(info, dict) or not remade:
        return info
    return {**info, "remade": remade, "persistent_workers": False,
            "persistent_workers_set": info.get("persistent_workers")}


def model_info(model: Any) -> dict[str, Any] | None:
    """Parameter count, dtypes and device of a model; DataParallel; conv layers."""
    if model is None:
        return None
    import torch

    out: dict[str, Any] = {"class": type(model).__name__}
    if not isinstance(model, torch.nn.Module):
        out.update(
            param_count=None,
            trainable_param_count=None,
            param_dtype=None,
            param_dtypes={},
            device=None,
            is_dataparallel=None,
            has_conv=None,
            conv_count=None,
        )
        return out
    dtypes: Counter[str] = Counter()
    devices: Counter[str] = Counter()
    total = trainable = 0
    for p in model.parameters():
        n = p.numel()
        total += n
        if p.requires_grad:
            trainable += n
        dtypes[str(p.dtype).replace("torch.", "")] += n
        devices[str(p.device)] += n
    conv = sum(1 for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd))
    out.update(
        param_count=total,
        trainable_param_count=trainable,
        param_dtype=dtypes.most_common(1)[0][0] if dtypes else None,
        param_dtypes=dict(dtypes),
        device=(devices.most_common(1)[0][0] if len(devices) == 1 else "mixed")
        if devices
        else None,
        devices=sorted(devices),
        is_dataparallel=isinstance(model, torch.nn.DataParallel),
        has_conv=conv > 0,
        conv_count=conv,
    )
    return out


def models_info(models: list[Any]) -> dict[str, Any] | None:
    """:func:`model_info` of several models as one (a GAN's generator and discriminator):
    class names joined with "+", counts summed, dtypes and devices merged, and each
    model's own under ``parts``. One model: its own info; none: None."""
    infos = [i for i in (model_info(m) for m in models) if i is not None]
    if len(infos) <= 1:
        return infos[0] if infos else None

    def total(key: str) -> int | None:
        vals = [i.get(key) for i in infos]
        return None if any(v is None for v in vals) else sum(int(v) for v in vals if v)

    dtypes: Counter[str] = Counter()
    for i in infos:
        dtypes.update(i.get("param_dtypes") or {})
    devices = sorted({d for i in infos for d in (i.get("devices") or [])})
    device = {i.get("device") for i in infos}
    return {
        "class": "+".join(str(i["class"]) for i in infos),
        "param_count": total("param_count"),
        "trainable_param_count": total("trainable_param_count"),
        "param_dtype": dtypes.most_common(1)[0][0] if dtypes else None,
        "param_dtypes": dict(dtypes),
        "device": device.pop() if len(device) == 1 else "mixed",
        "devices": devices,
        "is_dataparallel": any(i.get("is_dataparallel") for i in infos),
        "has_conv": any(i.get("has_conv") for i in infos),
        "conv_count": total("conv_count"),
        "parts": infos,
    }


def model_param_ids(model: Any) -> frozenset[int]:
    """ids of a model's parameters, to tell its optimizer from others."""
    try:
        return frozenset(id(p) for p in model.parameters())
    except Exception:
        return frozenset()


def optimizer_info(opt: Any) -> dict[str, Any] | None:
    """Optimizer class and whether it runs foreach / fused kernels."""
    if opt is None:
        return None
    defaults = getattr(opt, "defaults", {}) or {}
    params = [p for g in getattr(opt, "param_groups", []) for p in g.get("params", [])]
    foreach = defaults.get("foreach") if "foreach" in defaults else None
    fused = defaults.get("fused") if "fused" in defaults else None
    foreach_eff: bool | None = None
    fused_eff: bool | None = None
    if "foreach" in defaults or "fused" in defaults:
        fused_eff = bool(fused)
        if fused_eff:
            foreach_eff = False
        elif foreach is not None:
            foreach_eff = bool(foreach)
        else:  # torch decides at step time; ask it the same way
            try:
                from torch.optim.optimizer import _default_to_fused_or_foreach

                _, foreach_eff = _default_to_fused_or_foreach(
                    params, bool(defaults.get("differentiable", False)), use_fused=False
                )
            except Exception:
                foreach_eff = None
    return {
        "class": type(opt).__name__,
        "foreach": foreach,
        "fused": fused,
        "foreach_effective": foreach_eff,
        "fused_effective": fused_eff,
        "param_count": sum(int(p.numel()) for p in params),
        "param_groups": len(getattr(opt, "param_groups", [])),
        "arguments": _safe(lambda: optimizer_arguments(opt), {}),  # lr, the non-defaults
    }


def capacity_on_enter() -> tuple[float, float, float, Pace] | None:
    """The CPUs' capacity with its rounds' span and the host's pace, its least rounds only
    (tens of ms: no budget is known before the loop),
    :func:`~.probes.capacity.time_cpu_capacity_pace`."""
    with until(common._CLOCK(), least=True):
        return time_cpu_capacity_pace(usable_cpus())


def collect(model: Any = None, loader: Any = None, optimizer: Any = None,
            capacity: bool = False) -> dict[str, Any]:
    """The whole context dict (without the session's ``capture`` part); ``model`` may be a
    list of models (:func:`models_info`). Its ``probes_ms`` is the open
    :func:`~.probes.common.probe_clock`: each probe's own time (ms, summed over its
    calls) fills in as the probes run, the capacity timing here and those after the loop.
    With ``capacity`` and a DataLoader, the CPUs' capacity is timed here too, seconds
    before the timings after the loop (a shared host's pace moves for seconds at a time)."""
    import torch

    probes_ms = probe_clock()
    loader_info = dataloader_info(loader)
    on_enter = _safe(capacity_on_enter) if capacity and loader_info is not None else None

    minfo = models_info(list(model)) if isinstance(model, list | tuple) else model_info(model)
    dev = None
    if minfo and minfo.get("device") not in (None, "mixed"):
        dev = minfo["device"]
    cudnn_bench = _safe(lambda: bool(torch.backends.cudnn.benchmark))
    return {
        "version": CONTEXT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": _safe(torch.backends.cudnn.version),
        "device": device_info(dev),
        "cudnn_benchmark": cudnn_bench,
        "torch_num_threads": torch.get_num_threads(),
        "thread_pools": thread_pools(),
        "cpu_count": cpu_count(),
        "cpu_count_logical": os.cpu_count(),
        "cpu_quota": cpu_quota(),
        "cpu_capacity_on_enter": list(on_enter[:3]) if on_enter else None,
        "cpu_pace_ms": list(on_enter[3]) if on_enter else None,
        "dataloader": loader_info,
        "model": minfo,
        "optimizer": optimizer_info(optimizer),
        "exception": None,
        "oom": None,
        "probes_ms": probes_ms,
    }


def thread_pools() -> list[dict[str, Any]] | None:
    """The native thread pools loaded in this process (threadpoolctl: the BLAS and OpenMP
    libraries), each with its threads and whether it is torch's own (a library under
    torch's package: its OpenMP runtime); None where threadpoolctl is missing or fails."""
    try:
        import torch
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    info = _safe(threadpool_info)
    if not isinstance(info, list):
        return None
    root = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
    return [{"user_api": p.get("user_api"), "internal_api": p.get("internal_api"),
             "prefix": p.get("prefix"), "num_threads": p.get("num_threads"),
             "torch": os.path.realpath(str(p.get("filepath") or "")).startswith(root)}
            for p in info if isinstance(p, dict)]


# ---------------------------------------------------------------------------- OOM

_UNITS = {"bytes": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*(bytes|KiB|MiB|GiB|TiB)"

# Current CUDA caching allocator wording (c10/cuda/CUDACachingAllocator.cpp):
#   "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
#    79.19 GiB of which 1.50 GiB is free. [Process N has ... memory in use. | Including
#    non-PyTorch memory, this process has ... memory in use.] Of the allocated memory
#    75.00 GiB is allocated by PyTorch, [with ... allocated in private pools (e.g., CUDA
#    Graphs),] and 1.20 GiB is reserved by PyTorch but unallocated. ..."
# (older releases wrote "total capacty"; ROCm says "HIP out of memory").
# Before PyTorch 2.1:
#   "CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity;
#    130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)"
# CPU (c10/core/impl/alloc_cpu.cpp):
#   "DefaultCPUAllocator: can't allocate memory: you tried to allocate 4398046511104 bytes."
_PATTERNS: dict[str, re.Pattern[str]] = {
    "requested": re.compile(r"[Tt]ried to allocate " + _SIZE),
    "gpu": re.compile(r"\bGPU (\d+)\b"),
    "total": re.compile(r"total capac(?:i)?ty of " + _SIZE + r"|" + _SIZE + r" total capacity"),
    "free": re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free\b"),
    "in_use": re.compile(
        r"Of the allocated memory "
        + _SIZE
        + r" is allocated by PyTorch|"
        + _SIZE
        + r" already allocated"
    ),
    "reserved_unalloc": re.compile(_SIZE + r" is reserved by PyTorch but unallocated"),
}


def _to_bytes(num: str, unit: str) -> int:
    return round(float(num) * _UNITS[unit.lower()])


def _first_size(m: re.Match[str] | None) -> int | None:
    if m is None:
        return None
    groups = [g for g in m.groups() if g is not None]
    return _to_bytes(groups[0], groups[1]) if len(groups) >= 2 else None


def cuda_memory(ctx: dict[str, Any]) -> dict[str, Any] | None:
    """The caching allocator's peaks on the run's CUDA device, read when the profiled window
    ends (``torch.cuda.max_memory_*``: since the process started or the user last reset
    them; the session never resets them). None off CUDA. This is how a lean capture (no
    ``profile_memory``) still knows the peak memory."""
    dev = ctx.get("device") or {}
    if dev.get("type") != "cuda" or dev.get("index") is None:
        return None
    try:
        import torch

        i = int(dev["index"])
        return {"device": f"cuda:{i}",
                "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(i)),
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(i)),
                "total_bytes": int(torch.cuda.get_device_properties(i).total_memory)}
    except Exception:
        return None


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, or a RuntimeError saying an allocator ran out of memory
    (:func:`diagnose.memory.tensors.is_oom`: the memory tracker's test, one for both)."""
    from ..memory.tensors import is_oom as oom

    return oom(exc)


def parse_oom_message(message: str) -> dict[str, Any]:
    """Numbers an OOM message states (rounded as printed); None for each it doesn't."""
    out: dict[str, Any] = {
        "requested_bytes": _first_size(_PATTERNS["requested"].search(message)),
        "total_bytes": _first_size(_PATTERNS["total"].search(message)),
        "free_bytes": _first_size(_PATTERNS["free"].search(message)),
        "in_use_bytes": _first_size(_PATTERNS["in_use"].search(message)),
        "reserved_unallocated_bytes": _first_size(_PATTERNS["reserved_unalloc"].search(message)),
        "device": None,
    }
    low = message.lower()
    gpu = _PATTERNS["gpu"].search(message)
    if "cuda out of memory" in low or "hip out of memory" in low or gpu is not None:
        out["device"] = f"cuda:{gpu.group(1)}" if gpu else "cuda"
    elif "defaultcpuallocator" in low or "cpu out of memory" in low:
        out["device"] = "cpu"
    elif "mps" in low:
        out["device"] = "mps"
    elif "xpu" in low:
        out["device"] = "xpu"
    m = re.search(r"you tried to allocate (\d+) bytes", message)
    if out["requested_bytes"] is None and m:
        out["requested_bytes"] = int(m.group(1))
    return out


def oom_info(exc: BaseException, fallback_device: str | None = None) -> dict[str, Any]:
    """What an OOM says: requested / in use / total, from the message, else from torch now.

    In-use prefers the message ("allocated by PyTorch" at the failing moment);
    otherwise ``torch.cuda.memory_allocated()`` now, while the exception (and
    so the frames holding the step's tensors) is still alive. Total prefers the
    device's exact capacity. On CPU there is no PyTorch allocation counter, so
    in-use and total stay None (the process RSS is recorded beside them).
    """
    message = str(exc)
    parsed = parse_oom_message(message)
    device = parsed.pop("device")
    if device is None and isinstance(exc, MemoryError):
        device = "cpu"  # Python's own MemoryError: host memory
    device = device or fallback_device
    sources = {k: "message" for k, v in parsed.items() if v is not None}
    info: dict[str, Any] = {
        "type": type(exc).__name__,
        "device": device,
        **parsed,
        "memory_allocated_bytes": None,
        "max_memory_allocated_bytes": None,
        "memory_reserved_bytes": None,
        "process_rss_bytes": None,
        "message": message[:2000],
    }
    try:
        import psutil

        info["process_rss_bytes"] = int(psutil.Process().memory_info().rss)
    except Exception:
        pass
    if device and device.startswith("cuda"):
        try:
            import torch

            if torch.cuda.is_available():
                idx = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
                info["memory_allocated_bytes"] = int(torch.cuda.memory_allocated(idx))
                info["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(idx))
                info["memory_reserved_bytes"] = int(torch.cuda.memory_reserved(idx))
                total = int(torch.cuda.get_device_properties(idx).total_memory)
                info["total_bytes"] = total
                sources["total_bytes"] = "torch"
                if info["in_use_bytes"] is None:
                    info["in_use_bytes"] = info["memory_allocated_bytes"]
                    sources["in_use_bytes"] = "torch"
        except Exception:
            pass
    info["sources"] = sources
    return info
