"""The README, the user's page: its snippets run as written, and what it states holds.

Its first screen (80 lines) takes a user from install to a finding and to autofix; its
Python snippets, run one after the other as a user would paste them, print each report
once; every command, keyword and figure it names exists where it says.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
RESULTS = (REPO / "benchmarks" / "RESULTS.md").read_text()
MAX_README_LINES = 300


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert m, f"README has no '## {title}' section"
    return m.group(1)


def test_the_readme_is_one_page():
    n = len(README.splitlines())
    assert n <= MAX_README_LINES, f"README.md is {n} lines (at most {MAX_README_LINES}): " \
                                  "reference belongs in docs/"


def test_first_screen_goes_from_install_to_a_finding():
    head = "\n".join(README.splitlines()[:80])
    for needed in ("## Install", "pip install", "with diagnose(model, loader) as d:",
                   "## Reading a finding", "torch-diagnose analyze", ".autofix(",
                   "torch-diagnose autofix"):
        assert needed in head, f"{needed!r} is not in the README's first 80 lines"
    # developer material lives in CONTRIBUTING.md, linked from the README
    assert "## Layout" not in README and "(CONTRIBUTING.md)" in README
    assert "## Layout" in (REPO / "CONTRIBUTING.md").read_text()


def test_every_python_snippet_compiles():
    blocks = _python_blocks()
    assert len(blocks) >= 5, len(blocks)
    for i, block in enumerate(blocks):
        compile(block, f"README.md python block {i}", "exec")


def test_snippets_print_each_report_once(tmp_path):
    """The quickstart, autofix and hand-marked-steps snippets, pasted one after the other."""
    blocks = _python_blocks()
    quickstart, autofix = blocks[:2]
    manual = next(b for b in blocks if "d.step()" in b)
    assert "with diagnose(" in quickstart and ".autofix(" in autofix
    assert "DataLoader" not in manual.split("with diagnose")[0].split("#")[0]
    mark = "print('=== next snippet', flush=True)\n"
    script = tmp_path / "readme_snippets.py"
    script.write_text(quickstart + mark + autofix + mark + manual)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second, third = proc.stdout.split("=== next snippet\n")
    # each snippet's report once: the diagnosis (printed on exit of the with-block), the
    # autofix report, the diagnosis of the loop whose steps were marked by hand
    assert len(re.findall(r"^step time ", first, re.M)) == 1, first
    assert len(re.findall(r"^autofix \d+ trials? in ", second, re.M)) == 1, second
    assert len(re.findall(r"^step time ", third, re.M)) == 1, third
    # and the run folders the snippets' comments promise are there
    assert len(list((tmp_path / "diagnose-runs").iterdir())) >= 2


def test_named_keywords_and_methods_exist():
    """The signatures the README teaches: diagnose(..., step_fn=), autofix(budget_s=),
    d.step(), report.code / report.loader, and the callbacks' classes."""
    from diagnose.autofix import autofix
    from diagnose.session import Session

    params = inspect.signature(Session).parameters
    for kw in ("optimizer", "loss_fn", "step_fn", "tensorboard", "steps", "wait", "out_dir"):
        assert kw in params, f"diagnose() has no {kw}="
    auto = inspect.signature(autofix).parameters
    for kw in ("budget_s", "step_fn", "loss_fn", "try_all", "max_trials"):
        assert kw in auto, f"autofix() has no {kw}="
    assert callable(getattr(Session, "step", None)) and isinstance(Session.done, property)
    for name in ("lightning", "transformers"):
        tree = ast.parse((REPO / "diagnose" / "integrations" / f"{name}.py").read_text())
        assert any(isinstance(n, ast.ClassDef) and n.name == "DiagnoseCallback"
                   for n in tree.body), name
        assert f"diagnose.integrations.{name} import DiagnoseCallback" in README


def test_every_subcommand_is_on_the_page():
    from diagnose.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "cmd")
    for cmd in sub.choices:  # type: ignore[union-attr]
        assert f"`torch-diagnose {cmd}" in _section("The command line"), cmd


def test_the_limits_quote_the_current_figures():
    """Every 'N of M' the limits quote is a figure RESULTS.md holds now (a rerun of the
    benchmarks that changes one makes this fail until the README says the new figure)."""
    limits = _section("Limits")
    quoted = re.findall(r"\b(\d+ of \d+)\b", limits)
    assert len(quoted) >= 6, quoted
    for q in quoted:
        assert re.search(rf"\b{q}\b", RESULTS), f"README's limits quote '{q}', " \
                                               "which benchmarks/RESULTS.md does not hold"
    for gpu in ("H100", "H200"):
        assert gpu in limits
