"""The optimizers' step timed alone on copies (diagnose/capture/probes/optimizer_step.py):
real optimizers, the user's parameters, gradients, state and hooks untouched."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from diagnose.capture.probes import optimizer_step as probe


def _trained(opt_cls=torch.optim.Adam, **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = opt_cls(model.parameters(), **kw)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
    return model, opt


def _snapshot(opt):
    return [t.detach().clone() for t in probe._tensors(opt)], [
        None if p.grad is None else p.grad.clone() for g in opt.param_groups for p in g["params"]]


def test_the_step_is_timed_on_copies_and_the_run_is_untouched() -> None:
    """Adam after three steps: its step timed (3+ rounds after a warm-up), and every
    parameter, gradient and state tensor of the user's as it was, the same objects."""
    model, opt = _trained()
    before, grads = _snapshot(opt)
    ids = [id(t) for t in probe._tensors(opt)]
    got = probe.time_optimizers([opt])
    assert got is not None and got["step_ms"] > 0 and got["rounds"] >= probe.ROUNDS
    assert got["optimizers"] == 1
    after, grads_after = _snapshot(opt)
    assert [id(t) for t in probe._tensors(opt)] == ids
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_after, strict=True))
    assert all(int(s["step"]) == 3 for s in opt.state.values())


def test_a_copy_steps_every_parameter_that_learns() -> None:
    """A parameter whose gradient was set to None gets zeros in its copy (stepped as in
    the loop); the copy's state is its own; the groups' settings are kept."""
    model, opt = _trained(torch.optim.AdamW, weight_decay=0.05)
    first = opt.param_groups[0]["params"][0]
    first.grad = None
    twin = probe.copied(opt)
    c = twin.param_groups[0]["params"][0]
    assert c is not first and torch.equal(c, first) and torch.equal(c.grad, torch.zeros_like(c))
    assert twin.param_groups[0]["weight_decay"] == 0.05
    assert twin.state[c]["exp_avg"] is not opt.state[first]["exp_avg"]
    kept = opt.state[first]["exp_avg"].clone()
    twin.step()
    assert int(twin.state[c]["step"]) == 4 and int(opt.state[first]["step"]) == 3
    assert torch.equal(opt.state[first]["exp_avg"], kept)
    assert not torch.equal(twin.state[c]["exp_avg"], kept)  # the zero gradient moved it


def test_the_users_global_optimizer_hooks_are_held_back() -> None:
    """A hook the user registered for every optimizer's step is not called by the timing,
    and is there again after it."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _, opt = _trained(torch.optim.SGD, lr=0.1, momentum=0.9)
    calls: list[str] = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: calls.append(type(o).__name__))
    try:
        assert probe.time_optimizers([opt]) is not None
        assert calls == []
        opt.step()
        assert calls == ["SGD"]
    finally:
        handle.remove()


class _Wrapped(torch.optim.SGD):
    """An optimizer whose class takes more than its groups to build."""

    def __init__(self, params, clip: float, lr: float = 0.1) -> None:
        super().__init__(params, lr=lr)
        self.clip = clip


def test_what_is_not_timed(monkeypatch) -> None:
    """No optimizer; a class that cannot be rebuilt from its groups; a parameter off the
    CPU; copies past MAX_BYTES: None, the run as it was."""
    assert probe.time_optimizers([]) is None
    model = nn.Linear(4, 2)
    assert probe.time_optimizers([_Wrapped(model.parameters(), clip=1.0)]) is None
    meta = torch.optim.SGD([nn.Parameter(torch.empty(3, device="meta"))], lr=0.1)
    assert probe.time_optimizers([meta]) is None
    _, opt = _trained()
    monkeypatch.setattr(probe, "MAX_BYTES", probe.copies_bytes(opt) - 1)
    assert probe.time_optimizers([opt]) is None
    monkeypatch.setattr(probe, "MAX_BYTES", probe.copies_bytes(opt))
    assert probe.time_optimizers([opt]) is not None


def test_the_metric_reads_the_timing() -> None:
    """optimizer_quiet_ms: the timing's step_ms; None where it was not made or gave 0."""
    from diagnose.metrics.context.cpu import cpu_metrics

    assert cpu_metrics({"optimizer_quiet": {"step_ms": 1.83}}, {})["optimizer_quiet_ms"] == 1.83
    assert cpu_metrics({"optimizer_quiet": None}, {})["optimizer_quiet_ms"] is None
    assert cpu_metrics({"optimizer_quiet": {"step_ms": 0}}, {})["optimizer_quiet_ms"] is None


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.SGD, torch.optim.RMSprop])
def test_copies_bytes_counts_parameters_gradients_and_state(cls) -> None:
    """A parameter that learns counts twice (its gradient), each state tensor once."""
    _, opt = _trained(cls, lr=0.01)
    params = [p for g in opt.param_groups for p in g["params"]]
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    want = sum(2 * p.numel() * p.element_size() for p in params) + sum(
        v.numel() * v.element_size() for v in state)
    assert probe.copies_bytes(opt) == want
