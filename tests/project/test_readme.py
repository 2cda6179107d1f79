"""The README's snippets, run as written: a newcomer's first hour starts there.

Its first screen (80 lines) takes a user from install to a finding, and its Python
snippets, run one after the other as a user would paste them, print each report once.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def test_first_screen_goes_from_install_to_a_finding():
    head = "\n".join(README.splitlines()[:80])
    for needed in ("## Install", "pip install", "with diagnose(model, loader) as d:",
                   "## Reading a finding", "torch-diagnose analyze", ".autofix(",
                   "torch-diagnose autofix"):
        assert needed in head, f"{needed!r} is not in the README's first 80 lines"
    # developer material lives in CONTRIBUTING.md, linked from the README
    assert "## Layout" not in README and "(CONTRIBUTING.md)" in README
    assert "## Layout" in (REPO / "CONTRIBUTING.md").read_text()


def test_snippets_print_each_report_once(tmp_path):
    quickstart, autofix = _python_blocks()[:2]
    assert "with diagnose(" in quickstart and ".autofix(" in autofix
    script = tmp_path / "readme_snippets.py"
    script.write_text(quickstart + "\n" + autofix)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # the diagnosis (printed on exit of the with-block) and the autofix report, once each
    assert len(re.findall(r"^step time ", out, re.M)) == 1, out
    assert len(re.findall(r"^autofix decisions", out, re.M)) == 1, out
    # and the run folder the snippet's comment promises is there
    assert any((tmp_path / "diagnose-runs").iterdir())
