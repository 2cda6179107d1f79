"""Metric declarations: the catalog is static, matches what is computed, and tells why a
metric is missing (one short cause per need, so that reasons group)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.metrics import CATALOG, core
from diagnose.metrics.declare import GPU, LIVE, RANKS, Metric, catalog
from diagnose.metrics.needs import DECLARED
from diagnose.rules.engine import known_metrics, missing_cause, why_missing
from diagnose.trace import read_trace
from tests import tracebuilder as tb

GPU_DATA = Path(__file__).parents[1] / "data" / "gpu"


@pytest.mark.parametrize("name", ["healthy", "cpu_only", "comm_not_overlapped", "graph_decode"])
def test_computed_metrics_are_exactly_the_declared_ones(tmp_path, name):
    t = read_trace(tb.SCENARIOS[name]().write(tmp_path / f"{name}.pt.trace.json.gz"))
    values = core.compute(t).values
    assert list(values) != []
    assert set(values) == {m.name for m in core.DECLARATIONS} == set(core.CATALOG)


def test_catalog_is_the_union_of_the_declarations():
    assert set(CATALOG) == set(DECLARED) == known_metrics()
    for name, m in DECLARED.items():
        assert CATALOG[name] == (m.unit, m.doc) and m.doc, name
    with pytest.raises(ValueError, match="declared twice"):
        catalog([Metric("x", "", "a"), Metric("x", "", "b")])


def test_no_trace_is_built_to_fill_the_catalog():
    """Importing the package (metrics, engine, CLI) builds no Trace and computes no metric."""
    code = (
        "import sys\n"
        "calls = set()\n"
        "def prof(frame, event, arg):\n"
        "    if event == 'call':\n"
        "        c = frame.f_code\n"
        "        calls.add((c.co_filename.replace(chr(92), '/'), c.co_name))\n"
        "sys.setprofile(prof)\n"
        "import diagnose, diagnose.rules.engine, diagnose.cli\n"
        "sys.setprofile(None)\n"
        "import diagnose.metrics\n"
        "assert len(diagnose.metrics.CATALOG) > 150\n"
        "bad = sorted((f, n) for f, n in calls if (f.endswith('diagnose/trace/columns.py') and n in "
        "('from_decoded', 'finish')) or (f.endswith('diagnose/metrics/window.py') and n not in "
        "('<module>', 'StepWindow')))\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_reasons_are_one_cause_per_need(tmp_path):
    m = analyze(tb.cpu_only().write(tmp_path / "cpu.pt.trace.json.gz")).metrics
    gpu_only = [n for n, d in DECLARED.items() if d.needs[:1] == (GPU,)]
    assert len(gpu_only) > 60
    for n in gpu_only:
        assert m[n] is None, n
        assert cause(n, m) == GPU.missing == "the trace has no GPU activity"
        assert why_missing(n, m) == f"needs {n}: {GPU.missing}"  # the reason names it
    for n in ("dataloader_num_workers", "cudnn_benchmark", "model_has_conv"):
        assert cause(n, m) == LIVE.missing
    assert cause("straggler_rank", {"rank_count": 1}) == RANKS.missing
    assert why_missing("no_such_metric", m) == "needs no_such_metric (unknown metric)"


def cause(name, metrics):
    return missing_cause(name, metrics)[0]


def test_reasons_name_the_cause_on_a_gpu_trace(tmp_path):
    m = analyze(tb.healthy().write(tmp_path / "h.pt.trace.json.gz")).metrics
    assert m["has_gpu"] is True and m["comm_overlap_frac"] is None
    assert cause("comm_overlap_frac", m) == "no collectives in the trace"
    amd = dict(m, device_vendor="amd", device_cc_major=None)
    assert cause("device_cc_major", amd) == "not an NVIDIA GPU (no CUDA compute capability)"
    no_dl = analyze(GPU_DATA / "graph_decode.pt.trace.json.gz").metrics
    assert no_dl["dataloader_share"] is None
    assert cause("dataloader_share", no_dl) == "no DataLoader activity in the trace"
