"""What the bytes of a training step are, by kind, and the model states computed exactly.

The kinds: ``parameters`` (with the model's buffers), ``gradients``, ``optimizer_state``,
``activations`` (tensors the forward made that are still alive: at the peak, mostly those
saved for backward), ``temporaries`` (made in backward or in the optimizer's step and freed
within it) and ``other`` (the batch and anything else tracked). Parameters, gradients and
optimizer state follow from the model and the optimizer alone: numel x element size of each
tensor, and each optimizer class's per-parameter state (Adam: two buffers the size of the
parameter and a scalar step; SGD with momentum: one buffer; without: none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KINDS = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "other")
#: kinds that do not grow with the batch: the model states
MODEL_STATES = ("parameters", "gradients", "optimizer_state")

#: per-parameter state of torch.optim's classes: (buffers the size of the parameter, scalar
#: tensors). A scalar ``step`` is a float32 tensor (4 bytes) in torch >= 1.12; the buffer
#: counts follow each class's ``_init_group``. SGD's momentum buffer exists only with
#: momentum != 0 (see :func:`state_layout`).
STATE_LAYOUT: dict[str, tuple[int, int]] = {
    "Adam": (2, 1), "AdamW": (2, 1), "Adamax": (2, 1), "NAdam": (2, 2), "RAdam": (2, 1),
    "Adadelta": (2, 1), "Adagrad": (1, 1), "RMSprop": (1, 1), "ASGD": (1, 3),
    "Rprop": (2, 1), "SGD": (1, 0),
}
SCALAR_BYTES = 4  # a float32 step counter


def empty_kinds() -> dict[str, int]:
    return dict.fromkeys(KINDS, 0)


def tensor_bytes(t: Any) -> int:
    """numel x element size (the bytes its data takes, views aside)."""
    return int(t.numel()) * int(t.element_size())


def _unique(tensors: Iterable[Any]) -> list[Any]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def state_layout(opt_class: str, hyper: Mapping[str, Any] | None = None) -> tuple[int, int] | None:
    """(param-sized buffers, scalars) per parameter for an optimizer class name and its
    hyper-parameters; None for a class not known here."""
    hyper = hyper or {}
    layout = STATE_LAYOUT.get(opt_class)
    if layout is None:
        return None
    bufs, scalars = layout
    if opt_class == "SGD" and not hyper.get("momentum"):
        bufs = 0
    if opt_class in ("Adam", "AdamW") and hyper.get("amsgrad"):
        bufs += 1
    if opt_class == "RMSprop":
        bufs += bool(hyper.get("momentum")) + bool(hyper.get("centered"))
    return bufs, scalars


def predicted_state_bytes(opt_class: str, params: Iterable[Any],
                          hyper: Mapping[str, Any] | None = None) -> int | None:
    """Optimizer state an optimizer of ``opt_class`` holds after its first step over the
    trainable ``params`` (None: a class not known here)."""
    layout = state_layout(opt_class, hyper)
    if layout is None:
        return None
    bufs, scalars = layout
    ps = [p for p in _unique(params) if getattr(p, "requires_grad", True)]
    return sum(bufs * tensor_bytes(p) + scalars * SCALAR_BYTES for p in ps)


def optimizer_params(optimizer: Any) -> list[Any]:
    return _unique(p for g in getattr(optimizer, "param_groups", []) for p in g["params"])


def optimized(optimizers: Sequence[Any]) -> dict[str, int] | None:
    """The trainable parameters the optimizers hold, each once (a hand-written update
    holds the rest): ``bytes``, ``tensors`` and the ``largest``; None where no optimizer
    is known."""
    if not optimizers:
        return None
    sizes = [tensor_bytes(p) for p in _unique(p for o in optimizers for p in optimizer_params(o))
             if getattr(p, "requires_grad", True)]
    return {"bytes": sum(sizes), "tensors": len(sizes), "largest": max(sizes, default=0)}


def optimizer_hyper(optimizer: Any) -> dict[str, Any]:
    groups = getattr(optimizer, "param_groups", None) or [{}]
    return {**(getattr(optimizer, "defaults", None) or {}), **groups[0]}


def optimizer_state_bytes(optimizer: Any) -> int:
    """The tensors the optimizer holds in its state now (each storage once)."""
    seen: set[int] = set()
    total = 0
    for st in getattr(optimizer, "state", {}).values():
        for v in st.values():
            if hasattr(v, "untyped_storage") and id(v) not in seen:
                seen.add(id(v))
                total += tensor_bytes(v)
    return total


def model_states(model: Any, optimizer: Any = None, *, grads: bool = True) -> dict[str, int]:
    """Parameters (and buffers), gradients of the trainable parameters and the optimizer's
    state, in bytes. The state is what the optimizer holds, or, before its first step, what
    its class will hold (:func:`predicted_state_bytes`); ``grads=False``: none held."""
    params = _unique(model.parameters())
    buffers = _unique(model.buffers())
    out = {"parameters": sum(map(tensor_bytes, params)) + sum(map(tensor_bytes, buffers)),
           "gradients": sum(tensor_bytes(p) for p in params if p.requires_grad) if grads
           else 0, "optimizer_state": 0}
    if optimizer is not None:
        out["optimizer_state"] = optimizer_state(optimizer)
    return out


def optimizer_state(optimizer: Any) -> int:
    """The optimizer's state in bytes: what it holds, or, before its first step, what its
    class will hold (:func:`predicted_state_bytes`)."""
    held = optimizer_state_bytes(optimizer)
    if held == 0:
        held = predicted_state_bytes(type(optimizer).__name__, optimizer_params(optimizer),
                                     optimizer_hyper(optimizer)) or 0
    return held


def largest_param_bytes(model: Any) -> int:
    return max((tensor_bytes(p) for p in model.parameters()), default=0)


__all__ = ["KINDS", "MODEL_STATES", "STATE_LAYOUT", "empty_kinds", "largest_param_bytes",
           "model_states", "optimized", "optimizer_hyper", "optimizer_params", "optimizer_state",
           "optimizer_state_bytes",
           "predicted_state_bytes", "state_layout", "tensor_bytes"]
