"""`torch-diagnose autofix TARGET`: loads the user's objects from file.py:function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from diagnose import cli  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """As in test_tune.py: OpenMP threads of a tiny model spin on a busy 2-CPU machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

WORKLOAD = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

def make():
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    ds = TensorDataset(torch.randn(512, 8), torch.randint(0, 4, (512,)))
    return {"model": model, "loader": DataLoader(ds, batch_size=32),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loss_fn": nn.functional.cross_entropy}

def broken():
    return 42
'''


def test_autofix_command(tmp_path: Path, capsys) -> None:
    src = tmp_path / "work.py"
    src.write_text(WORKLOAD)
    out = tmp_path / "r.json"
    rc = cli.main(["autofix", f"{src}:make", "--quick", "--fixes",
                   "persistent_workers,set_to_none", "--json", str(out)])
    assert rc == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert [d["status"] for d in data["decisions"]] == ["not applicable", "no change"]
    assert "autofix decisions" in capsys.readouterr().out


@pytest.mark.parametrize("target,msg", [
    ("nocolon", "expected path/to/file.py:function"),
    ("missing.py:make", "no such file"),
    ("{src}:nothing", "is not a function"),
    ("{src}:broken", "must return a dict"),
])
def test_autofix_command_errors_are_one_line(tmp_path: Path, capsys, target: str,
                                             msg: str) -> None:
    src = tmp_path / "work2.py"
    src.write_text(WORKLOAD)
    assert cli.main(["autofix", target.format(src=src)]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
