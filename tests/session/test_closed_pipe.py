"""A run whose output goes into a pipe that closes early (``python train.py 2>&1 | head``)
still gets its report: the session's own lines are dropped, not raised, and the report
object, report.json and report.html are made."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from torch.utils.data import DataLoader
    from diagnose import diagnose
    from tests.datasets import Pairs, train

    print("first line", flush=True)
    sys.stdin.read(1)  # the reader has closed its end: every later write fails
    model = torch.nn.Linear(16, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs(), batch_size=32)
    with diagnose(model, loader, out_dir=sys.argv[1], steps=2, warmup=1, wait=0,
                  clock_steps=3) as d:
        for _ in range(3):
            train(model, opt, loader, d)
    with open(sys.argv[2], "w") as f:
        json.dump({"report": d.report is not None, "run_dir": str(d.run_dir)}, f)
""")


def test_a_closed_output_pipe_still_makes_the_report(tmp_path: Path) -> None:
    script, marker = tmp_path / "job.py", tmp_path / "marker.json"
    script.write_text(SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs"), str(marker)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert p.stdout is not None and p.stdin is not None
    assert p.stdout.readline().strip() == b"first line"
    p.stdout.close()  # as `| head -1` does
    p.stdin.write(b"x")
    p.stdin.close()
    p.wait(timeout=300)
    got = json.loads(marker.read_text())
    assert got["report"] is True
    run = Path(got["run_dir"])
    assert (run / "report.json").is_file() and (run / "report.html").is_file()
