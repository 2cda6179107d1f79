"""``torch-diagnose analyze RUN`` on a watched run's folder: the text summary (steps, pace,
alarms with what their capture found) and the HTML timeline, also for a run cut off
before its end record (a killed run); bad folders get one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from diagnose.cli import main
from diagnose.watching.timeline import TimelineWriter


def _run(tmp_path: Path, *, end: bool, second_signal: bool = False) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    cap = run / "captures" / "002-step600-step_time"
    cap.mkdir(parents=True)
    (cap / "report.json").write_text(json.dumps({"findings": [
        {"rule": "IN001", "severity": "warning", "title": "Training waits on the DataLoader"}]}))
    w = TimelineWriter(run)
    w.record("meta", version=1, rank=None)
    n = 1000
    ms = np.where(np.arange(n) < 580, 2.0, 2.6)
    w.steps(0, np.arange(n) * 0.002 + 0.002, ms, np.full(n, 0.1))
    w.record("alarm", step=600, start=581, signal="step_time", kind="change", before=2.0,
             after=2.6, unit="ms", ratio=1.3, capture_dir=None, capture_why="pending",
             changed=[])
    if second_signal:  # the loader's wait grew with it, two steps on: one change
        w.record("alarm", step=602, start=581, signal="loader_wait", kind="change",
                 before=0.1, after=0.7, unit="ms", ratio=7.0, capture_dir=None,
                 capture_why="pending", changed=[])
    w.record("capture", label="002-step600-step_time", baseline=False, first_step=600,
             dir=str(cap), alarms=[600, 602] if second_signal else [600], analysed=True,
             why=None,
             changed=["step time without the profiler: 2.0 ms -> 2.6 ms: worse"])
    w.record("spike", step=100, signal="step_time", before=2.0, after=30.0, unit="ms")
    w.record("host", step=600, signal="step_time", host={},  # a second after the alarm
             host_line="the machine: other processes kept 0.10 -> 0.12 CPUs busy")
    if end:
        w.record("end", steps=n)
    w.close()
    return run


@pytest.mark.parametrize("end", [True, False])
def test_text_summary_of_a_watched_run(tmp_path: Path, end: bool,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, end=end)
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert "1,000 steps" in out and ("cut off" in out) != end
    assert "step 600: step_time 2 -> 2.6 ms (x1.30)" in out
    assert "the machine: other processes kept 0.10 -> 0.12 CPUs busy" in out  # as live
    assert "002-step600-step_time" in out and "IN001" in out and "worse" in out
    assert "pace over the run" in out and "2.6 ms" in out
    assert "spikes (single slow steps, not alarms): 1" in out



def test_a_moved_runs_json_and_html_name_its_captures_where_they_are(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's `analyze RUN -o run.json` gave the alarm `capture: None, capture_why:
    'pending'` (its record, written before the capture began), and the HTML linked
    `file://runs/...` (a path relative to where the run started). The run is moved and
    read from elsewhere: the JSON's alarm carries its capture's folder, what changed and
    the findings; the HTML links a file URI that exists; the text names the folder."""
    import shutil

    run = shutil.move(str(_run(tmp_path, end=True)), str(tmp_path / "moved"))
    monkeypatch.chdir(tmp_path / "moved")  # the capture's recorded path no longer exists
    assert main(["analyze", run, "-o", str(tmp_path / "w.json")]) == 0
    a = json.loads((tmp_path / "w.json").read_text())["alarms"][0]
    where = Path(run, "captures", "002-step600-step_time").resolve()
    assert a["capture_dir"] == str(where) and a["capture_why"] is None
    assert a["changed"] == ["step time without the profiler: 2.0 ms -> 2.6 ms: worse"]
    assert [f["rule"] for f in a["capture"]["findings"]] == ["IN001"]
    assert main(["analyze", run, "-o", str(tmp_path / "w.html")]) == 0
    assert f'href="{where.as_uri()}"' in (tmp_path / "w.html").read_text()


def test_the_passed_and_neighbours_flags_survive_the_timeline(tmp_path: Path) -> None:
    """A re-check: `analyze RUN -o run.json` gave passed and neighbours false for alarms
    watch.json had true. The capture record says passed, the host record neighbours."""
    run = _run(tmp_path, end=False)
    w = TimelineWriter(run)
    w.record("capture", label="002-step600-step_time", baseline=False, first_step=600,
             dir=str(run / "captures" / "002-step600-step_time"), alarms=[600],
             analysed=True, why=None, passed=True,
             changed=["passed: the step time was back to the baseline's"])
    w.record("host", step=600, signal="step_time", host={}, neighbours=True,
             host_line="the machine: ... the machine's neighbours, not the job")
    w.record("end", steps=1000)
    w.close()
    assert main(["analyze", str(run), "-o", str(tmp_path / "w.json")]) == 0
    a = json.loads((tmp_path / "w.json").read_text())["alarms"][0]
    assert a["passed"] is True and a["neighbours"] is True


