"""The names the user's code gives its DataLoader and dataset (diagnose.capture.names), and
the fix code that uses them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.capture.names import loader_names  # noqa: E402
from diagnose.fixes import FIXES, Setup  # noqa: E402
from diagnose.fixes.code import LoaderSpec  # noqa: E402

GLOBAL_DS = TensorDataset(torch.zeros(8, 2))


def test_the_loader_and_dataset_are_named_as_the_frame_names_them() -> None:
    train_ds = TensorDataset(torch.zeros(8, 2))
    train_dl = DataLoader(train_ds, batch_size=4)
    assert loader_names(train_dl) == {"variable": "train_dl", "dataset_variable": "train_ds"}
    # a dataset made inline has no name; a global one is found after the locals
    inline = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    assert loader_names(inline) == {"variable": "inline"}
    glob = DataLoader(GLOBAL_DS, batch_size=4)
    assert loader_names(glob) == {"variable": "glob", "dataset_variable": "GLOBAL_DS"}
    assert loader_names(None) == {}


def test_a_library_frame_names_nothing() -> None:
    """Called from a training library's code (a callback), its variables are not the
    user's: nothing is named."""
    scope = {"__name__": "lightning.pytorch.loops.fit", "loader_names": loader_names,
             "dl": DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)}
    exec("got = loader_names(dl)", scope)  # noqa: S102 - a frame with a library's name
    assert scope["got"] == {}


def test_the_fix_code_uses_the_users_names() -> None:
    """context.json's names make the code read as the user's own; a name that is not a
    Python identifier is ignored (the context is data)."""
    ctx = {"num_workers": 0, "batch_size": 16, "sampler_class": "RandomSampler",
           "variable": "train_dl", "dataset_variable": "train_ds"}
    spec = LoaderSpec.from_context(ctx)
    assert spec is not None and spec.name == "train_dl" and spec.dataset == "train_ds"
    code = FIXES["batched_fetch"].code_for(Setup(spec, None))
    assert "train_dl = DataLoader(train_ds, batch_size=16, shuffle=True)" in code
    assert "RandomSampler(train_ds)" in code and "dataset" not in code.replace(
        "Dataset", "").replace("dataset[", "")
    workers = FIXES["persistent_workers"].code_for(Setup(spec, None))
    assert "train_dl = DataLoader(train_ds" in workers
    odd = LoaderSpec.from_context({**ctx, "variable": "os.system('x')", "dataset_variable": 3})
    assert odd is not None and odd.name == "loader" and odd.dataset == "dataset"


def test_a_session_records_the_names_of_the_with_line(tmp_path) -> None:
    """``with diagnose(model, train_dl)``: context.json's dataloader entry names train_dl
    and its dataset, and the report's fix code reads with them."""
    import json

    from diagnose import diagnose
    from tests.datasets import Pairs, train

    pairs = Pairs()
    train_dl = DataLoader(pairs, batch_size=32)
    model = torch.nn.Linear(16, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose(model, train_dl, out_dir=tmp_path, steps=2, warmup=1, wait=0,
                  clock_steps=3, print_report=False) as d:
        for _ in range(3):
            train(model, opt, train_dl, d)
    ctx = json.loads((d.run_dir / "context.json").read_text())
    assert ctx["dataloader"]["variable"] == "train_dl"
    assert ctx["dataloader"]["dataset_variable"] == "pairs"
