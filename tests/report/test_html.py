"""The HTML report: self-contained, escaped, every finding and plot shown in a real browser.

Browser tests run the page in headless Chromium (Debian's ``chromium``; ``.ci/run`` installs
it) and skip with a reason where it is missing. The page runs no script, so *any* console
message (an error, a CSP violation, a blocked load) fails the test; a control page checks
that console messages are in fact seen on this Chromium.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from diagnose import analyze
from diagnose.cli import main
from diagnose.report.html import render_html, write_html
from diagnose.report.markup import Markup, el, fmt, raw_svg, unit_beside
from diagnose.report.plots import PLOT_TITLES, AutofixRow, autofix_rows, figures, to_svg
from tests import tracebuilder as tb
from tests.conftest import shared_trace

NW0 = "kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
XSS = "<script>alert(1)</script>"
XSS_DEVICE = 'NVIDIA <img src=x onerror="alert(2)"> H100'
AUTOFIX = [AutofixRow("num_workers=4", 176.3, 126.5), ("pin_memory + non_blocking", 126.5, 121.0)]


# ------------------------------------------------------------------------------ browser
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        exe = shutil.which(name)
        if exe:
            return exe
    pytest.skip("headless Chromium not installed (Debian: apt-get install chromium; .ci/run does)")


def load_in_browser(page: Path, tmp: Path) -> tuple[str, list[str]]:
    """(the DOM after load, the console messages) of ``page`` in headless Chromium."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp / 'chromium-profile'}",
           "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    assert "</html>" in proc.stdout, "Chromium dumped no DOM"
    return proc.stdout, console


