"""Fixes: pure changes of a frozen TrainConfig, when they apply, what they search, the code."""

from __future__ import annotations

import dataclasses

import pytest

from diagnose.fixes import FIXES, Fix, TrainConfig, micro_batches, worker_ladder
from diagnose.fixes.code import loader_call, render_change

CPU = {"device_type": "cpu", "cpu_count": 2, "model_has_conv": False, "bf16_supported": False,
       "fused_supported": True, "allow_compile": False, "oom": False}
CUDA = {**CPU, "device_type": "cuda", "cpu_count": 16, "model_has_conv": True,
        "bf16_supported": True, "allow_compile": True, "oom": True}


def test_config_is_frozen_and_validated() -> None:
    c = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.num_workers = 3  # type: ignore[misc]
    for bad in ({"num_workers": -1}, {"grad_accum_steps": 0}, {"amp_dtype": "fp8"},
                {"batch_size": 0}, {"optimizer_fused": True, "optimizer_foreach": True}):
        with pytest.raises(ValueError):
            TrainConfig(**bad)


def test_apply_is_pure_for_every_automatic_fix() -> None:
    base = TrainConfig(num_workers=2, batch_size=64, grad_accum_steps=2,
                       zero_grad_set_to_none=False)
    for fix in FIXES.values():
        if not fix.auto:
            with pytest.raises(ValueError, match="advice only"):
                fix.apply(base)
            assert not fix.changes(base)
            continue
        before = dataclasses.replace(base)
        new = fix.apply(base)
        assert base == before, fix.id  # the input is never changed
        assert new is not base and isinstance(new, TrainConfig)
        for cand in fix.candidates(base, CUDA):
            assert cand != base
            assert cand.effective_batch == base.effective_batch, fix.id  # training unchanged


def test_a_fix_that_changes_nothing_says_so() -> None:
    on = TrainConfig(num_workers=2, persistent_workers=True)
    assert not FIXES["persistent_workers"].changes(on)
    assert FIXES["persistent_workers"].changes(TrainConfig(num_workers=2))
    assert not FIXES["set_to_none"].changes(TrainConfig())  # torch's default already


def test_worker_ladder_is_bounded_by_the_cpus() -> None:
    assert [c.num_workers for c in worker_ladder(TrainConfig(), {"cpu_count": 2})] == [1, 2]
    assert [c.num_workers for c in worker_ladder(TrainConfig(), {"cpu_count": 6})] == [1, 2, 4, 6]
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=2),
                                                 {"cpu_count": 8})] == [4, 8]
    assert worker_ladder(TrainConfig(), {}) == []  # CPUs unknown: nothing to search
    nw = FIXES["num_workers"]
    assert nw.why_not(TrainConfig(num_workers=2), CPU) is not None  # already at the CPU count
    assert nw.why_not(TrainConfig(), CPU) is None
    assert nw.why_not(TrainConfig(), {**CPU, "iterable_dataset": True}) is not None


def test_cuda_only_fixes_do_not_apply_on_cpu_and_say_why() -> None:
    cfg = TrainConfig()
    for fid in ("pin_memory", "amp", "channels_last", "cudnn_benchmark"):
        why = FIXES[fid].why_not(cfg, CPU)
        assert why is not None and "CUDA" in why, fid
        assert FIXES[fid].why_not(cfg, CUDA) is None, fid
    assert "opt-in" in (FIXES["torch_compile"].why_not(cfg, CPU) or "")


def test_amp_picks_bf16_where_supported_else_fp16_with_a_scaler() -> None:
    amp = FIXES["amp"]
    (bf16,) = amp.candidates(TrainConfig(), CUDA)
    (fp16,) = amp.candidates(TrainConfig(), {**CUDA, "bf16_supported": False})
    assert bf16.amp_dtype == "bfloat16" and not bf16.uses_grad_scaler
    assert fp16.amp_dtype == "float16" and fp16.uses_grad_scaler


def test_optimizer_tries_fused_first_on_cuda() -> None:
    opt = FIXES["foreach_optimizer"]
    cands = opt.candidates(TrainConfig(), CUDA)
    assert cands[0].optimizer_fused and cands[1].optimizer_foreach
    assert [c.optimizer_foreach for c in opt.candidates(TrainConfig(), CPU)] == [True]


def test_batch_fixes_keep_the_effective_batch() -> None:
    cfg = TrainConfig(batch_size=48)
    splits = micro_batches(cfg)
    assert [(c.batch_size, c.grad_accum_steps) for c in splits][:4] == [
        (48, 1), (24, 2), (16, 3), (12, 4)]
    assert all(c.effective_batch == 48 for c in splits)
    ga = FIXES["grad_accumulation"]
    assert ga.why_not(cfg, CPU) is not None  # the batch fits: nothing to do
    assert ga.apply(cfg) == TrainConfig(batch_size=24, grad_accum_steps=2)
    lb = FIXES["larger_batch"]
    assert lb.why_not(cfg, CPU) is not None  # no accumulation to trade
    # the next larger micro-batch that divides the effective batch
    assert lb.apply(TrainConfig(batch_size=12, grad_accum_steps=4)) == TrainConfig(
        batch_size=16, grad_accum_steps=3)


def test_loader_kwargs_are_valid_for_a_real_dataloader() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    ds = torch.utils.data.TensorDataset(torch.zeros(8, 2))
    for cfg in (TrainConfig(persistent_workers=True, prefetch_factor=4),
                TrainConfig(num_workers=1)):
        DataLoader(ds, batch_size=2, **cfg.loader_kwargs())  # torch refuses invalid combinations


def test_a_broken_condition_is_reported_not_raised() -> None:
    def boom(c: TrainConfig, m: object) -> bool:
        raise KeyError("x")

    f = Fix("t", "t", "# before\n# after", auto=True, change={"compile": True}, applies=boom)
    assert "KeyError" in (f.why_not(TrainConfig(), CPU) or "")


def test_code_change_by_hand() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    ds = torch.utils.data.TensorDataset(torch.zeros(8, 2))
    loader = DataLoader(ds, batch_size=4, shuffle=True, drop_last=True)
    before = TrainConfig.from_objects(loader)
    assert loader_call(loader, before) == (
        "DataLoader(dataset, batch_size=4, shuffle=True, drop_last=True)")
    after = before.replace(num_workers=2, persistent_workers=True)
    code = render_change(before, after, loader=loader)
    assert "# before" in code and "# after" in code
    assert "num_workers=2, persistent_workers=True" in code
    assert render_change(before, before, loader=loader) == ""
    step = render_change(before, before.replace(amp_dtype="float16", batch_size=2,
                                                grad_accum_steps=2), loader=loader)
    assert "GradScaler" in step and "autocast" in step and "% 2 == 0" in step
    assert "batch_size=2" in step
