"""HTML pages beside the report's: ``compare -o c.html`` and ``autofix -o af.html``; and
views that fit the run: a CPU run is titled for the CPU, a run without a trace says so, and
evidence never shows n/a."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from diagnose import analyze
from diagnose.report.compare import compare_reports
from diagnose.report.compare_html import render_compare_html
from diagnose.report.html import render_html
from diagnose.report.runkind import CPU_CAUSE, CPU_DEVICE, NO_TRACE_CAUSE
from tests import tracebuilder as tb
from tests.report.test_html import parse

REPO = Path(__file__).resolve().parents[2]
CPU_SLOW = REPO / "samples" / "traces" / "cpu" / "slow_loader.pt.trace.json.gz"


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", "".join(parse(page).text))


def _self_contained(page: str) -> None:
    d = parse(page)
    assert page.startswith("<!doctype html>") and d.scripts == 0 and d.links == []


# ------------------------------------------------------------------------- compare page
def test_compare_page(tmp_path: Path) -> None:
    a = analyze(tb.dataloader_bound().write(tmp_path / "a<b>.pt.trace.json.gz"))
    b = analyze(tb.healthy().write(tmp_path / "b.pt.trace.json.gz"))
    c = compare_reports(a, b)
    page = render_compare_html(c)
    _self_contained(page)
    assert "a&lt;b&gt;.pt.trace.json.gz" in page and "<b>.pt" not in page
    d, text = parse(page), _text(page)
    assert {d.ids.get(k) for k in ("summary", "metrics", "findings")} == {"section"}
    assert c.step is not None and c.step.line() in text
    # the step row: the headline's figure and verdict, once
    row = re.search(r'<tr data-metric="step_time_median_ms">(.*?)</tr>', page)
    assert row and str(c.step.verdict) in row.group(1)
    assert page.count('data-metric="step_time_median_ms"') == 1
    assert 'data-metric="share_dataloader"' not in page
    assert 'data-rule="IN001" data-status="resolved"' in page


# ------------------------------------------------------------------------- autofix page
def _autofix_result(diagnosis: object = None):  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    from diagnose.autofix import (
        KEPT,
        REVERTED,
        SKIPPED,
        AutofixReport,
        Bound,
        Comparison,
        Decision,
    )
    from diagnose.autofix.stats import Interval
    from diagnose.fixes import TrainConfig

    base = TrainConfig(num_workers=0, batch_size=8)
    best = base.replace(num_workers=2)
    decisions = [
        Decision("num_workers", "num_workers 0 → 2", KEPT, "CI lower bound 1.39 > 1.03",
                 "IN001", 40.0, 21.0, Interval(1.90, 1.39, 2.27, 0.95), 6, 36,
                 predicted_speedup=1.85, predicted_range=(1.48, 2.2)),
        Decision("gc_freeze", "gc_freeze False → True", REVERTED,
                 "no gain shown in 4 rounds", "IN001", 21.0, 20.9,
                 Interval(1.00, 0.93, 1.08, 0.95), 4, 36, predicted_speedup=1.02),
        Decision("<script>", "", SKIPPED, "budget: 3 s of 300 s left", "IN001"),
    ]
    final = Comparison(40.2, 21.3, Interval(1.89, 1.80, 1.98, 0.95), 10, 36)
    return AutofixReport(original=base, baseline=base, best=best, decisions=decisions,
                         final=final, bound=Bound(5.0, 20.0, best), bound_before=None,
                         tuned_ms=21.3, named={"num_workers": "IN001"}, diagnosis=diagnosis,
                         loader=None, optimizer=None, code="loader = DataLoader(ds, num_workers=2)",
                         trials=2, elapsed_s=95.0, device="cpu", cpus=2, min_gain=0.03,
                         notes=["a note"], predicted_tuned_ms=21.7)


def test_autofix_page_shows_predicted_beside_measured() -> None:
    from diagnose.report.autofix_html import render_autofix_html

    diagnosis = analyze(CPU_SLOW)
    r = _autofix_result(diagnosis)
    page = render_autofix_html(r)
    _self_contained(page)
    d, text = parse(page), _text(page)
    for sid in ("summary", "decisions", "before-after", "code", "notes", "findings"):
        assert d.ids.get(sid) == "section", sid
    kept = re.search(r'<tr data-fix="num_workers" data-status="kept">(.*?)</tr>', page)
    assert kept is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", kept.group(1))
    # ... baseline, trial, predicted, measured [CI], decision: side by side in one row
    assert cells[-3:] == ["1.85x [1.48, 2.20]", "1.90x [1.39, 2.27]", "kept"], cells
    # a trial without a range: its point alone
    gc = re.search(r'<tr data-fix="gc_freeze" data-status="reverted">(.*?)</tr>', page)
    assert gc is not None and re.findall(r"<td[^>]*>(.*?)</td>", gc.group(1))[-3] == "1.02x"
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "1.89x [1.80, 1.98] measured" in text and "1.85x by the step model" in text
    assert "num_workers (num_workers 0 → 2)" in text  # the kept change, not its id alone
    assert "finding-IN001" in d.ids and "plot-autofix" in d.ids


def test_autofix_page_without_a_diagnosis_or_a_kept_change() -> None:
    from diagnose.report.autofix_html import render_autofix_html

    r = _autofix_result()
    r.final = None
    page = render_autofix_html(r)
    _self_contained(page)
    assert "no fix was kept: the baseline stays" in _text(page)
    assert 'id="findings"' not in page


def test_autofix_bound_row_says_when_the_tuned_step_beats_its_bound() -> None:
    """The bound (20 ms, input) and the tuned step timed in the same rounds: 21.3 ms is
    94% of the bound's speed; 19.8 ms is at it (within the 3% autofix keeps a change
    for); 6 ms, 3.3x faster than a bound, says the bound's timing was disturbed."""
    from diagnose.autofix.render import render

    r = _autofix_result()
    assert "94% of the bound's speed" in render(r, width=200)
    r.tuned_ms = 19.8
    assert "at the bound (within measurement noise)" in render(r, width=200)
    r.tuned_ms = 6.0
    out = render(r, width=200)
    assert "3.33x faster than its bound" in out and "at the bound" not in out
    r.decisions = []  # a healthy job: nothing to try, and no empty table
    out = render(r, width=200)
    assert "no fix to try" in out and "autofix decisions" not in out


