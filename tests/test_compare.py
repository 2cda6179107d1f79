"""``torch-diagnose compare A B``: deltas, findings resolved/still/new, JSON, the CI gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.cli import main
from diagnose.report.compare import compare_reports
from tests import tracebuilder as tb
from tests.conftest import shared_trace

NW0 = "kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
NW4 = "kineto/resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz"


def _metric(doc: dict, name: str) -> dict:
    return next(m for m in doc["metrics"] if m["name"] == name)


@pytest.mark.shared_traces
def test_resnet_more_workers(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(shared_trace(NW0)), str(shared_trace(NW4))
    assert main(["compare", a, b, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dl = _metric(doc, "dataloader_share")
    assert 0.35 <= dl["a"] <= 0.40 and dl["b"] <= 0.02 and dl["verdict"] == "better"
    step = _metric(doc, "step_time_median_ms")
    assert step["b"] < step["a"] and step["change_pct"] == pytest.approx(
        (step["b"] - step["a"]) / step["a"] * 100, abs=0.01)
    assert "IN001" in {f["rule"] for f in doc["findings"]["resolved"]}
    assert "PR001" in {f["rule"] for f in doc["findings"]["still"]}
    for name in ("step_time_p90_ms", "gpu_busy_frac", "share_kernel", "share_dataloader",
                 "idle_sync_frac", "memcpy_pageable_host_frac", "launch_api_frac"):
        _metric(doc, name)

    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "dataloader_share" in out and "39.6%" in out and "1.0%" in out
    assert "-38.6 pp" in out
    assert "resolved" in out and "IN001" in out


@pytest.mark.shared_traces
def test_fail_on_regression(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(shared_trace(NW0)), str(shared_trace(NW4))
    assert main(["compare", a, b, "--fail-on-regression", "5"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "within the allowed +5%" in last
    # the other way round: the median step is ~39% slower
    assert main(["compare", b, a, "--fail-on-regression", "5", "--format", "json"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "regression" in lines[0] and "+39.3%" in lines[0]
    doc = json.loads(captured.out)  # stdout stays pure JSON
    assert doc["regression"]["failed"] is True
    assert main(["compare", b, a, "--fail-on-regression", "50"]) == 0


def test_findings_resolved_new_and_not_evaluated(tmp_path: Path) -> None:
    slow = analyze(tb.dataloader_bound().write(tmp_path / "slow.pt.trace.json.gz"))
    good = analyze(tb.healthy().write(tmp_path / "good.pt.trace.json.gz"))
    c = compare_reports(slow, good)
    assert [f.rule for f in c.by_status("resolved")] == ["IN001"] and not c.by_status("new")
    back = compare_reports(good, slow)
    assert [f.rule for f in back.by_status("new")] == ["IN001"]
    assert back.step_change_pct() is not None and back.step_change_pct() > 0
    # a rule B cannot evaluate (no GPU there) is not claimed as resolved
    copies = analyze(tb.pageable_copies().write(tmp_path / "copies.pt.trace.json.gz"))
    cpu = analyze(tb.cpu_only().write(tmp_path / "cpu.pt.trace.json.gz"))
    cc = compare_reports(copies, cpu)
    assert "TR001" in {f.rule for f in cc.by_status("not_evaluated")}
    assert "TR001" not in {f.rule for f in cc.by_status("resolved")}


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tb.healthy().write(tmp_path / "good.pt.trace.json.gz")
    bad = tmp_path / "broken.pt.trace.json"
    bad.write_text("{not json", encoding="utf-8")
    for args in ([str(tmp_path / "missing.json"), str(good)], [str(good), str(bad)]):
        assert main(["compare", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("torch-diagnose: error:"), err
    with pytest.raises(SystemExit) as e:
        main(["compare", str(good), str(good), "--fail-on-regression", "-1"])
    assert e.value.code == 2


def test_output_file(tmp_path: Path) -> None:
    a = tb.dataloader_bound().write(tmp_path / "a.pt.trace.json.gz")
    b = tb.healthy().write(tmp_path / "b.pt.trace.json.gz")
    out = tmp_path / "cmp.txt"
    assert main(["compare", str(a), str(b), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "step_time_median_ms" in text and "resolved" in text
