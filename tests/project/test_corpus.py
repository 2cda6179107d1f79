"""The committed corpus of held-out training jobs (benchmarks/corpus): the split puts each
job in exactly one half by the documented SHA-256 rule, every job keeps the job-dict
contract on a couple of batches, and two jobs (one with DataLoader workers, one with no
DataLoader and a hand-written update) give a report with their steps found under
``diagnose`` in a few steps. The full corpus is a benchmark (benchmarks/corpus_predict.py),
not a test. The jobs make their data at first use (about 110 MB, a minute) into their cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks" / "corpus"


def _load(name: str, path: Path, package: bool = False):
    """A module of the corpus' harness, loaded without torch."""
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[str(path.parent)] if package else None)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


corpus = _load("corpus_under_test", CORPUS / "__init__.py", package=True)
NAMES = corpus.names()
COVERS = _load("corpus_common_under_test", CORPUS / "_common.py").COVERS
KEYS = {"model", "loader", "optimizer", "train_step", "batches", "device", "covers",
        "marks_steps"}


def test_the_corpus_has_its_jobs() -> None:
    assert 16 <= len(NAMES) <= 40, NAMES
    assert all(not n.startswith("_") for n in NAMES)


ADAPTED = re.compile(r"Adapted from ([\w.-]+/[\w.-]+), (.+?), at commit ([0-9a-f]{40}) "
                     r"\(([^;]+); text in (licenses/[\w.-]+)\)")


def test_adapted_jobs_keep_their_provenance_and_licence() -> None:
    """A job adapted from someone else's script names its repository, path, commit and
    licence, and says what was changed; the licence's text is committed beside it. The
    adapted jobs come from at least 4 repositories."""
    repos = set()
    for name in NAMES:
        text = (CORPUS / f"{name}.py").read_text()
        doc = text.split('"""')[1]
        m = ADAPTED.search(" ".join(doc.split()))
        if m is None:
            assert "Adapted from" not in doc, f"{name}: provenance not in the documented form"
            continue
        repos.add(m.group(1))
        assert "Changed:" in doc, f"{name}: no list of what was changed"
        licence = CORPUS / m.group(5)
        assert licence.is_file() and licence.stat().st_size > 500, licence
    assert len(repos) >= 4, repos


def test_the_split_puts_each_job_in_exactly_one_half_by_the_rule() -> None:
    halves = corpus.split()
    tune, validate = set(halves["tune"]), set(halves["validate"])
    assert not tune & validate
    assert tune | validate == set(NAMES)
    for name in NAMES:  # the rule is SPLIT.md's: first byte of SHA-256(name), even: tune
        want = ("tune", "validate")[hashlib.sha256(name.encode("utf-8")).digest()[0] % 2]
        assert corpus.half(name) == want
        assert corpus.split([name]) == {want: [name], ("validate" if want == "tune"
                                                       else "tune"): []}
    table = (CORPUS / "SPLIT.md").read_text()
    assert "sha256" in table.lower() and "even" in table and "odd" in table
    for half, names in halves.items():
        for name in names:
            assert f"| {half} | {name} |" in table, f"SPLIT.md does not list {name} in {half}"


@pytest.mark.parametrize("name", NAMES)
def test_every_job_says_its_pattern_and_covers(name: str) -> None:
    text = (CORPUS / f"{name}.py").read_text()
    assert text.startswith('"""'), f"{name}: no docstring naming its pattern"
    assert "def make_job(" in text and "def main(" in text
    assert "pick_device" in text, f"{name}: no device from pick_device"
    assert "/" not in name and name == name.lower()


# one interpreter for every job: torch is imported once, workers start from a small process
_CONTRACT = """
import json, math, sys, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import torch
import corpus
for name in sys.argv[2:]:
    job = corpus.make(name)
    it = job["batches"]()
    losses = [float(job["train_step"](next(it))) for _ in range(2)]
    it.close()
    print("@@", json.dumps({
        "name": name, "keys": sorted(job), "covers": list(job["covers"]),
        "model": isinstance(job["model"], torch.nn.Module),
        "loader": job["loader"] is None or isinstance(job["loader"], torch.utils.data.DataLoader),
        "optimizer": job["optimizer"] is None or isinstance(job["optimizer"], torch.optim.Optimizer),
        "form": bool(job.get("loss_fn")) + bool(job.get("step_fn")),
        "models": all(isinstance(m, torch.nn.Module) for m in job.get("models", [job["model"]])),
        "device": str(job["device"]), "marks": job["marks_steps"], "losses": losses}), flush=True)
"""


