"""The by-kind split of a tracked step against sizes worked out by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from diagnose.memory import model_states, predicted_state_bytes  # noqa: E402
from diagnose.memory.tracker import run_step, track_step  # noqa: E402

from . import models as M  # noqa: E402


def test_model_states_by_hand():
    model = M.mlp()
    adam = torch.optim.Adam(model.parameters())
    # before the first step the state is predicted from the class
    assert model_states(model, adam) == {"parameters": M.PARAM_BYTES,
                                         "gradients": M.PARAM_BYTES,
                                         "optimizer_state": M.ADAM_STATE_BYTES}
    run_step(model, adam, [M.batch()], M.loss)
    assert model_states(model, adam)["optimizer_state"] == M.ADAM_STATE_BYTES  # now held
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert model_states(model, sgd)["optimizer_state"] == M.PARAM_BYTES
    assert predicted_state_bytes("SGD", model.parameters(), {"momentum": 0}) == 0
    assert predicted_state_bytes("Lion", model.parameters()) is None


def test_tracked_step_splits_by_kind():
    model = M.mlp()
    opt = torch.optim.Adam(model.parameters())
    run_step(model, opt, [M.batch()], M.loss)  # the state exists: the steady state
    prof = track_step(model, opt, M.batch(), M.loss).to_json()
    assert prof["model"]["parameters"] == M.PARAM_BYTES
    assert prof["model"]["optimizer_state"] == M.ADAM_STATE_BYTES
    kinds = prof["by_kind"]
    assert kinds["parameters"] == M.PARAM_BYTES
    assert kinds["optimizer_state"] == M.ADAM_STATE_BYTES
    assert prof["peak_bytes"] == sum(kinds.values())
    # the optimizer's phase holds every gradient; the batch is "other"
    opt_phase = prof["phases"]["optimizer"]["by_kind"]
    assert opt_phase["gradients"] == M.PARAM_BYTES
    assert opt_phase["other"] >= M.BATCH * M.IN * 4
    # the ReLU made the tensor the second Linear saved: the largest saved activation
    top = prof["top_modules"][0]
    assert (top["module"], top["class"], top["saved_bytes"]) == ("1", "ReLU", M.RELU_OUT_BYTES)
    assert prof["batch_size"] == M.BATCH and prof["step"]["set_to_none"] is True
    pts = prof["timeline"]["points"]
    assert {p["phase"] for p in pts} == {"forward", "backward", "optimizer"}
    assert max(sum(p[k] for k in kinds) for p in pts) == prof["peak_bytes"]


def test_a_compiled_models_gradients_are_gradients():
    """torch.compile's wrapper (OptimizedModule) runs its submodules without their forward
    hooks: the gradients are still filed as gradients, none as temporaries: the
    optimizer's phase splits as the eager model's does."""
    phases = []
    for wrap in (lambda m: m, lambda m: torch.compile(m, backend="eager")):
        model = M.mlp()
        opt = torch.optim.Adam(model.parameters())
        run_step(wrap(model), opt, [M.batch()], M.loss)
        phases.append(track_step(wrap(model), opt, M.batch(), M.loss).to_json()[
            "phases"]["optimizer"]["by_kind"])
    assert phases[1]["gradients"] == M.PARAM_BYTES
    assert phases[1] == phases[0]


def test_blocks_found_and_timed():
    model = M.tower()
    opt = torch.optim.AdamW(model.parameters())
    prof = track_step(model, opt, M.batch(width=128), M.loss).to_json()
    blocks = prof["blocks"]
    assert blocks["container"] == "" and [b["module"] for b in blocks["blocks"]] == \
        ["0", "1", "2", "3"]
    # GELU's input and output and LayerNorm's input stay inside a block; a block's output
    # (saved by the next block) does not count
    assert all(b["saved_bytes"] > 0 and b["forward_s"] > 0 for b in blocks["blocks"])
    assert blocks["freed_bytes"] == sum(b["saved_bytes"] for b in blocks["blocks"])
    assert any(p.get("in_blocks") for p in prof["timeline"]["points"])


class _Listed(torch.nn.Module):
    """The tower's blocks in a ModuleList the forward loops over, under a Sequential stem
    that holds them all: neither the list (its forward never runs) nor the stem (one block
    holding every activation frees nothing at the peak) is worth checkpointing."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Identity())
        self.blocks = torch.nn.ModuleList(M.tower(4)[:4])
        self.head = torch.nn.Linear(128, M.OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(self.stem(x))


def test_the_blocks_are_those_whose_forward_runs_one_after_another():
    """A new user's encoder kept its blocks in a ModuleList: the what-if checkpointed
    ``["blocks", "norm"]`` (the list's forward is never called), predicted at the peak as it
    was, where blocks 0-3 cut it by half. The blocks are the list's items; a whole tower
    as one block (a model of one Sequential and a head) is its blocks, not the tower."""
    model = _Listed()
    opt = torch.optim.AdamW(model.parameters())
    blocks = track_step(model, opt, M.batch(width=128), M.loss).to_json()["blocks"]
    assert blocks["container"] == "blocks"
    assert [b["module"] for b in blocks["blocks"]] == [f"blocks.{i}" for i in range(4)]
    tower = torch.nn.Sequential(M.tower(4)[:4], torch.nn.Linear(128, M.OUT))
    opt = torch.optim.AdamW(tower.parameters())
    blocks = track_step(tower, opt, M.batch(width=128), M.loss).to_json()["blocks"]
    assert blocks["container"] == "0" and len(blocks["blocks"]) == 4


def test_a_batch_sliced_from_data_in_memory_counts_as_the_slice():
    """``track_step(model, opt, (X[:64], Y[:64]), fn)``: the tracker counts a tensor by its
    storage, and a slice's storage is the whole of X. A new user's standalone checks were
    1 MiB (their X) above the what-ifs' fake re-runs: the slice is counted as itself."""
    torch = pytest.importorskip("torch")
    from torch import nn

    x, y = torch.randn(8192, 64), torch.randint(0, 10, (8192,))

    def fn(model, b):
        return nn.functional.cross_entropy(model(b[0]), b[1])

    def other(batch) -> int:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        return track_step(m, opt, batch, fn).by_kind()["other"]

    sliced = other((x[:64], y[:64]))
    assert sliced == other((x[:64].clone(), y[:64].clone()))
    assert sliced < x.numel() * x.element_size() / 10


def test_a_closure_given_to_the_optimizer_runs_forward_and_backward():
    """Lightning's automatic optimization (and LBFGS) run the forward and backward inside
    ``optimizer.step(closure)``: a new user's Lightning CNN read "peak in optimizer:
    temporaries 95%", activations 0. What the closure runs is the forward's and the
    backward's; the optimizer's own update stays the optimizer's."""
    torch = pytest.importorskip("torch")
    from diagnose.memory.tracker import StepTracker

    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def closure():
        opt.zero_grad()
        loss = M.loss(model, b)
        loss.backward()
        return loss

    opt.step(closure)  # the momentum buffers exist before the tracked step
    for call in (lambda: opt.step(closure), lambda: opt.step(closure=closure)):
        t = StepTracker(model, opt, b)
        with t:
            call()
        res = t.result()
        assert {p.phase for p in res.points} == {0, 1, 2}
        peak = res.by_kind()
        assert peak["activations"] > 0 and peak["optimizer_state"] == M.PARAM_BYTES
        t.release()


def test_a_peak_in_the_optimizer_lists_the_activations_own_peak():
    """A new user's recommender peaked in Adam's step, its loop still holding the model's
    output (1 KB here): the page listed that output as the largest saved activation. Under
    1% of the peak, the modules listed are those as backward began (the ReLU's 256 KB),
    and the page says when."""
    from torch import nn

    from diagnose.report.memory_text import memory_lines

    model = nn.Sequential(nn.Linear(M.IN, 2048, bias=False), nn.ReLU(),
                          nn.Linear(2048, M.OUT, bias=False))
    opt = torch.optim.Adam(model.parameters())
    held: list = []

    def step(m, b):
        out = m(b[0])
        held[:] = [out]  # as a loop's ``logits = model(x)`` stays alive past backward
        return nn.functional.cross_entropy(out, b[1])

    run_step(model, opt, [M.batch()], step)
    prof = track_step(model, opt, M.batch(), step).to_json()
    assert prof["peak_phase"] == "optimizer"
    assert 0 < prof["by_kind"]["activations"] < 0.01 * prof["peak_bytes"]
    assert prof["top_modules_at"] == "backward start"
    top = prof["top_modules"][0]
    assert (top["module"], top["class"], top["saved_bytes"]) == ("1", "ReLU", M.BATCH * 2048 * 4)
    lines = [text for text, kind in memory_lines(prof) if kind == "modules"]
    assert lines and lines[0].startswith("largest saved activations (as backward began")


def test_the_peak_line_leaves_off_kinds_that_round_to_nothing() -> None:
    """A kind of a few KB beside MiB of others printed as "other 0.0 MiB (0%)": it is left
    off the peak's line, which gives what the kinds left off add up to; every kind over
    0.5% stays."""
    from diagnose.report.memory_text import memory_lines

    mib = 2**20
    mem = {"peak_bytes": 15 * mib, "peak_phase": "backward",
           "by_kind": {"activations": 5 * mib, "temporaries": 6 * mib,
                       "optimizer_state": 3 * mib, "parameters": mib, "gradients": 2048,
                       "other": 0}}
    first = memory_lines(mem)[0][0]
    assert first.startswith("peak 15.0 MiB in backward: temporaries 6.0 MiB (40%)")
    assert "parameters 1.0 MiB (7%)" in first and "gradients" not in first
    assert first.endswith(", the rest 2 KiB (0.0%)")
    whole = memory_lines({**mem, "by_kind": {"activations": 5 * mib, "parameters": mib}})[0][0]
    assert "the rest" not in whole
    # a small module's saved activations in KiB, not "0.0 MiB"
    mods = {**mem, "top_modules": [{"module": "0", "class": "Linear", "saved_bytes": 5 * mib},
                                   {"module": "1", "class": "ReLU", "saved_bytes": 60 * 2**10}]}
    (line,) = [t for t, kind in memory_lines(mods) if kind == "modules"]
    assert "5.0 MiB" in line and "60 KiB" in line
