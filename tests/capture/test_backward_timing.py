"""The models' backward on the step clock: from a timed CPU model's output getting its
gradient to autograd's end (``backward_ms``), once a backward however many timed models
it runs through; and its ratio to the same backward alone (``backward_contention``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
from diagnose.capture.probes.compute import ForwardTimer  # noqa: E402
from diagnose.metrics.context import context_metrics  # noqa: E402
from tests.capture.test_loop_work import FakeClock  # noqa: E402


class _Slow(torch.autograd.Function):
    """Identity whose backward moves the hand clock on by ``clock.step`` seconds."""

    clock: FakeClock | None = None

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        assert _Slow.clock is not None
        _Slow.clock.t += 0.003
        return g


class _Part(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Slow.apply(self.lin(x))


def test_a_backward_through_two_timed_models_is_timed_once_a_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoder and a decoder, each timed, in one backward whose every part takes 3 ms
    on the hand clock: the decoder's output gets its gradient first, the encoder's 3 ms
    later, autograd ends 3 ms after that: 6 ms a step, not 9. A step with no backward
    reads null; a timer removed calls no one, though an output kept
    past it is backpropagated."""
    clock = FakeClock()
    _Slow.clock = clock
    monkeypatch.setattr(steps_mod.time, "perf_counter", clock)
    enc, dec = _Part(), _Part()
    opt = torch.optim.SGD([*enc.parameters(), *dec.parameters()], lr=0.01)
    s = steps_mod.Steps(None, after=100, extend=False)
    s.start()
    timers = [ForwardTimer(m, lambda _: None, s.on_backward_start) for m in (enc, dec)]
    for k in range(6):
        clock.t += 0.001
        s.on_model_call(True)
        loss = dec(enc(torch.randn(2, 4))).sum()
        if k < 5:  # the last step's loss is never backpropagated
            loss.backward()
        s.on_optimizer_start(opt)
        s.on_optimizer_step(opt)
    s.on_model_call(True)  # the last step's end
    kept = dec(enc(torch.randn(2, 4)))
    for t in timers:
        t.remove()
    calls: list[int] = []
    monkeypatch.setattr(s, "on_backward_start", lambda: calls.append(1))
    kept.sum().backward()
    rows = s.clock()
    assert len(rows["ms"]) >= 4  # the first row spans the steps while their kind is learnt
    assert rows["backward_ms"][1:-1] == pytest.approx([6.0] * (len(rows["ms"]) - 2))
    assert rows["backward_ms"][-1] is None and not calls


def test_the_loops_backward_over_the_same_alone_is_its_contention() -> None:
    """Steady steps whose backward took 30 ms, against 20 ms alone (the quiet work, 30 ms,
    less its 10 ms forward): 1.5x. Not read where the steps made two forward calls (the
    quiet timing is one model's call)."""
    n = 8
    clock = {"phase": ["wait"] * 2 + ["after"] * n, "ms": [60.0] * (n + 2),
             "forward_ms": [20.0] * (n + 2), "backward_ms": [30.0] * (n + 2),
             "forwards": [1] * (n + 2)}
    ctx = {"capture": {"step_clock": clock},
           "threads": {"forward_ms": 10.0, "work_ms": 30.0, "work_1thread_ms": 40.0}}
    m = context_metrics(ctx)
    assert m["backward_unprofiled_mean_ms"] == pytest.approx(30.0)
    assert m["backward_contention"] == pytest.approx(1.5)
    assert m["forward_contention"] == pytest.approx(2.0)
    clock["forwards"] = [2] * (n + 2)
    assert context_metrics(ctx).get("backward_contention") is None


def test_where_no_step_is_steady_the_backwards_median_is_read() -> None:
    """Epochs of 4 steps, each start forking 4 workers: every step lies within the 4 after
    its epoch's start, none is steady, so the backward is read as the forward is, as the
    median of the steps: 10 ms, each start's 60 ms left out."""
    n = 16
    clock = {"phase": ["wait"] * 2 + ["after"] * (n - 2), "ms": [60.0] * n,
             "forward_ms": [20.0] * n, "backward_ms": [60.0, 10.0, 10.0, 10.0] * 4,
             "forwards": [1] * n, "loader_starts": [1, 0, 0, 0] * 4}
    starts = [{"workers": 4, "iter_ms": 1.0, "first_wait_ms": 50.0}] * 4
    m = context_metrics({"capture": {"step_clock": clock, "loader_starts": starts}})
    assert m.get("forward_unprofiled_mean_ms") is None
    assert m["backward_unprofiled_mean_ms"] == pytest.approx(10.0)
