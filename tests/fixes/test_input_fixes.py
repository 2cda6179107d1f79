"""The input fixes that autofix applies: batched fetch (one dataset[indices] per batch) and
the split of the CPUs between torch's threads and the loader's workers."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset, SequentialSampler, TensorDataset

from diagnose.autofix.trial import Trial, Workload, build_loader
from diagnose.capture.probes.after_fetch import time_fetches
from diagnose.capture.runinfo import batch_indexable
from diagnose.fixes import FIXES, TrainConfig
from diagnose.fixes.code import Setup, render_change
from diagnose.stepmodel.facts import Facts


def _rows(n: int = 103) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g))


class _PerSample(TensorDataset):
    def __getitem__(self, i):  # a subclass with its own __getitem__: not safe to batch
        x, y = super().__getitem__(i)
        return x * 2, y


def test_batch_indexable_only_where_the_batches_come_out_the_same() -> None:
    ds = _rows()
    assert batch_indexable(DataLoader(ds, batch_size=8))
    assert not batch_indexable(DataLoader(ds, batch_size=8, collate_fn=lambda b: b))
    assert not batch_indexable(DataLoader(_PerSample(*ds.tensors), batch_size=8))
    assert not batch_indexable(DataLoader(ds, batch_size=None))

    class Plain(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.zeros(2)

    assert not batch_indexable(DataLoader(Plain(), batch_size=2))


def test_a_batched_fetch_is_timed_as_the_changed_loader_runs_it() -> None:
    """The prediction's measurement: batches from a loader that fetches each with one
    ``dataset[indices]`` call, timed (a positive ms figure), where the loader allows it,
    and in turn with them the same batches fetched a sample at a time (512 ``__getitem__``
    calls and a collate: far longer). The user's random state and the user's loader are
    left as they were: the next shuffled batch is the one it would have been."""
    ds = _rows(5000)

    def loader() -> DataLoader:
        return DataLoader(ds, batch_size=512, shuffle=True)

    torch.manual_seed(7)
    expected = next(iter(loader()))[1]
    torch.manual_seed(7)
    state = torch.get_rng_state()
    user = loader()
    both = time_fetches(user)
    assert both is not None and 0 < both[0] < both[1]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(next(iter(user))[1], expected)
    assert time_fetches(DataLoader(_PerSample(*ds.tensors), batch_size=8)) is None
    assert time_fetches(DataLoader(_rows(0), batch_size=8)) is None


def test_batched_fetch_gives_the_same_batches() -> None:
    ds = _rows()
    def orig(shuffle: bool) -> DataLoader:  # the same seed each time: the same order
        return DataLoader(ds, batch_size=16, shuffle=shuffle, drop_last=False,
                          generator=torch.Generator().manual_seed(3) if shuffle else None)

    for shuffle in (False, True):
        new = build_loader(orig(shuffle), TrainConfig(batched_fetch=True))
        assert new.batch_size is None and new.sampler.batch_size == 16
        a, b = list(build_loader(orig(shuffle), TrainConfig())), list(new)
        assert len(a) == len(b) == 7  # 103 rows: the last batch is short, as before
        for (xa, ya), (xb, yb) in zip(a, b, strict=True):
            assert torch.equal(xa, xb) and torch.equal(ya, yb) and ya.dtype == yb.dtype


def test_the_batched_fetch_fix_applies_from_the_fact_and_writes_the_change() -> None:
    fix = FIXES["batched_fetch"]
    assert fix.auto and fix.why_not(TrainConfig(), Facts(dataloader_dataset_tensor_indexable=True)) is None
    assert fix.why_not(TrainConfig(), Facts(dataloader_dataset_tensor_indexable=False)) is not None
    # a diagnosis whose dataset is not batch-indexable does not suggest it
    assert "one indexing call" in fix.in_place({"dataloader_dataset_tensor_indexable": False})
    assert fix.in_place({"dataloader_dataset_tensor_indexable": True}) is None
    # a loader whose dataset makes each batch from one key already (batch_size=None, a
    # BatchSampler as the sampler: the fix's own shape) has it in place, said so
    whole = fix.in_place({"dataloader_automatic_batching": False,
                          "dataloader_dataset_tensor_indexable": False})
    assert whole is not None and whole.startswith("in place already")
    assert fix.apply(TrainConfig()) == TrainConfig(batched_fetch=True)
    setup = Setup.from_objects(DataLoader(_rows(), batch_size=4096, shuffle=True))
    code = fix.code_for(setup)
    assert "batch_size=None" in code and "BatchSampler(" in code and "4096" in code
    assert "RandomSampler(dataset)" in code and "__getitems__" in code
    changed = render_change(TrainConfig(batch_size=4096), TrainConfig(batch_size=4096,
                                                                      batched_fetch=True))
    assert "BatchSampler(RandomSampler(dataset), batch_size=4096" in changed


def test_the_threads_fix_splits_the_cpus() -> None:
    fix = FIXES["threads"]
    facts = Facts(cpu_count=2, torch_num_threads=2)
    assert fix.auto and fix.why_not(TrainConfig(), facts) is None
    # one worker beside one thread, and a worker per CPU beside one thread
    assert fix.candidates(TrainConfig(), facts) == [
        TrainConfig(num_workers=1, intra_op_threads=1),
        TrainConfig(num_workers=2, intra_op_threads=1)]
    # already split one way: the other is left on 2 CPUs
    assert fix.candidates(TrainConfig(num_workers=1), facts.replace(torch_num_threads=1)) == [
        TrainConfig(num_workers=2, intra_op_threads=1)]
    eight = fix.candidates(TrainConfig(num_workers=2), Facts(cpu_count=8, torch_num_threads=8))
    assert [(c.num_workers, c.intra_op_threads) for c in eight] == [
        (1, 7), (2, 6), (4, 4), (8, 1)]
    assert fix.why_not(TrainConfig(), Facts(cpu_count=1, torch_num_threads=1)) is not None
    assert "torch.set_num_threads(1)" in render_change(TrainConfig(), eight[0].replace(
        intra_op_threads=1))


def test_a_trial_sets_torch_threads_and_puts_them_back() -> None:
    before = torch.get_num_threads()
    model = torch.nn.Linear(5, 3)
    loader = DataLoader(_rows(), batch_size=8, sampler=SequentialSampler(_rows()))
    w = Workload.from_user(model, loader, torch.optim.SGD(model.parameters(), lr=0.1),
                           loss_fn=torch.nn.functional.cross_entropy)
    seen = []
    with Trial(w, TrainConfig(batch_size=8, intra_op_threads=1)) as t:
        seen.append(torch.get_num_threads())
        t.run(1, 2)
    assert seen == [1] and torch.get_num_threads() == before


def test_a_loader_that_fetches_whole_batches_already_is_told_apart() -> None:
    """The capture records whether a DataLoader batches automatically (a batch_size, a
    batch_sampler) or hands each sampler key to ``dataset[key]`` whole (batch_size=None);
    the metric carries it to the batched fetch, which is then in place, not "cannot"."""
    from torch.utils.data import BatchSampler

    from diagnose.capture.runinfo import dataloader_info
    from diagnose.metrics.context.settings import settings_metrics

    rows = _rows()
    fix = FIXES["batched_fetch"]
    loaders = {True: DataLoader(rows, batch_size=8),
               False: DataLoader(rows, batch_size=None, sampler=BatchSampler(
                   SequentialSampler(rows), 8, drop_last=False))}
    for auto, loader in loaders.items():
        m = settings_metrics({"dataloader": dataloader_info(loader)})
        assert m["dataloader_automatic_batching"] is auto
        assert (fix.in_place(m) or "").startswith("in place already") is (not auto)
    assert settings_metrics({})["dataloader_automatic_batching"] is None
