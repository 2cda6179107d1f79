"""The user's hooks held back while a probe runs the model (diagnose/capture/probes/
held_hooks.py): a probe's forward and backward call none of them, the hooks of the
libraries that do the model's work still run, and every hook is back, in order, after."""

from __future__ import annotations

import functools

import torch
from torch import nn

from diagnose.capture.probes.compute import model_work
from diagnose.capture.probes.held_hooks import hook_package, user_hooks_held


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _work_hook(calls: list[str]):
    """A hook as a sharding library's would be (its code in ``deepspeed``)."""
    def gather(module, args):
        calls.append("gather")
    gather.__module__ = "deepspeed.runtime.zero.parameter_offload"
    return gather


def test_a_probes_work_calls_none_of_the_users_hooks_and_puts_them_back() -> None:
    """Forward, pre-forward, full backward, a parameter's gradient hook and a global
    forward hook of the user's: none is called by the probe's work (a forward and a
    backward through ``autograd.grad``); a sharding library's pre-hook is; after it, every
    hook is registered again, in its order, and a loop's call reaches them all."""
    model = _model()
    calls: list[str] = []
    first, second = model[0], model[2]
    handles = [
        first.register_forward_hook(lambda m, i, o: calls.append("fwd")),
        first.register_forward_pre_hook(lambda m, i: calls.append("pre")),
        second.register_full_backward_hook(lambda m, gi, go: calls.append("bwd")),
        second.weight.register_hook(lambda g: calls.append("grad")),
        nn.modules.module.register_module_forward_hook(
            lambda m, i, o: calls.append("global")),
        first.register_forward_pre_hook(_work_hook(calls)),
        first.register_forward_hook(lambda m, i, o: calls.append("fwd2")),
    ]
    order = list(first._forward_hooks)
    x = torch.randn(4, 8)
    try:
        with model_work(model, ((x,), {}), idle_s=0.0) as (_, work):
            for _ in range(3):
                work()
        assert calls == ["gather"] * 3
        assert list(first._forward_hooks) == order
        calls.clear()
        model(x).sum().backward()  # the loop's own call: every hook
        assert sorted(set(calls)) == ["bwd", "fwd", "fwd2", "gather", "global", "grad",
                                      "pre"]
        assert calls.index("fwd") < calls.index("fwd2")
    finally:
        for h in handles:
            h.remove()


def test_hooks_held_count_and_a_hook_added_meanwhile_stays() -> None:
    """The block is told how many hooks it holds; a hook registered inside the block is
    kept after it, behind the ones put back."""
    model = _model()
    h1 = model[0].register_forward_hook(lambda m, i, o: None)
    with user_hooks_held([model]) as n:
        assert n == 1 and not model[0]._forward_hooks
        h2 = model[0].register_forward_hook(lambda m, i, o: None)
    assert list(model[0]._forward_hooks) == [h1.id, h2.id]
    h1.remove()
    h2.remove()


def test_a_hooks_package_is_read_through_partials_methods_and_objects() -> None:
    class Observer:
        def __call__(self, m, i, o):
            return None

        def method(self, m, i, o):
            return None

    assert hook_package(functools.partial(nn.Module.__call__)) == "torch"
    assert hook_package(Observer()) == hook_package(Observer().method) == __name__.split(".")[0]
    assert hook_package(_work_hook([])) == "deepspeed"
    assert hook_package(torch.nn.utils.parametrize.register_parametrization) == "torch"
