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
    "report.html -> autofix (a renderer importing the autofix runner's types)": (
        "diagnose/report/html.py", "if TYPE_CHECKING:\n", "    from ..autofix import AutofixReport\n",
        "independent"),
    "autofix -> session (autofix importing the capture session that imports it)": (
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


# ---------------------------------------------------------------------- a fix is one unit
# DESIGN.md: "adding a fix touches its unit, its config field and its tests, nothing else".
# A fix's parts live in its catalog module: its transform of the step model, and the
# trial's realisation of every config field it changes (in the module of a fix that
# changes the field: the threads split changes num_workers, realised beside the worker
# fixes). The machinery that runs them (the Predictor, the Trial) names no fix and no
# field's realisation.

#: torch and gc calls that make a config field real: only a fix unit's realisation makes them
REALISING = {("cudnn", "benchmark"), ("torch", "set_num_threads"), ("gc", "freeze"),
             ("gc", "unfreeze"), ("torch", "autocast"), ("amp", "GradScaler"),
             ("torch", "compile"), ("torch", "channels_last"), ("data", "BatchSampler")}
#: autofix modules that may still name those: state.py snapshots and restores the user's
#: process state as a whole (the cudnn flag with the RNGs), whatever a trial changed
WHOLE_STATE = {"state.py"}


def _homes() -> dict[str, str]:
    from diagnose.fixes import catalog

    return {f.id: m.__name__ for m in catalog.MODULES for f in m.FIXES}


def _hooks(r) -> list:
    return [h for h in (r.batching, r.loader, r.optimizer, r.process, r.step) if h is not None]


def unit_parts_elsewhere(fixes, homes: dict[str, str], realisations) -> list[str]:
    """Each part of a fix unit that lives outside its unit, in words (empty: none)."""
    from dataclasses import fields as dc_fields

    from diagnose.fixes import TrainConfig

    out: list[str] = []
    for fix in fixes:
        home, t = homes.get(fix.id), fix.transform
        if t is not None and t.cannot is None:
            where = getattr(t.graph, "__module__", None)
            if where != home:
                out.append(f"{fix.id}: its transform lives in {where}, not {home}")
            for hook in (t.per_step, t.outside):
                if hook is not None and not hook.__module__.startswith("diagnose.fixes.catalog"):
                    out.append(f"{fix.id}: its transform's {hook.__name__} lives in "
                               f"{hook.__module__}, outside the fix units")
    changers: dict[str, set[str]] = {}
    for fix in fixes:
        if fix.auto:
            for f in fix.fields:
                changers.setdefault(f, set()).add(homes.get(fix.id, "?"))
    config_fields = {f.name for f in dc_fields(TrainConfig)}
    for name in sorted(set(changers) | config_fields):
        realising = [r for r in realisations if name in r.fields]
        if name not in changers:
            out.append(f"{name}: no automatic fix changes this TrainConfig field")
        if len(realising) != 1:
            out.append(f"{name}: {len(realising)} realisations, not one")
        for r in realising:
            where = {h.__module__ for h in _hooks(r)}
            if not where or not where <= changers.get(name, set()):
                out.append(f"{name}: realised in {sorted(where)}, not in the module of a "
                           f"fix that changes it ({sorted(changers.get(name, set()))})")
    for r in realisations:
        out += [f"{n}: realised but not a TrainConfig field" for n in r.fields
                if n not in config_fields]
    return out


def realising_outside_units(path: Path, src: str) -> list[str]:
    """The calls that make a config field real, and (in trial.py) reads of a config's
    fields, in the code of ``path`` (docstrings and comments aside)."""
    import ast
    from dataclasses import fields as dc_fields

    from diagnose.fixes import TrainConfig

    fields = {f.name for f in dc_fields(TrainConfig)}
    imported = {name for _, name in REALISING}
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            out += [f"{path.name}:{node.lineno}: imports {a.name}" for a in node.names
                    if a.name in imported]
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(
            node.value, "id", None)
        if (owner, node.attr) in REALISING:
            out.append(f"{path.name}:{node.lineno}: {owner}.{node.attr}")
        if path.name == "trial.py" and owner in ("cfg", "config") and node.attr in fields:
            out.append(f"{path.name}:{node.lineno}: reads the config's {node.attr}")
    return out


def test_every_part_of_a_fix_lives_in_its_unit() -> None:
    from diagnose.fixes import FIXES, REALISATIONS

    assert unit_parts_elsewhere(FIXES.values(), _homes(), REALISATIONS) == []


def test_the_trials_name_no_fields_realisation() -> None:
    found = []
    for path in sorted((ROOT / "diagnose" / "autofix").glob("*.py")):
        if path.name not in WHOLE_STATE:
            found += realising_outside_units(path, path.read_text())
    assert found == []


def test_the_unit_checks_flag_a_part_split_off() -> None:
    """Each check fails when a part is put back outside its unit."""
    import dataclasses

    from diagnose.fixes import FIXES, REALISATIONS, Realisation
    from diagnose.stepmodel.transforms import Transform

    homes = _homes()
    # a transform defined elsewhere (here, in a test module)
    def elsewhere(g, change, facts):
        return g

    moved = {**FIXES, "amp": FIXES["amp"].with_transform(Transform(elsewhere))}
    said = unit_parts_elsewhere(moved.values(), homes, REALISATIONS)
    assert said == [f"amp: its transform lives in {__name__}, not diagnose.fixes.catalog.precision"]
    # the same transform, its __module__ said to be the stepmodel's
    t = FIXES["set_to_none"].transform
    assert t is not None
    graph = t.graph
    try:
        graph.__module__ = "diagnose.stepmodel.transforms"
        assert any("set_to_none: its transform lives in diagnose.stepmodel.transforms" in s
                   for s in unit_parts_elsewhere(FIXES.values(), homes, REALISATIONS))
    finally:
        graph.__module__ = "diagnose.fixes.catalog.config"
    # a realisation split off (defined here), one realised twice, one missing
    def threads(cfg, model, optimizer):
        return None

    off = [Realisation(("intra_op_threads",), process=threads) if "intra_op_threads" in r.fields
           else r for r in REALISATIONS]
    assert any(s.startswith("intra_op_threads: realised in ['tests.project.test_house']")
               for s in unit_parts_elsewhere(FIXES.values(), homes, off))
    twice = [*REALISATIONS, dataclasses.replace(REALISATIONS[0])]
    assert "num_workers: 2 realisations, not one" in unit_parts_elsewhere(
        FIXES.values(), homes, twice)
    gone = [r for r in REALISATIONS if "gc_freeze" not in r.fields]
    assert "gc_freeze: 0 realisations, not one" in unit_parts_elsewhere(
        FIXES.values(), homes, gone)
    # a trial that sets a field's process-wide switch itself, or reads a config's field
    trial = ROOT / "diagnose" / "autofix" / "trial.py"
    src = trial.read_text() + (
        "\n\ndef _old(cfg):\n    import torch\n    torch.backends.cudnn.benchmark = True\n"
        "    torch.set_num_threads(cfg.intra_op_threads)\n")
    assert realising_outside_units(trial, src)[-3:] == [
        f"trial.py:{len(src.splitlines()) - 1}: cudnn.benchmark",
        f"trial.py:{len(src.splitlines())}: torch.set_num_threads",
        f"trial.py:{len(src.splitlines())}: reads the config's intra_op_threads"]
