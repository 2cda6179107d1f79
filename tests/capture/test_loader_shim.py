"""The DataLoader shim: the private names it reads exist in the installed torch, its wraps
change no batch and are undone, and without those names the session falls back (steps
from the optimizer alone, a note) instead of failing."""

from __future__ import annotations

import subprocess
import sys
from collections import UserDict
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data import dataloader as dlmod  # noqa: E402

import diagnose.capture.steps as steps_mod  # noqa: E402
import diagnose.session.lifecycle as session_mod  # noqa: E402
from diagnose.capture import loader_shim  # noqa: E402
from diagnose.capture.batch_bytes import batch_nbytes  # noqa: E402
from diagnose.capture.steps import settle_steps  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.session import diagnose  # noqa: E402
from tests.datasets import Pairs, train  # noqa: E402

ORIGINAL_NEXT = dlmod._BaseDataLoaderIter.__next__
DIAGNOSE = Path(__file__).resolve().parents[2] / "diagnose"


@pytest.fixture(autouse=True)
def _planned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step counts here are exact: no extra steps timed when a busy machine makes them vary
    (tests/test_step_clock.py tests that extension on its own)."""
    monkeypatch.setattr(steps_mod, "EXTEND", 1)
    monkeypatch.setattr(steps_mod, "MIN_AFTER_EXTEND", 1)
    monkeypatch.setattr(steps_mod, "GC_EXTEND", 1)


def test_the_private_names_exist_in_this_torch() -> None:
    assert loader_shim.missing() is None, loader_shim.missing()
    loader = DataLoader(Pairs(n=32), batch_size=8)
    assert loader_shim.missing(loader) is None
    assert "not a torch DataLoader" in (loader_shim.missing([1, 2]) or "")
    it = iter(loader)
    assert loader_shim.in_process(it) and loader_shim.worker_pids(it) == []
    assert it._index_sampler is loader._index_sampler  # what install() tells loaders apart by


def test_only_the_shim_names_the_private_internals() -> None:
    """One module reads torch's private DataLoader names (the rest of the package asks it)."""
    out = subprocess.run(["grep", "-rlE", "--include=*.py", r"_BaseDataLoaderIter|_index_sampler|\._workers\b|"
                          r"_dataset_fetcher|\._iterator\b|_shutdown_workers", str(DIAGNOSE)], capture_output=True, text=True)
    hits = sorted(Path(p).relative_to(DIAGNOSE).as_posix() for p in out.stdout.split())
    assert hits == ["capture/loader_shim.py"], hits


def test_wraps_change_no_batch_and_are_undone() -> None:
    ds = Pairs(n=48)
    plain = [b for b in DataLoader(ds, batch_size=8)]
    loader = DataLoader(ds, batch_size=8)
    other = DataLoader(ds, batch_size=8)
    seen: list[tuple[float, Any]] = []
    hook = loader_shim.install(loader, lambda it: None, lambda it, s, b: seen.append((s, b)))
    assert hook is not None and dlmod._BaseDataLoaderIter.__next__ is not ORIGINAL_NEXT
    try:
        _check_wrapped(hook, loader, other, plain, seen)
    finally:
        hook.restore()
    assert dlmod._BaseDataLoaderIter.__next__ is ORIGINAL_NEXT


