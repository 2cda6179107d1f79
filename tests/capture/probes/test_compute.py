"""The model's work on torch's threads and on one thread
(diagnose/capture/probes/compute.py): real timings that leave the run as it was."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from diagnose.capture.probes.compute import ForwardTimer, models_work, time_threads
from diagnose.capture.probes.thread_timings import (
    agreeing_threads,
    joined_threads,
    threads_ratio_span,
)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Dropout(0.5),
                         nn.Linear(64, 4)).train()


def test_forward_timer_times_every_call_and_keeps_the_first_inputs():
    m, seen = _model(), []
    timer = ForwardTimer(m, seen.append)
    x1, x2 = torch.randn(8, 32), torch.randn(8, 32)
    m(x1)
    m(x2)
    timer.remove()
    m(x1)  # removed: not timed
    assert len(seen) == 2 and all(s > 0 for s in seen)
    assert timer.inputs is not None and timer.inputs[0][0] is x1


def test_forward_timer_takes_the_parts_a_loop_calls_where_it_never_calls_the_model():
    """A LightningModule's shape: the loop calls ``m.net`` and ``m.head``, never ``m``.
    Each part's calls are timed and its first inputs kept, in the order first called; once
    ``m`` itself is called, it is the work, and its parts' calls inside it are not timed
    apart."""

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.head, self.act = nn.Linear(8, 16), nn.Linear(16, 2), nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.act(self.net(x)))

    m, seen = Wrapper(), []
    timer = ForwardTimer(m, seen.append)
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    for x in (x1, x2):
        m.head(m.act(m.net(x)))
    works = timer.works()
    assert [w[0] for w in works] == [m.net, m.head]  # act has no parameters: no part
    assert works[0][1][0][0] is x1 and timer.inputs is works[0][1]
    assert len(seen) == 4
    m(x2)  # the model itself: its own inputs are the work from now on
    assert timer.works() == [(m, ((x2,), {}))] and len(seen) == 5
    m(x1)
    assert len(seen) == 6  # one call of m, its parts inside it not timed apart
    timer.remove()


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_thread_timing_leaves_the_run_as_it_was():
    """Gradients, buffers (BatchNorm's running statistics), the RNG and the thread count are
    what they were; the timings are real (positive) and cover forward and backward."""
    m = _model()
    x = torch.randn(16, 32)
    m(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    bufs = [b.clone() for b in m.buffers()]
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    out = time_threads(m, ((x,), {}))
    assert out is not None and out["backward"] is True
    assert out["work_ms"] > 0 and out["work_1thread_ms"] > 0 and out["forward_ms"] > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads, strict=True))
    assert all(torch.equal(b, s) for b, s in zip(m.buffers(), bufs, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_a_work_too_slow_for_more_rounds_is_timed_by_its_one_round(monkeypatch):
    """A new user's step took 1.8 s on torch's 2 threads and 0.26 s on one: its first
    round ran past the rounds' limit (3 x SLOW_S), was thrown away as a warm-up, and the
    timing came back None without a word; CF008 never fired. That round is the timing
    now, its noise taken as the most a prediction reads (it is not known)."""
    import diagnose.capture.probes.compute as compute
    from diagnose.stepmodel.calibration import THREADS_NOISE_MAX

    monkeypatch.setattr(compute, "SLOW_S", 0.0)  # every round is too slow for another
    out = time_threads(_model(), ((torch.randn(16, 32),), {}))
    assert out is not None and out["rounds"] == 1, out
    assert out["work_ms"] > 0 and out["work_1thread_ms"] > 0
    assert out["noise"] == THREADS_NOISE_MAX


def test_thread_timing_does_not_apply_on_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert time_threads(_model(), ((torch.randn(4, 32),), {})) is None
    finally:
        torch.set_num_threads(before)
    assert time_threads(_model(), None) is None


def test_two_thread_timings_are_joined():
    """Two timings seconds apart: each median their geometric mean (the one-thread ratio
    their ratios' geometric mean), their rounds together, and a noise at least half the
    log of their ratios' ratio; a missing one gives the other."""
    busy = {"work_ms": 6.0, "work_1thread_ms": 6.3, "forward_ms": 2.5, "rounds": 3,
            "noise": 0.02}
    quiet = {"work_ms": 5.0, "work_1thread_ms": 6.5, "forward_ms": 2.0, "rounds": 4,
             "noise": 0.04}
    both = joined_threads(busy, quiet)
    assert both is not None and both == joined_threads(quiet, busy)
    ratio = both["work_1thread_ms"] / both["work_ms"]
    assert ratio == pytest.approx(math.sqrt(1.05 * 1.3), rel=1e-4)
    assert both["forward_ms"] == pytest.approx(math.sqrt(5.0), rel=1e-4)
    assert both["rounds"] == 7
    assert both["noise"] == pytest.approx(math.log(1.3 / 1.05) / 2, abs=1e-4)
    # two timings that agree keep their own noise (the mean of two: sqrt(a^2 + b^2) / 2)
    same = joined_threads(quiet, dict(quiet, noise=0.03))
    assert same is not None and same["noise"] == pytest.approx(0.025, abs=1e-4)
    assert joined_threads(None, quiet) is quiet and joined_threads(busy, None) is busy
    # the two timings' ratios, least first: the busier one's is the range's other end
    assert threads_ratio_span(busy, quiet) == [1.05, 1.3]
    assert threads_ratio_span(quiet, None) is None


def test_the_busier_thread_timing_reaches_the_metrics():
    """threads_one_thread_ratio is the kept timing's; threads_one_thread_ratio_min the least
    of the span where it is below it (else None: nothing to widen)."""
    from diagnose.metrics.context.cpu import cpu_metrics

    th = {"work_ms": 5.0, "work_1thread_ms": 6.5, "forward_ms": 2.0}
    got = cpu_metrics({"threads": th, "threads_span": [1.05, 1.3]}, {})
    assert got["threads_one_thread_ratio"] == 1.3
    assert got["threads_one_thread_ratio_min"] == 1.05
    same = cpu_metrics({"threads": th, "threads_span": [1.3, 1.3]}, {})
    assert same["threads_one_thread_ratio_min"] is None
    assert cpu_metrics({"threads": th}, {})["threads_one_thread_ratio_min"] is None


def test_the_loops_forward_is_set_beside_the_quiet_one_call_for_call():
    """forward_contention: the loop's forward a step (6 ms) over the quiet forward (2 ms),
    3.0, where each step made one forward call. With two calls a step (a GAN's generator
    and discriminator, say) the loop's figure holds both: its mean call (3 ms) over the
    quiet forward of a call in the loop's mix (``forward_per_call_ms``, 1.5 ms), 2.0; with
    no such figure (a call whose inputs changed shape) the ratio is not given, nor where
    the calls were not counted."""
    from diagnose.metrics.context.cpu import cpu_metrics

    th = {"work_ms": 5.0, "work_1thread_ms": 6.5, "forward_ms": 2.0}
    one = {"forward_unprofiled_ms": 6.0, "forward_calls_unprofiled": 1}
    assert cpu_metrics({"threads": th}, one)["forward_contention"] == 3.0
    two = {**one, "forward_calls_unprofiled": 2}
    assert cpu_metrics({"threads": th}, two).get("forward_contention") is None
    mixed = {**th, "forward_per_call_ms": 1.5}
    assert cpu_metrics({"threads": mixed}, two)["forward_contention"] == 2.0
    assert cpu_metrics({"threads": th}, {"forward_unprofiled_ms": 6.0}).get(
        "forward_contention") is None
    # the steady steps' mean, where the clock gave it, before the median
    mean = {**one, "forward_unprofiled_mean_ms": 8.0}
    assert cpu_metrics({"threads": th}, mean)["forward_contention"] == 4.0


def test_one_threads_work_is_set_beside_the_loops_own_pace():
    """threads_one_thread_loop_ratio: one thread's quiet work (6.5 ms) over torch's threads'
    (5.0 ms), 1.3, over the loop's forward contention (3.0: a neighbour's load the quiet
    timing missed), 0.4333; at one thread's pace where the other processes left it less
    than a CPU (0.5 of one: twice as long), 0.8667; no contention above 1 leaves the quiet
    ratio (the timing met the loop's load: none counted twice, whatever the CPUs left);
    none where the contention is unknown or no CPU was left."""
    from diagnose.metrics.context.cpu import cpu_metrics

    th = {"work_ms": 5.0, "work_1thread_ms": 6.5, "forward_ms": 2.0}
    loop = {"forward_unprofiled_ms": 6.0, "forward_calls_unprofiled": 1, "cpu_count": 2,
            "step_others_cpus_unprofiled": 1.0}
    assert cpu_metrics({"threads": th}, loop)["threads_one_thread_loop_ratio"] == 0.4333
    half = {**loop, "step_others_cpus_unprofiled": 1.5}
    assert cpu_metrics({"threads": th}, half)["threads_one_thread_loop_ratio"] == 0.8667
    quiet = {**loop, "forward_unprofiled_ms": 1.8}
    assert cpu_metrics({"threads": th}, quiet)["threads_one_thread_loop_ratio"] == 1.3
    assert cpu_metrics({"threads": th}, {**quiet, "step_others_cpus_unprofiled": 1.5})[
        "threads_one_thread_loop_ratio"] == 1.3
    assert cpu_metrics({"threads": th}, {**loop, "forward_calls_unprofiled": None})[
        "threads_one_thread_loop_ratio"] is None
    full = {**loop, "step_others_cpus_unprofiled": 2.0}
    assert cpu_metrics({"threads": th}, full)["threads_one_thread_loop_ratio"] is None


def test_the_values_optimizers_stepped_outside_the_models_given():
    """The capture's optimizers that held no model given (their values summed: 0 where
    every optimizer's were the models'); None where the capture did not say."""
    from diagnose.metrics.context.cpu import cpu_metrics

    def ctx(others):
        return {"capture": {"step_signals": {"other_optimizers": others}}}
    got = cpu_metrics(ctx([{"class": "Adam", "tensors": 4, "values": 164_608},
                           {"class": "SGD", "tensors": 1, "values": 3}]), {})
    assert got["optimizer_values_outside_models"] == 164_611
    assert cpu_metrics(ctx([]), {})["optimizer_values_outside_models"] == 0
    assert cpu_metrics({}, {})["optimizer_values_outside_models"] is None
    assert cpu_metrics(ctx([{"class": "SGD"}]), {})["optimizer_values_outside_models"] is None



class _Sleepy(nn.Module):
    """A forward that sleeps ``s`` seconds: a known lower bound of its time."""

    def __init__(self, s: float) -> None:
        super().__init__()
        self.s, self.w = s, nn.Parameter(torch.ones(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        time.sleep(self.s)
        return x @ self.w


def test_forward_timer_counts_each_models_calls_and_whether_their_shapes_held():
    """A GAN's step: the discriminator called three times on batches of one shape; a model
    called on another shape in more than a tenth of its calls is said to have changed
    shape (one short last batch in ten calls is not)."""
    d, g, seen = _model(), _model(), []
    timers = [ForwardTimer(d, seen.append), ForwardTimer(g, seen.append)]
    for _ in range(2):
        for _ in range(3):
            d(torch.randn(8, 32))
        g(torch.randn(8, 32))
    g(torch.randn(5, 32))  # another shape: one of 3 calls
    d(torch.randn(5, 32))  # an epoch's short last batch: one of 7 calls (over a tenth)
    calls = {k: c for t in timers for k, c in t.calls().items()}
    assert calls == {id(d): (7, False, 0), id(g): (3, False, 0)}
    for _ in range(3):
        d(torch.randn(8, 32))
    assert timers[0].calls() == {id(d): (10, True, 0)}  # 9 of 10
    for t in timers:
        t.remove()


def test_the_quiet_forward_of_a_call_is_weighted_by_the_loops_calls():
    """per_call_forward: a discriminator of 2 ms called three times a step and a generator
    of 6 ms once: a call in that mix takes (3 x 2 + 6) / 4 = 3 ms alone."""
    from diagnose.capture.probes.compute import per_call_forward

    assert per_call_forward([2.0, 6.0], [3, 1]) == 3.0
    assert per_call_forward([2.0], [1]) == 2.0
    assert per_call_forward([2.0, 6.0], [0, 0]) is None
    assert per_call_forward([2.0, 6.0], [3]) is None


def test_forward_timer_counts_the_calls_a_backward_went_through():
    """A GAN's step as pytorch/examples' dcgan writes it: the discriminator on real data
    and on a detached fake, each backpropagated, then on the fake again for the
    generator's loss, through both models; a call under no_grad (a sample for a picture)
    and one whose output no loss reached add no backward. Each output a backward reached
    tells of it (the step clock keeps the first of one backward: tests of the clock)."""
    g, d = nn.Linear(8, 32), nn.Linear(32, 1)
    began: list[int] = []
    timers = [ForwardTimer(m, lambda s: None, lambda: began.append(1)) for m in (g, d)]
    for _ in range(2):
        d(torch.randn(4, 32)).mean().backward()
        fake = g(torch.randn(4, 8))
        d(fake.detach()).mean().backward()
        d(fake).mean().backward()
        with torch.no_grad():
            g(torch.randn(4, 8))
        d(torch.randn(4, 32))  # never backpropagated
    calls = {k: c for t in timers for k, c in t.calls().items()}
    assert calls == {id(g): (4, True, 2), id(d): (8, True, 6)}
    assert calls[id(d)].backprops == 6 and len(began) == 8
    for t in timers:
        t.remove()
    d(torch.randn(4, 32)).mean().backward()  # after the session: nothing counted or told
    assert timers[1].calls()[id(d)].backprops == 6 and len(began) == 8


def test_the_quiet_backward_of_a_call_is_weighted_by_the_backwards_the_loop_ran():
    """_per_call_backward_ms: a discriminator whose backward takes 3 ms alone (its work
    5 ms, its forward 2), backpropagated in 2 of its 3 calls a step, and a generator of
    10 ms backward (16 - 6) in its 1: a forward call in that mix carries (2 x 3 + 10) / 4
    = 4 ms of backward. A model none of whose calls was backpropagated, or a call not
    timed here, gives none."""
    from diagnose.capture.probes.compute import ModelCalls, _per_call_backward_ms

    d, g = object(), object()
    pairs = [(d, None), (g, None)]
    each, works = [[0.002, 0.006]] * 3, [[0.005, 0.016]] * 3
    calls = {id(d): ModelCalls(3, True, 2), id(g): ModelCalls(1, True, 1)}
    assert _per_call_backward_ms(pairs, each, works, calls) == pytest.approx(4.0)
    none = {id(d): ModelCalls(3, True, 0), id(g): ModelCalls(1, True, 0)}
    assert _per_call_backward_ms(pairs, each, works, none) is None
    assert _per_call_backward_ms(pairs, each, works, {**calls, 1: ModelCalls(1, True, 1)}) is None
    changed = {**calls, id(g): ModelCalls(1, False, 1)}
    assert _per_call_backward_ms(pairs, each, works, changed) is None


def test_the_loops_backward_of_several_calls_is_set_beside_the_quiet_one():
    """backward_contention with two forward calls a step: the loop's backward a step
    (12 ms) over two calls' quiet backward (``backward_per_call_ms``, 4 ms each), 1.5;
    none without that figure (the calls were not all timed)."""
    from diagnose.metrics.context.cpu import cpu_metrics

    th = {"work_ms": 12.0, "work_1thread_ms": 15.0, "forward_ms": 4.0,
          "forward_per_call_ms": 1.5}
    two = {"forward_unprofiled_ms": 6.0, "forward_calls_unprofiled": 2,
           "backward_unprofiled_mean_ms": 12.0}
    got = cpu_metrics({"threads": {**th, "backward_per_call_ms": 4.0}}, two)
    assert got["forward_contention"] == 2.0 and got["backward_contention"] == 1.5
    assert cpu_metrics({"threads": th}, two).get("backward_contention") is None


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_thread_timing_gives_a_calls_quiet_forward_only_where_every_call_is_timed():
    """With the loop's calls of each model, the thread timing gives the quiet forward of a
    call in their mix: between the two models' own forwards, nearer the one called more;
    not where a model called in the loop is not in the timing, nor where its calls
    changed shape."""
    torch.manual_seed(0)
    small = nn.Sequential(nn.Linear(32, 32)).train()
    big = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 512),
                        nn.Linear(512, 4)).train()
    x = ((torch.randn(64, 32),), {})
    calls = {id(small): (30, True), id(big): (10, True)}
    out = time_threads(small, x, others=[(big, x)], calls=calls)
    assert out is not None and 0 < out["forward_per_call_ms"] < out["forward_ms"]
    alone = time_threads(small, x, calls={id(small): (5, True)})
    assert alone is not None and alone["forward_per_call_ms"] > 0
    missing = {**calls, 12345: (3, True)}  # a model the loop called that is not timed here
    assert "forward_per_call_ms" not in time_threads(small, x, others=[(big, x)], calls=missing)
    changed = {**calls, id(big): (10, False)}
    assert "forward_per_call_ms" not in time_threads(small, x, others=[(big, x)], calls=changed)
    # each model's backward, weighted by the calls a backward went through: between the
    # two models' own, and none where no call was backpropagated
    both = time_threads(small, x, others=[(big, x)],
                        calls={id(small): (30, True, 30), id(big): (10, True, 10)})
    assert both is not None and 0 < both["backward_per_call_ms"] < both["work_ms"] - both[
        "forward_ms"]
    assert "backward_per_call_ms" not in out


def test_several_models_are_timed_as_one_work():
    """A GAN's generator and discriminator: the work runs both models' forward and
    backward, so the thread timing covers all the step's model ops, not the first model's."""
    a, b = _Sleepy(0.01), _Sleepy(0.02)
    x = ((torch.ones(2, 4),), {})
    with models_work([(a, x), (b, x)], idle_s=0.0) as (forward, work):
        took = work()
        assert took >= 0.03 and forward() >= 0.03
        first, second = forward.each()
        assert first >= 0.01 and second >= 0.02 and math.isclose(first + second, forward())
    with models_work([(a, x)], idle_s=0.0) as (forward, work):
        assert 0.01 <= work() < took


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_thread_timing_takes_the_other_models_and_leaves_them_as_they_were():
    g, d = _model(), _model()
    x = torch.randn(16, 32)
    bufs = [b.clone() for b in d.buffers()]
    out = time_threads(g, ((x,), {}), others=[(d, ((x,), {}))])
    assert out is not None and out["models"] == 2
    assert all(torch.equal(b, s) for b, s in zip(d.buffers(), bufs, strict=True))
    assert time_threads(g, ((x,), {}))["models"] == 1


def test_the_hooks_on_a_model_compiled_in_place_leave_its_graph_whole():
    """A new user's ``net.compile()``: Dynamo traced the forward timer's perf_counter
    inside the module's call and broke the graph 4 times (one graph became 2, and a step
    that recompiled read as a 270 ms collector pause). The capture's hooks run as plain
    Python: no graph break, one graph, every forward still timed. Dynamo's eager backend
    (no code generated) stands in for inductor."""
    from torch._dynamo.utils import counters

    from diagnose.capture.boundaries import ModelHooks

    torch._dynamo.reset()
    counters.clear()
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    m.compile(backend="eager")
    seen: list[float] = []
    timer = ForwardTimer(m, seen.append)
    hooks = ModelHooks([m], lambda grad: None, lambda *a: None)
    try:
        for _ in range(3):
            m(torch.randn(4, 8)).sum().backward()
    finally:
        timer.remove()
        hooks.remove()
        torch._dynamo.reset()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1 and len(seen) == 3


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs 2 or more intra-op threads")
def test_models_recorded_under_autocast_are_timed_under_it():
    """An encoder and a decoder called under CPU bfloat16 autocast: the decoder's recorded
    input is the encoder's bfloat16 output, which its float32 weights take only under
    autocast. The thread timing replays each forward under the autocast it ran under
    (a new user's loop failed there: "mat1 and mat2 must have the same dtype"), and the
    autocast is off again after."""
    torch.manual_seed(0)
    enc, dec = nn.Linear(32, 16), nn.Linear(16, 32)
    te, td = ForwardTimer(enc, lambda s: None), ForwardTimer(dec, lambda s: None)
    x = torch.randn(8, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = enc(x)
        dec(z)
    te.remove()
    td.remove()
    assert td.inputs is not None and td.inputs[0][0].dtype == torch.bfloat16
    with pytest.raises(RuntimeError):  # the recorded input outside autocast
        dec(*td.inputs[0])
    out = time_threads(enc, te.inputs, others=[(dec, td.inputs)])
    assert out is not None and out["models"] == 2 and out["work_ms"] > 0
    assert not torch.is_autocast_enabled("cpu")


def test_of_three_thread_timings_the_two_that_agree_are_joined() -> None:
    """Three timings: the pair whose one-thread ratios lie closest is joined, the third
    left out (one disturbed moment is outvoted); two or fewer with a ratio: joined as two."""
    def timing(ratio: float, work: float = 10.0) -> dict:
        return {"work_ms": work, "work_1thread_ms": work * ratio, "forward_ms": 4.0,
                "rounds": 3, "noise": 0.02}

    a, b, c = timing(1.75), timing(1.08), timing(1.78, 11.0)
    got = agreeing_threads(a, b, c)
    assert got == joined_threads(a, c)
    assert got is not None and got["rounds"] == 6
    assert got["work_1thread_ms"] / got["work_ms"] == pytest.approx(math.sqrt(1.75 * 1.78),
                                                                    rel=1e-3)
    assert agreeing_threads(a, b) == joined_threads(a, b)
    assert agreeing_threads(a, None, c) == joined_threads(a, c)
    assert agreeing_threads(a, None, None) is a
    assert threads_ratio_span(a, b, c) == [1.08, 1.78]