class _Dom(HTMLParser):
    """What the tests look for in a dumped DOM: elements by id, scripts, text, outside links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: dict[str, str] = {}
        self.stack: list[str] = []  # ids of open elements that have one
        self.svg_in: set[str] = set()
        self.scripts = 0
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        for k in ("src", "href", "xlink:href", "action"):
            v = a.get(k)
            if v and not v.startswith(("#", "data:")):
                self.links.append(v)
        if any(k.startswith("on") for k in a):
            self.links.append(f"<{tag} {' '.join(k for k in a if k.startswith('on'))}>")
        if tag == "svg":
            self.svg_in.update(self.stack)
        if a.get("id") and tag in ("figure", "article", "section"):
            self.ids[a["id"] or ""] = tag
            self.stack.append(a["id"] or "")
        elif tag in ("figure", "article", "section"):
            self.stack.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("figure", "article", "section") and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(dom: str) -> _Dom:
    d = _Dom()
    d.feed(dom)
    return d


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def assert_page_shows(dom: str, console: list[str], report: Any, plots: list[str]) -> _Dom:
    d = parse(dom)
    assert console == [], "console messages:\n" + "\n".join(console)
    assert d.scripts == 0 and d.links == [], (d.scripts, d.links)
    text = _squash("".join(d.text))
    for f in report.findings:
        assert d.ids.get(f"finding-{f.rule}") == "article", f.rule
        assert _squash(f.message) in text, f.rule
    for key in plots:
        assert d.ids.get(f"plot-{key}") == "figure", key
        assert f"plot-{key}" in d.svg_in, f"plot {key} has no <svg>"
    return d


# ----------------------------------------------------------------------------- fixtures
def multi_rank_run(tmp: Path) -> Path:
    """Two ranks of a built trace (one of them input-bound, a kernel named like a script)."""
    run = tmp / "run"
    run.mkdir()
    r0 = tb.dataloader_bound(rank=0, world_size=2, backend="nccl", device=XSS_DEVICE)
    with r0.step():
        r0.kernel(XSS, dur=9000.0)
    r0.write(run / "host_1.rank0.pt.trace.json.gz")
    tb.healthy(rank=1, world_size=2, backend="nccl", device=XSS_DEVICE).write(
        run / "host_2.rank1.pt.trace.json.gz")
    return run


def fake_samples() -> dict[str, Any]:
    t = [1000.0 + 0.1 * i for i in range(30)]
    return {
        "version": 1, "pid": 1, "interval_s": 0.1, "t0": 999.95, "t1": 1003.1,
        "info": {"host": {"cores": [0, 1], "cpu_count": 2},
                 "gpu": {"index": 0, "name": "x", "mem_total_bytes": 80 * 2**30}},
        "series": {
            "host": {"t": t, "cpu_pct": [[50.0 + i, 90.0] for i in range(30)],
                     "iowait_pct": [0.0] * 30, "proc_cpu_pct": [110.0] * 30,
                     "proc_rss_bytes": [2**30] * 30, "workers_count": [2] * 30,
                     "workers_cpu_pct": [None] + [180.0] * 29, "workers_cpu_n": [2] * 30,
                     "workers_rss_bytes": [2**29] * 30},
            "gpu": {"t": t, "util_pct": [60.0 + (i % 5) * 8 for i in range(30)],
                    "mem_used_bytes": [30 * 2**30 + i * 2**28 for i in range(30)],
                    "sm_clock_mhz": [1700] * 30, "power_w": [300.0] * 30,
                    "pcie_rx_kbps": [1000] * 30, "pcie_tx_kbps": [100] * 30,
                    "proc_mem_bytes": [None] * 30},
        },
        "unavailable": {}, "errors": [],
        "marks": {"active_start": 1000.5, "active_end": 1002.5},
    }


# ---------------------------------------------------------------------------- builders
def test_el_escapes_text_and_attributes() -> None:
    out = el("p", XSS, title='"><script>', class_="a b", data_x=None, hidden=True)
    assert out == ('<p title="&quot;&gt;&lt;script&gt;" class="a b" hidden>'
                   "&lt;script&gt;alert(1)&lt;/script&gt;</p>")
    assert el("div", Markup("<b>ok</b>"), [1, None, "<"]) == "<div><b>ok</b>1&lt;</div>"
    assert isinstance(out, Markup)
    with pytest.raises(ValueError):
        raw_svg(XSS)


def test_values_are_formatted_by_unit() -> None:
    assert fmt("dataloader_share", 0.396378) == "39.6%"
    assert fmt("step_time_median_ms", 176.273) == "176.3 ms"
    assert fmt("sync_ms_per_step", 0.0912) == "0.09 ms"
    assert fmt("memcpy_h2d_bytes", 115607040) == "110.3 MiB"
    assert fmt("kernels_per_step", 1367.8) == "1,367.8"
    assert fmt("memcpy_h2d_count", 12) == "12"
    assert fmt("has_gpu", True) == "yes"
    assert fmt("gpu_busy_frac", None) == "n/a"
    # the metrics table's unit column: empty where the value carries its unit (a new user
    # read "491.9 ms ms"), the catalog's unit where it does not
    assert unit_beside("step_time_median_ms") == "" and unit_beside("dataloader_share") == ""
    assert unit_beside("memcpy_h2d_bytes") == "" and unit_beside("memcpy_h2d_count") == "count"


def test_svg_text_is_escaped_by_matplotlib() -> None:
    figs = figures(analyze_built(), [(XSS, 10.0, 5.0)])
    svg = to_svg(figs["autofix"], salt="autofix")
    assert svg.startswith("<svg") and "<?xml" not in svg
    assert "<script" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg


def analyze_built() -> Any:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = tb.dataloader_bound().write(Path(d) / "t.pt.trace.json.gz")
        return analyze(p)


# ----------------------------------------------------------------------- page contents
def test_page_is_self_contained_and_complete() -> None:
    report = analyze_built()
    page = render_html(report, autofix=AUTOFIX)
    d = parse(page)
    assert page.startswith("<!doctype html>") and "Content-Security-Policy" in page
    assert d.scripts == 0 and d.links == [] and "<link" not in page
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", page)
    assert report.findings and all(f"finding-{f.rule}" in d.ids for f in report.findings)
    assert {"plot-breakdown", "plot-idle", "plot-autofix"} <= set(d.ids)
    assert "plot-samples" not in d.ids  # a saved trace has no samples
    text = "".join(d.text)
    for f in report.findings:  # evidence values and the fix code come from the report
        for k, v in f.evidence.items():
            assert fmt(k, v) in text
    assert "num_workers=min(8" in text  # IN001's first fix, as code
    assert "126.5 ms" in text and "-28.2%" in text  # the autofix table


def test_no_findings_and_cpu_only_trace(tmp_path: Path) -> None:
    report = analyze(tb.cpu_only().write(tmp_path / "c.pt.trace.json.gz"))
    page = render_html(report)
    d = parse(page)
    assert "plot-idle" not in d.ids  # no GPU: no busy/idle bar, and the page says why
    assert "the trace has no GPU activity" in "".join(d.text)
    # a run folder whose run ended before the profiled window: no ranks, no series
    from diagnose.api import Report

    empty = parse(render_html(Report(source=["run"], ranks=[], metrics={}, findings=[],
                                     not_evaluated=[], notes=["no steps were profiled"])))
    assert "plots" not in empty.ids and "none profiled" in "".join(empty.text)
    # nothing profiled is no healthy run: the page says only the context was read
    assert "no step was profiled" in "".join(empty.text)
    assert "nothing in this run points at a bottleneck" not in "".join(empty.text)


def test_cli_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tb.dataloader_bound().write(tmp_path / "t.pt.trace.json.gz")
    out = tmp_path / "report.html"
    assert main(["analyze", str(trace), "--format", "html", "-o", str(out)]) == 0
    assert "finding-IN001" in out.read_text(encoding="utf-8")
    assert main(["analyze", str(trace), "--format", "html"]) == 0
    assert capsys.readouterr().out.startswith("<!doctype html>")
    assert main(["analyze", str(trace), "--format", "html", "-o",
                 str(tmp_path / "no" / "such" / "dir.html")]) == 2


def test_capture_writes_report_html_into_the_run_folder(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    from diagnose import diagnose

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))),
                        batch_size=8)
    with diagnose(model, loader, steps=2, warmup=1, wait=0, out_dir=tmp_path, sample_hz=20,
                  print_report=False) as d:
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if d.done:
                break
    assert d.run_dir is not None and d.report is not None
    page = (d.run_dir / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and 'id="plot-breakdown"' in page


# ------------------------------------------------------------------------------- browser
def test_browser_sees_console_messages(tmp_path: Path) -> None:
    """Control: the console check below is not vacuous on this Chromium."""
    page = tmp_path / "control.html"
    page.write_text("<!doctype html><html><body><p>x</p><script>console.error('boom')"
                    "</script></body></html>", encoding="utf-8")
    _, console = load_in_browser(page, tmp_path)
    assert any("boom" in line for line in console), console


@pytest.mark.shared_traces
def test_real_trace_report_in_browser(tmp_path: Path) -> None:
    report = analyze(shared_trace(NW0))
    assert {"IN001", "PR001"} <= {f.rule for f in report.findings}
    page = write_html(report, tmp_path / "report.html", autofix=AUTOFIX)
    dom, console = load_in_browser(page, tmp_path)
    d = assert_page_shows(dom, console, report, ["breakdown", "idle", "autofix"])
    text = _squash("".join(d.text))
    assert "Tesla V100-DGXS-32GB" in text and "39.6% of the profiled window" in text
    assert "volta_sgemm_64x64_nt" in text  # the top-kernels table


def test_all_plots_and_hostile_names_in_browser(tmp_path: Path) -> None:
    report = analyze(multi_rank_run(tmp_path), samples=fake_samples())
    assert len(report.ranks) == 2
    page = write_html(report, tmp_path / "report.html",
                      autofix=[*AUTOFIX, (XSS, 120.0, 119.0)])
    raw = page.read_text(encoding="utf-8")
    assert "<script" not in raw and "<img" not in raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in raw
    dom, console = load_in_browser(page, tmp_path)
    # several ranks: no single per-step series; the per-rank plot shows each rank's breakdown
    assert "breakdown" not in figures(report)
    d = assert_page_shows(dom, console, report, [k for k in PLOT_TITLES if k != "breakdown"])
    text = "".join(d.text)
    assert XSS in text and XSS_DEVICE in text  # shown as text, never as markup
    assert d.ids.get("ranks") == "section"


def test_autofix_result_becomes_before_after_rows() -> None:
    from types import SimpleNamespace as NS

    tuned = NS(decisions=[
        NS(fix="num_workers", change="num_workers 0 → 2", status="kept",
           baseline_ms=364.6, trial_ms=206.5),
        NS(fix="prefetch_factor", change="prefetch_factor default → 4", status="skipped",
           baseline_ms=None, trial_ms=None),
    ], final=NS(base_ms=180.9, cand_ms=120.4))
    assert autofix_rows(tuned) == [
        AutofixRow("num_workers 0 → 2 (kept)", 364.6, 206.5),
        AutofixRow("baseline vs tuned (all kept changes)", 180.9, 120.4)]
    report = analyze_built()
    d = parse(render_html(report, autofix=tuned, kernels=False))  # the result itself
    assert {"plot-autofix", "autofix"} <= set(d.ids)
    assert "num_workers 0 → 2 (kept)" in "".join(d.text)
    without = parse(render_html(report, kernels=False))
    assert "plot-autofix" not in without.ids and "autofix" not in without.ids


def test_top_kernels_come_with_the_analysis(tmp_path: Path) -> None:
    """The top-kernels table is computed with the metrics (the JSON carries it per rank) and
    the page is rendered from it: the trace is not read a second time."""
    import json as _json

    import numpy as np

    from diagnose.trace import Kind, read_trace

    src = multi_rank_run(tmp_path)
    report = analyze(src)
    first = min(report.ranks, key=lambda r: r.rank)
    table = first.tables["top_kernels"]
    t = read_trace(first.path)
    k = t.kind == Kind.KERNEL
    total = np.bincount(t.name_id[k], weights=t.dur[k], minlength=len(t.names))
    assert table["rows"][0]["name"] == t.names[int(np.argmax(total))]
    assert table["rows"][0]["total_ms"] == pytest.approx(total.max() / 1e3)
    assert sum(r["share"] for r in table["rows"]) <= 1.0 + 1e-9
    assert _json.loads(_json.dumps(report.to_json()))["ranks"][0]["tables"]["top_kernels"]
    for f in Path(src).rglob("*.json*"):
        f.unlink()  # rendering must not need the trace any more
    page = render_html(report)
    assert 'id="kernels"' in page
    assert html.escape(table["rows"][0]["name"], quote=False) in page