def _check_wrapped(hook: Any, loader: DataLoader, other: DataLoader, plain: list[Any],
                   seen: list[tuple[float, Any]]) -> None:
    it = iter(loader)
    assert hook.time_fetcher(it) and hook.time_fetcher(it)  # once per iterator
    got = list(it)
    assert len(list(other)) == 6 and len(seen) == 7  # other loaders pass through; +StopIteration
    for (x1, y1), (x2, y2) in zip(plain, got, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    fetch, collate, batches = hook.fetch_times.take()
    assert batches == 6 and 0 < collate < fetch  # the sampler ended the 7th call, not a fetch
    assert hook.fetch_times.take() == (0.0, 0.0, 0)
    fetcher = it._dataset_fetcher
    hook.restore()
    assert "fetch" not in vars(fetcher) and fetcher.collate_fn is loader.collate_fn


def test_fallback_when_the_internals_are_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """A torch without _BaseDataLoaderIter (simulated): steps come from the optimizer hook,
    the DataLoader wait is not known (None, not 0), and the report says why."""
    monkeypatch.delattr(dlmod, "_BaseDataLoaderIter")
    assert "no _BaseDataLoaderIter" in (loader_shim.missing() or "")
    monkeypatch.setattr(session_mod, "_run_analysis", lambda run_dir: None)
    torch.manual_seed(0)
    model = nn.Linear(16, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs(n=400), batch_size=8)
    with diagnose(model, loader, steps=2, wait=2, clock_steps=5, out_dir=tmp_path,
                  sample_hz=0) as d:
        n = train(model, opt, loader, d)
    # 10 boundaries, each at the model's call after opt.step(): the 11th step's call
    assert d.done and d.step_mode == "optimizer" and n == 1 + 2 + 1 + 2 + 1 + 4
    assert any("DataLoader hooks unavailable" in x for x in d.notes)
    ctx = load_context(d.run_dir)
    cap = ctx["capture"]
    assert cap["dataloader_hooks"] is False and cap["batches"] == 0
    assert set(cap["step_clock"]["dataloader_ms"]) == {None}
    assert set(cap["step_clock"]["fetch_ms"]) == {None}


def test_fallback_on_an_old_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "1.12.1")
    assert "older than 1.13" in (loader_shim.missing() or "")
    assert loader_shim.install(DataLoader(Pairs(n=8)), print, print) is None


def test_batch_facts() -> None:
    x, y = torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64)
    assert batch_nbytes((x, y)) == 4 * 3 * 4 + 4 * 8
    assert batch_nbytes({"a": [x, "text"], "b": y}) == 4 * 3 * 4 + 4 * 8
    # a mapping that is no dict (Hugging Face's BatchEncoding is a UserDict) is weighed too
    assert batch_nbytes(UserDict({"input_ids": y, "mask": x})) == 4 * 3 * 4 + 4 * 8
    assert batch_nbytes(["no", "tensor"]) is None
    assert batch_nbytes([0] * 10_000) is None  # too big a structure to weigh cheaply
    assert settle_steps(0, None) == 1 and settle_steps(2, 2) == 5 and settle_steps(64, 4) == 17


def test_dataset_facts_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_mod, "_run_analysis", lambda run_dir: None)
    ds = TensorDataset(torch.randn(64, 16), torch.randint(0, 3, (64,)))
    model = nn.Linear(16, 3)
    loader = DataLoader(ds, batch_size=8)
    with diagnose(model, loader, steps=1, wait=1, warmup=0, clock_steps=2, out_dir=tmp_path,
                  sample_hz=0) as d:
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, d)
    dl = load_context(d.run_dir)["dataloader"]
    assert dl["dataset_tensor_indexable"] is True and dl["batch_size"] == 8
    assert dl["dataset_getitems"] is False
    assert load_context(d.run_dir)["capture"]["dataloader_hooks"] is True


class _Wraps:
    """A loader that holds a DataLoader and iterates it (as Fabric's does)."""

    def __init__(self, loader: DataLoader, name: str) -> None:
        setattr(self, name, loader)
        self._inner = loader

    def __iter__(self) -> Any:
        return iter(self._inner)