@pytest.fixture(scope="module")
def contracts() -> dict[str, dict]:
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", _CONTRACT, str(CORPUS.parent), *NAMES],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("@@ "):
            row = json.loads(line[3:])
            out[row["name"]] = row
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_job_keeps_the_contract_on_two_batches(name: str, contracts: dict) -> None:
    row = contracts[name]
    assert not KEYS - set(row["keys"]), KEYS - set(row["keys"])
    assert row["covers"] and set(row["covers"]) <= set(COVERS), row["covers"]
    assert row["model"] and row["models"] and row["loader"] and row["optimizer"]
    assert row["form"] <= 1, "a job gives loss_fn or step_fn, not both"
    assert row["marks"] is False  # every job's steps are found without d.step()
    assert all(math.isfinite(v) for v in row["losses"]), row["losses"]


def test_the_corpus_covers_the_pipelines() -> None:
    """Together the jobs cover what the corpus is for (COVERS' tags, less none)."""
    text = "".join((CORPUS / f"{n}.py").read_text() for n in NAMES)
    for tag in ("image-decode", "augment", "tokenise", "dict-collate", "in-memory",
                "no-loader", "workers>cpus", "two-models", "hand-update", "parse", "features"):
        assert f'"{tag}"' in text, tag


# two jobs under diagnose, a few steps each, in one interpreter
_DIAGNOSE = """
import json, sys, tempfile, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, sys.argv[1])
import corpus
from diagnose import diagnose
for name in sys.argv[2:]:
    job = corpus.make(name)
    with tempfile.TemporaryDirectory() as tmp:
        d = diagnose(job.get("models") or job["model"], job["loader"], out_dir=tmp,
                     print_report=False, steps=2, warmup=1, wait=1, clock_steps=2)
        it = job["batches"]()
        with d:
            for batch in it:
                job["train_step"](batch)
                if d.done:
                    break
        it.close()
        rep = d.report.to_json()
    print("@@", json.dumps({"name": name, "step_time": rep["step_time"],
                            "notes": rep.get("notes") or []}), flush=True)
"""


