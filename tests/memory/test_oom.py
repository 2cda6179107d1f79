"""An out-of-memory error caught in a tracked step, explained: what held the bytes (by kind
and module), the largest batch predicted to fit, and a change predicted to fit. On CPU the
device is emulated: the tracker raises torch.OutOfMemoryError once its count passes a limit
(or a patched function raises it, as an allocator would)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from diagnose.memory import measure, track_step  # noqa: E402
from diagnose.memory.oom import FIT_MARGIN  # noqa: E402
from diagnose.memory.tracker import run_step  # noqa: E402

from . import models as M  # noqa: E402

WIDTH, BATCH = 128, 256


def _job():
    model = M.tower(width=WIDTH)
    opt = torch.optim.AdamW(model.parameters())
    run_step(model, opt, [M.batch(BATCH, WIDTH)], M.loss)
    return model, opt


def test_oom_explained_and_the_batch_it_suggests_fits():
    model, opt = _job()
    free_peak = track_step(*copy.deepcopy((model, opt)), M.batch(BATCH, WIDTH),
                           M.loss).peak_bytes
    limit = int(free_peak * 0.9)
    sec = measure(model, opt, M.batch(BATCH, WIDTH), M.loss, limit_bytes=limit)
    assert sec["oom"] is not None and "emulated" in sec["oom"]["message"]
    ex = sec["oom_explanation"]
    assert ex["budget_bytes"] == limit and ex["held_bytes"] <= limit
    assert ex["requested_bytes"] > 0 and ex["held_bytes"] + ex["requested_bytes"] > limit
    assert ex["by_kind"]["activations"] > 0 and ex["by_kind"]["parameters"] > 0
    assert ex["top_modules"] and ex["top_modules"][0]["module"].split(".")[0] in "0123"
    # the whole step was re-run under FakeTensorMode: its peak is over the limit
    assert sec["full_step"]["peak_bytes"] > limit
    n = ex["largest_batch"]["batch_size"]
    assert 1 <= n < BATCH and "FakeTensorMode" in ex["largest_batch"]["method"]
    # ... and the suggested batch fits when tried, under the same limit
    tried = track_step(*copy.deepcopy((model, opt)), M.batch(n, WIDTH), M.loss,
                       limit_bytes=limit)
    assert tried.oom is None and tried.peak_bytes <= limit * (1 - FIT_MARGIN)
    best = ex["cheapest"]
    assert best is not None and best["range"][1] <= limit * (1 - FIT_MARGIN)
    assert any("Largest batch predicted to fit" in line for line in ex["lines"])


def test_an_allocator_error_in_a_module_is_caught_with_its_module(monkeypatch):
    model, opt = _job()
    real_gelu = torch.nn.functional.gelu

    def failing(x, *a, **kw):
        if x.shape[0] > 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB "
                                         "(GPU 0; 1.00 GiB total capacity)")
        return real_gelu(x, *a, **kw)
    monkeypatch.setattr(torch.nn.functional, "gelu", failing)
    m = track_step(model, opt, M.batch(BATCH, WIDTH), M.loss)
    oom = m.to_json()["oom"]
    assert oom["requested_bytes"] == 2 * 2**20 and oom["phase"] == "forward"
    assert oom["module"] == "0.1"  # the first block's GELU
    assert oom["by_kind"]["parameters"] > 0 and oom["held_bytes"] > 0
    # without the step as a function the largest batch is scaled from what was held
    from diagnose.memory.live import live_section

    sec = live_section(m, budget_bytes=oom["held_bytes"] * 4)
    assert sec["oom_explanation"]["largest_batch"]["method"].startswith("scaled")
    assert all(w["method"].startswith("scaled") for w in sec["what_if"])


def test_a_fresh_optimizer_is_measured_at_its_steady_step():
    """measure() before the first step: Adam's moments are made in that step's optimizer
    phase, after a backward peak that does not hold them; every later step holds them from
    its start. The section is the second step's (a note says so): its peak is the steady
    one, and an emulated device the first step fits but later steps do not is caught."""
    model = M.tower(width=WIDTH)
    opt = torch.optim.AdamW(model.parameters())
    steady = copy.deepcopy((model, opt))
    run_step(*steady, [M.batch(BATCH, WIDTH)], M.loss)
    want = track_step(*steady, M.batch(BATCH, WIDTH), M.loss).peak_bytes
    fresh = copy.deepcopy((model, opt))
    first = track_step(*fresh, M.batch(BATCH, WIDTH), M.loss).peak_bytes
    assert first < want  # the first step does not hold the state at its peak
    sec = measure(model, opt, M.batch(BATCH, WIDTH), M.loss)
    assert sec["peak_bytes"] == want
    assert sec["by_kind"]["optimizer_state"] > 0
    assert any("no state yet" in n for n in sec["notes"])
    # a device between the two: the second step runs out, as the job's later steps would
    model = M.tower(width=WIDTH)
    opt = torch.optim.AdamW(model.parameters())
    sec = measure(model, opt, M.batch(BATCH, WIDTH), M.loss, limit_bytes=(first + want) // 2)
    assert sec["oom"] is not None
    # an optimizer with state already: one step, no note
    sec = measure(model, opt, M.batch(BATCH, WIDTH), M.loss)
    assert not any("no state yet" in n for n in sec["notes"])


def test_autocast_inside_the_step_fn_is_seen():
    """A step_fn that runs its forward under autocast itself: the step is known to run in
    bf16 (no autocast what-if is offered for what is in place)."""
    def step_fn(model, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return M.loss(model, b)
    model = M.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sec = measure(model, opt, M.batch(), step_fn)
    assert sec["step"]["amp_dtype"] == "bfloat16"
    assert not any("amp_dtype" in w["change"] for w in sec["what_if"])


def test_single_layers_are_no_checkpoint_blocks():
    """A convnet of single layers in one Sequential: checkpointing a layer frees only what
    it keeps of its own (a BatchNorm's statistics), its input and output stay saved by its
    neighbours: no checkpoint what-if. A tower of blocks keeps its own."""
    from torch import nn

    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    b = (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))
    prof = track_step(model, opt, b, M.loss).to_json()
    assert not (prof.get("blocks") or {}).get("blocks")
    tower = M.tower(width=WIDTH)
    opt = torch.optim.SGD(tower.parameters(), lr=0.1)
    prof = track_step(tower, opt, M.batch(BATCH, WIDTH), M.loss).to_json()
    assert len(prof["blocks"]["blocks"]) >= 2


class _Grows(torch.nn.Module):
    """A tower whose forward, once ``grown``, makes an intermediate 256x its input's width
    (a step counter's curriculum; a new user's model that asked for terabytes later)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.grown = M.tower(width=WIDTH), False

    def forward(self, x):
        if self.grown:
            x = x + x.unsqueeze(-1).expand(-1, -1, 256).contiguous().sum(-1)
        return self.body(x)


def test_what_ifs_are_scaled_where_the_model_changed_since_the_tracked_step():
    """The what-ifs re-run the step under FakeTensorMode after it was tracked; a model whose
    work changed since would have them describe another step (the trial's: 12.5 million
    MiB against a tracked 0.6). The step as it is re-run first: far from the tracked peak,
    every what-if is scaled, and a note says why; alike, they are re-run."""
    from diagnose.memory.live import live_section

    for grown, method in ((False, "re-run"), (True, "scaled")):
        model = _Grows()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        b = M.batch(BATCH, WIDTH)
        m = track_step(model, opt, b, M.loss)
        model.grown = grown
        sec = live_section(m, model=model, optimizer=opt, batch=b, step_fn=M.loss)
        assert sec["what_if"] and all(w["method"].startswith(method) for w in sec["what_if"])
        assert any("the model's work changed since" in n for n in sec["notes"]) == grown


def test_no_batch_fits_says_whether_the_states_or_the_step_need_the_room():
    """The explanation where not even a batch of one fits: the model states alone, or the
    step's own work per sample (the trial's forward asked for terabytes beside 0.2 MiB of
    states, and read "the model states alone need the room")."""
    from diagnose.memory.oom import lines

    ex = {"by_kind": {"parameters": 100, "optimizer_state": 100, "activations": 50},
          "phase": "forward",
          "held_bytes": 250, "requested_bytes": 10**12, "budget_bytes": 10**6,
          "largest_batch": {"batch_size": None}}
    assert "beyond the model states" in lines(ex)[-1]
    ex["by_kind"]["parameters"] = 2 * 10**6
    assert "the model states alone need the room" in lines(ex)[-1]
