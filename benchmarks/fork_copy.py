"""The pages a step writes, copied after a fork: the epoch-start term the session measures
(``fork_copy_ms``: the model's work after a fork beyond the same work unforked, and the
optimizer's states at the price of a MiB), beside the first step after a real fork
measured on the same job.

    python benchmarks/fork_copy.py [--repeats 7]

DataLoader workers that are not persistent are forked again at every epoch's ``iter()``;
until they exit, every page the training process writes is shared with them and is copied
at its first write. The jobs here are the project's own (an in-memory TensorDataset and an
MLP of three sizes, Adam), none from the corpus. Each is captured once by ``diagnose``
(``with diagnose(model, loader)``, no HTML); the prediction is ``fork_copy_ms`` of the
capture's facts. The measurement: after warm steps, a child is forked that only waits
(as an idle worker does), one training step is timed, the child is let go; the extra is
that step less the median of the steady steps before it, the median over ``--repeats``
forks, with the minor page faults of that step (``getrusage``) to set beside the pages the
prediction counts. Printed: a table, one row per job (a probe the capture left out says
why).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose import diagnose  # noqa: E402
from diagnose.api import analyze_runs  # noqa: E402
from diagnose.runfolder import load_context  # noqa: E402
from diagnose.stepmodel.epochs import fork_copy_ms  # noqa: E402

#: (name, features, hidden width, batch): the MLPs' sizes, small to large
JOBS = [("mlp_small", 64, 256, 256), ("mlp_medium", 128, 1024, 512),
        ("mlp_wide", 128, 1536, 1024), ("mlp_bigbatch", 64, 512, 2048)]


class Jittered(TensorDataset):
    """Rows held in memory, each with noise added as it is taken (a per-sample augmentation:
    the loader is a share of the step worth a warning, so the session's probes run)."""

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        x, y = super().__getitem__(i)
        return x + 0.01 * torch.randn_like(x), y


def make(features: int, hidden: int, batch: int) -> tuple[Any, ...]:
    torch.manual_seed(0)
    x, y = torch.randn(8192, features), torch.randint(0, 10, (8192,))
    loader = DataLoader(Jittered(x, y), batch_size=batch, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    def step(xb: Any, yb: Any) -> None:
        loss = loss_fn(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return model, loader, step


def predicted(model: Any, loader: Any, step: Any) -> tuple[float, Any, str | None]:
    """The capture's copy term (ms), its facts, and why its probe was left out (if so)."""
    with tempfile.TemporaryDirectory() as out:
        with diagnose(model, loader, out_dir=out, print_report=False, sample_hz=0) as d:
            for i, (xb, yb) in enumerate(_forever(loader)):
                step(xb, yb)
                if i >= 60 or d.done:
                    break
        facts = analyze_runs(d.run_dir).runs[0].predictor.facts
        skipped = ((load_context(d.run_dir) or {}).get("probes") or {}).get("skipped") or {}
    return fork_copy_ms(facts), facts, skipped.get("fork_copy")


def _forever(loader: Any) -> Any:
    while True:
        yield from loader


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measured(loader: Any, step: Any, repeats: int) -> tuple[float, float]:
    """The first step after a fork less a steady one (ms, median over ``repeats``), and
    that step's minor faults (median)."""
    xb, yb = next(iter(loader))
    for _ in range(10):
        step(xb, yb)
    extras, faults = [], []
    for _ in range(repeats):
        steady = []
        for _ in range(5):
            t0 = time.perf_counter()
            step(xb, yb)
            steady.append(time.perf_counter() - t0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # an idle worker: it only waits to be let go
            os.read(r, 1)
            os._exit(0)
        f0, t0 = _faults(), time.perf_counter()
        step(xb, yb)
        took, f1 = time.perf_counter() - t0, _faults()
        os.write(w, b"x")
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
        extras.append((took - statistics.median(steady)) * 1e3)
        faults.append(f1 - f0)
    return statistics.median(extras), statistics.median(faults)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from jobs._run import print_header

    print_header("the pages a step writes, copied after a fork: predicted beside measured",
                 "fork_copy.py")
    print()
    head = (f"{'job':<14}{'work ms':>8}{'states MiB':>11}{'ms/MiB':>7}{'predicted ms':>13}"
            f"{'measured ms':>12}{'ratio':>7}{'faults':>8}")
    print(head)
    print("-" * len(head))
    ratios = []
    for name, f, h, b in JOBS:
        model, loader, step = make(f, h, b)
        pred, f, why = predicted(model, loader, step)
        extra, faults = measured(loader, step, args.repeats)
        ratio = extra / pred if pred > 0 else float("nan")
        ratios.append(ratio)
        nan = float("nan")
        work = f.input_worker_fork_copy_ms
        print(f"{name:<14}{nan if work is None else work:8.1f}"
              f"{(f.mem_model_states_bytes or 0) / 2**20:11.1f}"
              f"{f.input_worker_fork_copy_ms_per_mib or nan:7.2f}"
              f"{pred:13.1f}{extra:12.1f}{ratio:7.2f}{faults:8.0f}"
              + (f"  (not timed: {why})" if why else ""))
    ok = [r for r in ratios if r == r]
    if ok:
        print(f"\nmeasured / predicted: median {statistics.median(ok):.2f}, "
              f"from {min(ok):.2f} to {max(ok):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
