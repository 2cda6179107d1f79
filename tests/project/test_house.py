"""The house rules (pyproject [tool.importlinter], README "Layout") hold, and would catch the
cycles the package used to have: each is put back into a copy of the package and
`lint-imports` must then fail, naming the contract it breaks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which(
    "lint-imports")

pytestmark = pytest.mark.skipif(LINT is None, reason="import-linter is not installed")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([LINT, "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_lint_imports_passes_on_the_package() -> None:
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_no_import_cycle_anywhere() -> None:
    """Stricter than the contracts: no chain leads back to any module, parents included."""
    g = grimp.build_graph("diagnose")  # TYPE_CHECKING and in-function imports included
    cycles = [(m, i) for m in sorted(g.modules) for i in g.find_modules_directly_imported_by(m)
              if g.chain_exists(importer=i, imported=m)]
    assert cycles == []


def test_report_and_tune_are_result_types_without_renderers() -> None:
    g = grimp.build_graph("diagnose")
    for result in ("diagnose.result", "diagnose.autofix.decisions"):
        up = g.find_upstream_modules(result)
        assert not {m for m in up if m.startswith(("diagnose.report", "diagnose.autofix.render",
                                                   "diagnose.autofix.runner", "diagnose.session"))}
    assert not any(m.startswith("diagnose.autofix") for m in g.find_upstream_modules(
        "diagnose.report", as_package=True))
    assert not list((ROOT / "diagnose").glob("tune_*.py"))


# The old cycles, one line each, put back where they were.
OLD_CYCLES = {
    "api <-> report.text (result type and its renderer)": (
        "diagnose/report/text.py", "if TYPE_CHECKING:\n", "    from ..api import Report\n",
        "One-way house"),
    "report.html -> tune (a renderer importing the autofix runner's types)": (
        "diagnose/report/html.py", "if TYPE_CHECKING:\n", "    from ..tune import AutofixReport\n",
        "independent"),
    "tune -> session (autofix importing the capture session that imports it)": (
        "diagnose/autofix/runner.py", "def planned_fixes(", None, "One-way house"),
}


@pytest.mark.parametrize("case", sorted(OLD_CYCLES))
def test_contracts_fail_on_the_old_cycles(case: str, tmp_path: Path) -> None:
    rel, anchor, line, contract = OLD_CYCLES[case]
    shutil.copytree(ROOT / "diagnose", tmp_path / "diagnose",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    f = tmp_path / rel
    src = f.read_text()
    assert anchor in src, f"{rel} no longer has {anchor!r}: update this test"
    if line is None:  # an import inside a function counts too
        new = src.replace(anchor, "def _baseline():\n    from ..session import Session\n"
                          "    return Session\n\n\n" + anchor, 1)
    else:
        new = src.replace(anchor, anchor + line, 1)
    f.write_text(new)
    r = _lint(tmp_path)
    assert r.returncode != 0, r.stdout
    assert "BROKEN" in r.stdout and contract in r.stdout, r.stdout
