"""TrainConfig: everything autofix may change about a training step, as one frozen value.

A config describes *how* a step runs (DataLoader settings, transfer, precision,
memory format, optimizer kernels, accumulation), never *what* is learned: the
effective batch (``batch_size * grad_accum_steps``) is kept by every fix. How a trial makes
each field real lives with the fixes that change it (:mod:`diagnose.fixes.realise`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

AMP_DTYPES = (None, "bfloat16", "float16")


@dataclass(frozen=True)
class TrainConfig:
    """Everything autofix may change about a training step (frozen: fixes return new ones)."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None  # None: torch's default (2) when num_workers > 0
    batch_size: int | None = None  # micro-batch per forward/backward (None: the loader's own)
    non_blocking: bool = False
    amp_dtype: str | None = None  # None, "bfloat16", "float16" (float16 runs with a GradScaler)
    channels_last: bool = False
    cudnn_benchmark: bool = False
    compile: bool = False
    zero_grad_set_to_none: bool = True
    optimizer_foreach: bool | None = None  # None: as the optimizer was built
    optimizer_fused: bool | None = None
    grad_accum_steps: int = 1
    intra_op_threads: int | None = None  # torch.set_num_threads in the training process (None: as it is)
    batched_fetch: bool = False  # one dataset[indices] call per batch, not one per sample
    gc_freeze: bool = False  # gc.collect(); gc.freeze() before the steps (undone after a trial)
    # submodules (names as model.get_submodule takes them) whose forward is recomputed in
    # backward (non-reentrant activation checkpointing; undone after a trial)
    checkpoint_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 (got {self.num_workers})")
        if self.grad_accum_steps < 1:
            raise ValueError(f"grad_accum_steps must be >= 1 (got {self.grad_accum_steps})")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {self.batch_size})")
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be >= 1 (got {self.prefetch_factor})")
        if self.amp_dtype not in AMP_DTYPES:
            raise ValueError(f"amp_dtype must be one of {AMP_DTYPES} (got {self.amp_dtype!r})")
        if self.intra_op_threads is not None and self.intra_op_threads < 1:
            raise ValueError(f"intra_op_threads must be >= 1 (got {self.intra_op_threads})")
        if self.optimizer_fused and self.optimizer_foreach:
            raise ValueError("optimizer_fused and optimizer_foreach cannot both be True")
        names = self.checkpoint_modules
        if isinstance(names, str) or not isinstance(names, tuple | list):
            raise ValueError("checkpoint_modules must be a tuple of submodule names "
                             f"(got {names!r})")
        if any(not isinstance(n, str) or not n for n in names) or len(set(names)) < len(names):
            raise ValueError("checkpoint_modules must name each submodule once, by a "
                             f"non-empty name (got {list(names)!r})")
        object.__setattr__(self, "checkpoint_modules", tuple(names))  # hashable, as frozen

    # ------------------------------------------------------------------ derived
    @property
    def effective_batch(self) -> int | None:
        """Samples per optimizer step (what every fix keeps)."""
        return None if self.batch_size is None else self.batch_size * self.grad_accum_steps

    @property
    def uses_grad_scaler(self) -> bool:
        """fp16 autocast needs a GradScaler (bf16 has fp32's range and does not)."""
        return self.amp_dtype == "float16"

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def diff(self, other: TrainConfig) -> dict[str, tuple[Any, Any]]:
        """Fields that differ: name -> (self's value, other's value)."""
        out = {}
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out[f.name] = (a, b)
        return out

    def describe_change(self, other: TrainConfig) -> str:
        """``num_workers 0 → 2, persistent_workers False → True`` (empty: no change)."""
        return ", ".join(f"{k} {_fmt(a)} → {_fmt(b)}" for k, (a, b) in self.diff(other).items())

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON writes and reads them back (the module names as a list)."""
        out = dataclasses.asdict(self)
        out["checkpoint_modules"] = list(self.checkpoint_modules)
        return out

    # ------------------------------------------------------------------ from user objects
    @classmethod
    def from_objects(cls, loader: Any = None, optimizer: Any = None, **step: Any) -> TrainConfig:
        """The config a user's DataLoader and optimizer already have (step settings from
        ``step``: e.g. ``amp_dtype="bfloat16"`` if the loop already autocasts)."""
        kw: dict[str, Any] = {}
        if loader is not None:
            nw = int(getattr(loader, "num_workers", 0) or 0)
            kw["num_workers"] = nw
            kw["pin_memory"] = bool(getattr(loader, "pin_memory", False))
            kw["batch_size"] = getattr(loader, "batch_size", None)
            if nw > 0:
                kw["persistent_workers"] = bool(getattr(loader, "persistent_workers", False))
                kw["prefetch_factor"] = getattr(loader, "prefetch_factor", None)
        if optimizer is not None:
            d = getattr(optimizer, "defaults", {}) or {}
            kw["optimizer_foreach"] = d.get("foreach")
            kw["optimizer_fused"] = d.get("fused")
        kw.update(step)
        return cls(**kw)


def micro_batches(config: TrainConfig) -> list[TrainConfig]:
    """Every split of the effective batch into micro-batch x accumulation steps, largest
    micro-batch first (the effective batch is kept exactly)."""
    eff = config.effective_batch
    if eff is None:
        return []
    return [config.replace(batch_size=b, grad_accum_steps=eff // b)
            for b in range(eff, 0, -1) if eff % b == 0]


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return f"[{', '.join(map(str, v))}]" if v else "none"
    return "default" if v is None else str(v)


__all__ = ["AMP_DTYPES", "TrainConfig", "micro_batches"]