# ------------------------------------------------------------------------- fit the run
def test_evidence_never_shows_na() -> None:
    """The CPU sample's input finding quotes idle_input_frac, None without a GPU: it is no
    evidence, so it is not shown (the HTML page, the TensorBoard tab)."""
    from diagnose.report.tb_plugin.view import _finding

    report = analyze(CPU_SLOW)
    (f,) = [f for f in report.findings if f.rule == "IN001"]
    assert f.evidence.get("idle_input_frac", 0) is None  # the case this test is about
    page = render_html(report)
    evidence = re.findall(r'<table class="evidence">(.*?)</table>', page, re.S)
    assert evidence and all("n/a" not in e for e in evidence)
    assert "idle_input_frac" not in "".join(evidence)
    tab = _finding(f.to_json())
    assert tab["evidence"] and all(v != "n/a" for _, v, _ in tab["evidence"])


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny live capture on the CPU (samples on): its run folder."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from diagnose import diagnose

    tmp = tmp_path_factory.mktemp("cpu_run")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,))),
                        batch_size=8)
    with diagnose(model, loader, steps=3, warmup=1, wait=1, out_dir=tmp, sample_hz=20,
                  print_report=False) as d:
        for _ in range(3):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad()
                if d.done:
                    break
            if d.done:
                break
    assert d.run_dir is not None
    return Path(d.run_dir)


def test_a_cpu_run_is_shown_as_one(cpu_run: Path) -> None:
    from diagnose.report.plots import has_gpu_samples
    from diagnose.report.tb_text import notes_markdown
    from diagnose.report.text import render

    report = analyze(cpu_run)
    m = report.metrics
    assert m.get("model_device") == "cpu" and m.get("has_gpu") is False
    page = render_html(report)
    text = _text(page)
    assert "the trace has no GPU activity" not in text and CPU_DEVICE in text
    if not has_gpu_samples(report.samples):  # (a machine with a GPU samples it anyway)
        assert "GPU and host over time" not in text and "GPU/host over time" not in text
        assert "GPU sampling not available" not in text and "GPU over time" not in text
        assert 'id="plot-samples"' in page and "Host CPU over time" in text
    out = render(report, width=200, detail=True)
    assert CPU_DEVICE in out and "no GPU activity in the trace" not in out
    assert "GPU sampling not available" not in out
    if report.not_evaluated:
        assert "the trace has no GPU activity" not in out and CPU_CAUSE in out
    md = notes_markdown(report, [])
    assert "the trace has no GPU activity" not in md and "GPU sampling" not in md


