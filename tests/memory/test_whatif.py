"""The scaled what-ifs on a hand-written profile, every number worked out by hand.

The profile: batch 8 (its tensors 800 bytes), parameters 1000, gradients 1000 when all
exist, Adam state 2000, largest parameter 100; three timeline stretches:

    phase     params grads  opt   act   temp  other  total
    forward    1000     0  2000  4000     0    800   7800
    backward   1000   500  2000  3000   600    800   7900  (the peak; in a block)
    optimizer  1000  1000  2000     0  1000    800   5800

What scales with the batch: activations and the batch (act + 800), and backward's
temporaries; the optimizer's temporaries do not. The weight-sized temporaries that may not
scale: 2 x the largest parameter = 200.
"""

from __future__ import annotations

from diagnose.memory import changes, largest_batch, scaled
from diagnose.memory.oom import explain, fitting


def _pt(phase, grads, act, temp, **kw):
    return {"phase": phase, "parameters": 1000, "gradients": grads, "optimizer_state": 2000,
            "activations": act, "temporaries": temp, "other": 800, **kw}


PROF = {
    "source": "tracker", "peak_bytes": 7900, "batch_size": 8, "batch_bytes": 800,
    "model": {"parameters": 1000, "gradients": 1000, "optimizer_state": 2000,
              "largest_parameter": 100, "parameter_tensors": 4,
              "optimizer": {"class": "Adam", "foreach": True, "fused": False}},
    "step": {"set_to_none": True, "micro_batches": 1, "amp_dtype": None},
    "blocks": {"container": "", "blocks": [{"module": "0", "saved_bytes": 800},
                                           {"module": "1", "saved_bytes": 800}],
               "freed_bytes": 2000, "largest_bytes": 800, "forward_s": 0.1},
    "step_s": 0.4,
    "timeline": {"points": [_pt("forward", 0, 4000, 0), _pt("backward", 500, 3000, 600,
                                                             in_blocks=True),
                            _pt("optimizer", 1000, 0, 1000)]},
}


def _w(change):
    w = scaled(PROF, change)
    return w.peak_bytes, w.range


def test_batch_scaling():
    # x2: forward 3000 + 2 x 4800 = 12600 (backward: 3500 + 2 x 4400 = 12300, or with the
    # 200 weight-sized bytes unscaled 3500 + 2 x 4200 + 200 = 12100)
    assert _w({"batch_size": 16}) == (12600, (12600, 12600))
    # x0.5: backward 3500 + 0.5 x 4400 = 5700 to 3500 + 0.5 x 4200 + 200 = 5800 (forward
    # 5400, optimizer 5000 + 400): the point is the high end
    assert _w({"batch_size": 4}) == (5800, (5700, 5800))


def test_accumulation_holds_every_gradient():
    # two micro-batches of 4: forward 3000 + 0.5 x 4800 + all 1000 gradients = 6400;
    # backward 3500 + 2200 + the 500 gradients not yet made = 6200 (6300 with 200 unscaled)
    assert _w({"batch_size": 4, "grad_accum_steps": 2}) == (6400, (6400, 6400))


def test_checkpointing_frees_the_blocks_share():
    # the blocks free 2000 of the forward's 4000 activations: half of each point's; a
    # point in a block's backward recomputes the largest block (800): 7900 - 1500 + 800
    # = 7200; forward 7800 - 2000 = 5800 (+ 800 at the high end). The low end holds none
    # of the recomputed block at once: backward 7900 - 1500 = 6400
    assert _w({"checkpoint_modules": ["0", "1"]}) == (7200, (6400, 7200))


def test_zero_grad_optimizer_and_autocast():
    # set_to_none off: the gradients held throughout: forward 7800 + 1000
    assert _w({"zero_grad_set_to_none": False}) == (8800, (8800, 8800))
    # a for-loop: the optimizer's 1000 of temporaries become 100 (its largest parameter's
    # share, 100/1000): 4900; the peak is backward's 7900 either way
    assert _w({"optimizer_foreach": False}) == (7900, (7900, 7900))
    # SGD with momentum: 1000 of state for 2000: backward 7900 - 1000
    assert _w({"optimizer_class": "SGD"}) == (6900, (6900, 6900))
    # bf16: activations and temporaries x0.5 to x1, plus half the parameters cast (500):
    # low = optimizer's 5800 (backward 3500 + 2200 = 5700), high = 3500 + 4400 + 500,
    # point = 3500 + 0.75 x 4400 + 500
    assert _w({"amp_dtype": "bfloat16"}) == (7300, (5800, 8400))


