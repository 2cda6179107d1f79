"""The sample workloads under ``diagnose``, end to end (on CPU here, on CUDA where there is
one: benchmarks/gpu_run.sh runs this file on the GPU machine): capture -> run folder -> report.

Also: the CLI reading the run folder gives the same findings, and the bundled CPU traces
in samples/traces/cpu/ are small and say what their samples plant.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from diagnose.api import analyze  # noqa: E402
from diagnose.cli import main as cli_main  # noqa: E402
from diagnose.runfolder import load_context, trace_files  # noqa: E402
from diagnose.stepmodel.calibration import HELPS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
BUNDLED = SAMPLES / "traces" / "cpu"
RANK = {"info": 0, "warning": 1, "critical": 2}


@pytest.fixture(scope="module", autouse=True)
def samples_importable() -> Any:
    sys.path.insert(0, str(SAMPLES))
    yield
    sys.path.remove(str(SAMPLES))


def run_sample(name: str, out: Path, **kw: Any) -> tuple[Any, Path]:
    mod = importlib.import_module(name)
    t0 = time.perf_counter()
    report = mod.main(out, quiet=True, **kw)
    assert time.perf_counter() - t0 < 60, f"{name} took too long"
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    return report, runs[0]


def serious(report: Any) -> list[Any]:
    return [f for f in report.findings if RANK[f.severity] >= RANK["warning"]]


def cli_findings(run_dir: Path, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "cli.json"
    assert cli_main(["analyze", str(run_dir), "--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())["findings"]


def test_slow_loader_input_finding(tmp_path: Path) -> None:
    report, run = run_sample("slow_loader", tmp_path)
    assert report is not None
    # the rule grades it serious; the step model may grade it down where workers are
    # predicted not to help (2 busy CPUs), or where other processes held the CPUs (this
    # test beside another test run), which a hint and the prediction then say
    inputs = [f for f in report.findings if f.category == "input"
              and RANK[f.graded_down_from or f.severity] >= RANK["warning"]]
    assert inputs, [(f.rule, f.severity, f.message) for f in report.findings]
    assert "num_workers" in inputs[0].fixes
    if RANK[inputs[0].severity] < RANK["warning"]:
        p = inputs[0].predictions["num_workers"]
        busy = isinstance(p, str) and p.startswith("not predicted: other processes held")
        assert busy or (not isinstance(p, str) and p.speedup < HELPS), p
        assert any("graded down" in h for h in inputs[0].hints), inputs[0].hints
    ctx = load_context(run)
    assert ctx is not None and ctx["dataloader"]["num_workers"] == 0
    assert report.metrics["dataloader_num_workers"] == 0  # context reached the metrics
    assert report.metrics["sample_count"] is not None  # and so did the samples
    import torch

    if torch.cuda.is_available():  # the GPU machine: NVML was sampled in the window
        assert report.metrics["gpu_mem_total_bytes"], report.notes
        assert not any(n.startswith("GPU sampling not available") for n in report.notes)
    else:
        assert "GPU sampling not available: no CUDA device visible to torch" in report.notes
    # torch-diagnose analyze RUN_FOLDER: the same findings from the files alone
    assert cli_findings(run, tmp_path) == [f for f in report.to_json()["findings"]]


def test_healthy_has_nothing_serious(tmp_path: Path) -> None:
    """Nothing at warning or above, but CF008 where other processes did hold the CPUs
    (the machine's truth beside a busy process: a CI run beside another, which held 0.76
    CPUs while the training thread waited for one 40% of its steps)."""
    report, run = run_sample("healthy", tmp_path)
    assert report is not None
    busy = (report.metrics.get("step_others_cpus_unprofiled") or 0.0) >= 0.5
    found = [f for f in serious(report) if not (busy and f.rule == "CF008")]
    assert found == [], [(f.rule, f.severity, f.message) for f in report.findings]
    assert len(trace_files(run)) == 1
    assert cli_findings(run, tmp_path) == report.to_json()["findings"]


def test_oom_sample_memory_finding(tmp_path: Path) -> None:
    report, run = run_sample("oom", tmp_path)
    assert report is not None
    mem = [f for f in report.findings if f.category == "memory"]
    assert mem and RANK[mem[0].severity] >= RANK["warning"]
    ctx = load_context(run)
    assert ctx is not None and ctx["oom"] is not None
    assert ctx["oom"]["requested_bytes"] >= 8 * (1 << 17) ** 2 * 4  # the attention scores
    assert report.metrics["oom"] is True
    assert report.metrics["oom_requested_bytes"] == ctx["oom"]["requested_bytes"]
    # the steps before the failing batch were still recorded
    assert len(trace_files(run)) == 1


@pytest.mark.parametrize("name", ["small_kernels", "sync_in_loop", "pageable_copy"])
def test_other_samples_run_on_cpu(name: str, tmp_path: Path) -> None:
    report, run = run_sample(name, tmp_path, steps=3)
    assert report is not None and report.metrics.get("step_count") != 0
    ctx = load_context(run)
    assert ctx is not None and ctx["capture"]["window_complete"] is True


def test_sync_sample_calls_item_every_step(tmp_path: Path) -> None:
    _, run = run_sample("sync_in_loop", tmp_path, steps=3)
    with gzip.open(trace_files(run)[0], "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]  # on CUDA each step has both
    items = [e for e in events if e.get("name") == "aten::item"]
    assert len(steps) == 3 and len(items) >= 2 * len(steps)


def test_sample_runs_as_a_script(tmp_path: Path) -> None:
    env = dict(os.environ)  # the repo off the path (other entries may hold its dependencies)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep)
        if p and Path(p).resolve() != ROOT)
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / "slow_loader.py"), "--out", str(tmp_path), "--steps", "2"],
        cwd=tmp_path,  # not the repo root: the script finds the package itself
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "IN001" in proc.stdout
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1


def test_every_sample_is_documented() -> None:
    readme = (SAMPLES / "README.md").read_text()
    for f in SAMPLES.glob("*.py"):
        assert f"`{f.name}`" in readme, f.name


@pytest.mark.parametrize("name", ["slow_loader", "healthy"])
def test_bundled_traces(name: str) -> None:
    path = BUNDLED / f"{name}.pt.trace.json.gz"
    assert path.stat().st_size < 300 * 1024
    with gzip.open(path, "rt") as fh:
        trace = json.load(fh)
    assert not any(e.get("args", {}).get("Input Dims") for e in trace["traceEvents"])  # no shapes
    report = analyze(path)
    if name == "slow_loader":
        f = [f for f in serious(report) if f.category == "input"]
        assert f and "num_workers" in f[0].fixes
    else:
        assert serious(report) == []


# Recorded with samples/record_traces.py --samples all (torch 2.11, CUDA 13): traces/gpu on
# an NVIDIA H100 (2026-11-22), traces/gpu_h200 on an NVIDIA H200 (2026-11-26)
GPU_EXPECTED = {"slow_loader": ("IN001", "num_workers"), "pageable_copy": ("TR001", "pin_memory"),
                "small_kernels": ("LA001", None), "sync_in_loop": ("SY001", None),  # SY001: info on
                # an H100, where its 4% of GPU idle is dwarfed by the tiny model's host-boundness
                "healthy": (None, None)}  # on the H200 the host ran ahead of the GPU (no sync in
                # its loop): the window's first 4.9 ms were the warm-up's kernels, not idle


@pytest.mark.parametrize("gpu", ["gpu", "gpu_h200"])
@pytest.mark.parametrize("name", sorted(GPU_EXPECTED))
def test_bundled_gpu_traces(name: str, gpu: str) -> None:
    """Each sample's planted bottleneck, found in its real GPU trace; healthy: nothing."""
    path = BUNDLED.parent / gpu / f"{name}.pt.trace.json.gz"
    assert path.stat().st_size < 300 * 1024
    report = analyze(path)
    assert report.metrics["has_gpu"] is True
    rule, fix = GPU_EXPECTED[name]
    if rule is None:
        assert serious(report) == [], [(f.rule, f.severity) for f in report.findings]
        assert report.metrics["gpu_busy_frac"] > 0.9
        return
    found = report.findings if name == "sync_in_loop" else serious(report)
    (f,) = [f for f in found if f.rule == rule]
    assert fix is None or fix in f.fixes


def test_oom_in_first_step_still_reports(tmp_path: Path) -> None:
    """No step was profiled (it failed at once): the memory finding still comes. On the
    GPU where there is one: a host that overcommits memory (the GPU machine does) grants
    the CPU allocation and then kills the process that touches it."""
    import oom
    import torch
    from torch.utils.data import DataLoader

    from diagnose import diagnose

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = oom.Classifier().to(dev)
    opt = torch.optim.Adam(model.parameters())
    loader = DataLoader(oom.Sequences(long_index=0), batch_size=8, collate_fn=oom.collate)
    with (
        pytest.raises(RuntimeError, match="can't allocate memory|out of memory"),
        diagnose(model, loader, out_dir=tmp_path, print_report=False) as d,
    ):
        for x, y in loader:
            x, y = x.to(dev), y.to(dev)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert trace_files(d.run_dir) == []
    assert d.report is not None
    assert [(f.category, f.severity) for f in d.report.findings] == [("memory", "critical")]
    assert any("no steps were profiled" in n for n in d.report.notes)
