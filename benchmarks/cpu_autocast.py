"""PR002's prediction checked as a user would check it: corpus jobs run with their models'
forward under CPU bf16 autocast (as Lightning's ``precision="bf16-mixed"`` and the Hugging
Face Trainer's ``bf16=True`` run it on a CPU), diagnosed, then the fix made exactly (the
autocast left out) and both timed without the profiler.

    python benchmarks/cpu_autocast.py                       # the default jobs
    python benchmarks/cpu_autocast.py mingpt_adder --rounds 8 --steps 10

The autocast is entered by a forward pre-hook on each of the job's models and left by its
forward hook, registered before the diagnosis, inside the job's step only: the loop's
forward runs under it, the loss and the backward do not (torch's advice, and what those
trainers do). The fix's change
turns the hooks off; the two arms run in interleaved blocks (autocast, fp32; fp32, autocast;
...) on the job's own batches, each after 3 warm-up steps. No constant of the model is
tuned here: PR002's prediction reads the fp32 timing the session made, and its transform
holds no fitted number, so every row is a held-out row; each says its corpus half all the
same.

Columns: the finding's severity, the predicted speedup with the range its changed step's
range gives, the measured speedup (mean block ratio, paired bootstrap 95% interval),
error = measured / predicted, whether the measured speedup lies inside the range, the
session's fp32 / autocast ratio of the model's work, and the two arms' mean steps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import predict_vs_measured as pvm  # noqa: E402
from _corpus import load_corpora, make  # noqa: E402
from _run import print_header  # noqa: E402
from corpus_predict import _fmt_range, _models, _sync, diagnose_job  # noqa: E402

#: one job of each model kind the corpus has: attention, convolution, recurrent, MLP, a GAN
JOBS = ("mingpt_adder", "nanogpt_train_shakespeare_char", "png_masks_unet",
        "examples_word_language_model", "tensor_dataset_mlp", "tensor_gan_mlp",
        "examples_vae", "csv_rows_mlp")


class Autocast:
    """Each model's forward under CPU autocast to bf16 while ``on``, inside the job's own
    ``train_step`` (wrapped here) only: a user's autocast is around the step's calls, so the
    session's timings after the loop call the model outside it (module doc)."""

    def __init__(self, job: dict[str, Any]) -> None:
        import torch

        self.on, self.stepping = True, False
        step = job["train_step"]

        def train_step(batch: Any) -> Any:
            self.stepping = True
            try:
                return step(batch)
            finally:
                self.stepping = False

        job["train_step"] = train_step
        models = _models(job)
        self._open: list[ExitStack] = []
        self._handles = []
        for m in models:
            self._handles += [m.register_forward_pre_hook(self._enter),
                              m.register_forward_hook(self._leave, always_call=True)]
        self._torch = torch

    def _enter(self, module: Any, args: Any) -> None:
        stack = ExitStack()
        if self.on and self.stepping:
            stack.enter_context(self._torch.autocast("cpu", dtype=self._torch.bfloat16))
        self._open.append(stack)

    def _leave(self, module: Any, args: Any, output: Any) -> None:
        if self._open:
            self._open.pop().close()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def time_both(job: dict[str, Any], cast: Autocast, rounds: int, steps: int
              ) -> tuple[list[float], list[float]]:
    """Mean step (ms) per round of the autocast arm and of the fp32 arm, in turns."""
    it = job["batches"]()
    out: tuple[list[float], list[float]] = ([], [])
    try:
        for r in range(rounds):
            for arm in ((0, 1) if r % 2 == 0 else (1, 0)):
                cast.on = arm == 0
                for k in range(3 + steps):
                    if k == 3:
                        _sync(job)
                        t0 = time.perf_counter()
                    job["train_step"](next(it))
                _sync(job)
                out[arm].append((time.perf_counter() - t0) / steps * 1e3)
    finally:
        getattr(it, "close", lambda: None)()
    return out


def run_job(name: str, half: str, args: argparse.Namespace) -> dict[str, Any]:
    job = dict(make(name))
    cast = Autocast(job)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or tmp
        report = diagnose_job(job, out)
    found = [f for f in report["findings"] if f["rule"] == "PR002"]
    metrics = report.get("metrics", {})
    ratio = metrics.get("cpu_autocast_ratio")
    cast_ms, fp32_ms = time_both(job, cast, args.rounds, args.steps)
    cast.remove()
    measured, lo, hi = pvm._ratio_ci(cast_ms, fp32_ms)
    row = {"job": name, "half": half, "ratio": ratio, "measured": measured, "ci": (lo, hi),
           "cast_ms": statistics.mean(cast_ms), "fp32_ms": statistics.mean(fp32_ms)}
    if not found:
        row["severity"] = "-"
        return row
    f = found[0]
    pred = f["fixes"][0].get("predicted")
    row["severity"] = f["severity"]
    if pred:
        row["predicted"], row["range"] = _fmt_range(pred)
        row["speedup"] = pred["speedup"]
    else:
        row["why"] = f["fixes"][0].get("predicted_why")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobs", nargs="*", help=f"corpus jobs (default: {', '.join(JOBS)})")
    ap.add_argument("--rounds", type=int, default=6, help="blocks per arm")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per block")
    ap.add_argument("--keep", metavar="DIR", help="keep the diagnoses' run folders in DIR")
    args = ap.parse_args()
    halves = {n: h for h, names in load_corpora().split().items() for n in names}
    jobs = args.jobs or list(JOBS)
    unknown = [j for j in jobs if j not in halves]
    if unknown:
        print(f"cpu_autocast: no corpus job {unknown[0]!r}", file=sys.stderr)
        return 2
    print_header("PR002 on corpus jobs under CPU bf16 autocast: predicted beside measured",
                 "cpu_autocast.py")
    print(f"{'half':8} {'job':32} {'sev':8} {'predicted [range]':22} {'measured [CI]':20} "
          f"{'error':>6} {'in':>3} {'work x':>7} {'autocast ms':>11} {'fp32 ms':>8}")
    inside = within = predicted = failed = 0
    for name in jobs:
        try:
            row = run_job(name, halves[name], args)
        except Exception as e:  # a job whose ops have no bf16 kernel on this CPU
            print(f"{halves[name]:8} {name:32} fails under autocast: {type(e).__name__}: "
                  f"{str(e)[:80]}", flush=True)
            failed += 1
            continue
        meas = f"{row['measured']:.2f}x [{row['ci'][0]:.2f}, {row['ci'][1]:.2f}]"
        pred, err, hit = "-", "-", "-"
        if "speedup" in row:
            predicted += 1
            e = row["measured"] / row["speedup"]
            err = f"{e:.2f}"
            within += abs(e - 1) <= 0.15
            rng = row["range"]
            ok = rng is not None and rng[0] <= row["measured"] <= rng[1]
            inside += ok
            pred, hit = row["predicted"], "yes" if ok else "no"
        elif "why" in row:
            pred = f"null: {row['why']}"[:22]
        ratio = f"{row['ratio']:.2f}" if row["ratio"] else "-"
        print(f"{row['half']:8} {name:32} {row['severity']:8} {pred:22} {meas:20} {err:>6} "
              f"{hit:>3} {ratio:>7} {row['cast_ms']:11.1f} {row['fp32_ms']:8.1f}", flush=True)
    print(f"\n{within} of {predicted} predictions within 15%; {inside} of {predicted} inside "
          f"the range; {predicted} of {len(jobs)} jobs predicted ({failed} fail under "
          "autocast)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
