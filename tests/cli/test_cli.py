"""The command line: exit codes, one-line errors, JSON output, user rules, `rules`, `metrics`."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from diagnose.cli import main
from tests.conftest import REPO, shared_trace

NW0 = "kineto/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
CPU = "hta/cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


# ----------------------------------------------------------------------------- helpers
def ev(name: str, cat: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1,
       **args: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                         "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def small_trace() -> dict[str, Any]:
    """Two steps on a CPU-only host: enough for step metrics, no GPU findings."""
    events = []
    for i in range(2):
        t0 = 1000.0 * i
        events += [ev(f"ProfilerStep#{i}", "user_annotation", t0, 900.0),
                   ev("aten::mm", "cpu_op", t0 + 100.0, 600.0)]
    return {"schemaVersion": 1, "traceEvents": events}


def write(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _truncated_gzip(p: Path) -> None:
    big = small_trace()
    big["traceEvents"] = big["traceEvents"] * 500
    data = gzip.compress(json.dumps(big).encode())
    p.write_bytes(data[: len(data) // 2])


def _folder_without_traces(p: Path) -> None:
    p.mkdir()
    (p / "notes.txt").write_text("no trace here")


BAD: dict[str, Any] = {
    # name -> bytes to write at the path, or a function creating the path, or None (absent)
    "not_json": b'{"traceEvents": [',
    "truncated_gzip": _truncated_gzip,
    "gzip_of_garbage": gzip.compress(b"\x00 not json at all \xff" * 20),
    "gzip_magic_then_garbage": b"\x1f\x8b" + b"garbage" * 20,
    "no_trace_events": json.dumps({"schemaVersion": 1}).encode(),
    "empty": b"",
    "empty_trace_events": json.dumps({"traceEvents": []}).encode(),
    "folder_without_traces": _folder_without_traces,
    "missing": None,
    "top_level_number": b"3.14",
    "top_level_string": b'"trace"',
    # times no run has (a step of 1e29 us was reported as its median; 1e308 overflowed)
    "implausible_duration": json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 1e29}]}).encode(),
    "overflowing_times": json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1e308,
         "dur": 1e308}]}).encode(),
}


def make_bad(tmp_path: Path, case: str) -> Path:
    p = tmp_path / f"{case}.pt.trace.json"
    content = BAD[case]
    if callable(content):
        content(p)
    elif content is not None:
        p.write_bytes(content)
    return p


def assert_one_error_line(err: str, path: Path) -> None:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("torch-diagnose: error: ")
    assert str(path) in lines[0]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("cmd", ["analyze", "metrics"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case, cmd):
    p = make_bad(tmp_path, case)
    rc, out, err = run_cli(capsys, cmd, str(p))
    assert rc == 2
    assert out == ""
    assert_one_error_line(err, p)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root reads a chmod-000 file anyway")
def test_unreadable_file(tmp_path, capsys):
    p = write(tmp_path / "secret.json", small_trace())
    p.chmod(0)
    try:
        rc, _, err = run_cli(capsys, "analyze", str(p))
    finally:
        p.chmod(0o600)
    assert rc == 2
    assert_one_error_line(err, p)


def test_decompression_limit(tmp_path, capsys, monkeypatch):
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b" " * 1_000_000 + json.dumps(small_trace()).encode()))
    assert run_cli(capsys, "analyze", str(p), "--format", "json")[0] == 0
    monkeypatch.setenv("TORCH_DIAGNOSE_MAX_TRACE_BYTES", "1000")
    rc, out, err = run_cli(capsys, "analyze", str(p))
    assert rc == 2 and out == ""
    assert_one_error_line(err, p)
    assert "1000 byte limit" in err


def test_one_bad_file_among_good_ones_fails_the_run(tmp_path, capsys):
    good = write(tmp_path / "good.json", small_trace())
    bad = make_bad(tmp_path, "not_json")
    rc, _, err = run_cli(capsys, "analyze", str(good), str(bad))
    assert rc == 2
    assert_one_error_line(err, bad)


def test_a_run_folders_own_report_points_at_the_folder(tmp_path, capsys):
    """report.json of a run folder is no trace: the one line names the folder to give."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "h_1.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (run / "context.json").write_text("{}")
    (run / "report.json").write_text('{"findings": []}')
    rc, _, err = run_cli(capsys, "analyze", str(run / "report.json"))
    assert rc == 2
    assert_one_error_line(err, run / "report.json")
    assert f"({run} is a run folder: give the folder)" in err


