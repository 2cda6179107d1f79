"""Fixes: pure changes of a frozen TrainConfig, when they apply, what they search, the code."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from diagnose.fixes import FIXES, Fix, Setup, TrainConfig, fix_code, micro_batches, worker_ladder
from diagnose.fixes.code import loader_call, render_change
from diagnose.stepmodel.facts import Facts

CPU = Facts(device_type="cpu", cpu_count=2, model_has_conv=False, bf16_supported=False,
            fused_supported=True, allow_compile=False, oom=False)
CUDA = CPU.replace(device_type="cuda", cpu_count=16, model_has_conv=True, bf16_supported=True,
                   allow_compile=True, oom=True)


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
                fix.apply(base, CUDA)
            assert fix.changes_nothing(base, CUDA) and fix.candidates(base, CUDA) == []
            continue
        before = dataclasses.replace(base)
        new = fix.apply(base, CUDA)
        assert base == before, fix.id  # the input is never changed
        assert isinstance(new, TrainConfig)
        # apply is the first candidate (or the config itself: nothing left to change)
        assert new == (fix.candidates(base, CUDA) or [base])[0], fix.id
        for cand in fix.candidates(base, CUDA):
            assert cand != base
            assert cand.effective_batch == base.effective_batch, fix.id  # training unchanged


def test_a_fix_that_changes_nothing_says_so() -> None:
    on = TrainConfig(num_workers=2, persistent_workers=True)
    assert FIXES["persistent_workers"].changes_nothing(on)
    assert FIXES["persistent_workers"].apply(on) == on
    assert not FIXES["persistent_workers"].changes_nothing(TrainConfig(num_workers=2))
    assert FIXES["set_to_none"].changes_nothing(TrainConfig())  # torch's default already
    assert FIXES["num_workers"].changes_nothing(TrainConfig(num_workers=2), CPU)  # 2 CPUs


def test_worker_ladder_is_bounded_by_the_cpus() -> None:
    assert [c.num_workers for c in worker_ladder(TrainConfig(), Facts(cpu_count=2))] == [1, 2]
    assert [c.num_workers for c in worker_ladder(TrainConfig(), Facts(cpu_count=6))] == [1, 2, 4, 6]
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=2),
                                                 Facts(cpu_count=8))] == [4, 8]
    assert worker_ladder(TrainConfig(), Facts()) == []  # CPUs unknown: nothing to search
    # more workers than CPUs: downward, the CPU count first, down to 0 (in-process)
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=6),
                                                 Facts(cpu_count=2))] == [2, 1, 0]
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=32),
                                                 Facts(cpu_count=8))] == [8, 7, 4, 1, 0]
    # the CPUs saturated (a diagnosis' host_cpu_mean_pct): fewer workers, also below the CPUs
    hot = Facts(cpu_count=8, host_cpu_mean_pct=97.0)
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=4), hot)] == [1, 0]
    assert [c.num_workers for c in worker_ladder(TrainConfig(), hot)] == [1, 2, 4, 8]
    # as many workers as CPUs, torch's 2 threads beside them on 2 CPUs: no more workers
    # can help, and they take turns with torch's threads: fewer, down to 0
    turns = Facts(cpu_count=2, torch_num_threads=2)
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=2), turns)] == [1, 0]
    assert [c.num_workers for c in worker_ladder(TrainConfig(num_workers=1), turns)] == [2]
    assert worker_ladder(TrainConfig(num_workers=2), Facts(cpu_count=2)) == []  # threads?
    nw = FIXES["num_workers"]
    assert nw.why_not(TrainConfig(num_workers=2), CPU) is not None  # already at the CPU count
    assert nw.why_not(TrainConfig(), CPU) is None
    assert nw.why_not(TrainConfig(), CPU.replace(iterable_dataset=True)) is not None
    assert nw.why_not(TrainConfig(num_workers=6), CPU) is None  # searched downward
    cap = FIXES["num_workers_cap"]  # IN004's fix is automatic: the same downward search
    assert cap.auto and cap.why_not(TrainConfig(num_workers=6), CPU) is None
    assert [c.num_workers for c in cap.candidates(TrainConfig(num_workers=6), CPU)] == [2, 1, 0]
    assert "more workers than the CPUs" in (cap.why_not(TrainConfig(num_workers=2), CPU) or "")


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
    (fp16,) = amp.candidates(TrainConfig(), CUDA.replace(bf16_supported=False))
    assert bf16.amp_dtype == "bfloat16" and not bf16.uses_grad_scaler
    assert fp16.amp_dtype == "float16" and fp16.uses_grad_scaler


def test_amp_on_a_saved_trace_picks_by_compute_capability() -> None:
    """A saved trace has no live answer on bf16: an Ampere-or-newer GPU (8.0 on) computes
    in it, so the change predicted is the one the fix's code advises there."""
    amp = FIXES["amp"]
    saved = CUDA.replace(bf16_supported=None)
    (hopper,) = amp.candidates(TrainConfig(), saved.replace(device_cc_major=9))
    (volta,) = amp.candidates(TrainConfig(), saved.replace(device_cc_major=7))
    (unknown,) = amp.candidates(TrainConfig(), saved.replace(device_cc_major=None))
    assert hopper.amp_dtype == "bfloat16"
    assert volta.amp_dtype == unknown.amp_dtype == "float16"


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
    """The realisations' keyword arguments for a rebuilt DataLoader: torch refuses invalid
    combinations (persistent_workers or prefetch_factor without workers)."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from diagnose.fixes import REALISATIONS
    from diagnose.fixes.realise import loader_kwargs

    ds = torch.utils.data.TensorDataset(torch.zeros(8, 2))
    orig = DataLoader(ds, batch_size=2)
    for cfg in (TrainConfig(persistent_workers=True, prefetch_factor=4),
                TrainConfig(num_workers=1), TrainConfig(batched_fetch=True, num_workers=1)):
        kw = loader_kwargs(REALISATIONS, cfg, orig)
        assert kw["num_workers"] == cfg.num_workers
        assert ("prefetch_factor" in kw) == (cfg.num_workers > 0)
        DataLoader(ds, **kw)


def test_a_broken_condition_is_reported_not_raised() -> None:
    class Boom(Fix):
        def applies(self, config: TrainConfig, facts: object) -> bool:
            raise KeyError("x")

    f = Boom("t", "t", "# before\n# after", auto=True, change={"compile": True})
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
    before_line, after_line = (code.split("# after")[0],
                               code.split("# after")[1].replace("\n" + " " * 20, " "))
    assert "num_workers=0" in before_line  # what changes is written out, also at its default
    assert "num_workers=2" in after_line and "persistent_workers=True" in after_line
    assert "drop_last=True" in after_line  # the rest as it was
    assert render_change(before, before, loader=loader) == ""
    step = render_change(before, before.replace(amp_dtype="float16", batch_size=2,
                                                grad_accum_steps=2), loader=loader)
    assert "GradScaler" in step and "autocast" in step and "% 2 == 0" in step
    assert "batch_size=2" in step


def pad_collate(batch: list) -> object:
    import torch

    return torch.utils.data.default_collate(batch)


def _unusual_loader() -> object:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    ds = torch.utils.data.TensorDataset(torch.zeros(96, 2), torch.zeros(96))
    return DataLoader(ds, batch_size=48, shuffle=False, drop_last=True, collate_fn=pad_collate,
                      num_workers=3, prefetch_factor=3)


def _joined(code: str) -> str:
    """Wrapped call arguments back on one line."""
    return re.sub(r",\n +", ", ", code)


def test_fix_code_is_the_users_own_loader_and_optimizer() -> None:
    torch = pytest.importorskip("torch")
    loader = _unusual_loader()
    opt = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=3e-4, weight_decay=0.05)
    setup = Setup.from_objects(loader, opt)
    mine = ["loader = DataLoader(dataset, batch_size=48, shuffle=False, num_workers=3, ",
            "collate_fn=pad_collate, ", "drop_last=True, ", "prefetch_factor=3"]
    for fid in ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory",
                "num_workers_cap"):
        code = _joined(FIXES[fid].code_for(setup))
        before = code.split("# after")[0]
        assert all(a in before for a in mine), (fid, code)
        assert "..." not in code and "64" not in code, (fid, code)
    after = _joined(FIXES["persistent_workers"].code_for(setup)).split("# after")[1]
    assert "persistent_workers=True" in after and "collate_fn=pad_collate" in after
    ga = _joined(FIXES["grad_accumulation"].code_for(setup))
    assert "batch_size=48" in ga and "batch_size=12" in ga and "drop_last=True" in ga
    fo = _joined(FIXES["foreach_optimizer"].code_for(setup))
    assert "torch.optim.AdamW(model.parameters(), lr=0.0003, weight_decay=0.05)" in fo
    assert "torch.optim.AdamW(model.parameters(), lr=0.0003, weight_decay=0.05, fused=True)" in fo
    # the same from what context.json records (the CLI on a run folder)
    from diagnose.capture.runinfo import collect

    ctx = json.loads(json.dumps(collect(None, loader, opt)))
    assert Setup.from_context(ctx) == setup
    # nothing known (a saved trace alone): a template that says it is one
    generic = FIXES["num_workers"].code_for(None)
    assert "DataLoader(dataset, ...," in generic and "your other arguments" in generic
    assert fix_code(["num_workers", "no_such_fix"], None) == {}
    assert set(fix_code(["num_workers", "no_such_fix"], setup)) == {"num_workers"}


def test_batched_fetch_keeps_every_other_setting_of_the_users_loader() -> None:
    """The batched fetch's code, run as printed, makes a loader that batches in the
    sampler and keeps the user's workers, pinning, persistence and prefetch (a new user's
    after-code dropped persistent_workers and prefetch_factor)."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    dataset = TensorDataset(torch.arange(40.0).reshape(20, 2))
    loader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, pin_memory=True,
                        drop_last=True, prefetch_factor=4, persistent_workers=True)
    code = FIXES["batched_fetch"].code_for(Setup.from_objects(loader, None))
    after = code[code.index("# after"):]
    scope = {"DataLoader": DataLoader, "dataset": dataset}
    exec(after, scope)  # noqa: S102 - the fix's own code, as a user would paste it
    made = scope["loader"]
    assert made.batch_size is None and made.batch_sampler is None
    assert made.sampler.batch_size == 4 and made.sampler.drop_last is True
    assert (made.num_workers, made.pin_memory, made.persistent_workers,
            made.prefetch_factor) == (2, True, True, 4)