class _Rebuilds:
    """A loader that makes a new DataLoader at every ``iter()`` (as DeepSpeed's does)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.dataloader = DataLoader(dataset, batch_size=8)

    def __iter__(self) -> Any:
        self.dataloader = DataLoader(self.dataset, batch_size=8)
        return iter(self.dataloader)


def test_unwrap_finds_a_wrapped_dataloader_one_level_down() -> None:
    loader = DataLoader(Pairs(n=8), batch_size=4)
    assert loader_shim.unwrap(loader) == (loader, None)
    assert loader_shim.unwrap(None) == (None, None)
    for name in loader_shim.WRAPPED_AS:
        assert loader_shim.unwrap(_Wraps(loader, name)) == (loader, name)
    for other in (_Wraps(loader, "elsewhere"), _Rebuilds(Pairs(n=8))):
        assert loader_shim.unwrap(other) == (other, None)
    twice = _Wraps(_Wraps(loader, "_dataloader"), "_dataloader")  # type: ignore[arg-type]
    assert loader_shim.unwrap(twice)[1] is None


def _diagnosed(loader: Any, tmp_path: Path) -> Any:
    torch.manual_seed(0)
    model = nn.Linear(16, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose(model, loader, steps=2, wait=2, clock_steps=5, out_dir=tmp_path,
                  sample_hz=0) as d:
        train(model, opt, loader, d)
    assert d.done
    return d


def test_a_fabric_loader_is_timed_on_its_dataloader(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   every_probe: None) -> None:
    """Lightning Fabric's ``setup_dataloaders`` gives a wrapper (not a DataLoader) that
    iterates the DataLoader it holds: the session times the batches on that one, records
    its settings, starts its workers' probes from it, and says so in one note. Every probe
    runs: on a busy host the loop's wait can fall under every input rule's threshold, and
    the budget would then skip them (the budget's own tests cover that)."""
    fabric_mod = pytest.importorskip("lightning.fabric")
    monkeypatch.setattr(session_mod, "_run_analysis", lambda run_dir: None)
    fabric = fabric_mod.Fabric(accelerator="cpu", devices=1)
    loader = fabric.setup_dataloaders(DataLoader(Pairs(n=400, delay_s=0.001), batch_size=8,
                                                 num_workers=2))
    assert not isinstance(loader, DataLoader)
    d = _diagnosed(loader, tmp_path)
    assert [n for n in d.notes if "_FabricDataLoader wrapping a torch DataLoader" in n]
    ctx = load_context(d.run_dir)
    assert ctx["capture"]["dataloader_hooks"] is True and ctx["capture"]["batches"] > 0
    assert ctx["dataloader"]["batch_size"] == 8 and ctx["dataloader"]["num_workers"] == 2
    waits = [w for w in ctx["capture"]["step_clock"]["dataloader_ms"] if w is not None]
    assert waits and all(w >= 0 for w in waits)
    assert ctx["capture"]["loader_starts"], "the workers' start was not seen"
    # the probes after the loop made a batch from the DataLoader the wrapper holds
    assert ctx["dataloader"].get("inprocess_batch_ms") or ctx["dataloader"].get(
        "worker_batch_ms"), ctx["probes"]


def test_an_accelerate_loader_is_timed_on_its_base_dataloader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """accelerate's prepared loader claims the DataLoader's class but iterates
    ``base_dataloader``: its workers' starts are seen on that one."""
    accelerate = pytest.importorskip("accelerate")
    monkeypatch.setattr(session_mod, "_run_analysis", lambda run_dir: None)
    loader = accelerate.Accelerator(cpu=True).prepare(
        DataLoader(Pairs(n=400), batch_size=8, num_workers=2))
    assert isinstance(loader, DataLoader) and not issubclass(type(loader), DataLoader)
    d = _diagnosed(loader, tmp_path)
    assert [n for n in d.notes if "wrapping a torch DataLoader (its `base_dataloader`)" in n]
    assert load_context(d.run_dir)["capture"]["loader_starts"]


def test_a_loader_made_anew_each_epoch_is_not_unwrapped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrapper that makes its DataLoader at each ``iter()`` keeps the old behaviour: no
    batch timed on a DataLoader the loop never iterates, and the note says so."""
    monkeypatch.setattr(session_mod, "_run_analysis", lambda run_dir: None)
    loader = _Rebuilds(Pairs(n=400))
    iter(loader)  # iterated once before the session: its .dataloader is already stale
    d = _diagnosed(loader, tmp_path)
    assert [n for n in d.notes if "not a torch DataLoader" in n]
    assert not [n for n in d.notes if "wrapping a torch DataLoader" in n]
    # the context says what was given (the IN007 hint reads it)
    assert load_context(d.run_dir)["capture"]["loader_given_other"] == "_Rebuilds"


def test_no_private_name_in_a_fresh_import() -> None:
    """Importing the package patches nothing: the patch exists only inside a session."""
    code = ("import torch.utils.data.dataloader as d; f = d._BaseDataLoaderIter.__next__; "
            "import diagnose, diagnose.session; "
            "assert d._BaseDataLoaderIter.__next__ is f")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={"PYTHONPATH": str(DIAGNOSE.parent), "PATH": "/usr/bin:/bin"})
