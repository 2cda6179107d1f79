"""Activation checkpointing as a TrainConfig field (``checkpoint_modules``): validated and
hashable, realised in a trial by wrapping each named submodule's forward and put back
exactly after it, and proposed by its unit from a memory section's blocks where the peak
is near the budget (diagnose/fixes/catalog/memory.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix import TuneError  # noqa: E402
from diagnose.autofix.trial import Trial, Workload  # noqa: E402
from diagnose.fixes import FIXES, CannotRealise, Facts, TrainConfig  # noqa: E402
from diagnose.fixes.catalog.memory import (  # noqa: E402
    ACTIVATION_CHECKPOINTING,
    GRAD_ACCUMULATION,
    REALISATIONS,
)

# A section's blocks timed under the tracker: the step 0.2 s, the blocks' forward 0.05 s
SECTION = {"peak_bytes": 1000, "batch_size": 32, "step_s": 0.2,
           "blocks": {"blocks": [{"module": "0", "forward_s": 0.03},
                                 {"module": "1", "forward_s": 0.02}]},
           "what_if": [
               {"change": {"checkpoint_modules": ["0", "1"]}, "peak_bytes": 700,
                "range": [700, 720], "method": "m"},
               {"change": {"batch_size": 16, "grad_accum_steps": 2}, "peak_bytes": 800,
                "range": [780, 820], "method": "m"}]}


def test_the_field_is_validated_and_hashable() -> None:
    c = TrainConfig(checkpoint_modules=["0", "1"])  # type: ignore[arg-type]
    assert c.checkpoint_modules == ("0", "1") and hash(c) == hash(c.replace())
    assert TrainConfig().describe_change(c) == "checkpoint_modules none → [0, 1]"
    assert c.to_json()["checkpoint_modules"] == ["0", "1"]  # as JSON reads it back
    for bad in ("0", ("",), ("a", "a"), (1,), 3):
        with pytest.raises(ValueError, match="checkpoint_modules"):
            TrainConfig(checkpoint_modules=bad)  # type: ignore[arg-type]


def _realise(model: nn.Module, names: tuple[str, ...]):  # type: ignore[no-untyped-def]
    (r,) = [r for r in REALISATIONS if r.fields == ("checkpoint_modules",)]
    assert r.process is not None
    return r.process(TrainConfig(checkpoint_modules=names), model, None)


def test_the_realisation_wraps_the_forward_and_puts_it_back_exactly() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    own = model[2].forward  # a forward the user set on the instance stays theirs
    model[2].forward = own
    x = torch.randn(5, 4)
    model(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    undo = _realise(model, ("0", "2"))
    assert undo is not None
    assert "forward" in vars(model[0]) and vars(model[2])["forward"] is not own
    model(x).sum().backward()
    assert all(torch.allclose(p.grad, g) for p, g in zip(model.parameters(), want, strict=True))
    undo()
    assert "forward" not in vars(model[0]) and vars(model[2])["forward"] is own
    assert "forward" not in vars(model[1])
    assert _realise(model, ()) is None  # nothing named: nothing set


def test_a_name_that_is_not_a_submodule_is_one_clear_error() -> None:
    model = nn.Sequential(nn.Linear(4, 2))
    with pytest.raises(CannotRealise, match=r"'enc' is not a submodule of the model"):
        _realise(model, ("enc",))
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))),
                        batch_size=4)
    w = Workload.from_user(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                           loss_fn=F.cross_entropy)
    with pytest.raises(TuneError, match="not a submodule") as e, \
            Trial(w, TrainConfig(checkpoint_modules=("0", "enc"))):
        pass
    assert "\n" not in str(e.value)
    assert "forward" not in vars(model[0])  # the first name, wrapped, was not left so


def test_the_unit_is_tried_only_bound_to_a_memory_sections_blocks() -> None:
    fix = FIXES["activation_checkpointing"]
    assert fix.auto and fix.fields == ("checkpoint_modules",)
    assert fix.candidates(TrainConfig(), Facts(oom=True)) == []  # no blocks named
    assert "memory budget" in (fix.why_not(TrainConfig(), Facts(oom=True)) or "")
    bound = ACTIVATION_CHECKPOINTING.for_memory(SECTION)
    assert bound.modules == ("0", "1")
    assert bound.candidates(TrainConfig(), Facts(oom=True)) == [
        TrainConfig(checkpoint_modules=("0", "1"))]


def test_it_proposes_the_blocks_near_the_budget_with_peak_and_time() -> None:
    """Peak 1000 over a 1050 budget less 10% (945): proposed, at the what-if's 700 (up to
    720); its step 1 + (0.03 + 0.02) / 0.2 = 1.25 x the step's. Far under the budget
    (peak 1000, budget 5000): nothing proposed."""
    (p,) = ACTIVATION_CHECKPOINTING.propose(TrainConfig(batch_size=32), SECTION, 1050)
    assert p.config.checkpoint_modules == ("0", "1") and p.fix == "activation_checkpointing"
    assert (p.peak_bytes, p.range, p.high) == (700, (700, 720), 720)
    assert p.step_ratio == pytest.approx(1.25)
    assert ACTIVATION_CHECKPOINTING.propose(TrainConfig(), SECTION, 5000) == []
    # the measured peak, where given, decides (1200 > 945 though the section says 1000)
    assert ACTIVATION_CHECKPOINTING.propose(TrainConfig(), SECTION, 1050, peak_bytes=1200)
    assert ACTIVATION_CHECKPOINTING.propose(TrainConfig(), {"what_if": []}, 10) == []


def test_accumulation_proposes_every_smaller_split() -> None:
    """Batch 32: 16 x 2 from the what-if (a re-run); 8 x 4 ... 1 x 32 scaled (no timeline
    here: the measured peak, unchanged, is all the scaling can say)."""
    props = GRAD_ACCUMULATION.propose(TrainConfig(batch_size=32), SECTION, 1050)
    assert [(p.config.batch_size, p.config.grad_accum_steps) for p in props] == [
        (16, 2), (8, 4), (4, 8), (2, 16), (1, 32)]
    assert (props[0].peak_bytes, props[0].range, props[0].method) == (800, (780, 820), "m")
    assert all(p.step_ratio is None for p in props)
    assert GRAD_ACCUMULATION.propose(TrainConfig(batch_size=32), SECTION, 5000) == []
