"""Traces that hold nothing to analyse: the last, partial span torch's
tensorboard_trace_handler writes as the profiler stops (a real one, torch 2.13 on CPU:
tests/data/cpu/empty_last_span.pt.trace.json: one ProfilerStep annotation, no operator)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tests.tracebuilder as tb
from diagnose.analysis import analyze, analyze_runs
from diagnose.cli import main
from diagnose.errors import DiagnoseError

EMPTY = Path(__file__).resolve().parents[1] / "data" / "cpu" / "empty_last_span.pt.trace.json"


def test_an_empty_span_beside_a_real_one_is_set_aside(tmp_path: Path) -> None:
    tb.cpu_only().write(tmp_path / "host_1.100.pt.trace.json")
    shutil.copy(EMPTY, tmp_path / "host_1.200.pt.trace.json")
    runs = analyze_runs(tmp_path)
    assert len(runs) == 1  # one run, not two: compare and metrics take the folder
    assert any("host_1.200.pt.trace.json set aside" in n for n in runs[0].notes)
    assert runs[0].metrics.get("step_time_median_ms")


def test_a_truncated_trace_beside_a_readable_one_is_set_aside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of two runs, one trace cut off mid-write (a job killed while the profiler
    exported): the other run still gives its report, with a note naming the truncated file
    and its problem; both cut off, the first one's problem is the error (one line, exit 2).
    Every run folder was refused whole before."""
    good = tb.cpu_only().write(tmp_path / "host_1.100.pt.trace.json")
    text = good.read_bytes()
    (tmp_path / "host_2.100.pt.trace.json").write_bytes(text[: len(text) // 2])
    runs = analyze_runs(tmp_path)
    assert len(runs) == 1 and runs[0].metrics.get("step_time_median_ms")
    (note,) = [n for n in runs[0].notes if "set aside" in n]
    assert note.startswith("host_2.100.pt.trace.json set aside: not valid JSON")
    assert main(["analyze", str(tmp_path)]) == 0
    assert "host_2.100.pt.trace.json set aside" in capsys.readouterr().out
    good.write_bytes(text[: len(text) // 3])
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON" in err[0]


def test_an_empty_trace_alone_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    with pytest.raises(DiagnoseError, match="no operators and no device activity"):
        analyze(EMPTY)
    assert main(["analyze", str(EMPTY)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing to analyse" in err[0]


def test_a_healthy_trace_is_not_empty(tmp_path: Path) -> None:
    for make in (tb.cpu_only, tb.healthy):
        r = analyze(make().write(tmp_path / f"{make.__name__}.pt.trace.json"))
        assert not any("set aside" in n for n in r.notes)


def test_a_processs_spans_give_the_newest(tmp_path: Path) -> None:
    # schedule(..., repeat=2) with tensorboard_trace_handler: a file per span of one process
    tb.cpu_only(steps=3).write(tmp_path / "host_1.1796010318984130581.pt.trace.json")
    tb.cpu_only(steps=5).write(tmp_path / "host_1.1796010319000823646.pt.trace.json")
    r = analyze(tmp_path)
    assert r.metrics["step_count"] == 5 and r.source == [str(tmp_path)]
    assert r.notes[0].startswith("2 profiled spans of one process")
    assert len(analyze_runs(tmp_path)) == 2  # `analyze DIR` still reports each


def test_two_processes_are_not_spans(tmp_path: Path) -> None:
    tb.cpu_only(steps=3).write(tmp_path / "host_1.1796010318984130581.pt.trace.json")
    tb.cpu_only(steps=5).write(tmp_path / "host_2.1796010319000823646.pt.trace.json")
    with pytest.raises(DiagnoseError, match="2 separate runs"):
        analyze(tmp_path)


def test_a_missing_path_is_a_file_not_found_error(tmp_path: Path) -> None:
    import pickle

    from diagnose.errors import TraceError

    with pytest.raises(FileNotFoundError) as e:
        analyze(tmp_path / "nope.json")
    assert isinstance(e.value, TraceError) and str(e.value).endswith("nope.json: no such "
                                                                      "file or folder")
    assert str(pickle.loads(pickle.dumps(e.value))) == str(e.value)


def test_a_folder_that_is_one_run_is_named_by_the_folder(tmp_path: Path) -> None:
    # given beside another source, a folder holding one run keeps its name (as it does
    # alone), so its TensorBoard run is named alike whatever else was given
    (tmp_path / "h2").mkdir()
    tb.cpu_only().write(tmp_path / "h2" / "host_1.100.pt.trace.json")
    other = tb.cpu_only(steps=3).write(tmp_path / "other.pt.trace.json")
    runs = analyze_runs([other, tmp_path / "h2"])
    assert [r.source for r in runs] == [[str(other)], [str(tmp_path / "h2")]]


def test_a_last_step_without_an_operator_is_no_step() -> None:
    # a real span that ends as the profiler stops: ProfilerStep#12 (2.2 ms of a loop's
    # work) and a #13 stub of 14 us holding no operator, which halved the median
    stub = EMPTY.parent / "stub_last_step.pt.trace.json"
    r = analyze(stub)
    assert r.metrics["step_count"] == 1 and r.metrics["step_time_median_ms"] > 2.0
    assert any("holds no operator" in n for n in r.notes)


def test_the_span_with_most_steps_is_taken(tmp_path: Path) -> None:
    tb.cpu_only(steps=5).write(tmp_path / "host_1.1796010318984130581.pt.trace.json")
    tb.cpu_only(steps=2).write(tmp_path / "host_1.1796010319000823646.pt.trace.json")
    r = analyze(tmp_path)
    assert r.metrics["step_count"] == 5 and "1796010318984130581" in r.notes[0]


def test_spans_are_not_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tb.cpu_only(steps=3).write(tmp_path / "host_1.1796010318984130581.pt.trace.json")
    tb.cpu_only(steps=5).write(tmp_path / "host_1.1796010319000823646.pt.trace.json")
    assert main(["analyze", str(tmp_path), "--as-ranks"]) == 2
    assert "not ranks" in capsys.readouterr().err
    assert main(["metrics", str(tmp_path)]) == 0
    assert "note: 2 profiled spans of one process" in capsys.readouterr().err
