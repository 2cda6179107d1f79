"""Every script under benchmarks/ still starts: its imports resolve against today's package
and its argument parser answers ``--help``. The benchmarks are run by hand (and on the GPU
machine), not by the tests, so a renamed helper would otherwise break them unseen (two
had: a private ``_cpus`` and ``pooled_median`` were gone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))

# one interpreter for all of them: torch is imported once
_RUN_ALL = """
import contextlib, io, runpy, sys
sys.path.insert(0, sys.argv[1])
for path in sys.argv[2:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        print(f"{path}: did not stop at --help")
    except SystemExit as e:
        if e.code not in (0, None):
            print(f"{path}: exit {e.code}")
        elif "usage:" not in out.getvalue():
            print(f"{path}: no usage text")
    except Exception as e:
        print(f"{path}: {type(e).__name__}: {e}")
"""


def test_every_benchmark_script_starts() -> None:
    assert len(SCRIPTS) >= 10, SCRIPTS
    r = subprocess.run([sys.executable, "-c", _RUN_ALL, str(BENCH), *map(str, SCRIPTS)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "", r.stdout