def test_two_jobs_give_a_report_with_their_steps_found() -> None:
    """csv_rows_mlp (a DataLoader with 2 workers) and token_slices_gru (no DataLoader, no
    optimizer: a backward and a hand-written update) under diagnose for 2 profiled steps:
    each report has its steps, found without ``d.step()``."""
    pytest.importorskip("torch")
    jobs = ["csv_rows_mlp", "token_slices_gru"]
    r = subprocess.run([sys.executable, "-c", _DIAGNOSE, str(CORPUS.parent), *jobs],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {}
    for line in r.stdout.splitlines():
        if line.startswith("@@ "):
            row = json.loads(line[3:])
            rows[row["name"]] = row
    assert set(rows) == set(jobs), r.stdout[-2000:]
    for name, row in rows.items():
        st = row["step_time"]
        assert st["profiled_steps"] == 2, (name, st)
        assert st["profiled_median_ms"] > 0, (name, st)
        # the report's first line where no step boundary was found (session/step_notes.py)
        assert not any("could not tell where this loop's steps" in n for n in row["notes"]), \
            (name, row["notes"])


# ------------------------------------------------------------------ kept GPU captures
REJUDGE = ROOT / "benchmarks" / "corpus_rejudge.py"
H200 = ROOT / "benchmarks" / "captures" / "h200"


def _script(name: str, path: Path):
    """A benchmark script as a module (registered: its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_rejudge_reads_measured_rows_and_their_halves() -> None:
    rejudge = _script("corpus_rejudge_under_test", REJUDGE)
    text = "\n".join([
        "## tune half (2 jobs)",
        "job_a    IN001    num_workers    num_workers=4     1.34x [1.03, 1.76]    1.68x [1.56, 1.74]"
        "   1.25  yes  (19.1 -> 11.4 ms)  extra",
        "job_a    LA001    cuda_graphs    not timed here: a change to the code, no setting  extra",
        "job_a    LA001    cuda_graphs                  1.05x [0.95, 1.16]    0.95x [0.83, 1.15]"
        "   0.91  no  (10.2 -> 10.7 ms)  repo",
        "## validate half (1 jobs)",
        "job_b    IN001    threads        num_workers=2, intra_op_threads=1   0.94x [0.88, 1.01]"
        "    1.24x [1.17, 1.32]   1.32  no  (14.2 -> 11.5 ms)  repo",
    ])
    rows = rejudge.parse_rows(text)
    assert [(r.half, r.job, r.fix) for r in rows] == [("tune", "job_a", "num_workers"),
                                                      ("validate", "job_b", "threads")]
    assert rows[0].change == {"num_workers": 4} and rows[0].measured == 1.68
    assert rows[1].change == {"num_workers": 2, "intra_op_threads": 1}
    assert rows[1].ci == (1.17, 1.32) and rows[1].was == 0.94


def test_rejudge_predicts_again_from_the_kept_h200_captures(tmp_path: Path) -> None:
    """Real H200 captures (trace, context with the session's probes, host samples) are
    analysed on this CPU machine and each measured row gets a prediction of exactly its
    change, or a reason; both halves are tallied."""
    results = ROOT / "benchmarks" / "results" / "corpus_predict_gpu_h200.txt"
    done = subprocess.run([sys.executable, str(REJUDGE), str(results), str(H200)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [ln for ln in done.stdout.splitlines() if ln.startswith(("tune ", "validate "))]
    assert len(rows) >= 20
    assert all("x [" in ln or "cannot tell" in ln or "not predicted" in ln for ln in rows)
    assert any(ln.startswith("tune:") for ln in done.stdout.splitlines())
    assert any(ln.startswith("validate:") for ln in done.stdout.splitlines())
    # the calibration plot reads the same rows, each with its half
    plot = _script("corpus_plot_under_test", ROOT / "benchmarks" / "corpus_plot.py")
    table = tmp_path / "rejudged.txt"
    table.write_text(done.stdout)
    got = plot.rows([table])
    assert len(got) == len(rows) - sum("x [" not in ln for ln in rows)
    assert {r.half for r in got} == {"tune", "validate"}


def test_rejudge_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REJUDGE), str(tmp_path / "nope.txt"), str(H200)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_grid_rows_are_read_by_the_rejudge_and_changes_name_their_fix() -> None:
    """corpus_grid.py's rows answer no finding (``-``) and carry corpus_predict.py's
    columns; each change is predicted through the fix that sets its fields."""
    grid = _script("corpus_grid_under_test", ROOT / "benchmarks" / "corpus_grid.py")
    rejudge = _script("corpus_rejudge_under_test", REJUDGE)
    text = "\n".join([
        "## tune half (1 jobs)",
        "job_a    -        num_workers    num_workers=0     1.07x [0.69, 1.65]    1.14x [0.99, 1.31]"
        "   1.07  yes  (25.8 -> 22.6 ms)  repo",
        "job_a    -        num_workers    num_workers=2                        not timed: the "
        "job's own settings  repo",
    ])
    rows = rejudge.parse_rows(text)
    assert [(r.rule, r.fix, r.change) for r in rows] == [("-", "num_workers", {"num_workers": 0})]
    assert grid.parse_change("num_workers=1,intra_op_threads=1") == {
        "num_workers": 1, "intra_op_threads": 1}
    assert grid.parse_change("pin_memory=True,non_blocking=True") == {
        "pin_memory": True, "non_blocking": True}
    assert grid.fix_for({"num_workers": 0}) == "num_workers"
    assert grid.fix_for({"num_workers": 1, "intra_op_threads": 1}) == "threads"
    assert grid.fix_for({"pin_memory": True}) == "pin_memory"
    assert grid.fix_for({"learning_rate": 0.1}) is None
    with pytest.raises(ValueError):
        grid.parse_change("num_workers")


def test_a_long_epoch_that_fits_runs_its_first_epoch_untimed() -> None:
    """The timing skips an epoch's cold start (a cache warming in the training process)
    where the rest of the first epoch fits FIRST_EPOCH_S at the step; past it, or with no
    length to count, nothing is run."""
    import torch

    cp = _script("corpus_predict_under_test", ROOT / "benchmarks" / "corpus_predict.py")
    ran: list[int] = []
    job = {"device": torch.device("cpu"), "train_step": ran.append}
    arm = cp.Arm(loader=list(range(300)), threads=None, freeze=False, cfg=None)
    fits = cp.FIRST_EPOCH_S * 1e3 / 300 * 0.9
    assert cp._first_epoch(job, arm, iter(range(1000)), 13, fits) == 287
    assert ran == list(range(287))  # the epoch's other 287 batches, in order
    ran.clear()
    assert cp._first_epoch(job, arm, iter(range(1000)), 13, fits / 0.9 * 1.1) == 0
    endless = cp.Arm(loader=iter(range(1000)), threads=None, freeze=False, cfg=None)
    assert cp._first_epoch(job, endless, iter(range(1000)), 13, fits) == 0
    assert cp._first_epoch(job, arm, iter(range(1000)), 13, None) == 0
    assert ran == []
