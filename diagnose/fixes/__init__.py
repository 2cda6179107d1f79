"""Fixes: one small object per change a person (or autofix) can make.

Each fix knows the code change a person would make by hand (``code``), and
whether autofix can apply it mechanically (``auto``). Automatic fixes change a
:class:`TrainConfig` purely: ``apply`` returns a new config and never mutates,
so a trial is reverted by keeping the old one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrainConfig:
    """Everything autofix may change about a training step."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    batch_size: int | None = None
    non_blocking: bool = False
    amp_dtype: str | None = None  # None, "bfloat16", "float16"
    channels_last: bool = False
    cudnn_benchmark: bool = False
    compile: bool = False
    zero_grad_set_to_none: bool = True
    optimizer_foreach: bool | None = None
    optimizer_fused: bool | None = None
    grad_accum_steps: int = 1


@dataclass(frozen=True)
class Fix:
    id: str
    title: str
    code: str  # before/after, as a person would write it
    auto: bool = False  # autofix can apply it mechanically
    applies: Callable[[TrainConfig, Mapping[str, Any]], bool] = field(
        default=lambda c, m: True, repr=False, compare=False
    )
    change: Mapping[str, Any] | None = None  # fields set by apply()

    def apply(self, config: TrainConfig) -> TrainConfig:
        """A new config with this fix applied (the input is never changed)."""
        if not self.auto or not self.change:
            raise ValueError(f"fix {self.id!r} is advice only: autofix cannot apply it")
        return dataclasses.replace(config, **self.change)

    def changes(self, config: TrainConfig) -> bool:
        """False when applying it would change nothing (already in place)."""
        return bool(self.change) and self.apply(config) != config

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "code": self.code, "auto": self.auto}


def _fix(id: str, title: str, code: str, *, auto: bool = False, change: Mapping[str, Any] | None = None,
         applies: Callable[[TrainConfig, Mapping[str, Any]], bool] | None = None) -> Fix:
    kw: dict[str, Any] = {}
    if applies is not None:
        kw["applies"] = applies
    return Fix(id, title, code.strip("\n"), auto, change=change, **kw)


