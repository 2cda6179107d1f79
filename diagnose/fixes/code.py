"""The change a person would make by hand to go from one TrainConfig to another.

``render_change(before, after, loader=..., optimizer=...)`` writes the DataLoader
call before and after (from the user's own loader: batch size, shuffle,
drop_last, custom sampler or collate_fn) and the lines of the step that change.
"""

from __future__ import annotations

from typing import Any

from .config import TrainConfig


def _collate_is_default(fn: Any) -> bool:
    name = getattr(fn, "__name__", "")
    mod = getattr(fn, "__module__", "") or ""
    return name in ("default_collate", "default_convert") and mod.startswith("torch.utils.data")


def loader_call(loader: Any, cfg: TrainConfig) -> str:
    """``DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)`` for ``cfg``."""
    args = ["dataset"]
    if loader is not None:
        sampler = type(getattr(loader, "sampler", None)).__name__
        if getattr(loader, "batch_size", None) is not None:
            args.append(f"batch_size={cfg.batch_size or loader.batch_size}")
        elif getattr(loader, "batch_sampler", None) is not None:
            args.append("batch_sampler=batch_sampler")
        if sampler == "RandomSampler":
            args.append("shuffle=True")
        elif sampler not in ("SequentialSampler", "_InfiniteConstantSampler", "NoneType") \
                and getattr(loader, "batch_size", None) is not None:
            args.append("sampler=sampler")
        if getattr(loader, "drop_last", False):
            args.append("drop_last=True")
        if not _collate_is_default(getattr(loader, "collate_fn", None)):
            args.append("collate_fn=collate_fn")
    elif cfg.batch_size is not None:
        args.append(f"batch_size={cfg.batch_size}")
    if cfg.num_workers:
        args.append(f"num_workers={cfg.num_workers}")
        if cfg.persistent_workers:
            args.append("persistent_workers=True")
        if cfg.prefetch_factor not in (None, 2):
            args.append(f"prefetch_factor={cfg.prefetch_factor}")
    if cfg.pin_memory:
        args.append("pin_memory=True")
    return "DataLoader(" + ", ".join(args) + ")"


def _loader_changed(a: TrainConfig, b: TrainConfig) -> bool:
    return a.loader_kwargs() != b.loader_kwargs() or a.batch_size != b.batch_size


def render_change(before: TrainConfig, after: TrainConfig, *, loader: Any = None,
                  optimizer: Any = None) -> str:
    """Code, ``# before`` / ``# after``, for the fields that differ (empty: nothing to do)."""
    if before == after:
        return ""
    lines: list[str] = []
    if _loader_changed(before, after):
        lines += ["# before", f"loader = {loader_call(loader, before)}",
                  "# after", f"loader = {loader_call(loader, after)}"]
    step: list[str] = []
    dev = "cuda"
    if after.cudnn_benchmark and not before.cudnn_benchmark:
        step.append("torch.backends.cudnn.benchmark = True")
    if after.channels_last and not before.channels_last:
        step.append("model = model.to(memory_format=torch.channels_last)")
    if after.compile and not before.compile:
        step.append("model = torch.compile(model)")
    if (after.optimizer_foreach, after.optimizer_fused) != (
            before.optimizer_foreach, before.optimizer_fused):
        cls = type(optimizer).__name__ if optimizer is not None else "Optimizer"
        flag = "fused=True" if after.optimizer_fused else "foreach=True"
        step.append(f"opt = torch.optim.{cls}(model.parameters(), ..., {flag})  # same settings")
    if after.uses_grad_scaler and not before.uses_grad_scaler:
        step.append(f'scaler = torch.amp.GradScaler("{dev}")')
    k = after.grad_accum_steps
    loop = ["for i, (x, y) in enumerate(loader):" if k > 1 else "for x, y in loader:"]
    nb = ", non_blocking=True" if after.non_blocking else ""
    loop.append(f"    x, y = x.to(device{nb}), y.to(device{nb})")
    if after.channels_last:
        loop.append("    x = x.contiguous(memory_format=torch.channels_last)")
    indent = "    "
    if after.amp_dtype:
        loop.append(f'    with torch.autocast("{dev}", dtype=torch.{after.amp_dtype}):')
        indent = "        "
    loop.append(f"{indent}loss = loss_fn(model(x), y){f' / {k}' if k > 1 else ''}")
    loop.append("    scaler.scale(loss).backward()" if after.uses_grad_scaler
                else "    loss.backward()")
    body = "        " if k > 1 else "    "
    if k > 1:
        loop.append(f"    if (i + 1) % {k} == 0:")
    if after.uses_grad_scaler:
        loop += [f"{body}scaler.step(opt)", f"{body}scaler.update()"]
    else:
        loop.append(f"{body}opt.step()")
    loop.append(f"{body}opt.zero_grad(set_to_none={after.zero_grad_set_to_none})")
    step_fields = {"non_blocking", "amp_dtype", "channels_last", "zero_grad_set_to_none",
                   "grad_accum_steps"}
    if step or step_fields & set(before.diff(after)):
        if lines:
            lines.append("")
        lines.append("# the step")
        lines += step + loop
    return "\n".join(lines)


__all__ = ["loader_call", "render_change"]
