"""A watched run killed with SIGKILL at a random step keeps its timeline up to the last
flush (every ~2 s): the folder reads back, cut off, with the steps it had written."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from diagnose.cli import main
from diagnose.watching import read_timeline

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

LOOP = """
import sys, time, torch
from diagnose import watch
torch.set_num_threads(1)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 4))
loader = torch.utils.data.DataLoader(data, batch_size=8)
with watch(model, loader, out_dir=sys.argv[1], baseline=False, print_summary=False,
           progress_s=None) as w:
    while True:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.002)
            print(w.steps, time.monotonic(), flush=True)
"""


def test_a_killed_run_keeps_its_timeline_to_the_last_flush(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random()
    target = rng.randint(800, 1500)
    age = rng.uniform(10.0, 13.0)  # old enough to have steps 8 s before the kill
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    seen: list[tuple[int, float]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            step, t = line.split()
            seen.append((int(step), float(t)))
            # at a random step, once the run is old enough to have flushed a few times
            if seen[-1][0] >= target and seen[-1][1] - seen[0][1] >= age:
                break
            assert time.monotonic() - seen[0][1] < 120, "the watched loop is too slow"
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1
    tl = read_timeline(runs[0])
    assert tl is not None and not tl["complete"] and tl["end"] is None
    n = len(tl["steps"]["ms"])
    done = seen[-1][0]
    # everything up to the last flush: flushes come every 2-3 s (checked once a second),
    # so the steps 8 s before the kill are in, however slowly a busy host ran the last ones
    before = max((s for s, t in seen if t <= killed_at - 8.0), default=0)
    assert 0 < before <= n <= done, (before, n, done)
    assert np.all(np.isfinite(tl["steps"]["ms"])) and np.all(tl["steps"]["ms"] > 0)
    assert np.all(np.diff(tl["steps"]["t"]) > 0)  # step i is record i, in order
    assert tl["meta"]["settings"]["flush_s"] == 2.0
    capsys.readouterr()
    assert main(["analyze", str(runs[0])]) == 0  # the command reads it, cut off as it is
    out = capsys.readouterr().out
    assert f"{n:,} steps" in out and "cut off" in out