def test_render_change_shows_the_users_arguments() -> None:
    torch = pytest.importorskip("torch")
    loader = _unusual_loader()
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.05, momentum=0.9)
    before = TrainConfig.from_objects(loader, opt)
    code = _joined(render_change(before, before.replace(num_workers=0, optimizer_foreach=True),
                                 loader=loader, optimizer=opt))
    assert ("loader = DataLoader(dataset, batch_size=48, shuffle=False, num_workers=0, "
            "collate_fn=pad_collate, drop_last=True)") in code
    assert "opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)" \
        in code
    # a custom sampler / batch sampler is passed on by name, never replaced by shuffle=
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, WeightedRandomSampler

    ds = loader.dataset
    weighted = DataLoader(ds, batch_size=8, sampler=WeightedRandomSampler([1.0] * 96, 96))
    assert loader_call(weighted) == "DataLoader(dataset, batch_size=8, sampler=sampler)"
    bs = DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 4, False))
    assert loader_call(bs) == "DataLoader(dataset, batch_sampler=batch_sampler)"


def test_render_change_writes_every_config_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each TrainConfig field that a fix changes shows up in the change by hand: as code
    where render_change knows it, else named (a new field is never silently dropped)."""
    from diagnose.fixes.code import _RENDERED

    base = TrainConfig(num_workers=2, batch_size=8)
    changed = {"num_workers": 3, "pin_memory": True, "persistent_workers": True,
               "prefetch_factor": 4, "batch_size": 4, "non_blocking": True,
               "amp_dtype": "float16", "channels_last": True, "cudnn_benchmark": True,
               "compile": True, "zero_grad_set_to_none": False, "optimizer_foreach": True,
               "grad_accum_steps": 2, "intra_op_threads": 1, "batched_fetch": True,
               "gc_freeze": True, "checkpoint_modules": ("0",)}
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(changed) | {"optimizer_fused"} == names == _RENDERED
    for k, v in changed.items():
        code = render_change(base, base.replace(**{k: v}))
        assert code and "also:" not in code, k
    # a field render_change has no code for (here: pretend it does not know amp)
    monkeypatch.setattr("diagnose.fixes.code._RENDERED", _RENDERED - {"amp_dtype"})
    assert "# also: amp_dtype None -> 'bfloat16'" in render_change(
        base, base.replace(amp_dtype="bfloat16"))


def test_a_change_made_before_the_loop_shows_no_loop() -> None:
    """A new user's job steps with its own step_fn over dict batches: the threads split's
    change by hand is the line before the loop, not a generic ``loss_fn(model(x), y)`` loop
    it does not have; a change inside the step still shows the loop it goes in."""
    before = TrainConfig(num_workers=3)
    code = render_change(before, before.replace(num_workers=1, intra_op_threads=1))
    assert "# before the loop\ntorch.set_num_threads(1)" in code
    assert "for x, y in loader" not in code and "loss_fn" not in code
    code = render_change(before, before.replace(zero_grad_set_to_none=False))
    assert "# the step" in code and "opt.zero_grad(set_to_none=False)" in code


def test_fix_code_imports_what_it_uses() -> None:
    """A new user pasted a persistent_workers fix that called os.sched_getaffinity with no
    ``import os``: every fix's code, generic and for a run's own loader, parses as Python
    and imports os where it uses it."""
    import ast

    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4, num_workers=0)
    setup = Setup.from_objects(loader, None)
    for fid, fix in FIXES.items():
        for code in (fix.code, fix.code_for(setup)):
            ast.parse(code)
            if "os.sched_getaffinity" in code:
                assert re.search(r"^import os$", code, re.MULTILINE), (fid, code)


def test_balance_ranks_code_is_the_users_loader_with_a_distributed_sampler() -> None:
    """IM001's fix printed `num_workers=workers_per_rank` (defined nowhere) and dropped the
    user's batch_size: it is now the user's own call, its shuffle moved into the sampler,
    and it runs as printed."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    ds = TensorDataset(torch.arange(40.0).reshape(20, 2))
    loader = DataLoader(ds, batch_size=4, shuffle=True, drop_last=True)
    code = FIXES["balance_ranks"].code_for(Setup.from_objects(loader, None))
    assert "workers_per_rank" not in code and "shuffle=True" not in code
    after = code[code.index("# after"):]
    scope = {"DataLoader": DataLoader, "dataset": ds,
             "DistributedSampler": lambda d, **kw: DistributedSampler(d, num_replicas=2,
                                                                      rank=0, **kw)}
    exec(after, scope)  # noqa: S102 - the fix's own code, one rank of two
    made = scope["loader"]
    assert made.batch_size == 4 and made.drop_last is True
    assert isinstance(made.sampler, DistributedSampler) and len(made.sampler) == 10
    assert "DataLoader(dataset, ..., sampler=sampler)" in FIXES["balance_ranks"].code


