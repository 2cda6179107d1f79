"""A fix as a Hugging Face ``Trainer`` user makes it: the ``TrainingArguments`` fields the
Trainer builds its DataLoader, optimizer and step from, where a hand-written loop would
edit its own DataLoader call.

A change of :class:`~diagnose.fixes.config.TrainConfig` fields is written as the fields it
sets (``num_workers=0`` is ``dataloader_num_workers=0``); torch's threads and
``gc.freeze()`` are lines before ``trainer.train()``. A fix with no such field (a faster
dataset, one batch per indexing call, each worker's thread pools) keeps its code, headed
by where a Trainer takes it: its dataset, or a Trainer subclass whose
``get_train_dataloader()`` builds the DataLoader.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from .config import TrainConfig

#: TrainConfig field -> how its value is written in TrainingArguments (None: no field)
_FIELDS: dict[str, Callable[[Any], str | None]] = {
    "num_workers": lambda v: f"dataloader_num_workers={v}",
    "pin_memory": lambda v: f"dataloader_pin_memory={v}",
    "persistent_workers": lambda v: f"dataloader_persistent_workers={v}",
    "prefetch_factor": lambda v: f"dataloader_prefetch_factor={v}",
    "batch_size": lambda v: None if v is None else f"per_device_train_batch_size={v}",
    "grad_accum_steps": lambda v: f"gradient_accumulation_steps={v}",
    "amp_dtype": lambda v: {"bfloat16": "bf16=True", "float16": "fp16=True"}.get(v),
    "compile": lambda v: f"torch_compile={v}",
    "optimizer_fused": lambda v: 'optim="adamw_torch_fused"' if v else None,
}
#: TrainConfig field -> the line before ``trainer.train()`` that makes its value
_BEFORE_TRAIN: dict[str, Callable[[Any], str | None]] = {
    "intra_op_threads": lambda v: None if v is None else f"torch.set_num_threads({v})",
    "gc_freeze": lambda v: "import gc\ngc.collect()\ngc.freeze()" if v else None,
}
#: fix id -> the TrainingArguments field that makes the fix where no TrainConfig field
#: does: the Trainer checkpoints every layer of a transformers model itself
_FIX_FIELDS: dict[str, str] = {"activation_checkpointing": "gradient_checkpointing=True"}
#: how the code of a fix without a TrainingArguments field begins
ELSEWHERE = ("# the Trainer builds this DataLoader itself: make the change in your dataset, "
             "or in a\n# Trainer subclass whose get_train_dataloader() returns the "
             "DataLoader below")


def fix_field_code(fix_id: str, note: str) -> str | None:
    """The TrainingArguments of a fix that has its own field (:data:`_FIX_FIELDS`), as
    :func:`trainer_code` writes a change; None: the fix has none."""
    field = _FIX_FIELDS.get(fix_id)
    if field is None:
        return None
    return "\n".join(["# before: as the run is", "args = TrainingArguments(...)",
                      f"# after: {note}", f"args = TrainingArguments(..., {field})"])


def trainer_code(before: TrainConfig, change: Mapping[str, Any], note: str) -> str | None:
    """``# before`` / ``# after`` of the TrainingArguments (and the lines before
    ``trainer.train()``) for ``change`` from ``before``; None where a field of it has no
    such form (the caller keeps the fix's DataLoader code, :func:`elsewhere`)."""
    args_before: list[str] = []
    args_after: list[str] = []
    lines: list[str] = []
    for k, v in change.items():
        if k in _FIELDS:
            now, then = _FIELDS[k](getattr(before, k)), _FIELDS[k](v)
            if now == then:  # as it is (a DataLoader call writes its batch size)
                continue
            if then is None:
                return None
            args_after.append(then)
            if now is not None:
                args_before.append(now)
        elif k in _BEFORE_TRAIN:
            line = _BEFORE_TRAIN[k](v)
            if line is None:
                return None
            lines.append(line)
        else:
            return None
    if not args_after and not lines:
        return None
    out = [f"# before{'' if args_before else ': as the run is'}",
           f"args = TrainingArguments(..., {', '.join(args_before)})" if args_before else
           "args = TrainingArguments(...)", f"# after: {note}"]
    if args_after:
        out.append(f"args = TrainingArguments(..., {', '.join(args_after)})")
    if lines:
        out += [*lines, "trainer.train()"]
    return "\n".join(out)


#: the DataLoader arguments TrainingArguments sets (the rest it sets itself)
_LOADER_ARGS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                "batch_size")


def after_loader_args(code: str) -> dict[str, str] | None:
    """The settings of :data:`_LOADER_ARGS` in the last ``DataLoader(...)`` call of a
    fix's code (its after), as written there (``min(3, len(os.sched_getaffinity(0)) -
    1)``), and torch's threads where it calls ``torch.set_num_threads``; None where the
    code has no DataLoader call."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    loaders = [n for n in calls if isinstance(n.func, ast.Name) and n.func.id == "DataLoader"]
    if not loaders:
        return None
    last = max(loaders, key=lambda n: (n.lineno, n.col_offset))
    out = {kw.arg: ast.unparse(kw.value) for kw in last.keywords if kw.arg in _LOADER_ARGS}
    threads = [n for n in calls if isinstance(n.func, ast.Attribute)
               and n.func.attr == "set_num_threads" and len(n.args) == 1]
    if threads:
        out["intra_op_threads"] = ast.unparse(threads[-1].args[0])
    return out or None


def elsewhere(code: str) -> str:
    """A fix's DataLoader code headed by where a Trainer user makes it (:data:`ELSEWHERE`)."""
    return f"{ELSEWHERE}\n{code}"


__all__ = ["ELSEWHERE", "after_loader_args", "elsewhere", "trainer_code"]
