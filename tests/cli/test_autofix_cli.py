"""`torch-diagnose autofix TARGET`: loads the user's objects from file.py:function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from diagnose import cli  # noqa: E402
from tests.conftest import REPO  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """As in test_tune.py: OpenMP threads of a tiny model spin on a busy 2-CPU machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

WORKLOAD = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

def make():
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    ds = TensorDataset(torch.randn(512, 8), torch.randint(0, 4, (512,)))
    return {"model": model, "loader": DataLoader(ds, batch_size=32),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loss_fn": nn.functional.cross_entropy}

def broken():
    return 42

def no_loader():
    d = make(); del d["loader"]; return d

def no_optimizer():
    d = make(); d["optimizer"] = None; return d

def odd_optimizer():
    d = make(); d["optimizer"] = 42; return d

def empty_loader():
    d = make(); d["loader"] = DataLoader(TensorDataset(torch.randn(0, 8)), batch_size=32)
    return d
'''


def test_autofix_command(tmp_path: Path, capsys) -> None:
    src = tmp_path / "work.py"
    src.write_text(WORKLOAD)
    out, js, txt = tmp_path / "r.json", tmp_path / "o.json", tmp_path / "o.txt"
    runs = tmp_path / "runs"
    rc = cli.main(["autofix", f"{src}:make", "--quick", "--fixes",
                   "persistent_workers,set_to_none", "--json", str(out), "-o", str(js),
                   "--out-dir", str(runs), "--try-all"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert [d["status"] for d in data["decisions"]] == ["not applicable", "no change"]
    assert json.loads(js.read_text()) == data  # -o x.json: JSON, as --json
    (run,) = runs.iterdir()  # the run folder autofix was given: its report is there
    assert json.loads((run / "autofix.json").read_text()) == data
    printed = capsys.readouterr().out
    assert "autofix decisions" in printed and str(run) in printed
    # fixes given: no diagnosis was made, so none is pointed to
    assert not [p for p in run.iterdir() if p.is_dir()] and "the diagnosis" not in printed
    rc = cli.main(["autofix", f"{src}:make", "--quick", "--fixes", "set_to_none",
                   "-o", str(txt), "--out-dir", str(runs)])
    assert rc == 0
    text = txt.read_text()
    assert "autofix decisions" in text and not text.lstrip().startswith("{")
    assert capsys.readouterr().err.splitlines()[-1] == f"wrote {txt}"
    page = tmp_path / "af.html"
    rc = cli.main(["autofix", f"{src}:make", "--quick", "--fixes", "set_to_none",
                   "-o", str(page), "--out-dir", str(runs)])
    assert rc == 0 and capsys.readouterr().err.splitlines()[-1] == f"wrote {page}"
    html = page.read_text()
    assert html.startswith("<!doctype html>") and 'data-fix="set_to_none"' in html


def test_report_files_of_demo_and_autofix(tmp_path: Path, capsys) -> None:
    """demo and autofix share their report files: -o FILE in the format its name says
    (.html: a page with predicted beside measured), --json FILE, each said on stderr."""
    from argparse import Namespace

    from diagnose.cli.autofix import _outputs, _write_outputs
    from tests.report.test_pages import _autofix_result

    r = _autofix_result()
    run = tmp_path / "run"
    run.mkdir()
    for name in ("af.html", "af.json", "af.txt"):
        args = Namespace(json=str(tmp_path / "also.json"), output=str(tmp_path / name))
        _write_outputs(_outputs(args), r, run)
        err = capsys.readouterr().err.splitlines()
        assert err == [f"wrote {tmp_path / 'also.json'}", f"wrote {tmp_path / name}"]
    assert json.loads((run / "autofix.json").read_text())["decisions"][0]["fix"] == \
        "num_workers"
    page = (tmp_path / "af.html").read_text()
    assert 'data-fix="num_workers" data-status="kept"' in page and "1.85x" in page
    assert json.loads((tmp_path / "af.json").read_text()) == r.to_json()
    assert "autofix decisions" in (tmp_path / "af.txt").read_text()
    for cmd in ("demo", "autofix"):  # both take -o x.html
        ns = cli._parser().parse_args([cmd, *(["t.py:f"] if cmd == "autofix" else []),
                                       "-o", "x.html"])
        assert _outputs(ns) == [("x.html", "html")]


@pytest.mark.parametrize("argv,phrase", [
    (["--json", "r.txt"], "--json contradicts the file name r.txt"),
    (["--json", "r.html"], "--json contradicts the file name r.html"),
])
def test_autofix_output_name_checked_first(tmp_path: Path, capsys, argv: list[str],
                                           phrase: str) -> None:
    """A report file the command cannot write is refused before the target runs."""
    src = tmp_path / "work.py"
    src.write_text(WORKLOAD.replace("def make():", "def make():\n    raise SystemExit(9)"))
    assert cli.main(["autofix", f"{src}:make", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and phrase in err[0], err


SIBLING = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

def tiny_loader():
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    return DataLoader(ds, batch_size=32)
'''

JOB = '''
import torch
from torch import nn

from mydata import tiny_loader  # a module next to this file

def make_job():
    model = nn.Linear(8, 4)
    return {"model": model, "loader": tiny_loader(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loss_fn": nn.functional.cross_entropy}
'''


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command line in a fresh process: only the package itself on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "diagnose", *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_autofix_target_imports_its_sibling_module(tmp_path: Path) -> None:
    """As `python job/job.py` would: the target's folder is on sys.path, no PYTHONPATH."""
    job, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    job.mkdir()
    elsewhere.mkdir()
    (job / "mydata.py").write_text(SIBLING)
    (job / "job.py").write_text(JOB)
    out = tmp_path / "r.json"
    r = _cli("autofix", f"{job / 'job.py'}:make_job", "--quick", "--fixes", "set_to_none",
             "--out-dir", str(tmp_path / "runs"), "-o", str(out), cwd=elsewhere)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [d["fix"] for d in json.loads(out.read_text())["decisions"]] == ["set_to_none"]

    (job / "job.py").write_text(JOB.replace("from mydata", "from mydata_gone"))
    r = _cli("autofix", f"{job / 'job.py'}:make_job", "--quick", cwd=elsewhere)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "'mydata_gone'" in err[0] and str(job) in err[0]


@pytest.mark.parametrize("target,msg", [
    ("nocolon", "expected path/to/file.py:function"),
    ("missing.py:make", "no such file"),
    ("{src}:nothing", "'nothing' is not defined in work2.py (its functions: "),
    ("{src}:broken", "must return a dict with model, loader, optimizer and loss_fn or "
                     "step_fn (it returned a value of type int)"),
    # a new user's: the key was not named, the Python API's advice went to the CLI
    ("{src}:no_loader", "its dict has no loader"),
    ("{src}:no_optimizer", "its dict has no optimizer"),
    ("{src}:odd_optimizer", "its optimizer is of type int, not a torch.optim optimizer"),
    # a new user's: these read like the tool's own errors ("Empty module name", "cannot
    # import (autofix.py, line 312)")
    (":make_job", "(the file or module is missing)"),
    ("{src}:", "(the function is missing)"),
    ("{src}.orig:make_job", "not a Python file autofix can import (name it *.py)"),
])
def test_autofix_command_errors_are_one_line(tmp_path: Path, capsys, target: str,
                                             msg: str) -> None:
    src = tmp_path / "work2.py"
    src.write_text(WORKLOAD)
    (tmp_path / "work2.py.orig").write_text(WORKLOAD)
    assert cli.main(["autofix", target.format(src=src)]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_function_the_file_does_not_define_is_named_before_it_runs(tmp_path: Path,
                                                                    capsys) -> None:
    """Importing runs the file: a new user's `autofix mem_train.py:nope` trained for 37 s
    before saying so. The source is read first; a name bound at run time (a loop's, a
    star import's) is still looked up after the import."""
    ran = tmp_path / "ran"
    src = tmp_path / "script.py"
    src.write_text(f"open({str(ran)!r}, 'w').write('x')\n\ndef train():\n    pass\n\n"
                   "for name in ['late']:\n    globals()[name] = train\nlate2 = train\n")
    assert cli.main(["autofix", f"{src}:nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope' is not defined in script.py (its functions: train)" in err
    assert not ran.exists()
    assert cli.main(["autofix", f"{src}:late2"]) == 2  # bound: imported, then called
    assert ran.exists() and "not defined" not in capsys.readouterr().err


@pytest.mark.parametrize("flags,msg", [
    (["--budget", "-5"], "--budget -5: give a number > 0"),
    (["--budget", "0"], "--budget 0: give a number > 0"),
    (["--max-trials", "-1"], "--max-trials -1: give a number >= 0"),
    (["--min-gain", "-0.1"], "--min-gain -0.1: give a number >= 0"),
])
def test_autofix_numbers_are_checked_before_the_job_is_made(tmp_path: Path, capsys,
                                                            flags: list[str], msg: str) -> None:
    """A new user's ``--budget -5`` was named as the Python parameter, after make_job()
    had built the job (its DataLoader warning first): the flag is named, and nothing of
    the target runs."""
    src = tmp_path / "made.py"
    src.write_text("def make_job():\n    raise SystemExit('make_job ran')\n")
    assert cli.main(["autofix", f"{src}:make_job", *flags]) == 2
    err = capsys.readouterr().err
    assert msg in err and "make_job ran" not in err and len(err.strip().splitlines()) == 1


def test_the_job_sees_its_own_command_line_not_torch_diagnoses(tmp_path: Path, capsys) -> None:
    """A training script that parses its command line when imported (argparse at the top)
    sees ``[job.py]``, as ``python job.py`` gives it, not ``autofix job.py:fn --budget``;
    the CLI's own argv is back afterwards."""
    src = tmp_path / "argv_job.py"
    src.write_text("import argparse, sys\nSEEN = list(sys.argv)\n"
                   "argparse.ArgumentParser().parse_args()\n"
                   "def make_job():\n    raise SystemExit(repr(SEEN))\n")
    before = list(sys.argv)
    assert cli.main(["autofix", f"{src}:make_job", "--budget", "30"]) == 2
    err = capsys.readouterr().err
    assert f"[{str(src)!r}]" in err and "--budget" not in err and "unrecognized" not in err
    assert sys.argv == before


@pytest.mark.parametrize("body,msg", [
    ("import sys\nint(sys.argv[2])\n", "raised while being imported: IndexError"),
    ("import sys\nsys.exit(3)\n", "exited while being imported (status 3)"),
    ("def make_job():\n    return {}['model']\n", "raised KeyError: 'model' (bad_job.py, line 2)"),
])
def test_a_job_that_fails_as_it_is_made_is_one_line(tmp_path: Path, capsys, body: str,
                                                     msg: str) -> None:
    """The job's own error while imported or set up: one line naming it and its line in
    the job, exit 2 (1 is a finding), no traceback."""
    src = tmp_path / "bad_job.py"
    src.write_text(body + ("" if "make_job" in body else "def make_job():\n    return {}\n"))
    assert cli.main(["autofix", f"{src}:make_job"]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_diagnosis_autofix_made_is_named(tmp_path: Path) -> None:
    """Autofix's own capture is a run folder inside its run folder: the command points to
    it, so that the findings its table names (the "by" column) can be read."""
    from diagnose.cli.autofix import _diagnoses

    run = tmp_path / "run"
    (run / "20261130-222535-705").mkdir(parents=True)
    (run / "20261130-222535-705" / "report.json").write_text("{}")
    (run / "empty").mkdir()
    (run / "autofix.json").write_text("{}")
    assert _diagnoses(run) == [run / "20261130-222535-705"]
    assert _diagnoses(tmp_path / "gone") == []


BAD_IN_A_TRIAL = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

class Rows(Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        if i == 40:
            raise ValueError("bad sample 40")
        return torch.randn(8), 0

def make_job(workers):
    model = nn.Linear(8, 4)
    return {"model": model, "loader": DataLoader(Rows(), batch_size=32, num_workers=workers),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loss_fn": nn.functional.cross_entropy}

def shapes():
    model = nn.Linear(4, 4)
    ds = TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    return {"model": model, "loader": DataLoader(ds, batch_size=32),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
            "loss_fn": nn.functional.cross_entropy}

def sample():
    return make_job(0)

def sample_in_a_worker():
    return make_job(1)

def wants_arguments(a, b):
    return {}
'''


@pytest.mark.parametrize("fn,msg", [
    ("shapes", "the job raised in a trial step: RuntimeError: mat1 and mat2 shapes"),
    ("sample", "the job raised in a trial step: ValueError: bad sample 40 (trial_job.py, line 11)"),
    ("sample_in_a_worker", "ValueError: bad sample 40 (trial_job.py, line 11)"),
    ("wants_arguments", "raised TypeError: wants_arguments() missing 2 required positional"),
])
def test_the_jobs_own_error_in_a_trial_is_one_line(tmp_path: Path, capsys, fn: str,
                                                   msg: str) -> None:
    """A new user's model with the wrong input size, or a dataset with a bad sample, ended
    autofix with 50 lines of traceback through torch-diagnose's files: the job's own error
    is one line naming where in the job it came from, exit 2. A function that wants
    arguments was blamed on autofix.py's line; it names no place now. The run folder made
    for it is gone with nothing in it (a new user found an empty one left)."""
    src = tmp_path / "trial_job.py"
    src.write_text(BAD_IN_A_TRIAL)
    runs = tmp_path / "runs"
    assert cli.main(["autofix", f"{src}:{fn}", "--budget", "20", "--quick",
                     "--out-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert msg in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "autofix.py" not in err
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def test_an_unknown_fix_is_named_before_the_job_is_made(tmp_path: Path, capsys) -> None:
    src = tmp_path / "made.py"
    src.write_text("def make_job():\n    raise SystemExit('make_job ran')\n")
    assert cli.main(["autofix", f"{src}:make_job", "--fixes", "amp,XX"]) == 2
    err = capsys.readouterr().err
    assert "--fixes: unknown fix 'XX'" in err and "make_job ran" not in err


@pytest.mark.parametrize("flags,msg", [
    # a new user's: "--fixes ," ran and said the diagnosis named no fix
    (["--fixes", ","], "--fixes ',': names no fix"),
    # a new user's --json into a missing folder was refused after the whole autofix
    (["--json", "{tmp}/gone/x.json"], "x.json: cannot write (no folder"),
    (["-o", "{tmp}"], ": is a folder (give a file name)"),
    # "File exists" for a file where the runs' folder should be
    (["--out-dir", "{tmp}/made.py"], "made.py is a file, not a folder"),
])
def test_what_autofix_cannot_do_is_said_before_the_job_is_made(
        tmp_path: Path, capsys, flags: list[str], msg: str) -> None:
    src = tmp_path / "made.py"
    src.write_text("def make_job():\n    raise SystemExit('make_job ran')\n")
    args = [f.format(tmp=tmp_path) for f in flags]
    assert cli.main(["autofix", f"{src}:make_job", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and "make_job ran" not in err and len(err.strip().splitlines()) == 1, err


def test_an_empty_loader_is_said_so(tmp_path: Path, capsys) -> None:
    """A new user's empty loader ended autofix with "StopIteration: (dataloader.py, line
    715)"."""
    src = tmp_path / "work3.py"
    src.write_text(WORKLOAD)
    assert cli.main(["autofix", f"{src}:empty_loader", "--budget", "20", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "the loader gives no batches" in err and "StopIteration" not in err, err
    assert len(err.strip().splitlines()) == 1, err
