"""The loaders a loop iterates: one made again each epoch, made inside the session as
the given one was count as it (diagnose/capture/loader_shim.py), the context says so, and
the persistent-workers fix writes the loop that makes it once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler  # noqa: E402
from torch.utils.data import dataloader as dlmod  # noqa: E402

from diagnose.capture import loader_shim  # noqa: E402
from diagnose.capture.runinfo import remade_loader  # noqa: E402
from diagnose.fixes import FIXES  # noqa: E402
from diagnose.fixes.code import Setup  # noqa: E402
from diagnose.fixes.for_run import run_config  # noqa: E402
from diagnose.metrics.context import context_metrics  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from diagnose.stepmodel.facts import Facts  # noqa: E402
from tests.datasets import Pairs, train  # noqa: E402


def test_made_alike_is_the_same_dataset_batch_sampler_and_workers() -> None:
    ds = Pairs(n=48)
    given = DataLoader(ds, batch_size=8, shuffle=True, num_workers=1)
    assert loader_shim.made_alike(DataLoader(ds, batch_size=8, shuffle=True, num_workers=1),
                                  given)
    # the dataset made again too: its class and length
    assert loader_shim.made_alike(
        DataLoader(Pairs(n=48), batch_size=8, shuffle=True, num_workers=1), given)
    assert not loader_shim.made_alike(given, given)
    for other in (DataLoader(Pairs(n=16), batch_size=8, shuffle=True, num_workers=1),
                  DataLoader(ds, batch_size=16, shuffle=True, num_workers=1),
                  DataLoader(ds, batch_size=8, num_workers=1),  # no shuffle
                  DataLoader(ds, batch_size=8, shuffle=True)):  # no workers
        assert not loader_shim.made_alike(other, given)


def test_only_loaders_made_inside_the_hook_count_as_the_given_one() -> None:
    """A loader made before the hook (a validation loader set up with the training one) is
    another loader even where made alike; one made after it is the given loader again."""
    ds = Pairs(n=48)
    given = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds))
    before = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds))
    pulled: list[Any] = []
    init, it_ = DataLoader.__init__, DataLoader.__iter__
    hook = loader_shim.install(given, pulled.append, lambda it, s, b: None)
    assert hook is not None
    try:
        assert len(list(before)) == 6 and not pulled
        again = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds))
        it = iter(again)
        assert it in hook.remade and it in hook.started
        assert len(list(it)) == 6 and len(pulled) == 7  # and the StopIteration's call
        val = DataLoader(Pairs(n=20), batch_size=8)  # made inside, not alike
        assert len(list(val)) == 3 and len(pulled) == 7
    finally:
        hook.restore()
    assert DataLoader.__init__ is init and DataLoader.__iter__ is it_
    assert dlmod._BaseDataLoaderIter.__next__ is not None


def test_a_loader_made_again_each_epoch_is_timed(tmp_path: Path, every_probe) -> None:
    """The given loader is never iterated: the loop makes a new one (1 worker) each epoch,
    beside a validation loader. Each new loader's epoch start is recorded, the context
    says how many were made (its workers do not persist), and the fix's code makes it
    once."""
    torch.manual_seed(0)
    ds, val = Pairs(n=48), Pairs(n=20)
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def make() -> DataLoader:
        return DataLoader(ds, batch_size=8, shuffle=True, num_workers=1,
                          persistent_workers=True)

    with diagnose(model, make(), steps=2, wait=3, clock_steps=6, out_dir=tmp_path,
                  sample_hz=0, print_report=False) as d:
        while not d.done:
            train(model, opt, make(), d)
            with torch.no_grad():
                for x, _ in DataLoader(val, batch_size=8):
                    model(x)
    ctx = load_context(d.run_dir)
    starts, dl = ctx["capture"]["loader_starts"], ctx["dataloader"]
    assert len(starts) >= 2 and all(s["workers"] == 1 for s in starts)
    assert dl["remade"] == len(starts)  # the validation loaders are not counted
    # each epoch after the first began after the validation pass: the loop's own work,
    # from the last iterator running out to the new iter(), told apart on the clock too
    assert starts[0]["gap_ms"] is None and all(s["gap_ms"] > 0 for s in starts[1:])
    gaps = ctx["capture"]["step_clock"]["epoch_gap_ms"]
    assert len(gaps) == len(ctx["capture"]["step_clock"]["ms"]) and any(gaps)
    assert dl["persistent_workers"] is False and dl["persistent_workers_set"] is True
    m = context_metrics(ctx)
    assert m["dataloader_remade"] == len(starts) and m["dataloader_persistent_workers"] is False
    # the batches counted are the training loop's: 6 an epoch
    assert d.report.metrics["dataloader_epoch_batches"] == 6
    fix = FIXES["persistent_workers"]
    facts = Facts.from_metrics(m)
    assert fix.applies(run_config(ctx, m), facts) and fix.in_place(m) is None
    code = fix.render(Setup.from_context(ctx))
    assert code.index("for epoch in range(epochs):") < code.index("num_workers=1)")
    assert code.rindex("persistent_workers=True") < code.rindex("for epoch in range(epochs):")


def test_a_loader_kept_is_not_remade() -> None:
    info = {"num_workers": 2, "persistent_workers": True}
    assert remade_loader(info, 0) is info and remade_loader(None, 3) is None
    assert remade_loader(info, 3) == {**info, "remade": 3, "persistent_workers": False,
                                      "persistent_workers_set": True}


def test_a_loop_over_another_loader_alone_is_told(tmp_path: Path) -> None:
    """The loader given hands out no batch while the loop iterates another (not made as it
    was): a note says its wait is not timed, and which loader to give."""
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    given = DataLoader(Pairs(n=48), batch_size=8, shuffle=True)
    used = DataLoader(Pairs(n=40), batch_size=4, shuffle=True)
    with diagnose(model, given, steps=2, wait=1, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, print_report=False, analyze=False) as d:
        while not d.done:
            train(model, opt, used, d)
    (note,) = [n for n in d.notes if "the loader given handed out no batch" in n]
    assert "give diagnose() the loader the training loop iterates" in note
    with diagnose(model, given, steps=2, wait=1, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, print_report=False, analyze=False) as d:
        while not d.done:
            train(model, opt, given, d)
            train(model, opt, used, d, limit=2)  # beside it: the given one is iterated
    assert not [n for n in d.notes if "the loader given handed out no batch" in n]


def test_a_loader_zipped_beside_the_given_one_is_told(tmp_path: Path) -> None:
    """Two loaders zipped, the other with a worker process: a note says the other fed the
    loop beside the given one, with its worker, and that the wait is the given one's."""
    model = nn.Sequential(nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    given = DataLoader(Pairs(n=64), batch_size=8, shuffle=True)
    other = DataLoader(Pairs(n=64), batch_size=4, num_workers=1)
    with diagnose(model, given, steps=2, wait=1, clock_steps=4, out_dir=tmp_path,
                  sample_hz=0, print_report=False, analyze=False) as d:
        while not d.done:
            for (x, y), (u, _) in zip(given, other, strict=False):
                loss = nn.functional.cross_entropy(model(x), y) + model(u).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                if d.done:
                    break
    (note,) = [n for n in d.notes if "another DataLoader handed out batches beside" in n]
    assert "with 1 worker process of its own" in note
