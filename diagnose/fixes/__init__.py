"""Fixes: one small object per change a person (or autofix) can make.

Each fix knows the code change a person would make by hand (``code``), and
whether autofix can apply it mechanically (``auto``). Automatic fixes change a
:class:`TrainConfig` purely: ``apply`` returns a new config and never mutates,
so a trial is reverted by keeping the old one.

Facts
-----
``applies(config, facts)`` reads a flat mapping: the metrics of a diagnosis
(``diagnose.analyze``) overlaid by what autofix measures live. The names fixes
read: ``device_type`` ("cuda"/"cpu"), ``cpu_count`` (``os.sched_getaffinity``),
``model_has_conv``, ``iterable_dataset``, ``bf16_supported``, ``fused_supported``,
``allow_compile``, ``oom`` (the configured batch does not fit), ``host_cpu_mean_pct``
(a diagnosis' CPU load: 85% or more is saturated). A fact that is missing counts as not
known, and a fix that needs it does not apply.

Code
----
``code`` is a generic template (``DataLoader(dataset, ...)``: "..." stands for the other
arguments); ``code_for(setup)`` writes the same change from the user's own DataLoader and
optimizer (:class:`~diagnose.fixes.code.Setup`, from the live objects or a run's
context.json): their batch size, sampler, collate_fn, ... as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .code import GENERIC_NOTE, Setup, loader_call, optimizer_call
from .config import TrainConfig

Facts = Mapping[str, Any]


@dataclass(frozen=True)
class Fix:
    """One change: when it applies, how it changes a TrainConfig (purely), the code by hand."""

    id: str
    title: str
    code: str  # before/after, as a person would write it
    auto: bool = False  # autofix can apply it mechanically
    applies: Callable[[TrainConfig, Facts], bool] = field(
        default=lambda c, m: True, repr=False, compare=False
    )
    change: Mapping[str, Any] | None = None  # fields set by apply()
    step: Callable[[TrainConfig], TrainConfig] | None = field(
        default=None, repr=False, compare=False
    )  # apply() when the change is computed from the config (e.g. double the workers)
    search: Callable[[TrainConfig, Facts], list[TrainConfig]] | None = field(
        default=None, repr=False, compare=False
    )  # the candidates autofix measures (default: [apply(config)])
    needs: str = ""  # when it applies, in words (the reason shown when it does not)
    render: Callable[[Setup | None], str] | None = field(
        default=None, repr=False, compare=False
    )  # the code for a known Setup (``code`` is render(None): the generic template)

    def apply(self, config: TrainConfig) -> TrainConfig:
        """A new config with this fix applied (the input is never changed)."""
        if not self.auto or not (self.change or self.step):
            raise ValueError(f"fix {self.id!r} is advice only: autofix cannot apply it")
        if self.change:
            return dataclasses.replace(config, **self.change)
        assert self.step is not None
        return self.step(config)

    def changes(self, config: TrainConfig) -> bool:
        """False when applying it would change nothing (already in place)."""
        if not self.auto or not (self.change or self.step):
            return False
        try:
            return self.apply(config) != config
        except ValueError:
            return False

    def why_not(self, config: TrainConfig, facts: Facts) -> str | None:
        """None when the fix applies to ``config``; else the reason, in words."""
        if not self.auto:
            return "advice only: a person makes this change"
        try:
            ok = bool(self.applies(config, facts))
        except Exception as e:  # a broken condition is reported, never raised
            return f"condition failed: {type(e).__name__}: {e}"
        return None if ok else (f"needs {self.needs}" if self.needs else "does not apply")

    def candidates(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        """The configs autofix measures for this fix, in order; none equal to ``config``."""
        cands = self.search(config, facts) if self.search else [self.apply(config)]
        out: list[TrainConfig] = []
        for c in cands:
            if c != config and c not in out:
                out.append(c)
        return out

    def code_for(self, setup: Setup | None) -> str:
        """The change by hand for the user's own DataLoader and optimizer (``setup``); the
        generic template where nothing is known."""
        if setup is None or self.render is None:
            return self.code
        return self.render(setup).strip("\n")

    def to_json(self, code: str | None = None) -> dict[str, Any]:
        """``code``: the code rendered for a run (default: the generic template)."""
        return {"id": self.id, "title": self.title, "code": code or self.code,
                "auto": self.auto}


def fix_code(ids: Iterable[str], setup: Setup | None) -> dict[str, str]:
    """The known fixes among ``ids`` as code for ``setup`` (empty when nothing is known:
    the generic templates then serve)."""
    if setup is None:
        return {}
    return {i: FIXES[i].code_for(setup) for i in ids if i in FIXES}


def _fix(id: str, title: str, code: str | Callable[[Setup | None], str], *,
         auto: bool = False, change: Mapping[str, Any] | None = None,
         applies: Callable[[TrainConfig, Facts], bool] | None = None,
         step: Callable[[TrainConfig], TrainConfig] | None = None,
         search: Callable[[TrainConfig, Facts], list[TrainConfig]] | None = None,
         needs: str = "") -> Fix:
    """``code``: the template, or a function of the Setup (None: the generic template)."""
    kw: dict[str, Any] = {}
    if applies is not None:
        kw["applies"] = applies
    render = None
    if callable(code):
        render, code = code, code(None)
    return Fix(id, title, code.strip("\n"), auto, change=change, step=step, search=search,
               needs=needs, render=render, **kw)


# ---------------------------------------------------------------------- conditions and searches
def _cuda(m: Facts) -> bool:
    return m.get("device_type") == "cuda"


def _cpus(m: Facts) -> int | None:
    n = m.get("cpu_count")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def cpus_saturated(facts: Facts) -> bool:
    """The diagnosis saw the usable CPUs busy 85% of the time or more."""
    v = facts.get("host_cpu_mean_pct")
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 85


def too_many_workers(config: TrainConfig, facts: Facts) -> bool:
    """More DataLoader workers than the CPUs this process may use, or workers on CPUs the
    diagnosis saw saturated: fewer workers may be faster (searched downward)."""
    cpus = _cpus(facts)
    return cpus is not None and config.num_workers > 0 and (
        config.num_workers > cpus or cpus_saturated(facts))


def worker_ladder(config: TrainConfig, facts: Facts) -> list[TrainConfig]:
    """num_workers candidates, measured in this order.

    Upward (fewer workers than CPUs): 1, 2, 4, ... and the CPU count itself above the
    current value, never more workers than CPUs this process may use. Downward (more
    workers than CPUs, or the CPUs saturated; :func:`too_many_workers`): the CPU count,
    one less, half, 1 and 0 below the current value (0: batches made in the training
    process, no inter-process transfer at all).
    """
    cpus = _cpus(facts)
    if cpus is None:
        return []
    if too_many_workers(config, facts):
        down = {cpus, cpus - 1, cpus // 2, 1, 0}
        return [config.replace(num_workers=v) for v in sorted(down, reverse=True)
                if 0 <= v < config.num_workers]
    values, n = set(), 1
    while n <= cpus:
        values.add(n)
        n *= 2
    values.add(cpus)
    return [config.replace(num_workers=v) for v in sorted(values) if v > config.num_workers]


def _double_workers(c: TrainConfig) -> TrainConfig:
    return c.replace(num_workers=max(1, 2 * c.num_workers))


def _halve_workers(c: TrainConfig) -> TrainConfig:
    return c.replace(num_workers=c.num_workers // 2)


def _more_prefetch(c: TrainConfig) -> TrainConfig:
    return c.replace(prefetch_factor=max(4, 2 * (c.prefetch_factor or 2)))


def _amp_search(c: TrainConfig, m: Facts) -> list[TrainConfig]:
    return [c.replace(amp_dtype="bfloat16" if m.get("bf16_supported") else "float16")]


def _optimizer_search(c: TrainConfig, m: Facts) -> list[TrainConfig]:
    out = []
    if _cuda(m) and m.get("fused_supported"):
        out.append(c.replace(optimizer_fused=True, optimizer_foreach=None))
    out.append(c.replace(optimizer_foreach=True, optimizer_fused=None))
    return out


def micro_batches(config: TrainConfig) -> list[TrainConfig]:
    """Every split of the effective batch into micro-batch x accumulation steps, largest
    micro-batch first (the effective batch is kept exactly)."""
    eff = config.effective_batch
    if eff is None:
        return []
    return [config.replace(batch_size=b, grad_accum_steps=eff // b)
            for b in range(eff, 0, -1) if eff % b == 0]


def _halve_batch(c: TrainConfig) -> TrainConfig:
    smaller = [x for x in micro_batches(c) if (x.batch_size or 0) < (c.batch_size or 0)]
    return smaller[0] if smaller else c


def _grow_batch(c: TrainConfig) -> TrainConfig:
    larger = [x for x in micro_batches(c) if (x.batch_size or 0) > (c.batch_size or 0)]
    return larger[-1] if larger else c


# ---------------------------------------------------------------------- code for a setup
_AFFINITY = "len(os.sched_getaffinity(0))"
_SOME_WORKERS = f"min(8, {_AFFINITY} - 1)"


def _loader_code(setup: Setup | None, before_note: str, after_note: str,
                 after: Callable[[TrainConfig], TrainConfig], *, generic: TrainConfig,
                 override: Mapping[str, str] | None = None,
                 needs_workers: bool = False, before_extra: tuple[str, ...] = (),
                 after_extra: tuple[str, ...] = ()) -> str:
    """``# before`` / ``# after`` of the user's DataLoader call (``generic`` settings and
    ``DataLoader(dataset, ...)`` when the loader is not known). ``needs_workers``: the
    change needs worker processes, so a loader without them gets some in the after."""
    spec = setup.loader if setup is not None else None
    before = spec.config() if spec is not None else generic
    new = after(before)
    over = dict(override or {})
    if needs_workers and before.num_workers == 0:
        new = new.replace(num_workers=1)
        over.setdefault("num_workers", _SOME_WORKERS)
    changed = [*before.diff(new), *over]
    head = "# before" + (f": {before_note}" if before_note else "")
    if spec is None:
        head += f" {GENERIC_NOTE}" if len(head) + len(GENERIC_NOTE) < 88 else \
            f"\n# {GENERIC_NOTE}"
    return "\n".join([head, loader_call(spec, before, show=changed, prefix="loader = "),
                      *before_extra, f"# after: {after_note}",
                      loader_call(spec, new, show=changed, override=over, prefix="loader = "),
                      *after_extra])


def _code_num_workers(setup: Setup | None) -> str:
    return _loader_code(setup, "", "workers prepare batches in parallel with the training "
                        "step", lambda c: c, generic=TrainConfig(),
                        override={"num_workers": _SOME_WORKERS})


def _code_num_workers_cap(setup: Setup | None) -> str:
    spec = setup.loader if setup is not None else None
    n = spec.num_workers if spec is not None and spec.num_workers else 32
    return _loader_code(setup, "workers fight for the CPUs (and with the training process)",
                        "at most the CPUs; fewer (even 0) can be faster: measure",
                        lambda c: c, generic=TrainConfig(num_workers=32),
                        override={"num_workers": f"min({n}, {_AFFINITY} - 1)"})


def _code_persistent_workers(setup: Setup | None) -> str:
    return _loader_code(setup, "", "no worker start-up stall at every epoch",
                        lambda c: c.replace(persistent_workers=True),
                        generic=TrainConfig(num_workers=4), needs_workers=True)


def _code_prefetch_factor(setup: Setup | None) -> str:
    def more(c: TrainConfig) -> TrainConfig:
        return _more_prefetch(c.replace(num_workers=c.num_workers or 1))

    spec = setup.loader if setup is not None else None
    n = more(spec.config() if spec is not None else TrainConfig()).prefetch_factor
    return _loader_code(setup, "", f"each worker keeps {n} batches ready, absorbing slow "
                        "samples", more, generic=TrainConfig(num_workers=4), needs_workers=True)


def _code_pin_memory(setup: Setup | None) -> str:
    return _loader_code(
        setup, "", "page-locked batches, copied without blocking the host",
        lambda c: c.replace(pin_memory=True), generic=TrainConfig(num_workers=4),
        before_extra=("for x, y in loader:", "    x, y = x.cuda(), y.cuda()"),
        after_extra=("for x, y in loader:",
                     "    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)"))


def _code_larger_batch(setup: Setup | None) -> str:
    if setup is not None and setup.loader is not None and setup.loader.batch_size is None:
        setup = None  # a batch sampler: no batch_size to show
    return _loader_code(
        setup, "tiny kernels, the GPU mostly waits for launches",
        "more work per kernel; scale the learning rate or keep the effective batch",
        lambda c: c.replace(batch_size=8 * (c.batch_size or 16)),
        generic=TrainConfig(batch_size=16),
        after_extra=("# autofix applies it only where the effective batch stays: fewer "
                     "accumulation steps",))


def _code_grad_accumulation(setup: Setup | None) -> str:
    spec = setup.loader if setup is not None else None
    b = spec.batch_size if spec is not None else None
    k = next((k for k in (4, 2, 3) if b and b % k == 0 and b > k), None)
    if b is None or k is None:
        spec, b, k = None, 256, 4
    micro = b // k
    before = spec.config() if spec is not None else TrainConfig(batch_size=b)
    head = f"# before: batch {b} does not fit" + ("" if spec is not None else
                                                   f"\n# {GENERIC_NOTE}")
    return "\n".join([
        head, loader_call(spec, before, show=["batch_size"], prefix="loader = "),
        "for x, y in loader:",
        "    loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()",
        f"# after: {k} micro-batches of {micro}, the same effective batch",
        loader_call(spec, before.replace(batch_size=micro), show=["batch_size"],
                    prefix="loader = "),
        "for i, (x, y) in enumerate(loader):",
        f"    (loss_fn(model(x), y) / {k}).backward()",
        f"    if (i + 1) % {k} == 0:",
        "        opt.step(); opt.zero_grad()"])


def _code_foreach_optimizer(setup: Setup | None) -> str:
    o = setup.optimizer if setup is not None else None
    head = "# before: one small kernel per parameter per operation"
    if o is None:
        head += f"\n# {GENERIC_NOTE}"
        before = optimizer_call(None, foreach=False)
    else:
        before = optimizer_call(o, foreach=o.foreach, fused=o.fused)
    return "\n".join([head, before, "# after: a few multi-tensor kernels for all parameters",
                      optimizer_call(o, fused=True) + "   # or foreach=True"])


_ALL = [
    _fix("num_workers", "Load batches in worker processes (DataLoader num_workers)",
         _code_num_workers, auto=True, step=_double_workers, search=worker_ladder,
         applies=lambda c, m: (_cpus(m) is not None and m.get("iterable_dataset") is not True
                               and (c.num_workers < (_cpus(m) or 0) or too_many_workers(c, m))),
         needs="a map-style dataset (an IterableDataset must shard itself across workers) "
               "and workers other than the CPU count: fewer are searched upward, more (or "
               "saturated CPUs) downward"),
    _fix("persistent_workers", "Keep DataLoader workers alive between epochs",
         _code_persistent_workers, auto=True, change={"persistent_workers": True},
         applies=lambda c, m: c.num_workers > 0 and not c.persistent_workers,
         needs="worker processes (num_workers > 0)"),
    _fix("prefetch_factor", "Queue more batches ahead (DataLoader prefetch_factor)",
         _code_prefetch_factor, auto=True, step=_more_prefetch,
         applies=lambda c, m: c.num_workers > 0, needs="worker processes (num_workers > 0)"),
    _fix("pin_memory", "Pinned host memory and asynchronous copies (pin_memory + non_blocking)",
         _code_pin_memory, auto=True, change={"pin_memory": True, "non_blocking": True},
         applies=lambda c, m: _cuda(m),
         needs="a CUDA device (pinned memory speeds host-to-GPU copies)"),
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
""", auto=True, change={"amp_dtype": "bfloat16"}, search=_amp_search,
        applies=lambda c, m: _cuda(m) and c.amp_dtype is None,
        needs="a CUDA device and an fp32 step"),
    _fix("channels_last", "channels_last memory format for convolution nets", """
# before
model = model.cuda()
# after: NHWC layout that tensor-core convolutions prefer
model = model.cuda().to(memory_format=torch.channels_last)
x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
""", auto=True, change={"channels_last": True},
        applies=lambda c, m: _cuda(m) and m.get("model_has_conv") is True,
        needs="a convolution net on a CUDA device"),
    _fix("cudnn_benchmark", "Let cuDNN pick the fastest convolution algorithm", """
# before: cuDNN uses a heuristic algorithm choice
# after: benchmarks once per input shape, then reuses the fastest (fixed input shapes)
torch.backends.cudnn.benchmark = True
""", auto=True, change={"cudnn_benchmark": True},
        applies=lambda c, m: _cuda(m) and m.get("model_has_conv") is True,
        needs="a convolution net on a CUDA device"),
    _fix("set_to_none", "zero_grad(set_to_none=True)", """
# before: a fill kernel per parameter every step
optimizer.zero_grad(set_to_none=False)
# after: gradients are simply dropped (the default since PyTorch 2.0)
optimizer.zero_grad(set_to_none=True)
""", auto=True, change={"zero_grad_set_to_none": True}),
    _fix("foreach_optimizer", "Multi-tensor (foreach) or fused optimizer",
         _code_foreach_optimizer,
         auto=True, change={"optimizer_foreach": True, "optimizer_fused": None},
        search=_optimizer_search,
        applies=lambda c, m: not c.optimizer_fused and c.optimizer_foreach is not True,
        needs="an optimizer not already foreach or fused"),
    _fix("torch_compile", "torch.compile: fuse small kernels, cut launch overhead", """
# before
model = Net().cuda()
# after: fused kernels; mode="reduce-overhead" also captures CUDA graphs
model = torch.compile(Net().cuda())               # or torch.compile(model, mode="reduce-overhead")
""", auto=True, change={"compile": True},
        applies=lambda c, m: m.get("allow_compile") is True,
        needs="opt-in: autofix(compile=True) (compile time is counted)"),
    _fix("cuda_graphs", "Capture the step in a CUDA graph", """
# before: every step launches every kernel from Python
loss = train_step(x, y)
# after: replay one captured graph (static shapes, static input buffers)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_loss = train_step(static_x, static_y)
static_x.copy_(x); static_y.copy_(y); g.replay()
"""),
    _fix("larger_batch",
         "Larger batch per step (keep the effective batch with fewer accumulation steps)",
         _code_larger_batch, auto=True, step=_grow_batch,
         applies=lambda c, m: c.grad_accum_steps > 1 and c.batch_size is not None,
         needs="gradient accumulation to trade for a larger micro-batch (effective batch "
               "kept)"),
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
    _fix("grad_accumulation", "Smaller micro-batch with gradient accumulation",
         _code_grad_accumulation, auto=True, step=_halve_batch,
        search=lambda c, m: [x for x in micro_batches(c)
                             if (x.batch_size or 0) < (c.batch_size or 0)],
        applies=lambda c, m: (c.batch_size or 0) > 1 and m.get("oom") is True,
        needs="a batch that does not fit (out of memory)"),
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
    _fix("use_nccl", "NCCL backend for GPU tensors", """
# before: gloo moves GPU tensors through host memory for every collective
torch.distributed.init_process_group("gloo")
# after: NCCL talks GPU to GPU (NVLink / InfiniBand / PCIe peer-to-peer); on AMD it is RCCL
torch.distributed.init_process_group("nccl")
# keep gloo for CPU-only collectives if you need them:
torch.distributed.init_process_group("cuda:nccl,cpu:gloo")
"""),
    _fix("balance_ranks", "Even out work across ranks", """
# before: one rank gets slower input or larger samples
sampler = DistributedSampler(dataset)
# after: the same per-rank input speed (workers per rank, local data),
# and similar work per batch (bucket by sequence length, drop_last=True)
sampler = DistributedSampler(dataset, drop_last=True)
loader = DataLoader(dataset, sampler=sampler, num_workers=workers_per_rank, pin_memory=True)
"""),
    _fix("num_workers_cap", "No more DataLoader workers than CPUs", _code_num_workers_cap,
         auto=True, step=_halve_workers, search=worker_ladder,
         applies=lambda c, m: (_cpus(m) is not None and c.num_workers > (_cpus(m) or 0)
                               and m.get("iterable_dataset") is not True),
         needs="more workers than the CPUs this process may use, and a map-style dataset"),
]

FIXES: dict[str, Fix] = {f.id: f for f in _ALL}

__all__ = ["FIXES", "Facts", "Fix", "Setup", "TrainConfig", "cpus_saturated", "fix_code",
           "micro_batches", "too_many_workers", "worker_ladder"]
