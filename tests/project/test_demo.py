"""The built-in demo workload and `torch-diagnose demo` (quick mode: a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from diagnose import cli  # noqa: E402
from diagnose.demo import SyntheticDigits, build  # noqa: E402


def test_demo_dataset_is_mnist_shaped_and_deterministic() -> None:
    ds = SyntheticDigits(n=100)
    x, y = ds[3]
    assert x.shape == (784,) and x.dtype == torch.float32 and 0 <= y < 10
    assert torch.equal(SyntheticDigits(n=100)[3][0], x)  # per-index seeded augmentation
    assert not torch.equal(ds[4][0], x)
    w = build(samples=256)
    assert [m.out_features for m in w.model if hasattr(m, "out_features")] == [128, 64, 10]
    assert w.loader.num_workers == 0 and w.loader.batch_size == 64


def test_demo_command_runs_and_keeps_only_named_fixes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo.json"
    rc = cli.main(["demo", "--quick", "--samples", "6000", "--budget", "40",
                   "--json", str(out), "--out-dir", str(tmp_path / "runs")])
    text = capsys.readouterr().out
    assert rc == 0
    (run,) = (tmp_path / "runs").iterdir()  # the baseline's capture and autofix.json
    assert (run / "autofix.json").is_file() and any(p.is_dir() for p in run.iterdir())
    assert "diagnosis of the baseline" in text and "IN001" in text
    assert "autofix decisions" in text and "speed of light" in text
    data = json.loads(out.read_text())
    assert set(data["kept"]) <= set(data["named"])  # kept fixes are the ones findings named
    assert data["named"].get("num_workers") == "IN001"
    assert data["bound"]["bound_ms"] > 0 and data["decisions"]
    for d in data["decisions"]:
        if d["status"] == "kept":
            assert d["ci"][0] > 1 + data["min_gain"]


def test_demo_bad_arguments_are_one_line(capsys) -> None:
    assert cli.main(["demo", "--samples", "10"]) == 2
    assert "torch-diagnose: error: demo:" in capsys.readouterr().err
