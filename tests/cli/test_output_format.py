"""``-o FILE`` writes the format its extension names (analyze, compare; autofix and demo in
test_autofix_cli.py), and says where in one line on stderr; a ``--format`` that
contradicts it is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose.cli import main
from diagnose.cli.output import choose_format
from diagnose.errors import DiagnoseError
from tests import tracebuilder as tb


@pytest.mark.parametrize("explicit,output,want", [
    (None, None, "text"),
    ("json", None, "json"),
    (None, "r.html", "html"),
    (None, "R.HTM", "html"),
    (None, "out/r.json", "json"),
    (None, "r.txt", "text"),
    (None, "report", "text"),
    (None, "r.log", "text"),
    ("json", "r.log", "json"),  # an extension that says nothing: --format decides
    ("html", "r.html", "html"),
])
def test_choose_format(explicit: str | None, output: str | None, want: str) -> None:
    assert choose_format(explicit, output) == want


@pytest.mark.parametrize("explicit,output,allowed,phrase", [
    ("text", "r.json", ("text", "json", "html"), "--format text contradicts the file name r.json"),
    ("json", "r.html", ("text", "json", "html"), "(a html file)"),
    ("html", "r.txt", ("text", "json", "html"), "drop --format or rename the file"),
    (None, "r.html", ("text", "json"), "writes text or json, not html (use .txt, .json)"),
    (None, "report.pdf", ("text", "json", "html"), ".pdf is not a format torch-diagnose writes"),
])
def test_choose_format_refuses(explicit: str | None, output: str, allowed: tuple[str, ...],
                               phrase: str) -> None:
    with pytest.raises(DiagnoseError) as e:
        choose_format(explicit, output, allowed)
    assert phrase in str(e.value)


@pytest.fixture
def traces(tmp_path: Path) -> tuple[str, str]:
    a = tb.dataloader_bound().write(tmp_path / "a.pt.trace.json.gz")
    b = tb.healthy().write(tmp_path / "b.pt.trace.json.gz")
    return str(a), str(b)


def test_analyze_output_follows_the_file_name(tmp_path: Path, traces: tuple[str, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = traces
    html, js, txt = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "r.txt"
    for path in (html, js, txt):
        assert main(["analyze", a, "-o", str(path)]) == 0
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.splitlines()[-1] == f"wrote {path}"
    page = html.read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html") and "IN001" in page
    assert json.loads(js.read_text(encoding="utf-8"))["findings"][0]["rule"] == "IN001"
    text = txt.read_text(encoding="utf-8")
    assert "IN001" in text and not text.lstrip().startswith(("{", "<"))


@pytest.mark.parametrize("cmd", ["analyze", "compare"])
def test_contradicting_format_is_one_line(tmp_path: Path, traces: tuple[str, str], cmd: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    paths = list(traces) if cmd == "compare" else traces[:1]
    assert main([cmd, *paths, "--format", "text", "-o", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and "contradicts" in err[0], err
    assert not out.exists()


def test_compare_output_follows_the_file_name(tmp_path: Path, traces: tuple[str, str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    js, txt, html = tmp_path / "c.json", tmp_path / "c.txt", tmp_path / "c.html"
    assert main(["compare", *traces, "-o", str(js)]) == 0
    assert main(["compare", *traces, "-o", str(txt)]) == 0
    doc = json.loads(js.read_text(encoding="utf-8"))
    assert doc["schema_version"] == 1 and "metrics" in doc
    assert "resolved" in txt.read_text(encoding="utf-8")
    assert capsys.readouterr().err.splitlines() == [f"wrote {js}", f"wrote {txt}"]
    assert main(["compare", *traces, "-o", str(html)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [f"wrote {html}"]
    page = html.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "torch-diagnose comparison" in page
    assert 'data-rule="IN001" data-status="resolved"' in page


def test_compare_html_to_stdout_keeps_the_gate_line_apart(
        traces: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--format html`` without -o: the page on stdout, the --fail-on-regression line on
    stderr (as with json), so the page stays a page."""
    a, b = traces
    assert main(["compare", b, a, "--format", "html", "--fail-on-regression", "5"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("<!doctype html>") and captured.out.rstrip().endswith(
        "</html>")
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "regression" in err[0]


@pytest.mark.parametrize("argv", [["compare", "B", "A", "--fail-on-regression", "5"],
                                  ["analyze", "A", "--fail-on", "warning"]])
def test_a_gate_keeps_its_exit_status_when_its_reader_stops_early(
        traces: tuple[str, str], argv: list[str]) -> None:
    """``... | head -1`` (or ``| grep -q``) closes the pipe before the verdict is printed:
    the exit status is still the gate's (it read 0, and a CI step passed a regression)."""
    import subprocess
    import sys

    a, b = traces
    cmd = [sys.executable, "-m", "diagnose", *[{"A": a, "B": b}.get(x, x) for x in argv]]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.readline()
    p.stdout.close()  # the reader goes away
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1, err.decode()
    assert b"Traceback" not in err
