"""Rules not evaluated are grouped by cause: one line per cause in text, expanded in JSON
(``not_evaluated_groups``, beside the unchanged ``not_evaluated`` list) and HTML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.cli import main
from diagnose.report.html import render_html
from diagnose.rules.engine import NotEvaluated, group_not_evaluated, missing_cause, why_missing
from tests import tracebuilder as tb


def test_groups_by_cause_largest_first() -> None:
    items = [NotEvaluated("B002", "needs x: no GPU", "no GPU"),
             NotEvaluated("A001", "needs y: no GPU", "no GPU"),
             NotEvaluated("C003", "needs 2 or more ranks")]
    groups = group_not_evaluated(items)
    assert [g["cause"] for g in groups] == ["no GPU", "needs 2 or more ranks"]
    assert groups[0]["count"] == 2 and groups[0]["rules"] == ["A001", "B002"]
    assert groups[0]["reasons"] == {"A001": "needs y: no GPU", "B002": "needs x: no GPU"}
    assert groups[1]["reasons"] == {"C003": "needs 2 or more ranks"}  # cause defaults to reason
    assert group_not_evaluated([]) == []


def test_cause_is_the_reason_without_the_metric() -> None:
    m = {"has_gpu": False, "gpu_busy_frac": None, "kernel_median_us": None}
    for name in ("gpu_busy_frac", "kernel_median_us"):
        cause, reason = missing_cause(name, m)
        assert cause == "the trace has no GPU activity" and name in reason
        assert why_missing(name, m) == reason
    assert missing_cause("gpu_busy_frac", m)[0] == missing_cause("kernel_median_us", m)[0]


def test_a_live_loop_without_a_dataloader_groups_its_settings_with_it() -> None:
    """A live capture of a loop with no DataLoader: IN004's num_workers is missing for the
    reason IN001-IN003's metrics are (no DataLoader), not "needs dataloader_num_workers";
    a saved trace's is missing for want of a live capture."""
    live = {"context_available": True, "dataloader_share": None,
            "dataloader_num_workers": None, "torch_num_threads": 4}
    cause = missing_cause("dataloader_num_workers", live)[0]
    assert cause == missing_cause("dataloader_share", live)[0] == (
        "no DataLoader activity in the trace")
    saved = {"context_available": False, "dataloader_share": 0.3}
    assert missing_cause("dataloader_num_workers", saved)[0] == (
        "only known from a live capture (with diagnose(...))")


@pytest.fixture
def cpu_report(tmp_path: Path) -> tuple[Path, object]:
    path = tb.cpu_only().write(tmp_path / "cpu.pt.trace.json.gz")
    return path, analyze(path)


def test_cpu_trace_one_line_per_cause(cpu_report, capsys: pytest.CaptureFixture[str]) -> None:
    path, report = cpu_report
    gpu = [n.rule for n in report.not_evaluated if "no GPU activity" in n.reason]
    assert len(gpu) >= 5  # a CPU-only run skips every GPU rule
    assert main(["analyze", str(path), "-v"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("Not evaluated:"):].split("\n\n")[0].splitlines()[1:]
    causes = {n.cause for n in report.not_evaluated}
    assert len(block) == len(causes) < len(report.not_evaluated)
    line = next(x for x in block if "no GPU activity" in x)
    assert f"{len(gpu)} rules (" in line and all(r in line for r in gpu)


def test_json_and_html_expand_the_groups(cpu_report, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path, report = cpu_report
    assert main(["analyze", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [set(n) for n in doc["not_evaluated"]] == [{"rule", "reason"}] * len(
        doc["not_evaluated"])  # the list stays as it was
    flat = {r: why for g in doc["not_evaluated_groups"] for r, why in g["reasons"].items()}
    assert flat == {n["rule"]: n["reason"] for n in doc["not_evaluated"]}
    assert sum(g["count"] for g in doc["not_evaluated_groups"]) == len(doc["not_evaluated"])
    page = render_html(report)
    gpu = next(g for g in doc["not_evaluated_groups"] if "GPU" in g["cause"])
    assert f"<summary>{gpu['count']} rules: {gpu['cause']}</summary>" in page
    for rule in gpu["rules"]:
        assert f'<span class="rule">{rule}</span>' in page