def test_changes_listed():
    assert changes(PROF) == [
        {"batch_size": 4}, {"batch_size": 16}, {"batch_size": 4, "grad_accum_steps": 2},
        {"batch_size": 2, "grad_accum_steps": 4}, {"checkpoint_modules": ["0", "1"]},
        {"amp_dtype": "bfloat16"}, {"zero_grad_set_to_none": False},
        {"optimizer_foreach": False}, {"optimizer_class": "SGD"}]


def test_an_inference_step_gets_no_training_what_ifs():
    """No gradients and no optimizer (the README's d.step() inference loop): no
    accumulation, checkpoint, zero_grad or optimizer what-if, only the batch and autocast."""
    forward = {"points": [_pt("forward", 0, 4000, 0)]}
    model = {**PROF["model"], "gradients": 0, "optimizer_state": 0, "optimizer": None}
    only = [{"batch_size": 4}, {"batch_size": 16}, {"amp_dtype": "bfloat16"}]
    assert changes({**PROF, "model": model, "timeline": forward}) == only
    # a new user's inference_mode loop: the model's gradients "when all exist" sized from
    # its parameters, none made, no backward: still inference
    sized = {**model, "gradients": 1000}
    assert changes({**PROF, "model": sized, "timeline": forward}) == only
    assert len(changes({**PROF, "model": sized})) > len(only)  # a backward: training
    # a new user's hand-written update (no optimizer: it sets p.grad = None itself): no
    # zero_grad what-if, which changes an optimizer's call
    hand = changes({**PROF, "model": sized})
    assert {"batch_size": 4, "grad_accum_steps": 2} in hand
    assert not any("zero_grad_set_to_none" in c or "optimizer_class" in c for c in hand)


def test_largest_batch_and_what_fits():
    # 10,000 bytes less 10%: forward 3000 + 600 n <= 9000 -> n = 10
    assert largest_batch(PROF, 10_000, 0.10) == 10
    assert largest_batch(PROF, 4_000, 0.10) is None  # the model states alone need 5000
    whats = [scaled(PROF, c).to_json() for c in changes(PROF)]
    fit = fitting(whats, 7_000)  # room 6300: half the batch, accumulation x4, ...
    assert [list(w["change"]) for w in fit] == [["batch_size", "grad_accum_steps"],
                                                ["batch_size"]]
    ex = explain({**PROF, "oom": {"held_bytes": 7000, "requested_bytes": 900,
                                  "by_kind": {"activations": 3000}, "phase": "backward"}},
                 7_000, whats)
    assert ex["cheapest"]["change"] == {"batch_size": 2, "grad_accum_steps": 4}
    # backward, its 200 weight-sized bytes unscaled: 3700 + 525 n <= 6300 -> n = 4
    assert ex["largest_batch"]["batch_size"] == 4
    assert "Cheapest change predicted to fit" in " ".join(ex["lines"])


def _timeline(points, n):
    """The JSON timeline of op-level ``points`` cut into at most ``n`` stretches."""
    from diagnose.memory.profile import PHASES, downsample, point_kinds

    return {"points": [{"phase": PHASES[p.phase], **point_kinds(p, 2000),
                        "most_bytes": most} for _, p, most in downsample(points, n)]}


def _ops(seed):
    """A step's op-level points: activations grow through the forward and fall in the
    backward while gradients appear; every other backward op a weight-sized temporary that
    the next op turns into a gradient (the two maxima of a stretch of two ops fall on
    different ops, as a gradient accumulated into .grad does)."""
    import random

    from diagnose.memory.profile import Point

    rng = random.Random(seed)
    ops, act, grads = [], 0, 0
    for _ in range(rng.randint(5, 30)):
        act += rng.randint(0, 100)
        ops.append(Point(0, 1000, 0, 2000, act, 0, 100))
    while grads < 1000:
        spike = rng.randint(50, 200)  # within the weight-sized bytes (2 x 100)
        ops.append(Point(1, 1000, grads, 2000, act, spike, 100))
        grads, act = min(1000, grads + spike), max(0, act - rng.randint(0, 300))
        ops.append(Point(1, 1000, grads, 2000, act, rng.randint(0, 50), 100))
    ops += [Point(2, 1000, 1000, 2000 + rng.randint(0, 300), 0, 0, 100) for _ in range(4)]
    return ops


