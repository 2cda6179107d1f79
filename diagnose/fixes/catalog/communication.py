"""Communication fixes: how ranks exchange gradients."""

from __future__ import annotations

from ..unit import Fix

OVERLAP_COMMUNICATION = Fix("overlap_communication", "Overlap gradient communication with "
                            "backward", """
# before: DDP's default buckets (the first 1 MiB, then 25 MiB each): a bucket's all-reduce
# starts once every gradient in it is made
model = DDP(model, device_ids=[rank])  # a model on the CPU: DDP(model), no device_ids
# after, for gradients of well over 25 MiB: smaller buckets start all-reduce earlier in
# backward (a bucket_cap_mb given sizes the first bucket too: keep it well under the
# gradients' size); no copies into buckets (measure: each bucket pays a launch)
model = DDP(model, device_ids=[rank], bucket_cap_mb=10, gradient_as_bucket_view=True)
# with gradient accumulation, skip the all-reduce on the micro-steps:
with model.no_sync():
    loss_fn(model(x), y).backward()
""", category="communication")

USE_DDP = Fix("use_ddp", "DistributedDataParallel instead of DataParallel", """
# before: one process drives all GPUs, re-broadcasting the model every step
model = torch.nn.DataParallel(model)
# after: one process per GPU (torchrun --nproc_per_node=N train.py)
torch.distributed.init_process_group("nccl")
model = DDP(model.to(local_rank), device_ids=[local_rank])
""", category="communication")

USE_NCCL = Fix("use_nccl", "NCCL backend for GPU tensors", """
# before: gloo moves GPU tensors through host memory for every collective
torch.distributed.init_process_group("gloo")
# after: NCCL talks GPU to GPU (NVLink / InfiniBand / PCIe peer-to-peer); on AMD it is RCCL
torch.distributed.init_process_group("nccl")
# keep gloo for CPU-only collectives if you need them:
torch.distributed.init_process_group("cuda:nccl,cpu:gloo")
""", category="communication")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (OVERLAP_COMMUNICATION, USE_DDP, USE_NCCL)
