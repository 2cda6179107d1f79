"""Run the benchmarks and assemble benchmarks/RESULTS.md from what they printed.

    python benchmarks/make_results.py --run all          # every benchmark (tens of minutes)
    python benchmarks/make_results.py --run fuzz_reader  # one, then rebuild RESULTS.md
    python benchmarks/make_results.py                    # rebuild RESULTS.md from saved runs

Each benchmark's full output (it prints its own machine, date and command) is saved
verbatim in benchmarks/results/<name>.txt; RESULTS.md quotes those files. No number in
RESULTS.md is typed by hand.

A results file keeps its runs newest first: a new run goes on top, and the ones before it
follow under their own headings ("## the run before it (...)" or "# Run 7 (...)", each
naming its code and time). RESULTS.md opens with the checks' tallies (the lines a
benchmark prints as "N of M ... within 15% ...": the newest run's, and all saved runs'
together) and quotes the newest run of a long file, pointing to the file for the rest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results"

#: name -> (title, command line (run from the repo root), what it shows)
BENCHMARKS: dict[str, tuple[str, list[str], str]] = {
    "analyze_speed": (
        "Analysis speed and memory on a ~300 MB trace",
        ["benchmarks/analyze_speed.py", "--profile"],
        "Full analysis (read + all metrics + rules) against `json.load` and a bare typed "
        "decode of the same file, as ratios in one run; peak RSS against the file size, and "
        "the analysis' processes' memory at one moment (its worker processes' own pages "
        "with it); "
        ".json.gz against .json; and where the time goes (cProfile).",
    ),
    "analyze_2gb": (
        "A 2 GB trace in bounded memory",
        ["benchmarks/analyze_speed.py", "--size-mb", "2000", "--phases", "decode,analyze",
         "--repeat", "1", "--no-gz"],
        "json.load is left out: it would need ~6x the file in RAM. Goal: under 4 GB peak RSS.",
    ),
    "hta_compare": (
        "Against Holistic Trace Analysis on the same file",
        ["benchmarks/hta_compare.py"],
        "HTA installed in a separate venv by the script; goal: at least 30x faster.",
    ),
    "parse_ranks": (
        "Parsing many ranks in parallel",
        ["benchmarks/parse_ranks.py"],
        "8 rank traces parsed in a process pool vs one after another.",
    ),
    "capture_overhead": (
        "Capture overhead",
        ["benchmarks/capture_overhead.py"],
        "The same loop with and without the samplers, interleaved; goal: under 1% of step time.",
    ),
    "gc_footprint": (
        "What a finished session leaves in the training process",
        ["benchmarks/gc_footprint.py"],
        "Objects Python's collector walks in every full collection after a session, and "
        "how long one takes, against the same job never diagnosed (and against the "
        "session drawing its page's plots in-process, as before).",
    ),
    "autofix_vs_grid": (
        "Autofix against an exhaustive grid",
        ["benchmarks/autofix_vs_grid.py"],
        "Goal: at least 95% of the best grid throughput with far fewer trials.",
    ),
    "step_model_replay": (
        "Step model: replay of the unmodified step on real traces",
        ["benchmarks/step_model_replay.py"],
        "Each trace's profiled steps rebuilt as a dependency graph and replayed; error = "
        "replayed / measured - 1. Goal: median |error| <= 3%, none over 10%; a trace with no "
        "model says why. Also the model's own time next to the metrics' time.",
    ),
    "predict_vs_measured": (
        "Predictions checked by timing the job without the profiler",
        ["benchmarks/predict_vs_measured.py", "--rounds", "16"],
        "Jobs of a user's own (benchmarks/jobs): each warning/critical finding's first fix, "
        "its change applied exactly as autofix applies it, timed in interleaved blocks "
        "against the unchanged job (gc.freeze, and any change to a job whose collector "
        "made full collections in the diagnosed loop: in processes of its own, "
        "alternating, as a user times a job), "
        "compared by the mean step. Goal: measured within 15% of predicted. One run on a "
        "shared 2-CPU machine: the capture's base step and its exit timings vary by 10-30% "
        "from one capture to the next (the closing notes list several runs).",
    ),
    "predict_configs": (
        "Every worker and thread split, predicted beside timed",
        ["benchmarks/predict_configs.py", "--repeat", "2"],
        "The same jobs, and every config autofix's worker and thread ladders may try "
        "(0 to CPUs workers, on torch's threads and on one thread), not only the first "
        "fix: each predicted by the diagnosis' step model and timed against the plain loop "
        "in interleaved blocks. `--save DIR` keeps the captures and timings, and "
        "`--offline DIR` predicts them again with a changed model, so that a change to the "
        "model is judged on the same captures and timings. It shows where the model is "
        "weak: workers beside torch's 2 threads on the 2 CPUs (configs `1w`, `2w`) for "
        "augment_cnn and tensor_rows timed 0.58-0.78 of their prediction (workers whose "
        "own work is torch ops slow torch's compute more than the CPUs' sharing says), and "
        "a capture taken in a busy moment moves a job's predictions by 20-40%. masked_lm "
        "(workers that rest most of the step) was predicted 0.53x for 1 and 2 workers "
        "until 657ff36, where 0.94x was timed.",
    ),
    "predict_spread": (
        "One job's predictions, capture after capture",
        ["benchmarks/predict_spread.py"],
        "Each job captured 5 times in a row and predicted each time (1 and 2 workers "
        "beside one thread, the split the jobs' findings advise); nothing else is timed. "
        "The spread is the part of a prediction's error that comes from the moment of its "
        "capture, not from the model: the measured speedups it is checked against in the "
        "tables above carry their own confidence intervals besides.",
    ),
    "autofix_jobs": (
        "Autofix on the project's own jobs: predicted beside measured",
        ["benchmarks/autofix_jobs.py"],
        "diagnose(...).autofix() as the README shows it, on a fresh job each run: every "
        "tried decision with the prediction it carried, the measured speedup and its 95% "
        "interval; a kept change within 15% of its prediction or not; each run's before/"
        "after (its own, longer interleaved measurement of what was kept) beside the "
        "model's tuned step. A fix is skipped only where even the fast end of its "
        "predicted range gains nothing (the range holds the ends of the CPUs' capacity "
        "timings for a change of CPU work). "
        "Goals: the job with more workers than CPUs keeps fewer workers "
        "in 3 of 3 runs; no job is left slower; tensor rows keep the batched fetch.",
    ),
    "predict_vs_measured_samples": (
        "Predictions on the demo and the CPU samples",
        ["benchmarks/predict_vs_measured.py", "--samples", "--rounds", "16"],
        "As above, on `torch-diagnose demo`'s workload and the samples that run on a CPU "
        "(benchmarks/sample_jobs). The GPU workloads and samples run under "
        "benchmarks/autofix_gpu.py and `predict_vs_measured.py --gpu` on a GPU: see the GPU "
        "section at the end.",
    ),
    "autofix_samples": (
        "Autofix on the demo and the CPU samples: predicted beside measured",
        ["benchmarks/autofix_jobs.py", "--samples"],
        "As above, on `torch-diagnose demo`'s workload and the samples that run on a CPU. "
        "Goals: the demo ends 1.3x faster or more; the healthy sample keeps nothing.",
    ),
    "epoch_start": (
        "An epoch's start and end with DataLoader workers: timed beside the model",
        ["benchmarks/epoch_start.py", "--workers", "2,4,6", "--reps", "4", "slow_loader"],
        "Workers that are not persistent are forked at every epoch's iter() and joined at "
        "its end; the step model predicts both from what a session times after its loop "
        "(one worker's start, of it the fork, its end, a batch). Here real loaders with k "
        "workers are timed over whole epochs (loading alone) beside the model and beside "
        "the one-after-another bound it used where the fork was not timed. The H100 runs "
        "are in the GPU section.",
    ),
    "loop_parts": (
        "Where a job's step goes for each split, timed in the loop",
        ["benchmarks/loop_parts.py", "augment_cnn", "--splits", "0,2", "2,2", "2,1", "1,2",
         "0,2", "--steps", "160"],
        "The job's own loop for each (workers, threads) split, no profiler: each step's "
        "wait for its batch and its compute, and the batch's making where it was made (in "
        "a worker where there are workers), beside a worker's batch and the one-thread "
        "ratio as a session times them. What the step model's sharing rules come from: 2 "
        "workers beside 1 thread make their batches about 1.5x as slowly as the timed one "
        "(augment_cnn); one worker beside torch's 2 threads 2.0-2.4x (tokenizing, "
        "masked_lm), and torch's compute then slows only as much as the workers are busy "
        "(masked_lm's workers rest most of the step: 1.16x). Where it is weak: "
        "augment_cnn's 2 workers beside torch's 2 threads, whose own work is torch ops, "
        "made its compute 2.1-3x as long, where the model says 2x.",
    ),
    "work_after_fetch": (
        "The model's compute after each kind of fetch (tensor_rows)",
        ["benchmarks/work_after_fetch.py", "--runs", "2"],
        "One loop in blocks of per-sample and batched fetches in turn: the compute after a "
        "long single-threaded load took 1.10-1.25x as long as after a batched fetch. On "
        "one thread, or with the OpenMP threads spinning, mostly less (0.98-1.12x); with "
        "20 ms asleep before the batched blocks' compute, none (0.93-0.99x): a thread pool "
        "left asleep by the load, woken by the ops. The session's own timing of it (the "
        "last column, what the batched-fetch prediction uses) read 0.99-1.32 where the "
        "loops gave 1.10-1.25: noisier.",
    ),
    "step_clock_truth": (
        "The unprofiled step time against the same loop timed without the tool",
        ["benchmarks/step_time_truth.py", "--rounds", "5", "--workload", "both",
         "--retries", "4"],
        "plain / capture / plain interleaved; goal: the report's unprofiled step within 15% "
        "of the plain loop in 5 of 5 captures.",
    ),
    "fuzz_reader": (
        "Reader fuzzing",
        ["benchmarks/fuzz_reader.py", "--cases", "10000"],
        "Every case must end in a report or the project's own one-line error. Goal: 0 failures.",
    ),
}


def run(name: str) -> None:
    title, cmd, _ = BENCHMARKS[name]
    print(f"== {name}: python {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, *cmd], cwd=REPO, env=env, capture_output=True,
                          text=True)
    text = proc.stdout
    if proc.returncode != 0:
        # progress lines redraw themselves with "\r": keep what each line finally showed
        err = [ln.rsplit("\r", 1)[-1] for ln in proc.stderr.splitlines()]
        text += f"\n[exit code {proc.returncode}; last lines of stderr:]\n" + "\n".join(err[-15:])
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.txt").write_text(text)


#: a results file longer than this is quoted down to its newest run
LONG = 100
#: the start of a numbered run in a file of them ("# Run 8 (...)", "## Run F (...)")
RUN_MARK = re.compile(r"^#{1,2} Run \w+ \(")
#: a heading over the runs before the newest ("## the run before it (...)")
EARLIER = re.compile(r"^## (the run|the runs|earlier runs)")
#: the tallies a benchmark prints, each at the start of its line
TALLY = re.compile(r"^(\d+) of (\d+) (predictions within 15%|kept changes measured within 15%"
                   r"|runs' before/after measured within 15%)")


def newest_run(text: str) -> tuple[str, bool]:
    """The newest run of a results file (its runs newest first), and whether runs follow
    it. Numbered runs end at the next run's mark; otherwise the newest run ends at the
    first "## " heading where that heading is over earlier runs (a file of several checks
    has headings of its own, and is one run)."""
    lines = text.rstrip().splitlines()
    marks = [i for i, ln in enumerate(lines) if RUN_MARK.match(ln)]
    if marks:
        end = marks[1] if len(marks) > 1 else len(lines)
    else:
        end = next((i for i, ln in enumerate(lines) if ln.startswith("## ")), len(lines))
        if end < len(lines) and not EARLIER.match(lines[end]):
            end = len(lines)
    return "\n".join(lines[:end]).rstrip(), end < len(lines)


def tallies(text: str) -> dict[str, list[tuple[int, int]]]:
    """Each kind of tally in ``text``, in the file's order (newest run first):
    kind -> [(within, of), ...]."""
    out: dict[str, list[tuple[int, int]]] = {}
    for ln in text.splitlines():
        m = TALLY.match(ln)
        if m:
            out.setdefault(m.group(3), []).append((int(m.group(1)), int(m.group(2))))
    return out


#: the newest runs the middle column of the tallies sums
RECENT = 4


def tally_table(files: list[Path]) -> list[str]:
    """The checks' tallies: the newest run's, the newest few runs', every saved run's."""

    def summed(runs: list[tuple[int, int]]) -> str:
        a, b = sum(x for x, _ in runs), sum(y for _, y in runs)
        return f"{a} of {b} ({a / b:.0%}), {len(runs)} run{'s' * (len(runs) > 1)}" if b else "-"

    rows = [f"| `{f.name}` | {kind} | {summed(runs[:1])} | {summed(runs[:RECENT])} | "
            f"{summed(runs)} |"
            for f in files for kind, runs in tallies(f.read_text()).items()]
    if not rows:
        return []
    return ["## The checks at a glance", "",
            "The tallies the prediction checks print, read from the saved outputs: the "
            f"newest run's, the newest {RECENT} runs' together, and every saved run's. Each "
            "run is at the code its heading names: the wider sums take in earlier code.", "",
            f"| results file | tally | newest run | newest {RECENT} runs | all saved runs |",
            "|---|---|---|---|---|", *rows, ""]


def quote(f: Path) -> list[str]:
    """A results file as RESULTS.md quotes it: whole, or its newest run where it is long."""
    text = f.read_text().rstrip()
    n = len(text.splitlines())
    if n > LONG:
        newest, more = newest_run(text)
        if more:
            return ["```", newest, "```", "",
                    f"The earlier runs, each under a heading with its code and time: "
                    f"`benchmarks/results/{f.name}` ({n} lines).", ""]
    return ["```", text, "```", ""]


def assemble() -> str:
    gpu_files = sorted(OUT.glob("*h100*.txt")) + sorted(OUT.glob("*h200*.txt"))
    checked = [OUT / f"{n}.txt" for n in BENCHMARKS] + gpu_files
    lines = [
        "# Benchmark results",
        "",
        "Generated by `python benchmarks/make_results.py` from the saved outputs in",
        "`benchmarks/results/` (each benchmark prints its own machine, date and command).",
        "The development machine is shared (2 cores, other work running): compare ratios",
        "taken in one run, not absolute times across runs.",
        f"Assembled {dt.date.today().isoformat()}.",
        "",
    ]
    lines += tally_table([f for f in checked if f.exists()])
    for name, (title, cmd, what) in BENCHMARKS.items():
        lines += [f"## {title}", "", what, "", f"Reproduce: `python {' '.join(cmd)}`", ""]
        f = OUT / f"{name}.txt"
        if f.exists() and f.read_text().strip():
            lines += quote(f)
        else:
            lines += ["Not run yet on this machine.", ""]
    lines += ["## On a GPU", "",
              "Recorded on lent GPU machines by `bash benchmarks/gpu_run.sh`, and by",
              "`python benchmarks/predict_vs_measured.py --gpu` and `benchmarks/autofix_gpu.py`",
              "run on their own (each file names its GPU, torch build, date and code); the",
              "sessions here have no GPU of their own, so these are re-run only when one is lent.",
              ""]
    for f in gpu_files:
        lines += [f"### {f.stem}", "", f"Saved output: `benchmarks/results/{f.name}`", "",
                  *quote(f)]
    if not gpu_files:
        lines += ["No GPU results are saved yet.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", nargs="*", default=[], metavar="NAME",
                    help=f"benchmarks to (re)run: all, or any of {', '.join(BENCHMARKS)}")
    args = ap.parse_args()
    names = list(BENCHMARKS) if "all" in args.run else args.run
    for n in names:
        if n not in BENCHMARKS:
            ap.error(f"unknown benchmark {n!r}")
        run(n)
    (HERE / "RESULTS.md").write_text(assemble())
    print(f"wrote {HERE / 'RESULTS.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
