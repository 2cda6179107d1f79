"""The built wheel ships the rule pack and the installed copy finds it; it declares the
TensorBoard tab's entry point, and TensorBoard finds the installed tab through it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

PROBE = """
import json, diagnose
from diagnose.rules.engine import builtin_rules, builtin_rules_dir
print(json.dumps({"file": diagnose.__file__, "count": len(builtin_rules()),
                  "dir": str(builtin_rules_dir())}))
"""


def _rule_counts() -> dict[str, int]:
    """Number of [[rule]] tables in each rules/*.toml of the repository."""
    return {f.name: len(re.findall(r"^\[\[rule\]\]\s*$", f.read_text(), re.MULTILINE))
            for f in sorted((REPO / "rules").glob("*.toml"))}


def _build_wheel(out: Path) -> Path:
    for mod in ("build", "hatchling"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"`{mod}` is not importable: install the dev extra "
                        "(pip install -e '.[dev]') to build the wheel without isolation")
    r = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, f"wheel build failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    wheels = list(out.glob("torch_diagnose-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _install_and_probe(wheel: Path, site: Path, probe: str) -> dict:
    """Install ``wheel`` into ``site`` and run ``probe`` (which prints JSON) with ``site``
    first on the path, from a folder away from the repository."""
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--disable-pip-version-check", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    work = site.parent / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run([sys.executable, "-c", probe], cwd=work, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_wheel_ships_rules_and_installed_copy_loads_them(tmp_path):
    counts = _rule_counts()
    assert counts and all(counts.values()), counts
    wheel = _build_wheel(tmp_path / "dist")

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    shipped = {n.split("/")[-1] for n in names if re.fullmatch(r"diagnose/_rules/[^/]+\.toml", n)}
    assert shipped == set(counts), sorted(n for n in names if "_rules" in n)
    assert "diagnose/rules/engine.py" in names and "diagnose/trace/decode.py" in names
    assert not any(n.startswith(("tests/", "rules/")) for n in names)

    site = tmp_path / "site"
    info = _install_and_probe(wheel, site, PROBE)
    assert (site / "diagnose" / "_rules").is_dir()
    installed = (site / "diagnose").resolve()
    assert Path(info["file"]).resolve().parent == installed, info
    assert Path(info["dir"]).resolve() == installed / "_rules", info
    assert info["count"] == sum(counts.values())


TB_PROBE = """
import json
from tensorboard import default
from diagnose.report.tb_plugin.plugin import DiagnoseLoader, STATIC
found = [p for p in default.get_dynamic_plugins() if p is DiagnoseLoader]
print(json.dumps({"found": len(found), "static": sorted(p.name for p in STATIC.iterdir())}))
"""


def test_wheel_declares_the_tensorboard_tab_and_tensorboard_finds_it(tmp_path):
    pytest.importorskip("tensorboard")
    wheel = _build_wheel(tmp_path / "dist")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        (ep,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = z.read(ep).decode()
    section = re.search(r"^\[tensorboard_plugins\]\n((?:[^\[\n].*\n?)*)", entry_points, re.MULTILINE)
    assert section, entry_points
    assert re.search(r"^diagnose\s*=\s*diagnose\.report\.tb_plugin\.plugin:DiagnoseLoader\s*$",
                     section.group(1), re.MULTILINE), entry_points
    static = {"index.js", "index.html", "tab.css"}
    assert {f"diagnose/report/tb_plugin/static/{n}" for n in static} <= names

    # the installed copy first on the path: its metadata is the one entry points come from
    info = _install_and_probe(wheel, tmp_path / "site", TB_PROBE)
    assert info == {"found": 1, "static": sorted(static)}, info