def test_stretches_predict_no_less_than_every_op_and_no_change_gives_the_peak():
    """Cut into stretches, a timeline predicts at least what its every operator gives (an
    under-prediction is an out-of-memory error), and no more than the kinds' maxima
    alone: a smaller batch never lifts the peak above the measured one."""
    for seed in range(40):
        ops = _ops(seed)
        peak = max(p.total for p in ops)
        exact = {**PROF, "peak_bytes": peak, "timeline": _timeline(ops, len(ops))}
        cut = {**PROF, "peak_bytes": peak, "timeline": _timeline(ops, max(3, len(ops) // 4))}
        maxima = {**cut, "timeline": {"points": [
            {k: v for k, v in p.items() if k != "most_bytes"} for p in cut["timeline"]["points"]]}}
        for change in changes(exact):
            a, b, c = scaled(exact, change), scaled(cut, change), scaled(maxima, change)
            assert a.range[1] <= b.range[1] <= c.range[1], (seed, change, a.range, b.range)
        assert scaled(cut, {"batch_size": 4}).range[1] <= peak, seed


def test_a_stretch_is_bounded_by_the_most_it_held_at_once():
    # one backward stretch of two ops: a 600-byte temporary, then the gradient it became;
    # the maxima (grads 1000, temp 600) sum to 8400, the most at once is 7900
    prof = {**PROF, "peak_bytes": 7900, "timeline": {"points": [
        _pt("forward", 0, 4000, 0),
        _pt("backward", 1000, 3000, 600, in_blocks=True, most_bytes=7900),
        _pt("optimizer", 1000, 0, 1000)]}}
    # twice the batch: what scales grows from the most at once, 7900 + 4400 (or 4200 with
    # the 200 weight-sized bytes unscaled), under the forward's 3000 + 2 x 4800 = 12600;
    # from the maxima alone the stretch gave 4000 + 2 x 4400 = 12800
    assert scaled(prof, {"batch_size": 16}).range == (12600, 12600)
    old = {**prof, "timeline": {"points": [
        {k: v for k, v in p.items() if k != "most_bytes"} for p in prof["timeline"]["points"]]}}
    assert scaled(old, {"batch_size": 16}).range == (12600, 12800)
    # a change that only frees: never above the most at once (7900), and here the maxima
    # give less: 4000 + 0.5 x 4400 = 6200 to 4000 + 0.5 x 4200 + 200 = 6300
    assert scaled(prof, {"batch_size": 4}).range == (6200, 6300)
    # the gradients held whole (set_to_none off): the forward's 7800 + 1000 leads (the
    # backward stretch gives 8400 either way: its maxima hold them all already)
    assert scaled(prof, {"zero_grad_set_to_none": False}).range == (8800, 8800)


def test_half_the_batch_is_never_predicted_above_the_measured_peak():
    # a backward stretch of two ops: a 500-byte temporary beside 500 of gradients, then
    # the 1000 they became (4200 each); its maxima sum to 4700, above the optimizer's 4400
    # peak. Half the batch from the maxima alone: 4000 + 0.5 x 500 + 200 unscaled = 4450,
    # a smaller batch predicted above the peak it was measured at
    pts = [_pt("forward", 0, 500, 0, other=100),
           _pt("backward", 1000, 100, 500, other=100, most_bytes=4200),
           _pt("optimizer", 1000, 0, 300, other=100)]
    prof = {**PROF, "peak_bytes": 4400, "timeline": {"points": pts}}
    old = {**prof, "timeline": {"points": [
        {k: v for k, v in p.items() if k != "most_bytes"} for p in pts]}}
    assert scaled(old, {"batch_size": 4}).range == (4350, 4450)
    # bounded by the stretch's 4200 at once: the optimizer's 4400 - 0.5 x 100 leads
    assert scaled(prof, {"batch_size": 4}).range == (4350, 4350)


def test_sgd_for_adam_steps_in_place():
    # Adam stepping one parameter at a time (foreach off), its step the peak: optimizer
    # 1000 + 1000 + 2000 + 1500 of temporaries + 800 = 6300 (backward 5100, forward 4800).
    # SGD with momentum: 1000 of state for 2000, and its update in place: no temporaries,
    # or one parameter's copy (100) with weight decay: the optimizer 3800-3900, the
    # backward's 4100 leads. Sized with 2 x the gradients (2000) it looked like a rise.
    pts = [_pt("forward", 0, 1000, 0), _pt("backward", 1000, 200, 100),
           _pt("optimizer", 1000, 0, 1500)]
    model = {**PROF["model"], "optimizer": {"class": "Adam", "foreach": False, "fused": False}}
    prof = {**PROF, "peak_bytes": 6300, "model": model, "timeline": {"points": pts}}
    w = scaled(prof, {"optimizer_class": "SGD"})
    assert (w.peak_bytes, w.range) == (4100, (4100, 4100))
    assert "SGD with momentum" in w.note
