"""How far one thread timing after the loop lies from the job's own thread scaling, and
which way of reading two timings lies closest.

    python benchmarks/threads_probe_spread.py [JOB ...] [--rounds 80] [--gap 30]

For each corpus job (default: four tune-half jobs with a CPU model), the model's forward
and backward on the first batch its loop saw is timed as the session's thread probe times
it (``diagnose.capture.probes.compute.models_work``: the same idle spell before each
work), ``--rounds`` pairs of (torch's threads, one thread) back to back. The reference is
the one-thread ratio of all rounds (median over median). Against it, every window of the
rounds read as the session would:

- ``one of 3`` / ``one of 6``: one timing of 3 rounds (the probe's least) or 6;
- ``two, larger``: two timings of 3 rounds ``--gap`` rounds apart (about a second), the
  larger ratio kept (the rule before this benchmark: a busy moment was taken to lower the
  ratio only);
- ``two, joined``: the same two timings joined (``joined_threads``: each median their
  geometric mean).

Per reading: the median and the 90th percentile of |ln(reading / reference)|, and for one
timing of 3, how often the reference lies within its reported noise (one standard error:
68% if the noise were honest). The host's pace drifts over seconds, so the rounds of one
timing share a moment: see benchmarks/NOTES.md, "the threads probe".
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "jobs"))
sys.path.insert(0, str(HERE.parent))

from _corpus import load_corpus, make  # noqa: E402
from _run import print_header  # noqa: E402

#: tune-half jobs whose model runs on the CPU with torch's threads (corpus/SPLIT.md)
DEFAULT_JOBS = ("hf_run_image_classification_no_trainer", "wordpiece_reviews_classifier",
                "csv_rows_mlp", "examples_super_resolution")
#: the rounds of one timing as the session makes its least one
LEAST = 3

Round = tuple[float, float]  # (seconds on torch's threads, seconds on one thread)


def rounds_of(job: str, n: int) -> list[Round]:
    """``n`` paired rounds of the job's model work, as the probe times it."""
    import torch

    from diagnose.capture.probes import compute

    j = make(job)
    model, step, batches = j["model"], j["train_step"], j["batches"]()
    timer = compute.ForwardTimer(model, lambda s: None)
    step(next(batches))
    inputs = timer.inputs
    timer.remove()
    if inputs is None:
        raise SystemExit(f"{job}: its model's forward was not seen (a GPU model?)")
    threads = torch.get_num_threads()
    out: list[Round] = []
    with compute.models_work([(model, inputs)]) as (_, work):
        for t in (threads, 1):  # warm both up
            torch.set_num_threads(t)
            work()
        for _ in range(n):
            torch.set_num_threads(threads)
            a = work()
            torch.set_num_threads(1)
            out.append((a, work()))
    torch.set_num_threads(threads)
    return out


def ratio(rows: Sequence[Round]) -> float:
    """One thread against torch's threads, median over median (as the session reads it)."""
    return statistics.median(c for _, c in rows) / statistics.median(a for a, _ in rows)


def readings(rows: list[Round], gap: int) -> dict[str, Callable[[int], float]]:
    """Each way of reading the rounds from window start ``i``."""
    def two(i: int) -> tuple[float, float]:
        return ratio(rows[i:i + LEAST]), ratio(rows[i + gap:i + gap + LEAST])

    return {"one of 3": lambda i: ratio(rows[i:i + LEAST]),
            "one of 6": lambda i: ratio(rows[i:i + 2 * LEAST]),
            "two, larger": lambda i: max(two(i)),
            "two, joined": lambda i: math.sqrt(math.prod(two(i)))}


def noise_coverage(rows: list[Round], ref: float) -> float:
    """How often one timing of 3 holds the reference within its reported noise."""
    from diagnose.capture.probes.common import median_noise

    hits = total = 0
    for i in range(len(rows) - LEAST + 1):
        w = rows[i:i + LEAST]
        noise = median_noise([a for a, _ in w], [c for _, c in w]) or 0.0
        hits += abs(math.log(ratio(w) / ref)) <= math.log(1 + noise)
        total += 1
    return hits / total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", default=list(DEFAULT_JOBS))
    ap.add_argument("--rounds", type=int, default=80)
    ap.add_argument("--gap", type=int, default=30, help="rounds between two timings")
    args = ap.parse_args()
    corpus = load_corpus()
    unknown = [j for j in args.jobs if j not in corpus.names()]
    if unknown or args.rounds < args.gap + 2 * LEAST:
        print(f"threads_probe_spread: {'unknown job ' + unknown[0] if unknown else '--rounds must exceed --gap + 6'}",
              file=sys.stderr)
        return 2
    print_header("one thread timing against the job's own thread scaling", "threads_probe_spread.py")
    head = f"{'job':40s} {'half':8s} {'ref':>5s}"
    names = ("one of 3", "one of 6", "two, larger", "two, joined")
    print(head + "".join(f"  {n + ' med/p90':>20s}" for n in names) + "  noise holds ref")
    for job in args.jobs:
        rows = rounds_of(job, args.rounds)
        ref = ratio(rows)
        cells = []
        for read in readings(rows, args.gap).values():
            errs = sorted(abs(math.log(read(i) / ref))
                          for i in range(len(rows) - args.gap - LEAST + 1))
            cells.append(f"{errs[len(errs) // 2]:.3f}/{errs[int(0.9 * len(errs))]:.3f}")
        print(f"{job:40s} {corpus.half(job):8s} {ref:5.2f}" + "".join(f"  {c:>20s}" for c in cells)
              + f"  {noise_coverage(rows, ref):14.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
