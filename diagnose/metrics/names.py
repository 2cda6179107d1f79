"""Event names the analysis recognises, shared by the area modules."""

from __future__ import annotations

import re

STEP = re.compile(r"^ProfilerStep#\d+$")
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#")
#: the span a live session puts around a batch of a DataLoader other than the one it was
#: given (a validation loader): its wait is the loop's other work, not the training input
OTHER_LOADER = "diagnose::other_loader"
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
SYNC_RUNTIME = frozenset(
    {
        "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
        "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpy",
        "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
    }
)
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
#: a runtime call that launches one kernel or a graph: CUDA's runtime and driver calls (with
#: the version suffixes newer CUDA puts on them: ``cudaLaunchKernelExC_v11060``), HIP's
#: (``hipExtModuleLaunchKernel`` among them), and graph launches
LAUNCH = re.compile(r"^(?:(?:cuda|cu)(?:LaunchKernel|LaunchKernelEx|LaunchKernelExC|"
                    r"LaunchCooperativeKernel|GraphLaunch)"
                    r"|hip(?:Ext)?(?:Module)?(?:LaunchKernel|LaunchCooperativeKernel)"
                    r"|hipGraphLaunch)(?:_v\d+)?$")
MEMCPY_API = re.compile(r"^(cuda|hip)Memcpy|^cuMemcpy")
GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
COMM_KERNEL = re.compile(r"nccl|rccl", re.IGNORECASE)
#: an all-reduce: NCCL/RCCL's kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) and the
#: host backends' spans (``gloo:all_reduce``); DDP's gradient buckets are these
ALL_REDUCE = re.compile(r"all_?reduce", re.IGNORECASE)


def copy_direction(name: str) -> str | None:
    """h2d, d2h or d2d for a device copy's name (``Memcpy HtoD (Pageable -> Device)``)."""
    if not name.startswith("Memcpy"):
        return None
    if "HtoD" in name or "Host->Device" in name or "HostToDevice" in name:
        return "h2d"
    if "DtoH" in name or "Device->Host" in name or "DeviceToHost" in name:
        return "d2h"
    if "DtoD" in name or "Device->Device" in name or "PtoP" in name or "DeviceToDevice" in name:
        return "d2d"
    return None