def test_balance_ranks_is_in_place_where_a_distributed_sampler_splits_the_samples() -> None:
    """A 2-rank DDP job whose loader drew through DistributedSampler, one rank sleeping in
    its step, was offered DistributedSampler as the straggler's fix. The capture records
    the loader's sampler class; with DistributedSampler every rank has its even share
    already, and the fix is left out (the rule's hints name the cause)."""
    from diagnose.metrics.context.settings import settings_metrics

    m = settings_metrics({"dataloader": {"sampler_class": "DistributedSampler"}})
    assert m["dataloader_sampler_class"] == "DistributedSampler"
    fix = FIXES["balance_ranks"]
    assert "DistributedSampler" in (fix.in_place(m) or "")
    assert "DistributedSamplerWrapper" in (fix.in_place(
        {"dataloader_sampler_class": "DistributedSamplerWrapper"}) or "")
    assert fix.in_place({"dataloader_sampler_class": "RandomSampler"}) is None
    assert fix.in_place({}) is None


def test_the_step_code_moves_the_batch_only_off_the_cpu() -> None:
    """The loop autofix writes: on a CPU job no ``.to(device)`` (a name the user's script
    may not define) and autocast for the CPU; on a GPU the device autofix ran on."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    loader = DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 2)), batch_size=4)
    before = TrainConfig.from_objects(loader)
    after = before.replace(batch_size=2, grad_accum_steps=2, amp_dtype="bfloat16")
    cpu = render_change(before, after, loader=loader, device="cpu")
    assert ".to(" not in cpu and 'torch.autocast("cpu"' in cpu
    gpu = render_change(before, after.replace(non_blocking=True), loader=loader,
                        device="cuda:0")
    assert "x.to('cuda:0', non_blocking=True)" in gpu and 'torch.autocast("cuda"' in gpu
    for code in (cpu, gpu):
        compile(code, "<fix>", "exec")


def test_the_step_code_loops_over_the_users_loader_by_its_name() -> None:
    import dataclasses

    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from diagnose.fixes.code import Setup

    loader = DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 2)), batch_size=4)
    setup = Setup.from_objects(loader, None)
    setup = dataclasses.replace(setup, loader=dataclasses.replace(setup.loader,
                                                                  variable="train_dl"))
    before = TrainConfig.from_objects(loader)
    code = render_change(before, before.replace(batch_size=2, grad_accum_steps=2),
                         setup=setup, device="cpu")
    assert "enumerate(train_dl)" in code and "train_dl = DataLoader(" in code