def test_subprocess_bad_inputs_show_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for case in ("not_json", "truncated_gzip", "missing", "folder_without_traces",
                 "top_level_number"):
        p = make_bad(tmp_path, case)
        r = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(p)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert r.returncode == 2, (case, r.stderr)
        assert r.stdout == ""
        assert_one_error_line(r.stderr, p)


def test_subprocess_good_trace(tmp_path):
    p = write(tmp_path / "t.pt.trace.json.gz", small_trace())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(p), "--format", "json"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert json.loads(r.stdout)["source"] == [str(p)]


# ----------------------------------------------------------------------------- analyze
FINDING_KEYS = {"rule", "category", "severity", "title", "message", "evidence", "fixes",
                "estimated_gain"}


def check_report_json(rep: dict[str, Any]) -> None:
    assert set(rep) >= {"schema_version", "source", "ranks", "metrics", "findings",
                        "not_evaluated"}
    assert rep["schema_version"] == 1
    assert isinstance(rep["metrics"], dict) and rep["metrics"]
    assert isinstance(rep["ranks"], list) and rep["ranks"]
    for f in rep["findings"]:
        assert set(f) >= FINDING_KEYS, f
        assert f["severity"] in ("info", "warning", "critical")
        assert isinstance(f["evidence"], dict) and isinstance(f["fixes"], list)
        assert f["estimated_gain"] is None or 0.0 <= f["estimated_gain"] <= 1.0
    for n in rep["not_evaluated"]:
        assert set(n) == {"rule", "reason"} and n["reason"]


def test_analyze_json(tmp_path, capsys):
    p = write(tmp_path / "t.pt.trace.json", small_trace())
    rc, out, err = run_cli(capsys, "analyze", str(p), "--format", "json")
    assert rc == 0 and err == ""
    rep = json.loads(out)
    check_report_json(rep)
    assert rep["source"] == [str(p)]
    assert [r["path"] for r in rep["ranks"]] == [str(p)]
    # a CPU-only trace: GPU rules are not evaluated, with a reason
    reasons = {n["rule"]: n["reason"] for n in rep["not_evaluated"]}
    assert "no GPU activity" in reasons["UT001"]


def test_analyze_json_flag_is_format_json(tmp_path, capsys):
    """``--json`` (what users type first) gives the same report as ``--format json``."""
    p = write(tmp_path / "t.pt.trace.json", small_trace())
    rc, out, err = run_cli(capsys, "analyze", str(p), "--json")
    assert rc == 0 and err == ""
    check_report_json(json.loads(out))


