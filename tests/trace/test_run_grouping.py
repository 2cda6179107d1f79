"""Which traces are ranks of one run (diagnose.trace.grouping), and one report per run in
every output: text, JSON, HTML, TensorBoard, --fail-on."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from diagnose.analysis import RankResult, report_from_ranks
from diagnose.api import analyze, analyze_runs, as_report
from diagnose.cli import main
from diagnose.errors import DiagnoseError
from diagnose.runfolder import write_context
from tests import tracebuilder as tb

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "traces"
PAGEABLE = SAMPLES / "gpu" / "pageable_copy.pt.trace.json.gz"
HEALTHY = SAMPLES / "gpu" / "healthy.pt.trace.json.gz"


def _imbalance(report) -> list:
    return [f for f in report.findings if f.category == "imbalance"]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------ two unrelated sample traces
def test_two_sample_jobs_are_two_runs():
    runs = analyze_runs([PAGEABLE, HEALTHY])
    assert len(runs) == 2
    assert [r.source for r in runs.runs] == [[str(PAGEABLE)], [str(HEALTHY)]]
    for r in runs.runs:
        assert len(r.ranks) == 1 and not _imbalance(r)
        assert "straggler_rank" not in r.metrics  # no run-scope metrics on one rank
    # each report is what that file gives alone
    alone = analyze(HEALTHY)
    assert runs.runs[1].metrics == alone.metrics
    assert [f.rule for f in runs.runs[1].findings] == [f.rule for f in alone.findings]
    # one report wanted, several runs given: one clear error, not a merged run
    with pytest.raises(DiagnoseError, match="2 separate runs"):
        analyze([PAGEABLE, HEALTHY])


def test_two_sample_jobs_cli_text_json_html_fail_on(capsys, tmp_path):
    rc, out, _ = _cli(capsys, "analyze", str(PAGEABLE), str(HEALTHY))
    assert rc == 0
    assert "2 separate runs" in out and "run 1 of 2" in out and "run 2 of 2" in out
    assert not re.search(r"^ranks\s+2", out, re.M)  # no summary row "ranks 2"
    assert "straggler" not in out.lower() and "Ranks" not in out  # no IM001, no rank table
    assert out.index("pageable_copy") < out.index("run 2 of 2") < out.rindex("healthy")
    rc, out, _ = _cli(capsys, "analyze", str(PAGEABLE), str(HEALTHY), "--format", "json")
    doc = json.loads(out)
    assert set(doc) == {"schema_version", "runs", "notes"} and len(doc["runs"]) == 2
    assert [len(r["ranks"]) for r in doc["runs"]] == [1, 1]
    assert not any(f["category"] == "imbalance" for r in doc["runs"] for f in r["findings"])
    # a single run's document is unchanged: no "runs" wrapper
    rc, out, _ = _cli(capsys, "analyze", str(HEALTHY), "--format", "json")
    assert "runs" not in json.loads(out) and "findings" in json.loads(out)
    page = tmp_path / "r.html"
    assert _cli(capsys, "analyze", str(PAGEABLE), str(HEALTHY), "--format", "html", "-o",
                str(page))[0] == 0
    html = page.read_text()
    assert 'id="run1"' in html and 'id="run2"' in html
    assert 'id="run1-summary"' in html and 'id="run2-summary"' in html
    assert 'id="summary"' not in html  # ids stay unique on the page
    assert "straggler" not in html.lower()
    # --fail-on looks at every run: the pageable-copy job has critical findings
    assert _cli(capsys, "analyze", str(HEALTHY), str(PAGEABLE), "--fail-on", "critical")[0] == 1
    assert _cli(capsys, "analyze", str(HEALTHY), "--fail-on", "warning")[0] == 0


# ------------------------------------------------------------------ a folder of run folders
def _capture_folder(root: Path, stamp: str, trace: Path, created: str) -> Path:
    """A run folder as the capture writes it (runfolder.py: ``<root>/<stamp>/`` with
    ``<host>_<pid>.<time_ns>.pt.trace.json.gz`` and ``context.json``)."""
    d = root / stamp
    d.mkdir(parents=True)
    shutil.copy(trace, d / f"host_{4100 + len(stamp)}.1700000000000000000.pt.trace.json.gz")
    write_context(d, {"created": created, "dataloader": {"num_workers": 0}})
    return d


def test_folder_of_run_folders_gives_one_report_each_newest_first(tmp_path, capsys):
    root = tmp_path / "diagnose-runs"
    cpu = SAMPLES / "cpu"
    made = [_capture_folder(root, f"20261123-10{i}000-000", t, f"2026-11-23T10:{i}0:00")
            for i, t in enumerate([cpu / "healthy.pt.trace.json.gz",
                                   cpu / "slow_loader.pt.trace.json.gz",
                                   cpu / "healthy.pt.trace.json.gz"])]
    runs = analyze_runs(root)
    assert len(runs) == 3
    assert [r.source for r in runs.runs] == [[str(d)] for d in reversed(made)]  # newest first
    for r in runs.runs:
        assert len(r.ranks) == 1 and not _imbalance(r)
        assert any("holds 3 run folders" in n and "newest first" in n for n in r.notes)
        assert r.metrics["context_available"] is True  # each run reads its own context
    # the text names the first report the newest (a new user read "run 1 of 14" as the
    # oldest); loose files given in an order keep it, unnamed
    rc, out, _ = _cli(capsys, "analyze", str(root))
    assert rc == 0 and f"run 1 of 3 (the newest): {made[-1]}" in out
    assert "run 2 of 3: " in out and "(the newest)" not in out.split("run 2 of 3")[1]
    assert "(the newest)" not in _cli(capsys, "analyze", str(PAGEABLE), str(HEALTHY))[1]
    rc, out, _ = _cli(capsys, "analyze", str(root), "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and len(doc["runs"]) == 3
    assert not any(f["category"] == "imbalance" for r in doc["runs"] for f in r["findings"])
    assert "--as-ranks forces rank-less files into one run" in runs.summary()
    # --as-ranks joins loose files only: the run folders stay runs, and the summary says so
    # (a new user read the same three reports with no word of the flag)
    forced = analyze_runs(root, as_ranks=True)
    assert len(forced) == 3 and "each run folder (a capture's) is a run of its own" in (
        forced.summary())
    # one run folder alone is one run, as before
    one = analyze(made[0])
    assert one.source == [str(made[0])] and len(one.ranks) == 1


# ------------------------------------------------------------------ declared ranks
def _rank_files(tmp_path: Path, specs: list[tuple[int | None, int | None]]) -> list[Path]:
    out = []
    for i, (rank, world) in enumerate(specs):
        kw = {"rank": rank, "world_size": world, "backend": "nccl"} if world else {}
        p = tmp_path / f"t{i}.pt.trace.json.gz"
        tb.healthy(**kw).write(p)
        out.append(p)
    return out


def test_distributed_info_that_agrees_is_one_run(tmp_path):
    files = _rank_files(tmp_path, [(1, 2), (0, 2)])
    r = analyze(files)
    assert sorted(x.rank for x in r.ranks) == [0, 1]
    assert {x.path: x.rank for x in r.ranks} == {str(files[0]): 1, str(files[1]): 0}


def test_duplicate_ranks_are_separate_runs_with_a_note(tmp_path, capsys):
    files = _rank_files(tmp_path, [(0, 2), (0, 2)])
    runs = analyze_runs(files)
    assert len(runs) == 2 and all(len(r.ranks) == 1 for r in runs.runs)
    for r in runs.runs:
        (note,) = [n for n in r.notes if "duplicate rank 0" in n]
        assert "not taken as ranks of one run" in note
    # forcing them together is refused: one line, exit 2, no traceback
    rc, out, err = _cli(capsys, "analyze", *map(str, files), "--as-ranks")
    assert rc == 2 and err.count("\n") == 1 and "rank 0 twice" in err and "Traceback" not in err
    # one file named twice is one rank, not two (a new user got a one-rank report)
    rc, out, err = _cli(capsys, "analyze", str(files[0]), str(files[0]), "--as-ranks")
    assert rc == 2 and err.count("\n") == 1 and "given twice" in err and "Traceback" not in err


def test_world_size_that_does_not_match_is_separate_with_a_note(tmp_path):
    files = _rank_files(tmp_path, [(0, 4), (1, 4)])
    runs = analyze_runs(files)
    assert len(runs) == 2
    for r in runs.runs:
        assert any("2 traces for world size 4" in n and "--as-ranks" in n for n in r.notes)
    # --as-ranks groups the partial set, each file keeping its own rank
    forced = analyze(files[::-1], as_ranks=True)
    assert {x.path: x.rank for x in forced.ranks} == {str(files[0]): 0, str(files[1]): 1}
    assert any("forced" in n and "rank 1 = t1" in n for n in forced.notes)


def test_complete_sets_in_two_folders_are_two_runs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    fa = _rank_files(a, [(0, 2), (1, 2)])
    fb = _rank_files(b, [(0, 2), (1, 2)])
    runs = analyze_runs([*fa, *fb])
    assert [sorted(x.path for x in r.ranks) for r in runs.runs] == [
        sorted(map(str, fa)), sorted(map(str, fb))]
    assert all(not any("not taken" in n for n in r.notes) for r in runs.runs)


# ------------------------------------------------------------------ forced group
def test_forced_group_numbers_rank_less_files_in_the_order_given(tmp_path, capsys):
    slow, ok = tmp_path / "slow.pt.trace.json.gz", tmp_path / "ok.pt.trace.json.gz"
    tb.dataloader_bound().write(slow)
    tb.healthy().write(ok)
    r = analyze([ok, slow], as_ranks=True)
    assert [(Path(x.path).name, x.rank) for x in r.ranks] == [(ok.name, 0), (slow.name, 1)]
    assert [x.metrics["rank"] for x in r.ranks] == [0, 1]
    (note,) = [n for n in r.notes if "forced" in n]
    assert "rank 0 = ok.pt.trace.json.gz, rank 1 = slow.pt.trace.json.gz" in note
    (im,) = _imbalance(r)
    assert im.ranks == [1] and r.metrics["straggler_rank"] == 1 and "Rank 1" in im.message
    # the other order numbers them the other way: the straggler is then rank 0
    r2 = analyze([slow, ok], as_ranks=True)
    assert _imbalance(r2)[0].ranks == [0]
    # every output carries the note and the same rank label
    text = r.render_text(width=160)
    assert "forced" in text
    row = next(line for line in text.splitlines() if "yes (" in line)
    assert row.strip("│ ").startswith("1 ")
    rc, out, _ = _cli(capsys, "analyze", str(ok), str(slow), "--as-ranks", "--format", "json")
    doc = json.loads(out)
    assert [x["rank"] for x in doc["ranks"]] == [0, 1]
    assert any("forced" in n for n in doc["notes"])
    assert [f["ranks"] for f in doc["findings"] if f["rule"] == "IM001"] == [[1]]
    assert "forced" in r.to_html()


def test_unknown_ranks_get_one_label_everywhere():
    """report_from_ranks given ranks it cannot name (a caller's summaries) labels them once:
    the table, the finding and the JSON show the same number."""
    def m(step: float, inp: float) -> dict:
        return {"step_time_mean_ms": step, "step_time_median_ms": step,
                "dataloader_wait_ms_per_step": inp, "dataloader_share": inp / step,
                "gpu_busy_frac": 0.5}
    rep = as_report(report_from_ranks(["x"], [RankResult("a", None, m(10.0, 0.2), {}, []),
                                              RankResult("b", 0, m(10.0, 0.2), {}, []),
                                              RankResult("c", None, m(16.0, 6.0), {}, [])]))
    assert [x.rank for x in rep.ranks] == [1, 0, 2]
    (im,) = _imbalance(rep)
    assert im.ranks == [2] == [rep.metrics["straggler_rank"]] and "Rank 2" in im.message
    row = next(line for line in rep.render_text(width=160).splitlines() if "yes (" in line)
    assert row.strip("│ ").startswith("2 ")
    assert [x["rank"] for x in rep.to_json()["ranks"]] == [1, 0, 2]


# ------------------------------------------------------------------ TensorBoard
@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="needs tensorboard")
def test_tensorboard_writes_one_run_per_analysis_run(tmp_path, capsys):
    from diagnose.report.tb_plugin.runfile import read_run_file

    logdir = tmp_path / "tb"
    rc, out, _ = _cli(capsys, "tensorboard", str(PAGEABLE), str(HEALTHY), "--logdir",
                      str(logdir))
    assert rc == 0 and "2 separate runs" in out
    runs = sorted(p.name for p in logdir.iterdir())
    assert runs == ["healthy", "pageable_copy"]
    for name in runs:
        doc = read_run_file(logdir / name)
        assert not any(f["category"] == "imbalance" for f in doc["report"]["findings"])
        assert not (logdir / name / "rank1").exists()


def test_tensorboard_run_names_are_distinct():
    from diagnose.report.tb_runs import run_names
    from diagnose.result import Analysis

    def a(src: str) -> Analysis:
        return Analysis(source=[src], ranks=[], metrics={}, findings=[], not_evaluated=[])

    runs = [a("gpu/healthy.pt.trace.json.gz"), a("cpu/healthy.pt.trace.json.gz"),
            a("diagnose-runs/20261123-101000-000")]
    assert run_names(runs) == ["healthy", "healthy-2", "20261123-101000-000"]
    assert run_names(runs, "exp") == ["exp-healthy", "exp-healthy-2", "exp-20261123-101000-000"]
    assert run_names(runs[:1], "exp") == ["exp"]  # one run: the name given, as before
