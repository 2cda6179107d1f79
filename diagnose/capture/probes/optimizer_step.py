"""The optimizers' step timed alone after the loop, on copies of their parameters, gradients
and state.

In the loop the step hooks time ``optimizer.step()`` (the clock's ``optimizer_ms``) beside
whatever else held the CPUs then: a worker making its next batch lands wherever in the
step it starts, the optimizer's many small ops included. Set beside the same step alone,
that is the optimizer's own contention (:mod:`diagnose.stepmodel.host`). Each counted
optimizer is rebuilt of its class over copies (a missing gradient: zeros, so every
parameter that learns is stepped as in the loop), its state copied, and its step timed on
torch's threads; nothing of the run changes: no parameter, gradient or state of the
user's is touched, and the user's global optimizer hooks are held back while it runs.
CPU optimizers only, and only where the copies stay under :data:`MAX_BYTES`.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

from .common import cannot_afford, median_noise, out_of_time, settled, timed
from .held_hooks import held

#: timed steps after one warm-up step: ROUNDS and LEAST_S seconds of them at least (a step
#: of a millisecond is shorter than a scheduler's time slice: a few of them are one moment's
#: luck), then more, up to MAX_ROUNDS within ROUNDS_S seconds, until their median is
#: settled (:func:`~.common.settled`)
ROUNDS = 3
LEAST_S = 0.02
MAX_ROUNDS = 40
ROUNDS_S = 0.1
#: the copies (parameters, gradients, state) at most this many bytes: a step's memory
#: doubled for a moment is the probe's price, and a large model's is not paid
MAX_BYTES = 256 * 2**20


def _tensors(opt: Any) -> Iterator[Any]:
    import torch

    for group in opt.param_groups:
        for p in group["params"]:
            yield p
            yield from (v for v in opt.state.get(p, {}).values() if torch.is_tensor(v))


def copies_bytes(opt: Any) -> int:
    """The bytes a copy of ``opt``'s parameters, gradients and state takes."""
    return sum(t.numel() * t.element_size() * (2 if t.requires_grad else 1)
               for t in _tensors(opt))


def on_cpu(opt: Any) -> bool:
    """Every parameter and state tensor of ``opt`` on the CPU."""
    return all(t.device.type == "cpu" for t in _tensors(opt))


def copied(opt: Any) -> Any:
    """A new optimizer of ``opt``'s class over copies of its parameters (each with a copy of
    its gradient, zeros where it had none and learns), with its groups' settings and a copy
    of its state. Raises where the class cannot be rebuilt from its groups."""
    import torch

    twin: dict[int, Any] = {}
    groups = []
    for group in opt.param_groups:
        params = []
        for p in group["params"]:
            c = p.detach().clone().requires_grad_(p.requires_grad)
            if p.requires_grad:
                c.grad = (p.grad.detach().clone() if p.grad is not None
                          else torch.zeros_like(p))
            twin[id(p)] = c
            params.append(c)
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    new = type(opt)(groups)
    for p, state in opt.state.items():
        c = twin.get(id(p))
        if c is not None:
            new.state[c] = {k: v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v)
                            for k, v in state.items()}
    return new


@contextmanager
def optimizer_hooks_held() -> Iterator[int]:
    """The user's global optimizer step hooks (``register_optimizer_step_pre_hook`` and
    ``..._post_hook``) taken out for the block and put back after it (:func:`held`)."""
    from torch.optim import optimizer as torch_optimizer

    dicts = [d for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")
             if isinstance(d := getattr(torch_optimizer, name, None), MutableMapping)]
    with held(dicts) as n:
        yield n


@timed("optimizer_step")
def time_optimizers(optimizers: Sequence[Any]) -> dict[str, Any] | None:
    """The counted optimizers' step, each on its copy (:func:`copied`), timed in turn: the
    median of each one's timed steps, summed (``step_ms``), with the rounds and their
    noise. None where there is none, one is not a CPU optimizer, the copies would pass
    :data:`MAX_BYTES`, or a class cannot be rebuilt from its groups."""
    opts = [o for o in optimizers if o is not None]
    if not opts or not all(on_cpu(o) for o in opts):
        return None
    if sum(copies_bytes(o) for o in opts) > MAX_BYTES:
        return None
    try:
        twins = [copied(o) for o in opts]
    except Exception:  # an optimizer whose class takes more than its groups: not timed
        return None
    series: list[list[float]] = [[] for _ in twins]
    start = time.perf_counter()
    with optimizer_hooks_held():
        for k in range(MAX_ROUNDS + 1):
            took = time.perf_counter() - start
            if k > ROUNDS and took > LEAST_S and (took > ROUNDS_S or out_of_time()
                                                  or settled(*series)):
                break
            t0 = time.perf_counter()
            for twin, got in zip(twins, series, strict=True):
                s = time.perf_counter()
                twin.step()
                got.append(time.perf_counter() - s)
            if k == 0:  # the warm-up: its state made, its round measured
                for got in series:
                    got.clear()
                if cannot_afford(time.perf_counter() - t0, ROUNDS):
                    return None
    if not series[0]:
        return None
    return {"step_ms": round(sum(statistics.median(v) for v in series) * 1e3, 4),
            "optimizers": len(twins), "rounds": len(series[0]),
            "noise": median_noise(*series)}
