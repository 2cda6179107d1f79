"""Output into a pipe, a file or a CI log stays readable: no colours, no live displays, and
tables wide enough that each row keeps to its line; COLUMNS, NO_COLOR and FORCE_COLOR are
honoured."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from diagnose.console import LOG_WIDTH, make_console, progress

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "samples" / "traces" / "cpu" / "slow_loader.pt.trace.json.gz"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[(?:[0-9]+;)*(?:3[0-8]|9[0-7])[;m]")  # a foreground colour


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items()
         if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "TERM")}
    e.update(env)
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True,
                          text=True, env=e, timeout=120, cwd=ROOT)


def test_piped_report_is_plain_and_wide() -> None:
    r = _cli("analyze", str(TRACE))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert not ANSI.search(r.stdout)
    assert max(map(len, lines)) <= LOG_WIDTH
    assert max(map(len, lines)) > 100  # not squeezed into rich's 80-column default
    # the finding's row holds its rule, category and the start of its message on one line
    row = next(ln for ln in lines if "IN001" in ln)
    assert "input" in row and "of step time waiting on DataLoader" in row
    assert r.stderr.count("analysing") == 0  # no spinner where stderr is no terminal
    # rich pads a table's lines to the console's width: not into a pipe or a file
    assert not [ln for ln in lines if ln != ln.rstrip()]


def test_a_report_written_to_a_file_has_no_trailing_spaces(tmp_path) -> None:
    """``-o report.txt`` and the other tables (rules, metrics) carry no padding either."""
    out = tmp_path / "report.txt"
    for args in (("analyze", str(TRACE), "-o", str(out)), ("rules",), ("rules", "IN001"),
                 ("metrics", str(TRACE))):
        r = _cli(*args)
        assert r.returncode == 0, r.stderr
        text = out.read_text() if "-o" in args else r.stdout
        assert text.strip() and not [ln for ln in text.splitlines() if ln != ln.rstrip()], args


def test_columns_no_color_force_color() -> None:
    narrow = _cli("analyze", str(TRACE), COLUMNS="100")
    assert max(map(len, narrow.stdout.splitlines())) <= 100
    forced = _cli("analyze", str(TRACE), FORCE_COLOR="1")
    assert COLOUR.search(forced.stdout)  # e.g. the critical finding in red
    both = _cli("analyze", str(TRACE), FORCE_COLOR="1", NO_COLOR="1")
    assert not COLOUR.search(both.stdout)  # NO_COLOR: no colour (bold may stay)


def test_make_console_into_a_file(monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    c = make_console(io.StringIO())
    assert not c.is_terminal and c.width == LOG_WIDTH and c.color_system is None
    monkeypatch.setenv("COLUMNS", "90")
    assert make_console(io.StringIO()).width == 90


def test_progress_is_silent_without_a_terminal(capsys) -> None:
    with progress("working") as p:
        p.update("still working")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_a_hint_several_findings_share_is_printed_once(tmp_path) -> None:
    """A hint about the machine or the run (the same words on each finding it concerns) is
    printed with the first finding that has it; the JSON keeps it on each."""
    from diagnose import analyze
    from tests import tracebuilder as tb

    path = tb.dataloader_bound(workers=4).write(tmp_path / "t.pt.trace.json.gz")
    report = analyze(path)
    assert len(report.findings) >= 2
    shared = "predicted on a busy machine: a hint that concerns every finding"
    for f in report.findings:
        f.hints.append(shared)
    text = report.render_text()
    assert text.count(shared) == 1
    assert all(shared in f["hints"] for f in report.to_json()["findings"])


def test_printing_a_report_leaves_pythons_random_state_as_it_was() -> None:
    """A new user's Python-side augmentation drew other numbers after `with diagnose`:
    rich, imported to print the report, seeds its style ids from the global random
    generator. A fresh process: import, analyse and print, then the state is compared."""
    code = ("import random; random.seed(3); s = random.getstate()\n"
            "import diagnose\n"
            f"diagnose.analyze({str(TRACE)!r}).print()\n"
            "import rich.console, rich.table, rich.panel\n"
            "print('SAME' if random.getstate() == s else 'MOVED')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "SAME"