def test_analyze_text(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    rc, out, err = run_cli(capsys, "analyze", str(p))
    assert rc == 0 and err == ""
    # short: the rules not evaluated are counted on the last line, which says how to see them
    assert "steps" in out and "Not evaluated" not in out
    flat = "".join(out.split())  # the terminal's width wraps the line anywhere
    assert flat.endswith(f"ruleswerenotevaluated):torch-diagnoseanalyze{p}-v")
    rc, out, err = run_cli(capsys, "analyze", str(p), "-v")
    assert rc == 0 and err == "" and "Not evaluated" in out and "more (" not in out


def test_analyze_folder_of_ranks(tmp_path, capsys):
    for r in range(2):
        # ranks of one run because the traces say so (distributedInfo), not their names
        write(tmp_path / f"rank-{r}.pt.trace.json",
              {**small_trace(), "distributedInfo": {"rank": r, "world_size": 2}})
    rc, out, _ = run_cli(capsys, "analyze", str(tmp_path), "--format", "json")
    assert rc == 0
    rep = json.loads(out)
    assert sorted(r["rank"] for r in rep["ranks"]) == [0, 1]
    assert rep["metrics"]["rank_count"] == 2


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_output_file(tmp_path, capsys, fmt):
    p = write(tmp_path / "t.json", small_trace())
    out_file = tmp_path / f"report.{fmt}"
    rc, out, err = run_cli(capsys, "analyze", str(p), "--format", fmt, "-o", str(out_file))
    assert rc == 0 and out == "" and err == f"wrote {out_file}\n"  # where it went, on stderr
    text = out_file.read_text()
    if fmt == "json":
        check_report_json(json.loads(text))
    else:
        assert str(p) in text and "Not evaluated" in text


def test_output_file_unwritable(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    target = tmp_path / "no" / "such" / "dir" / "r.json"
    rc, out, err = run_cli(capsys, "analyze", str(p), "-o", str(target))
    assert rc == 2 and out == ""
    assert_one_error_line(err, target)


def test_fail_on_warning_with_dataloader_bound_trace(capsys):
    p = shared_trace(NW0)
    rc, out, _ = run_cli(capsys, "analyze", str(p), "--format", "json", "--fail-on", "warning")
    assert rc == 1
    rep = json.loads(out)
    check_report_json(rep)
    severities = {f["rule"]: f["severity"] for f in rep["findings"]}
    assert severities.get("IN001") in ("warning", "critical")
    # without --fail-on the same report exits 0
    assert run_cli(capsys, "analyze", str(p), "--format", "json")[0] == 0


def test_fail_on_warning_without_such_findings(capsys):
    p = REPO / "samples" / "traces" / "cpu" / "healthy.pt.trace.json.gz"
    rc, out, _ = run_cli(capsys, "analyze", str(p), "--format", "json", "--fail-on", "warning")
    assert rc == 0
    rep = json.loads(out)
    assert not [f for f in rep["findings"] if f["severity"] in ("warning", "critical")]


def test_fail_on_critical_for_a_run_held_in_its_collectives(capsys):
    """HTA's gloo CPU trace spends 85% of its step in all-reduce (it was this file's healthy
    trace until CM001 read host collectives)."""
    rc, out, _ = run_cli(capsys, "analyze", str(shared_trace(CPU)), "--format", "json",
                         "--fail-on", "critical")
    assert rc == 1
    assert [f["rule"] for f in json.loads(out)["findings"]
            if f["severity"] == "critical"] == ["CM001"]


def test_fail_on_levels(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    rules = write_rule(tmp_path / "mine.toml")  # XX001 fires as a warning on any trace
    base = ["analyze", str(p), "--format", "json", "--rules", str(rules)]
    assert run_cli(capsys, *base, "--fail-on", "info")[0] == 1
    assert run_cli(capsys, *base, "--fail-on", "warning")[0] == 1
    assert run_cli(capsys, *base, "--fail-on", "critical")[0] == 0


# ----------------------------------------------------------------------------- user rules
USER_RULE = """
[[rule]]
id = "{id}"
category = "input"
title = "Custom rule for tests"
when = "{when}"
warning = "step_count >= 1"
message = "{{step_count}} steps seen by the custom rule"
evidence = ["step_count"]
gain = "0.02"
fixes = [{fixes}]

[rule.docs]
detects = "Any trace with steps."
why = "Test."
fix = "None needed."
false_positives = "All of them."
"""


def write_rule(path: Path, id: str = "XX001", when: str = "step_count >= 1",
               fixes: str = '"num_workers"') -> Path:
    path.write_text(USER_RULE.format(id=id, when=when.replace('"', '\\"'), fixes=fixes))
    return path


def test_user_rule_finding_appears(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    rules = write_rule(tmp_path / "mine.toml")
    rc, out, err = run_cli(capsys, "analyze", str(p), "--format", "json", "--rules", str(rules))
    assert rc == 0 and err == ""
    rep = json.loads(out)
    check_report_json(rep)
    mine = [f for f in rep["findings"] if f["rule"] == "XX001"]
    assert len(mine) == 1
    f = mine[0]
    assert f["severity"] == "warning" and f["category"] == "input"
    assert f["message"] == "2 steps seen by the custom rule"
    assert f["evidence"] == {"step_count": 2}
    assert f["estimated_gain"] == 0.02
    assert [x["id"] for x in f["fixes"]] == ["num_workers"]
    assert f["fixes"][0]["code"]
    # and the same run without the rule file has no such finding
    rc, out, _ = run_cli(capsys, "analyze", str(p), "--format", "json")
    assert "XX001" not in {f["rule"] for f in json.loads(out)["findings"]}


def test_user_rule_folder(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    (tmp_path / "rules").mkdir()
    write_rule(tmp_path / "rules" / "a.toml", id="XX001")
    write_rule(tmp_path / "rules" / "b.toml", id="XX002")
    rc, out, _ = run_cli(capsys, "analyze", str(p), "--format", "json",
                         "--rules", str(tmp_path / "rules"))
    assert rc == 0
    assert {"XX001", "XX002"} <= {f["rule"] for f in json.loads(out)["findings"]}


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"when": "__import__('os')"}, "not allowed"),
        ({"when": "step_count >="}, "XX001"),
        ({"fixes": '"no_such_fix"'}, "no_such_fix"),
        ({"id": "IN001"}, "IN001"),
        ({"id": "bad-id"}, "id"),
    ],
    ids=["import", "syntax", "unknown_fix", "duplicate_builtin", "bad_id"],
)
@pytest.mark.parametrize("cmd", ["analyze", "rules"])
def test_bad_user_rule_is_one_line_and_exit_2(tmp_path, capsys, kwargs, phrase, cmd):
    p = write(tmp_path / "t.json", small_trace())
    rules = write_rule(tmp_path / "mine.toml", **kwargs)
    argv = [cmd, str(p)] if cmd == "analyze" else [cmd]
    rc, out, err = run_cli(capsys, *argv, "--rules", str(rules))
    assert rc == 2 and out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch-diagnose: error: ")
    assert "mine.toml" in lines[0] and phrase in lines[0]


def test_duplicate_user_rule_ids(tmp_path, capsys):
    a = write_rule(tmp_path / "a.toml")
    b = write_rule(tmp_path / "b.toml")
    rc, _, err = run_cli(capsys, "rules", "--rules", str(a), "--rules", str(b))
    assert rc == 2
    assert len(err.splitlines()) == 1
    assert "XX001" in err and "defined twice" in err and str(a) in err and str(b) in err


def test_missing_rule_file(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    missing = tmp_path / "nope.toml"
    rc, _, err = run_cli(capsys, "analyze", str(p), "--rules", str(missing))
    assert rc == 2
    assert_one_error_line(err, missing)


def test_invalid_toml(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rule]\nid = ")
    rc, _, err = run_cli(capsys, "rules", "--rules", str(bad))
    assert rc == 2
    assert_one_error_line(err, bad)
    assert "TOML" in err


# ----------------------------------------------------------------------------- rules
def builtin_ids() -> list[str]:
    from diagnose.rules.engine import tomllib  # tomllib, or tomli on Python 3.10

    ids = []
    for f in sorted((REPO / "rules").glob("*.toml")):
        ids += [r["id"] for r in tomllib.loads(f.read_text()).get("rule", [])]
    return ids


def test_rules_lists_every_rule(capsys):
    rc, out, err = run_cli(capsys, "rules")
    assert rc == 0 and err == ""
    ids = builtin_ids()
    assert len(ids) >= 10
    assert f"{len(ids)} rules" in out
    for rid in ids:
        assert rid in out
    shown = sorted(ids, key=out.index)  # the order the table shows them in
    assert shown == sorted(ids) and shown != ids  # by id, not by rule file


def test_rules_lists_user_rules(tmp_path, capsys):
    rules = write_rule(tmp_path / "mine.toml")
    rc, out, _ = run_cli(capsys, "rules", "--rules", str(rules))
    assert rc == 0
    assert "XX001" in out and f"{len(builtin_ids()) + 1} rules" in out


@pytest.mark.parametrize("rule_id", ["IN001", "in001"])
def test_rules_explains_one(capsys, rule_id):
    rc, out, err = run_cli(capsys, "rules", rule_id)
    assert rc == 0 and err == ""
    assert "IN001" in out and "dataloader_share" in out
    heads = ["What it detects", "Why it costs time", "How to fix", "Known false positives"]
    pos = [out.index(h) for h in heads]
    assert pos == sorted(pos)
    assert "num_workers" in out


def test_rules_explains_user_rule(tmp_path, capsys):
    rules = write_rule(tmp_path / "mine.toml")
    rc, out, _ = run_cli(capsys, "rules", "XX001", "--rules", str(rules))
    assert rc == 0
    assert "Any trace with steps." in out and "All of them." in out


def test_rules_unknown_id(capsys):
    rc, out, err = run_cli(capsys, "rules", "NOPE999")
    assert rc == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch-diagnose: error: ")
    assert "NOPE999" in lines[0]


# ----------------------------------------------------------------------------- metrics
def test_metrics_json(tmp_path, capsys):
    p = write(tmp_path / "t.json.gz", small_trace())
    rc, out, err = run_cli(capsys, "metrics", str(p), "--format", "json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert set(data) == {"metrics", "ranks"}
    m = data["metrics"]
    assert m["step_count"] == 2
    assert m["has_gpu"] is False
    assert [r["path"] for r in data["ranks"]] == [str(p)]


def test_metrics_text(tmp_path, capsys):
    p = write(tmp_path / "t.json", small_trace())
    rc, out, _ = run_cli(capsys, "metrics", str(p))
    assert rc == 0
    assert "step_count" in out


def test_metrics_json_real_trace(capsys):
    p = shared_trace(NW0)
    rc, out, _ = run_cli(capsys, "metrics", str(p), "--format", "json")
    assert rc == 0
    m = json.loads(out)["metrics"]
    assert m["has_gpu"] is True
    assert 0.36 <= m["dataloader_share"] <= 0.44


def test_module_entry_point_help():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "diagnose", "--help"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0
    for cmd in ("analyze", "rules", "metrics"):
        assert cmd in r.stdout


# ----------------------------------------------------------------------------- known bugs
def test_bad_file_in_parallel_read(tmp_path, capsys, monkeypatch, forkable):
    import diagnose.analysis

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (cpus or 1) < 2:
        pytest.skip("parallel reading needs two CPUs")
    monkeypatch.setattr(diagnose.analysis, "_PARALLEL_MIN_BYTES", 0)
    good = write(tmp_path / "a.pt.trace.json", small_trace())
    bad = make_bad(tmp_path, "not_json")
    # named on the command line, read in the pool: one line, exit 2, no traceback
    rc, _, err = run_cli(capsys, "analyze", str(good), str(bad))
    assert rc == 2
    assert_one_error_line(err, bad)
    # found in a folder: set aside with a note, the other run reported
    rc, out, err = run_cli(capsys, "analyze", str(tmp_path))
    assert rc == 0 and f"{bad.name} set aside: " in out and "Traceback" not in err


@pytest.mark.parametrize("argv,phrase", [
    (["analyze", "x.json", "--fail-on", "bogus"], "invalid choice: 'bogus'"),
    # a whole option name only: --fail-on is analyze's, not compare's --fail-on-regression
    (["compare", "a.json", "b.json", "--fail-on", "warning"], "unrecognized arguments"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, phrase):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0] and "--help" in lines[0], err
    if argv[0] in ("analyze", "compare"):  # the command's own help is named
        assert f"torch-diagnose {argv[0]} --help" in lines[0], err


@pytest.mark.parametrize("cmd", ["analyze", "metrics", "compare"])
def test_a_folder_that_cannot_be_read_is_one_line(tmp_path, monkeypatch, capsys, cmd):
    """A folder without read permission (as a user, not root, meets it): Path.is_file
    raises PermissionError there on Python 3.11, which went up as a traceback."""
    import pathlib

    locked = tmp_path / "locked"
    locked.mkdir()
    real_is_file, real_iterdir = pathlib.Path.is_file, pathlib.Path.iterdir

    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    def is_file(self):  # what lies inside cannot be looked at
        if str(self).startswith(str(locked) + "/"):
            denied(self)
        return real_is_file(self)

    def iterdir(self):  # nor listed
        if self == locked:
            denied(self)
        return real_iterdir(self)
    monkeypatch.setattr(pathlib.Path, "is_file", is_file)
    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    argv = [cmd, str(locked)] + ([str(locked)] if cmd == "compare" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "permission denied" in err[0], err


@pytest.mark.parametrize("argv", [["demo", "--quick"], ["autofix", "job.py:make"]])
def test_a_command_that_trains_says_it_needs_torch_where_there_is_none(
        monkeypatch, capsys, argv):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs PyTorch" in err[0], err
