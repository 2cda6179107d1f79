"""The corpus: training jobs written for the project from scratch (one common pipeline
shape each) and adapted from other people's scripts (their provenance and licence in each
module's docstring), benchmarks/corpus/<name>.py, split once into a tune half and a
validate half by the rule in SPLIT.md.

    import corpus                               # with benchmarks/ on sys.path
    corpus.names()                              # every job
    corpus.split()                              # {"tune": [...], "validate": [...]}
    job = corpus.make("jpeg_folder_convnet")    # make_job() of that module

The job modules import their helpers relatively (``from ._common import ...``), so another
corpus whose modules import a top-level ``_common`` can sit on sys.path beside this one.
Each job makes its data at first use, into :func:`corpus._common.cache_dir`.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HALVES = ("tune", "validate")


def names() -> list[str]:
    """Every job in the corpus: the modules in this folder not starting with ``_``."""
    return sorted(p.stem for p in HERE.glob("[!_]*.py"))


def half(name: str) -> str:
    """The half a job belongs to, by SPLIT.md's rule: the first byte of the SHA-256 of its
    name (UTF-8) even -> "tune", odd -> "validate"."""
    return HALVES[hashlib.sha256(name.encode("utf-8")).digest()[0] % 2]


def split(jobs: list[str] | None = None) -> dict[str, list[str]]:
    """``jobs`` (default: every job) by half; each job lands in exactly one."""
    out: dict[str, list[str]] = {h: [] for h in HALVES}
    for name in jobs if jobs is not None else names():
        out[half(name)].append(name)
    return out


def module(name: str) -> Any:
    """The job's module, a submodule of this package (imported once)."""
    if name not in names():
        raise KeyError(f"no job {name!r} in {HERE}")
    return importlib.import_module(f"{__name__}.{name}")


def make(name: str, **kwargs: Any) -> dict[str, Any]:
    """A fresh job: ``make_job(**kwargs)`` of benchmarks/corpus/<name>.py."""
    return module(name).make_job(**kwargs)