def test_tensorboard_leads_with_the_jobs_own_step(cpu_run: Path) -> None:
    """The TensorBoard run list and its findings text give the step the clock timed
    without the profiler; a saved trace's profiled step is marked as such."""
    from diagnose.report.markup import fmt
    from diagnose.report.tb_plugin.view import run_summary
    from diagnose.report.tb_text import findings_markdown

    report = analyze(cpu_run)
    m = report.metrics
    own, prof = m["step_time_unprofiled_median_ms"], m["step_time_median_ms"]
    if f"{own:.1f}" == f"{prof:.1f}":  # a timing that met the profiled one: set them apart
        own = m["step_time_unprofiled_median_ms"] = prof + 1.0
    row = run_summary("cpu", {"report": report.to_json()})
    assert row["step_time"] == fmt("step_time_median_ms", own)
    assert f"step time (median) **{own:.1f} ms**" in findings_markdown(report)
    saved = analyze(CPU_SLOW)
    assert "step time (median, profiled)" in findings_markdown(saved)
    assert run_summary("x", {"report": saved.to_json()})["step_time"].endswith("(profiled)")


def test_a_run_without_a_trace_says_so(cpu_run: Path, tmp_path: Path) -> None:
    from diagnose.report.text import render

    bare = tmp_path / "bare"
    shutil.copytree(cpu_run, bare)
    for f in bare.glob("*.pt.trace.json*"):
        f.unlink()
    report = analyze(bare)
    assert report.ranks == []
    out, page = render(report, width=200, detail=True), render_html(report)
    for shown in (out, _text(page)):
        assert "the trace has no GPU activity" not in shown
        assert NO_TRACE_CAUSE in shown


def test_a_saved_cpu_trace_keeps_the_trace_wording() -> None:
    """A trace without device work may come from a GPU job whose trace left it out."""
    report = analyze(CPU_SLOW)
    assert report.metrics.get("model_device") is None
    assert "no GPU activity in the trace" in _text(render_html(report))


def test_the_page_offers_first_what_the_text_offers() -> None:
    # a fix predicted slower is not "try first" on the page while the text says "Not
    # offered: ... slower": the page lists it after the offered ones, marked, closed
    from diagnose.report.html import _fixes
    from diagnose.rules.engine import Finding

    f = Finding("IN004", "config", "warning", "t", "m", {}, ["num_workers_cap", "threads"],
                0.03, predictions={"num_workers_cap": {"speedup": 0.97, "at_least": False},
                                   "threads": "not known: the CPUs"})
    page = str(_fixes(f))
    first, second = page.index('data-fix="threads"'), page.index('data-fix="num_workers_cap"')
    assert first < second and "try first: Split the CPUs" in page
    assert "not offered: No more DataLoader workers than CPUs" in page
    assert '<details class="fix" data-fix="num_workers_cap">' in page  # not open


def test_autofix_with_only_a_memory_fit_says_so() -> None:
    """A baseline changed to fit memory (a budget, or a batch the device cannot hold) and
    no speed fix kept: neither the page nor the text table says "no fix was kept" beside a
    changed config."""
    from diagnose.autofix.render import before_after_table
    from diagnose.report.autofix_html import render_autofix_html

    r = _autofix_result()
    r.final = None
    r.baseline = r.original.replace(batch_size=(r.original.batch_size or 64) // 2,
                                    grad_accum_steps=2)
    assert "the fit to memory only" in _text(render_autofix_html(r))
    from rich.console import Console

    con = Console(width=200, record=True)
    con.print(before_after_table(r))
    assert "the fit to memory only" in con.export_text()


def test_the_loader_line_names_the_steady_wait_that_grades():
    """The summary's DataLoader line gives the unprofiled wait and, where it differs by a
    point or more, the wait of the steps that began no epoch (IN001's grade)."""
    from diagnose.report.text import unprofiled_dl

    m = {"dataloader_wait_unprofiled_share": 0.157, "dataloader_wait_steady_share": 0.136}
    assert unprofiled_dl(m) == ("; 15.7% without the profiler (13.6% in the steps that began "
                                "no epoch)")
    assert unprofiled_dl({**m, "dataloader_wait_steady_share": 0.152}) == \
        "; 15.7% without the profiler"
    assert unprofiled_dl({"dataloader_wait_steady_share": 0.136}) == ""


def test_tensorboard_gives_each_fix_as_the_text_does() -> None:
    """The findings text in TensorBoard gives a fix's exact change in its title and the
    code rendered for the run, not the unit's generic title and template."""
    from diagnose.fixes import FIXES
    from diagnose.report.tb_text import findings_markdown
    from diagnose.stepmodel.prediction import Prediction

    report = analyze(CPU_SLOW)
    f = report.findings[0]
    assert f.fixes[0] == "num_workers"
    change = {"num_workers": 2}
    f.predictions["num_workers"] = Prediction(change, 10.0, 1.5, (8.0, 12.0), 15.0)
    f.fix_code["num_workers"] = "loader = DataLoader(ds, num_workers=2)  # this run's"
    md = findings_markdown(report)
    title = FIXES["num_workers"].title_for(change)
    assert title != FIXES["num_workers"].title
    assert f"**Fix: {title}**" in md and "# this run's" in md
