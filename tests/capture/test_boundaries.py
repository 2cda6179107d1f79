"""Where steps begin, from the loop's signals alone (diagnose.capture.boundaries): each
loop shape as the sequence of signals it gives, on real tensors and optimizers."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from diagnose.capture.boundaries import (  # noqa: E402
    FORWARD_ONLY,
    StepFinder,
    as_models,
    model_names,
)


def _opt(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1)


def _backward(f: StepFinder, model: nn.Module) -> None:
    """A backward through ``model``: every parameter gets a gradient, the first is told."""
    for p in model.parameters():
        p.grad = torch.ones_like(p) if p.grad is None else p.grad.add_(1)
    f.watch_grad(next(model.parameters()))


def test_models_given_as_one_a_list_a_dict_or_none() -> None:
    """A dict of models by name gives its values; a ModuleDict is one model (a Module)."""
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    assert as_models(a) == [a] and as_models([a, b]) == [a, b] and as_models(None) == []
    assert as_models({"netG": a, "netD": b}) == [a, b]
    both = nn.ModuleDict({"g": a, "d": b})
    assert as_models(both) == [both]
    # each one's name, in the same order (the memory section files modules under it)
    assert model_names({"netG": a, "netD": b}) == ["netG", "netD"]
    # a list's by class, with the position where two share one
    assert model_names([a, None, b]) == ["Linear[0]", "Linear[2]"] and model_names(a) == [""]
    assert model_names((a, nn.Tanh())) == ["Linear", "Tanh"]
    assert model_names(both) == [""] and model_names(None) == []


def test_one_optimizer_with_batches_steps_at_the_next_batch() -> None:
    m = nn.Linear(2, 2)
    opt, f = _opt(m), StepFinder([m])
    marks = []
    for _ in range(4):
        marks.append(f.pull())
        f.forward(True)
        _backward(f, m)
        marks.append(f.optimizer_step(opt))
    assert marks == [False, False] + [True, False] * 3
    assert f.mode == "optimizer"


def test_a_gan_steps_once_a_round_of_both_optimizers() -> None:
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_g, opt_d = _opt(g), _opt(d)
    for models in ([g, d], []):  # both given; none given (the round: one repeats)
        f = StepFinder(models)
        marks = []
        for _ in range(4):
            marks.append(f.pull())
            marks.append(f.forward(True))  # D on real
            marks.append(f.optimizer_step(opt_d))
            marks.append(f.forward(True))  # D on fake: not a new step
            marks.append(f.optimizer_step(opt_g))
        boundaries = [i for i, m in enumerate(marks) if m]
        first = 5 if models else 10  # both given: the first round is known at once
        assert boundaries == list(range(first, 20, 5)), models
        assert [type(o).__name__ for o in f.optimizer_list] == ["SGD", "SGD"]


def test_without_batches_a_gan_steps_at_the_first_model_call_after_the_round() -> None:
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_g, opt_d = _opt(g), _opt(d)
    f = StepFinder([g, d])
    marks = []
    for _ in range(3):
        marks += [f.forward(True), f.forward(True), f.optimizer_step(opt_d),
                  f.forward(True), f.optimizer_step(opt_g)]
    assert [i for i, m in enumerate(marks) if m] == [5, 10]


def test_only_the_optimizers_of_the_model_given_count() -> None:
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_g, opt_d = _opt(g), _opt(d)
    f = StepFinder([d])
    assert f.counts(opt_d) and not f.counts(opt_g)
    for _ in range(3):
        f.pull()
        f.optimizer_step(opt_d)
        f.optimizer_step(opt_g)
    assert f.placed == 2 and f.totals["other_steps"] == 3
    assert list(f.others.values()) == [("SGD", 2, 6)]


def test_without_batches_or_calls_the_round_ends_at_its_last_step() -> None:
    m = nn.Linear(2, 2)
    opt, f = _opt(m), StepFinder([m])
    assert [f.optimizer_step(opt) for _ in range(3)] == [True] * 3


def test_gradient_accumulation_steps_at_the_optimizer_not_the_batch() -> None:
    m = nn.Linear(2, 2)
    opt, f = _opt(m), StepFinder([m])
    marks = []
    for i in range(12):
        marks.append(f.pull())
        f.forward(True)
        _backward(f, m)  # accumulates: the same gradient tensors, written in place
        if i % 4 == 3:
            f.optimizer_step(opt)
            opt.zero_grad()
    # a boundary at the 5th and 9th batch: 4 batches a step
    assert [i for i, m_ in enumerate(marks) if m_] == [4, 8]


def test_a_hand_written_update_steps_once_gradients_are_cleared() -> None:
    m = nn.Linear(2, 2)
    f = StepFinder([m])
    marks = []
    for _ in range(4):
        m.zero_grad()  # word_language_model: first in the step
        marks.append(f.forward(True))
        _backward(f, m)
        with torch.no_grad():
            for p in m.parameters():
                p.data.add_(p.grad, alpha=-0.1)  # .data: no version bump
    assert marks == [False, True, True, True] and f.mode == "backward"
    assert f.grads_set_to_none is True


def test_a_hand_written_update_with_batches_steps_where_gradients_are_cleared() -> None:
    """zero_grad() after the batch came, before the model's call: the call starts the
    step (the batch's wait goes to the step before); cleared before the batch: the batch."""
    for clear_first in (True, False):
        m = nn.Linear(2, 2)
        f = StepFinder([m])
        marks = []
        for _ in range(3):
            if not clear_first:
                m.zero_grad()
            marks.append(f.pull())
            if clear_first:
                m.zero_grad()
            marks.append(f.forward(True))
            _backward(f, m)
        assert f.mode == "backward"
        assert marks == ([False, False, False, True, False, True] if clear_first
                         else [False, False, True, False, True, False])


def test_written_parameters_end_a_step_too() -> None:
    m = nn.Linear(2, 2)
    f = StepFinder([m])
    marks = []
    for _ in range(3):
        marks.append(f.forward(True))
        _backward(f, m)
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad  # the parameters' versions move
        for p in m.parameters():
            p.grad.zero_()
    assert marks == [False, True, True]
    assert f.grads_set_to_none is False  # zeroed in place


def test_inference_steps_on_batches_or_on_calls_without_autograd() -> None:
    f = StepFinder([])
    assert [f.pull() for _ in range(3)] == [False, True, True] and f.mode == "dataloader"
    f = StepFinder([])
    marks = [f.forward(False) for _ in range(FORWARD_ONLY + 3)]
    assert marks == [False] * FORWARD_ONLY + [True] * 3 and f.mode == "forward"
    # calls with autograd on and no backward: nothing tells
    f = StepFinder([])
    assert not any(f.forward(True) for _ in range(50))
    assert "autograd on and never a backward" in (f.untold() or "")


def test_a_stronger_signal_takes_over_and_is_told() -> None:
    m = nn.Linear(2, 2)
    opt = _opt(m)
    changes: list[tuple[Any, str]] = []
    f = StepFinder([m], on_change=lambda old, new: changes.append((old, new)))
    with torch.no_grad():  # an evaluation pass first
        for _ in range(3):
            f.pull()
            f.forward(False)
    assert f.mode == "dataloader" and f.placed == 2
    for _ in range(3):
        f.pull()
        f.forward(True)
        _backward(f, m)
        f.optimizer_step(opt)
    assert changes == [("dataloader", "optimizer")] and f.mode == "optimizer"


def test_manual_steps_turn_the_others_off() -> None:
    m = nn.Linear(2, 2)
    opt, f = _opt(m), StepFinder([m])
    f.manual()
    assert not any([f.pull(), f.forward(True), f.optimizer_step(opt), f.pull()])
    assert f.untold() is None


@pytest.mark.parametrize(("signals", "why"), [
    ([], "no DataLoader batch, no optimizer step and no call of a model (no model"),
    (["fwd", "bwd", "fwd", "bwd", "fwd", "bwd"], "backward ran 3 times, but the gradients"),
    (["other", "other"], "the only optimizers that stepped hold none"),
])
def test_why_nothing_told_the_steps(signals: list[str], why: str) -> None:
    m, other = nn.Linear(2, 2), nn.Linear(2, 2)
    opt, opt_other = _opt(m), _opt(other)
    f = StepFinder([m] if "other" in signals else [])
    for s in signals:
        if s == "pull":
            f.pull()
        elif s == "fwd":
            f.forward(True)
        elif s == "bwd":
            _backward(f, m)  # accumulating, never cleared
        elif s == "opt":
            f.optimizer_step(opt)
        else:
            f.optimizer_step(opt_other)
    assert f.placed == 0
    assert (f.untold() or "").startswith(why)


def test_a_loop_that_ended_after_one_step_was_told() -> None:
    """One optimizer step, or one batch: nothing was unclear, the loop was short."""
    m = nn.Linear(2, 2)
    f = StepFinder([m])
    f.pull()
    f.forward(True)
    _backward(f, m)
    f.optimizer_step(_opt(m))
    assert f.placed == 0 and f.untold() is None
    f = StepFinder([])
    f.pull()
    assert f.untold() is None