_ALL = [
    _fix("num_workers", "Load batches in worker processes (DataLoader num_workers)", """
# before
loader = DataLoader(dataset, batch_size=64, shuffle=True)
# after: workers prepare batches in parallel with the training step
loader = DataLoader(dataset, batch_size=64, shuffle=True,
                    num_workers=min(8, len(os.sched_getaffinity(0)) - 1))
""", auto=True, applies=lambda c, m: c.num_workers < (m.get("cpu_count") or 2) - 0),
    _fix("persistent_workers", "Keep DataLoader workers alive between epochs", """
# before
loader = DataLoader(dataset, batch_size=64, num_workers=4)
# after: no worker start-up stall at every epoch
loader = DataLoader(dataset, batch_size=64, num_workers=4, persistent_workers=True)
""", auto=True, change={"persistent_workers": True},
        applies=lambda c, m: c.num_workers > 0 and not c.persistent_workers),
    _fix("prefetch_factor", "Queue more batches ahead (DataLoader prefetch_factor)", """
# before
loader = DataLoader(dataset, batch_size=64, num_workers=4)            # prefetch_factor=2
# after: each worker keeps 4 batches ready, absorbing slow samples
loader = DataLoader(dataset, batch_size=64, num_workers=4, prefetch_factor=4)
""", auto=True, change={"prefetch_factor": 4}, applies=lambda c, m: c.num_workers > 0),
    _fix("pin_memory", "Pinned host memory and asynchronous copies (pin_memory + non_blocking)", """
# before
loader = DataLoader(dataset, batch_size=64, num_workers=4)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
# after: page-locked batches, copied without blocking the host
loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
""", auto=True, change={"pin_memory": True, "non_blocking": True}),
    _fix("faster_input", "Make each sample cheaper to produce", """
# before: decode + augment every sample on the CPU, every epoch
class DS(Dataset):
    def __getitem__(self, i):
        return augment(decode(read(self.paths[i])))
# after: decode once and cache (or decode on the GPU, e.g. NVIDIA DALI / torchvision.io
# decode_jpeg(device="cuda")); keep only cheap random augmentation per step
class DS(Dataset):
    def __init__(self, paths):
        self.cache = [decode(read(p)) for p in paths]   # or a memory-mapped array on fast storage
    def __getitem__(self, i):
        return augment(self.cache[i])
"""),
    _fix("amp", "Automatic mixed precision (bf16, or fp16 with GradScaler)", """
# before
loss = loss_fn(model(x), y)
loss.backward()
opt.step()
# after: GEMMs and convolutions run on tensor cores
with torch.autocast("cuda", dtype=torch.bfloat16):       # Ampere or newer
    loss = loss_fn(model(x), y)
loss.backward()
opt.step()
# on GPUs without bf16 (e.g. V100): dtype=torch.float16 with a GradScaler
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    loss = loss_fn(model(x), y)
scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
""", auto=True, change={"amp_dtype": "bfloat16"}),
    _fix("channels_last", "channels_last memory format for convolution nets", """
# before
model = model.cuda()
# after: NHWC layout that tensor-core convolutions prefer
model = model.cuda().to(memory_format=torch.channels_last)
x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
""", auto=True, change={"channels_last": True}),
    _fix("cudnn_benchmark", "Let cuDNN pick the fastest convolution algorithm", """
# before: cuDNN uses a heuristic algorithm choice
# after: benchmarks once per input shape, then reuses the fastest (fixed input shapes)
torch.backends.cudnn.benchmark = True
""", auto=True, change={"cudnn_benchmark": True}),
    _fix("set_to_none", "zero_grad(set_to_none=True)", """
# before: a fill kernel per parameter every step
optimizer.zero_grad(set_to_none=False)
# after: gradients are simply dropped (the default since PyTorch 2.0)
optimizer.zero_grad(set_to_none=True)
""", auto=True, change={"zero_grad_set_to_none": True}),
    _fix("foreach_optimizer", "Multi-tensor (foreach) or fused optimizer", """
# before: one small kernel per parameter per operation
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
# after: a few multi-tensor kernels for all parameters
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)   # or foreach=True
""", auto=True, change={"optimizer_foreach": True}),
    _fix("torch_compile", "torch.compile: fuse small kernels, cut launch overhead", """
# before
model = Net().cuda()
# after: fused kernels; mode="reduce-overhead" also captures CUDA graphs
model = torch.compile(Net().cuda())               # or torch.compile(model, mode="reduce-overhead")
""", auto=True, change={"compile": True}),
    _fix("cuda_graphs", "Capture the step in a CUDA graph", """
# before: every step launches every kernel from Python
loss = train_step(x, y)
# after: replay one captured graph (static shapes, static input buffers)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = train_step(static_x, static_y)
static_x.copy_(x); static_y.copy_(y); g.replay()
"""),
    _fix("larger_batch", "Larger batch per step (keep the effective batch with fewer accumulation steps)", """
# before: tiny kernels, the GPU mostly waits for launches
loader = DataLoader(dataset, batch_size=16)
# after: more work per kernel; scale the learning rate or keep the effective batch
loader = DataLoader(dataset, batch_size=128)
"""),
    _fix("remove_sync", "Take host synchronisation out of the step", """
# before: .item() forces the host to wait for the GPU every step
for x, y in loader:
    loss = train_step(x, y)
    total += loss.item()
# after: accumulate on the GPU, read it once in a while
running = torch.zeros((), device="cuda")
for i, (x, y) in enumerate(loader):
    loss = train_step(x, y)
    running += loss.detach()
    if i % 100 == 0:
        print(running.item() / 100); running.zero_()
"""),
    _fix("grad_accumulation", "Smaller micro-batch with gradient accumulation", """
# before: batch 256 does not fit
for x, y in loader:                          # batch_size=256
    loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()
# after: 4 micro-batches of 64, the same effective batch
for i, (x, y) in enumerate(loader):          # batch_size=64
    (loss_fn(model(x), y) / 4).backward()
    if (i + 1) % 4 == 0:
        opt.step(); opt.zero_grad()
""", auto=True, applies=lambda c, m: (c.batch_size or 0) > 1),
    _fix("activation_checkpointing", "Recompute activations in backward instead of storing them", """
# before
h = self.block(h)
# after: trade ~30% more compute for much less activation memory
from torch.utils.checkpoint import checkpoint
h = checkpoint(self.block, h, use_reentrant=False)
"""),
    _fix("expandable_segments", "Reduce allocator fragmentation", """
# before: reserved memory far above what is allocated
# after (set before the first CUDA allocation):
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
"""),
    _fix("overlap_communication", "Overlap gradient communication with backward", """
# before: gradients all-reduced after backward, nothing to hide behind
model = DDP(model, device_ids=[rank])
# after: smaller buckets start all-reduce earlier; no copies into buckets
model = DDP(model, device_ids=[rank], bucket_cap_mb=25, gradient_as_bucket_view=True)
# with gradient accumulation, skip the all-reduce on the micro-steps:
with model.no_sync():
    loss_fn(model(x), y).backward()
"""),
    _fix("use_ddp", "DistributedDataParallel instead of DataParallel", """
# before: one process drives all GPUs, re-broadcasting the model every step
model = torch.nn.DataParallel(model)
# after: one process per GPU (torchrun --nproc_per_node=N train.py)
torch.distributed.init_process_group("nccl")
model = DDP(model.to(local_rank), device_ids=[local_rank])
"""),
    _fix("balance_ranks", "Even out work across ranks", """
# before: one rank gets slower input or larger samples
sampler = DistributedSampler(dataset)
# after: the same per-rank input speed (workers per rank, local data),
# and similar work per batch (bucket by sequence length, drop_last=True)
sampler = DistributedSampler(dataset, drop_last=True)
loader = DataLoader(dataset, sampler=sampler, num_workers=workers_per_rank, pin_memory=True)
"""),
    _fix("num_workers_cap", "No more DataLoader workers than CPUs", """
# before: workers fight for the CPUs (and with the training process)
loader = DataLoader(dataset, num_workers=32)
# after
loader = DataLoader(dataset, num_workers=max(1, len(os.sched_getaffinity(0)) - 1))
"""),
]

FIXES: dict[str, Fix] = {f.id: f for f in _ALL}

__all__ = ["FIXES", "Fix", "TrainConfig"]