def test_fail_on_reads_a_watched_runs_captures(tmp_path: Path) -> None:
    """--fail-on exits 1 where a capture's finding is at or above it (the capture's
    IN001 is a warning), 0 below it, in every output format."""
    run = _run(tmp_path, end=True)
    assert main(["analyze", str(run), "--fail-on", "warning"]) == 1
    assert main(["analyze", str(run), "--fail-on", "info", "--format", "json"]) == 1
    assert main(["analyze", str(run), "--fail-on", "critical"]) == 0
    assert main(["analyze", str(run)]) == 0

def test_two_alarms_of_one_change_show_its_capture_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The step time and the loader's wait both alarmed for one slowdown, sharing one
    capture: the second points to the first's block instead of repeating it."""
    run = _run(tmp_path, end=True, second_signal=True)
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert "step 602: loader_wait" in out
    assert "capture: the one above (002-step600-step_time)" in out
    assert out.count("IN001") == 1


def test_html_timeline_marks_alarms_and_links_captures(tmp_path: Path) -> None:
    run = _run(tmp_path, end=False)
    page = tmp_path / "w.html"
    assert main(["analyze", str(run), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "<svg" in html and "<polyline" in html
    assert "alarm #1: step_time" in html  # the alarm's mark on the plot
    assert 'href="file://' in html and "002-step600-step_time" in html
    assert "Training waits on the DataLoader" in html
    # cut off (no end record): said at the top, as the text summary says it
    assert "Cut off:" in html and html.index("Cut off:") < html.index("<svg")


def test_html_alarm_rows_carry_the_machines_line(tmp_path: Path) -> None:
    """A new user's killed run: the text summary gave each alarm its host line, the HTML
    table did not."""
    run = _run(tmp_path, end=True)
    line = "the machine: other processes kept 0.10 -&gt; 0.12 CPUs busy"  # as _run wrote it
    page = tmp_path / "w.html"
    assert main(["analyze", str(run), "-o", str(page)]) == 0
    html = page.read_text()
    assert line in html.split("<h2>Alarms</h2>", 1)[1].split("<h2>Summary</h2>", 1)[0]
    assert "Cut off:" not in html


def test_a_folder_with_a_broken_timeline_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "watch.jsonl").write_text("not json\n")
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no meta record" in err


def test_html_timeline_plots_the_sampled_machine_by_step(tmp_path: Path) -> None:
    run = _run(tmp_path, end=True)
    lines = [{"type": "meta", "version": 1, "pid": 1, "interval_s": 1.0, "t0": 0.0}]
    for k in range(10):  # a sample a second, each tagged with the watch's step
        lines.append({"type": "sample", "sampler": "host", "t": float(k), "step": 100 * k,
                      "proc_cpu_pct": 90.0, "proc_rss_bytes": 2e9})
        lines.append({"type": "sample", "sampler": "gpu", "t": float(k), "step": 100 * k,
                      "util_pct": 40.0 + 5 * k, "mem_used_bytes": 30e9})
    (run / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    w = TimelineWriter(run)
    for step, j in ((300, 4.9), (700, 6.1)):
        w.record("energy", step=step, j_per_step=j)
    w.close()
    page = tmp_path / "w.html"
    assert main(["analyze", str(run), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count("<svg") == 4  # steps; utilisation; memory; energy
    for label in ("GPU utilisation (%)", "process CPU (%)", "GPU memory used (GB)",
                  "process RSS (GB)", "GPU energy (J a step)"):
        assert label in html
    assert html.count("alarm #1: step_time") == 4  # marked on every plot
    (run / "samples.jsonl").unlink()
    assert main(["analyze", str(run), "-o", str(page)]) == 0
    assert page.read_text().count("<svg") == 2  # no samples: the steps and the energy


def test_a_step_file_cut_short_beside_a_whole_timeline_is_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The end record counts 1,000 steps, the step file holds 6 (truncated since): the
    summary says so rather than report 6 steps as the run."""
    run = _run(tmp_path, end=True)
    steps = run / "watch.steps.bin"
    steps.write_bytes(steps.read_bytes()[:6 * 16 + 5])
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert "6 steps" in out
    assert "ended after 1,000 steps, but its step file (watch.steps.bin) holds only the " \
        "first 6" in out
    (tmp_path / "whole").mkdir()
    run2 = _run(tmp_path / "whole", end=True)
    assert main(["analyze", str(run2)]) == 0
    assert "holds only" not in capsys.readouterr().out
