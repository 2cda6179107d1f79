"""The user's hooks held back while a probe runs the model again after the loop.

A probe's forward and backward (:func:`~.compute.model_work`) would call every hook on the
model's modules and parameters: a hook that logs, counts or keeps activations would see
calls the loop never made (a counter off, a list grown, a logger's extra entries). Hooks
that do the model's own work stay: those of torch itself (FSDP's gathers, weight and
spectral norm, pruning, parametrisations, quantisation observers) and of the libraries
whose hooks shard, gather or re-parametrise the model (:data:`WORK_HOOKS`). The held ones
are put back in their order on the way out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

#: the packages whose hooks do the model's work (its parameters gathered, sharded or
#: re-parametrised, its per-sample gradients), kept in the probes' calls: without them the
#: forward fails or times other work. Any other hook is the user's, held back
WORK_HOOKS = ("torch", "deepspeed", "opacus", "accelerate", "fairscale", "apex", "peft",
              "transformers")
#: a module's hook dicts the probes' forward and backward call
MODULE_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                "_backward_hooks")
#: the same, registered for every module (``torch.nn.modules.module``'s globals)
GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks",
                "_global_backward_pre_hooks", "_global_backward_hooks")


def hook_package(hook: Any) -> str:
    """The top-level package a hook's code lives in ('' where it cannot be told)."""
    while isinstance(hook, functools.partial):
        hook = hook.func
    func = getattr(hook, "__func__", hook)  # a bound method: its function
    module = getattr(func, "__module__", None)
    if not isinstance(module, str):  # a callable object: its class's module
        module = getattr(type(hook), "__module__", None)
    return module.split(".")[0] if isinstance(module, str) else ""


def users(hooks: MutableMapping[Any, Any]) -> list[Any]:
    """The keys of ``hooks`` whose hook is the user's (not of :data:`WORK_HOOKS`)."""
    return [k for k, h in hooks.items() if hook_package(h) not in WORK_HOOKS]


def _hook_dicts(models: Iterable[Any]) -> Iterator[MutableMapping[Any, Any]]:
    """Every hook dict a probe's forward and backward of ``models`` call, each once: each
    module's, each parameter's (a tensor hook fires in ``autograd.grad``), and the global
    ones."""
    import torch

    def candidates() -> Iterator[Any]:
        for model in models:
            for m in model.modules():
                yield from (getattr(m, name, None) for name in MODULE_HOOKS)
            yield from (getattr(p, "_backward_hooks", None) for p in model.parameters())
        yield from (getattr(torch.nn.modules.module, name, None) for name in GLOBAL_HOOKS)

    seen: set[int] = set()
    for d in candidates():
        if isinstance(d, MutableMapping) and id(d) not in seen:
            seen.add(id(d))
            yield d


@contextmanager
def held(dicts: Iterable[MutableMapping[Any, Any]]) -> Iterator[int]:
    """The user's hooks (:func:`users`) in each of ``dicts`` taken out for the block, put
    back in their order after it (with any added meanwhile after them); yields how many
    were held."""
    kept: list[tuple[MutableMapping[Any, Any], dict[Any, Any]]] = []
    try:
        for d in dicts:
            drop = users(d)
            if drop:
                kept.append((d, dict(d)))
                for k in drop:
                    del d[k]
        yield sum(len(saved) - len(d) for d, saved in kept)
    finally:
        for d, saved in kept:
            added = {k: v for k, v in d.items() if k not in saved}
            d.clear()
            d.update(saved)
            d.update(added)


@contextmanager
def user_hooks_held(models: Iterable[Any]) -> Iterator[int]:
    """The user's hooks on ``models`` (and the global ones) taken out for the block, put
    back in their order after it; yields how many were held."""
    with held(_hook_dicts(list(models))) as n:
        yield n
