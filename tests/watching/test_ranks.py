"""Many ranks: the straggler rule on given summaries, and two gloo ranks on CPU (spawned)
with rank 1 made 30% slower from a random step: the alarm names it within 100 steps, and
rank 1 takes the capture."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from diagnose.watching.ranks import RankWatch

REPO = Path(__file__).resolve().parents[2]


def _s(rank: int, ms: float, wait: float = 0.0) -> dict[str, Any]:
    return {"rank": rank, "step": 20, "n": 20, "ms": ms, "wait": wait}


def test_a_rank_slow_in_two_gathers_in_a_row_is_the_straggler() -> None:
    rw = RankWatch(0, 4, sustain=2, margin=0.10)
    fast = [_s(0, 10.0), _s(1, 10.2), _s(2, 9.9)]
    assert rw.judge([*fast, _s(3, 10.5)]) is None  # within the margin
    assert rw.judge([*fast, _s(3, 12.0)]) is None  # once
    s = rw.judge([*fast, _s(3, 12.5)])  # twice in a row
    assert s is not None and s.rank == 3 and s.others_ms == 10.0
    assert rw.judge([*fast, _s(3, 12.5)]) is None  # named once ...
    assert rw.judge([*fast, _s(3, 10.0)]) is None
    rw.judge([*fast, _s(3, 13.0)])
    assert rw.judge([*fast, _s(3, 13.0)]) is not None  # ... again after it fell back in line


def test_a_rank_waiting_on_its_loader_is_named_in_lockstep() -> None:
    """Under DDP the ranks' wall steps even out; the slow loader still shows."""
    rw = RankWatch(0, 2, sustain=1)
    s = rw.judge([_s(0, 20.0, wait=1.0), _s(1, 20.0, wait=6.0)])
    assert s is not None and s.rank == 1 and s.wait_ms == 6.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


STEP_S = 0.004  # each step's time on the watch's clock (injected: a busy machine's own
#: pace changes would otherwise name a straggler of its own making)


def _rank(rank: int, world: int, port: int, out: str, slow_at: int) -> None:
    """One rank's training (a spawned process): every rank runs the same steps, each
    ``STEP_S`` long on the watch's clock, rank 1's 30% longer from ``slow_at`` on."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import types

    import torch
    import torch.distributed as dist

    import diagnose.watching.clock as clock
    from diagnose import watch

    now = [time.perf_counter()]
    clock.time = types.SimpleNamespace(perf_counter=lambda: now[0])  # type: ignore[assignment]

    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    steps = slow_at + 160

    def batches() -> Any:
        while True:
            yield from loader

    with watch(model, loader, out_dir=out, baseline=False, print_summary=False,
               progress_s=None, capture_interval_s=0, rank_every=20) as w:
        it = batches()
        for _ in range(steps):
            x, y = next(it)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now[0] += STEP_S * (1.3 if rank == 1 and w.steps >= slow_at else 1.0)
    Path(out, f"result{rank}.json").write_text(json.dumps(
        {"alarms": [a.to_json() for a in w.alarms], "run_dir": str(w.run_dir),
         "steps": w.steps}))
    dist.barrier()  # leave together (gloo's threads and interpreter exit)
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_name_the_straggler_within_100_steps(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    slow_at = random.Random().randint(150, 250)
    # spawned from a child Python, so that multiprocessing's helper process (its resource
    # tracker) ends with that child, not with the test session
    code = ("import sys, torch.multiprocessing as mp; from tests.watching.test_ranks import _rank; "
            "mp.spawn(_rank, args=(2, int(sys.argv[1]), sys.argv[2], int(sys.argv[3])), "
            "nprocs=2, join=True)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code, str(_free_port()), str(tmp_path),
                        str(slow_at)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r0 = json.loads((tmp_path / "result0.json").read_text())
    r1 = json.loads((tmp_path / "result1.json").read_text())
    assert r0["run_dir"] == r1["run_dir"]  # one run folder for both ranks
    named = [a for a in r0["alarms"] if a["signal"] == "rank"]
    assert named, r0["alarms"]
    a = named[0]
    assert a["rank"] == 1 and slow_at <= a["step"] <= slow_at + 100, (slow_at, a)
    assert a["after"] == pytest.approx(1.3 * a["before"], rel=0.02)
    assert a["capture"] is None and "rank 1 takes the capture" in a["capture_why"]
    own = [a for a in r1["alarms"] if a["signal"] == "rank" and a["rank"] == 1]
    assert own and own[0]["capture_dir"] is not None, r1["alarms"]
    assert "rank1" in Path(own[0]["capture_dir"]).name
    assert any(Path(own[0]["capture_dir"]).glob("*.pt.trace.json.gz"))
    assert not [a for a in r0["alarms"] if a["signal"] != "rank"]  # rank 0 kept its pace
    # `analyze RUN` shows rank 1's own timeline too: its steps, its alarm and capture
    from diagnose.watching.timeline import read_watched

    tl = read_watched(r0["run_dir"])
    assert tl is not None and [o["rank"] for o in tl["other_ranks"]] == [1]
    r = subprocess.run([sys.executable, "-m", "diagnose", "analyze", r0["run_dir"]], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("rank 1:"))
    assert "steps" in line and "alarms" in line
    assert Path(own[0]["capture_dir"]).name in r.stdout
