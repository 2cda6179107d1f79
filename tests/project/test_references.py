"""References in the package's own text stay true, and the package carries no run evidence.

(a) Every repository path a docstring or comment in ``diagnose/`` names exists (in the
repository, or in the ``shared`` folder beside it). (b) ``diagnose/`` names no benchmark
job and no dated run: the evidence behind a number lives in ``benchmarks/`` and the commit
messages, and the code states what it does and the model it follows.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "diagnose"
SHARED = ROOT.parent / "shared"

FILES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
IDS = [p.relative_to(ROOT).as_posix() for p in FILES]

#: top-level folders whose paths the text may name
TOP = ("benchmarks", "tests", "diagnose", "samples", "rules", "docs", "notebooks")
PATH = re.compile(r"(?<![\w./<>-])((?:" + "|".join(TOP) + r")/[\w./*-]*[\w*])")
MARKDOWN = re.compile(r"(?<![\w./<>-])([\w-]+\.md)\b")
#: names the text may use that are written at run time, not files of the repository
ALLOWED: frozenset[str] = frozenset()

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
CLOCK_UTC = re.compile(r"\b\d{1,2}:\d\d(?::\d\d)? ?UTC\b")


def prose(path: Path) -> str:
    """The docstrings and comments of one module, one piece a line."""
    src = path.read_text(encoding="utf-8")
    parts = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            parts.append(tok.string)
    return "\n".join(parts)


@cache
def markdown_names() -> frozenset[str]:
    """Names of the Markdown files in the repository and the shared folder."""
    names = set()
    for top in (ROOT, SHARED):
        for _, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            names.update(f for f in files if f.endswith(".md"))
    return frozenset(names)


def exists(ref: str) -> bool:
    ref = ref.rstrip(".")
    if ref in ALLOWED:
        return True
    for base in (ROOT, SHARED):
        if "*" in ref:
            if any(base.glob(ref)):
                return True
        elif (base / ref).exists():
            return True
    return False


def missing_references(path: Path) -> list[str]:
    text = prose(path)
    bad = [ref for ref in PATH.findall(text) if not exists(ref)]
    bad += [name for name in MARKDOWN.findall(text)
            if name not in ALLOWED and name not in markdown_names()]
    return sorted(set(bad))


@cache
def job_names() -> frozenset[str]:
    """The benchmark jobs' names: the modules of benchmarks/jobs and benchmarks/sample_jobs,
    and the samples whose names are identifiers rather than words (``slow_loader``; not
    ``healthy`` or ``oom``, which the package's prose uses as words)."""
    names = set()
    for folder in (ROOT / "benchmarks" / "jobs", ROOT / "benchmarks" / "sample_jobs"):
        names.update(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    names.update(p.stem for p in (ROOT / "samples").glob("*.py")
                 if not p.stem.startswith("_") and "_" in p.stem and p.stem != "record_traces")
    return frozenset(names)


def test_job_names_found() -> None:
    assert {"tensor_rows", "too_many_workers", "slow_loader"} <= job_names()


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_paths_named_exist(path: Path) -> None:
    missing = missing_references(path)
    assert not missing, f"named in docstrings/comments but not found: {missing}"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_no_benchmark_jobs_or_dated_runs(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    jobs = sorted({m for m in re.findall(r"\b\w+\b", text) if m in job_names()})
    dates = sorted(set(DATE.findall(text)) | set(CLOCK_UTC.findall(text)))
    assert not jobs and not dates, f"benchmark jobs {jobs} / dated runs {dates}: move to benchmarks/"
