"""The corpus of other people's training jobs (benchmarks/corpus): every job keeps its
provenance, the split puts each job in exactly one half, and two jobs (one with a
DataLoader, one without) still train a few steps. The full corpus is a benchmark
(benchmarks/corpus_predict.py), not a test."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _find() -> Path | None:
    """The corpus benchmarks/corpus_predict.py uses: $TORCH_DIAGNOSE_CORPUS, else
    ../shared/corpus, else a local draft in benchmarks/corpus (other people's code: the
    repository does not commit it)."""
    env = os.environ.get("TORCH_DIAGNOSE_CORPUS")
    for d in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "corpus",
                                               ROOT / "benchmarks" / "corpus"]:
        if (d / "__init__.py").is_file():
            return d
    return None


_FOUND = _find()
if _FOUND is None:
    pytest.skip("no training-job corpus here (../shared/corpus): its jobs are other "
                "people's code and are not in the repository", allow_module_level=True)
CORPUS: Path = _FOUND


def _corpus():
    """benchmarks/corpus/__init__.py as a module (names, split), without torch."""
    spec = importlib.util.spec_from_file_location("corpus", CORPUS / "__init__.py",
                                                  submodule_search_locations=[str(CORPUS)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


corpus = _corpus()
NAMES = corpus.names()
_spec = importlib.util.spec_from_file_location("corpus_common", CORPUS / "_common.py")
assert _spec is not None and _spec.loader is not None
_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_common)
COVERS = _common.COVERS
HEADER = ("Source:", "Commit:", "Licence:", "Covers:", "Changed")
LICENCES = {"BSD-3-Clause": "BSD-3-Clause.pytorch-examples.txt", "MIT": "MIT.minGPT.txt",
            "Apache-2.0": "Apache-2.0.txt"}


def test_the_corpus_has_enough_jobs_from_enough_sources() -> None:
    assert len(NAMES) >= 16, NAMES
    sources = {re.search(r"^Source:\s+(\S+?),", (CORPUS / f"{n}.py").read_text(),
                         re.M).group(1) for n in NAMES}  # type: ignore[union-attr]
    assert len(sources) >= 4, sources


@pytest.mark.parametrize("name", NAMES)
def test_every_job_keeps_its_provenance(name: str) -> None:
    text = (CORPUS / f"{name}.py").read_text()
    doc = text.split('"""')[1]
    for field in HEADER:
        assert field in doc, f"{name}: no {field} line in its header"
    commit = re.search(r"^Commit:\s+([0-9a-f]{8,40})", doc, re.M)
    assert commit, f"{name}: the commit is not a hash"
    licence = re.search(r"^Licence:\s+(\S+)", doc, re.M).group(1).rstrip(",")  # type: ignore[union-attr]
    assert licence in LICENCES, f"{name}: licence {licence} has no text in LICENSES/"
    assert (CORPUS / "LICENSES" / LICENCES[licence]).is_file()
    assert "def make_job(" in text and "def main(" in text
    covers = re.search(r'"covers": \(([^)]*)\)', text)
    assert covers, f"{name}: make_job() names no covers"
    tags = set(re.findall(r'"([^"]+)"', covers.group(1)))
    assert tags and tags <= set(COVERS), f"{name}: unknown covers {tags - set(COVERS)}"
    assert f"| {name} |" in (CORPUS / "PROVENANCE.md").read_text(), f"{name}: not in PROVENANCE.md"


def test_the_split_puts_each_job_in_exactly_one_half() -> None:
    halves = corpus.split()
    tune, validate = set(halves["tune"]), set(halves["validate"])
    assert not tune & validate
    assert tune | validate == set(NAMES)
    assert len(tune) >= 6 and len(validate) >= 6, halves
    for name in NAMES:  # the rule is the documented one, and SPLIT.md says the same
        assert corpus.half(name) in ("tune", "validate")
        assert corpus.split([name])[corpus.half(name)] == [name]
    table = (CORPUS / "SPLIT.md").read_text()
    for half, names in halves.items():
        for name in names:
            assert f"| {half} | {name} |" in table, f"SPLIT.md does not list {name} in {half}"


# one interpreter for both jobs: torch is imported once
_RUN = """
import sys
sys.path.insert(0, sys.argv[1])
import importlib
for name in sys.argv[2:]:
    importlib.import_module(name).main(steps=3)
    print(f"@@ {name} ran", flush=True)
"""


def test_two_jobs_train_a_few_steps() -> None:
    """mingpt_adder (a DataLoader with 4 workers) and nanogpt_train_shakespeare_char (no
    DataLoader: memmap slices) run their own loops for 3 steps each."""
    pytest.importorskip("torch")
    jobs = ["mingpt_adder", "nanogpt_train_shakespeare_char"]
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", _RUN, str(CORPUS), *jobs],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in jobs:
        assert f"@@ {name} ran" in r.stdout, r.stdout[-2000:]
    assert r.stdout.count("loss") >= 6, r.stdout[-2000:]
