"""The code of a fix is the user's own: a live capture, the same run folder analysed again
(the CLI's path) and autofix all show the DataLoader's and optimizer's real arguments."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset, default_collate  # noqa: E402

from diagnose import analyze, diagnose  # noqa: E402
from diagnose.tune import Plan, autofix  # noqa: E402

ARGS = ("batch_size=48", "shuffle=False", "collate_fn=pad_collate", "drop_last=True")


class Slow(Dataset):
    """Each sample waits 0.2 ms: the loop waits for input (IN001 fires)."""

    def __init__(self, n: int = 480) -> None:
        self.x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.0002)
        return self.x[i], i % 4


def pad_collate(batch: list) -> object:
    return default_collate(batch)


def _setup() -> tuple[nn.Module, DataLoader, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    loader = DataLoader(Slow(), batch_size=48, shuffle=False, drop_last=True,
                        collate_fn=pad_collate)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    return model, loader, opt


def _joined(code: str) -> str:
    return re.sub(r",\n +", ", ", code)


def _shows_the_loader(code: str) -> None:
    code = _joined(code)
    for line in [x for x in code.splitlines() if "DataLoader(" in x]:
        assert all(a in line for a in ARGS), code
        assert "..." not in line and "batch_size=64" not in line, code


def test_a_live_capture_shows_the_users_dataloader(tmp_path: Path) -> None:
    model, loader, opt = _setup()
    with diagnose(model, loader, steps=3, warmup=1, out_dir=tmp_path, sample_hz=0,
                  print_report=False) as d:
        for x, y in loader:
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    report = d.report
    assert report is not None
    (f,) = [f for f in report.findings if f.rule == "IN001"]
    assert set(f.fix_code) == set(f.fixes)
    for fid in ("num_workers", "persistent_workers", "prefetch_factor"):
        _shows_the_loader(f.fix_code[fid])
    # the JSON and the text carry it
    (fj,) = [x for x in report.to_json()["findings"] if x["rule"] == "IN001"]
    assert fj["fixes"][0]["code"] == f.fix_code[f.fixes[0]]
    assert "collate_fn=pad_collate" in report.render_text(width=132)
    # the run folder analysed again (what `torch-diagnose analyze RUN` does): the same code
    again = analyze(d.run_dir)
    (g,) = [g for g in again.findings if g.rule == "IN001"]
    assert g.fix_code == f.fix_code


def test_autofix_code_shows_the_users_dataloader_and_optimizer(monkeypatch) -> None:
    """The trial and the before/after are stubbed to a clear win (timing is not what is
    tested here): the change by hand is written from the user's own loader and optimizer."""
    from diagnose.tune import runner as tune
    from diagnose.tune.stats import Interval

    def win(self, a, b, label, *, rounds=None, bound=False):
        c = tune.Comparison(10.0, 5.0, Interval(2.0, 1.8, 2.2, 0.95), 4, 12)
        return c, (tune.Bound(1.0, 4.0, b) if bound else None)

    monkeypatch.setattr(tune._Tuner, "compare", win)
    monkeypatch.setattr(tune, "cpu_count", lambda: 2)
    model, loader, opt = _setup()
    r = autofix(model, loader, opt, loss_fn=F.cross_entropy, plan=Plan.quick(),
                fixes=["num_workers", "foreach_optimizer"])
    assert "num_workers" in r.kept and "foreach_optimizer" in r.kept
    _shows_the_loader(r.code)
    code = _joined(r.code)
    assert "num_workers=0" in code and f"num_workers={r.best.num_workers}" in code
    # on the CPU the multi-tensor kernels are foreach (fused is tried on CUDA first)
    assert "torch.optim.AdamW(model.parameters(), lr=0.0003, weight_decay=0.05, foreach=True)" \
        in code, code
