"""torch's idle threads spinning beside new workers: a job whose step waits ~90% of its
time for an in-process loader's batch, captured, and the fixes its report offers timed
without the tool, beside the same with OpenMP's threads told not to spin.

The job (written for this benchmark, re-made from a helper's new-user trial of 2026-12-07):
a Dataset doing ~1 ms of numpy per sample (sort, tanh), batches of 32, ``num_workers=0``,
an MLP on torch's threads. Each variant runs in its own process (GNU OpenMP reads
``OMP_WAIT_POLICY`` as it loads), in ``--rounds`` interleaved rounds; a round's figure is
the median step of ``--steps`` steps after 8 of warm-up. The capture is made first, in its
own process, and its report's fixes for IN001 are read from the run folder's report.json.
The measured speedup is the median of the rounds' own ratios (each round's variant against
the same round's job as written: the host's pace drifts between rounds), with their least
and most.

    python benchmarks/threads_spin.py [--rounds 5] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from jobs._run import print_header  # noqa: E402

#: (name, num_workers, torch threads (0: torch's own), OMP_WAIT_POLICY)
VARIANTS = (("as written", 0, 0, ""), ("num_workers=2", 2, 0, ""),
            ("num_workers=2, 1 thread", 2, 1, ""),
            ("num_workers=2, OMP_WAIT_POLICY=PASSIVE", 2, 0, "PASSIVE"))

JOB = r'''
import os, sys, time
import numpy as np, torch
from torch.utils.data import DataLoader, Dataset

class Features(Dataset):
    def __len__(self): return 4096
    def __getitem__(self, i):
        a = np.random.default_rng(i).standard_normal(2048)
        for _ in range(30):
            a = np.sort(np.tanh(a * 1.1 + np.roll(a, 3)))
        return torch.from_numpy(a.astype(np.float32)), int(i % 10)

nw, th, steps, capture = (int(x) for x in sys.argv[1:5])
if th:
    torch.set_num_threads(th)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Features(), batch_size=32, shuffle=True, num_workers=nw,
                    persistent_workers=nw > 0)

def step(x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()

if capture:
    from diagnose import diagnose
    with diagnose(model, loader) as d:
        for x, y in loader:
            step(x, y); d.step()
            if d.done:
                break
    sys.exit(0)
it, times = iter(loader), []
for i in range(8 + steps):
    t = time.perf_counter()
    x, y = next(it)
    step(x, y)
    if i >= 8:
        times.append(time.perf_counter() - t)
print(f"{np.median(times) * 1e3:.3f}")
'''


def run(nw: int, th: int, policy: str, steps: int, capture: bool, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", JOB, str(nw), str(th), str(steps),
                          str(int(capture))], cwd=cwd, env=env, capture_output=True,
                         text=True, check=True, timeout=600)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def predictions(cwd: Path) -> tuple[dict[str, str], float | None]:
    """{variant name: 'predicted [range]'} of IN001's fixes in the capture's report, and its
    threads' spin."""
    folder = max(cwd.glob("diagnose-runs/*/report.json"))
    report = json.loads(folder.read_text())
    spin = json.loads((folder.parent / "context.json").read_text()).get("threads_spin_ms")
    out = {}
    for f in report["findings"]:
        if f["rule"] != "IN001":
            continue
        for fix in f["fixes"]:
            p = fix.get("predicted")
            if not p:
                continue
            ch = p["change"]
            name = ("num_workers=2, 1 thread" if ch.get("intra_op_threads") == 1
                    and ch.get("num_workers") == 2 else
                    "num_workers=2" if ch == {"num_workers": 2} else None)
            if name:
                lo, hi = p["speedup_range"]
                tag = " (first)" if fix is f["fixes"][0] else ""
                out[name] = f"{p['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]{tag}"
    return out, spin


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--keep", type=Path, help="copy the capture's run folder here")
    ap.add_argument("--captures", type=int, default=1,
                    help="captures made (each one's predictions shown); the first is timed")
    args = ap.parse_args()
    print_header("torch's idle threads spinning beside new workers: predicted vs timed",
                 "threads_spin.py")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        made = []
        for _ in range(args.captures):
            run(0, 0, "", 0, True, cwd)
            made.append(predictions(cwd))
        pred, spin = made[0]
        if args.keep:
            import shutil
            shutil.copytree(cwd / "diagnose-runs", args.keep, dirs_exist_ok=True)
        times: dict[str, list[float]] = {v[0]: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for name, nw, th, policy in VARIANTS:
                times[name].append(float(run(nw, th, policy, args.steps, False, cwd)))
    base = times[VARIANTS[0][0]]
    for i, (p, s) in enumerate(made):
        print(f"capture {i + 1}: threads_spin_ms {s}; " + "; ".join(f"{k}: {v}" for k, v in p.items()))
    print(f"{'variant':42} {'predicted [range]':26} {'ms a step (rounds)':34} "
          f"{'measured [rounds]':>19}  inside")
    for name, *_ in VARIANTS:
        got = times[name]
        each = [b / x for b, x in zip(base, got, strict=True)]  # paired by round
        sp = statistics.median(each)
        p = pred.get(name, "-")
        inside = "-"
        if p != "-":
            lo, hi = (float(x) for x in p.split("[")[1].split("]")[0].split(", "))
            inside = "yes" if lo <= sp <= hi else "no"
        rounds = " ".join(f"{x:.1f}" for x in got)
        spread = f"{sp:.2f}x [{min(each):.2f}, {max(each):.2f}]"
        print(f"{name:42} {p:26} {rounds:34} {spread:>19}  {inside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
