"""notebooks/walkthrough.ipynb runs top to bottom without an error (CPU, nbclient).

The kernel is this test's own interpreter (the venv's: ``/tmp/venv0``, ``.venv`` under
``make test``, whatever runs pytest) through a kernelspec written for the test alone, so
no ``python3`` kernelspec elsewhere on the machine can pick another Python.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

NOTEBOOK = REPO / "notebooks" / "walkthrough.ipynb"


def _outputs(nb: dict, kind: str) -> list[str]:
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            if kind == "text" and o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif kind != "text" and kind in o.get("data", {}):
                out.append(o["data"][kind])
    return out


@pytest.mark.slow
def test_walkthrough_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kernels = tmp_path / "kernels"
    spec = kernels / "torch-diagnose-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "torch-diagnose tests", "language": "python",
    }), encoding="utf-8")
    # the kernel inherits this environment: the package importable, state kept out of $HOME
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's run folders

    km = KernelManager(kernel_name="torch-diagnose-test",
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, km=km, timeout=240,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    try:
        client.execute()  # raises CellExecutionError, with the cell and traceback, on an error
    finally:  # nbclient leaves a kernel it was handed running
        if km.has_kernel:
            km.shutdown_kernel(now=True)

    text = "".join(_outputs(nb, "text"))
    assert "IN001" in text and "first fix" in text
    assert "dataloader_share" in text and "Findings (A -> B)" in text  # the comparison
    svgs = _outputs(nb, "image/svg+xml")
    assert len(svgs) >= 2  # the breakdown and the before/after chart at least
    pages = _outputs(nb, "text/html")
    assert any("<iframe srcdoc=" in p and "finding-IN001" in p for p in pages)
    assert any("autofix decisions" in p for p in pages)  # rich renders as HTML in a notebook
    assert list(tmp_path.glob("diagnose-walkthrough-*/*/report.html"))
