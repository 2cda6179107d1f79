"""Run the benchmarks and assemble benchmarks/RESULTS.md from what they printed.

    python benchmarks/make_results.py --run all          # every benchmark (tens of minutes)
    python benchmarks/make_results.py --run fuzz_reader  # one, then rebuild RESULTS.md
    python benchmarks/make_results.py                    # rebuild RESULTS.md from saved runs

Each benchmark's full output (it prints its own machine, date and command) is saved
verbatim in benchmarks/results/<name>.txt; RESULTS.md quotes those files. No number in
RESULTS.md is typed by hand.

A results file keeps its runs newest first: a new run goes on top, and the ones before it
follow under their own headings ("## the run before it (...)" or "# Run 7 (...)", each
naming its code and time). RESULTS.md is the headline page: the checks' tallies (the lines
a benchmark prints as "N of M ... within 15% ...": the newest run's, the newest few runs'
and all saved runs' together), the weak ones listed apart, then for each benchmark a few
lines of its newest run (its ``headline``) and the file that holds the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results"

#: RESULTS.md's lines are wrapped to this width (a quoted line longer than it continues,
#: indented, on the next)
WIDTH = 100


@dataclass(frozen=True)
class Bench:
    """One benchmark as RESULTS.md shows it: what it checks, how it is run, and which lines
    of its newest run are its headline (``headline``: patterns, each line matching one of
    them, at most ``most``; ``condense`` rewrites a matched line shorter, or drops it;
    ``columns`` heads the lines picked)."""

    title: str
    cmd: list[str]
    what: str
    headline: tuple[str, ...] = ()
    most: int = 6
    condense: Callable[[str], str | None] | None = field(default=None, compare=False)
    columns: str = ""  # a header over the headline's rows


# ---------------------------------------------------------------------- condensing
def _no_rounds(line: str) -> str:
    """A threads_spin.py row without its rounds' own figures (the results file has them)."""
    line = re.sub(r"\s+(?:\d+\.\d+ ){2,}\d+\.\d+(?=\s{2,})", "  ", line)
    return re.sub(r"\s{2,}", ", ", line.strip(), count=1).replace("  ", " ")


#: a predict_vs_measured row: job, finding, fix, ..., predicted, measured [CI], ratio, verdict
_PVM = re.compile(r"^(\S+)\s+([A-Z]{2}\d{3})\s+(\S+)\s+.*?\s(\d+\.\d+x)\s+"
                  r"(\d+\.\d+x \[[^\]]+\])\s+(\d+\.\d+)\s+(within 15%|OFF)\s*$")
#: an autofix decision kept: job, run, fix, ..., predicted, measured [CI], ratio, verdict
_KEPT = re.compile(r"^(\S+)\s+(\d+) (\S+)\s+.*?\s(\d+\.\d+x)\s+(\d+\.\d+x \[[^\]]+\])\s+"
                   r"kept\s+(\d+\.\d+) (within 15%|OFF)\s*$")
#: an autofix run's before/after: job, run, ..., before -> after, its interval, predicted
_AFTER = re.compile(r"^(\S+)\s+(\d+)\s+kept: (?!nothing).*?; ([\d.]+ -> [\d.]+) ms measured "
                    r"\(([^)]*)\), predicted ([\d.]+) ms")


def predicted_row(line: str) -> str | None:
    """A row of predict_vs_measured's table as its headline shows it."""
    m = _PVM.match(line)
    if m is None:
        return line if line[:1].isdigit() else None
    job, finding, fix, pred, meas, ratio, verdict = m.groups()
    return f"{job:<18} {finding} {fix:<14} {pred:>9}  {meas:<20} {ratio} {verdict}"


PREDICTED_COLUMNS = f"{'job':<18} {'fix':<20} {'predicted':>9}  {'measured [95% CI]':<20} meas/pred"


def autofix_row(line: str) -> str | None:
    """A kept decision, a run's before/after or a tally line of autofix's tables."""
    m = _KEPT.match(line)
    if m is not None:
        job, run, fix, pred, meas, ratio, verdict = m.groups()
        return f"{job:<18} {run:>3} {fix:<16} {pred:>9}  {meas:<20} {ratio} {verdict}"
    m = _AFTER.match(line)
    if m is not None:
        job, run, ms, interval, pred = m.groups()
        return f"{job:<18} {run:>3} before/after {ms} ms ({interval}), predicted {pred} ms"
    return line if line[:1].isdigit() else None


AUTOFIX_COLUMNS = (f"{'job':<18} run {'kept':<16} predicted  {'measured [95% CI]':<20} "
                   "meas/pred")


def spaced(line: str) -> str:
    """A line with its runs of spaces (a table's alignment) cut to two."""
    return re.sub(r"\s{3,}", "  ", line.strip())


def stability_row(line: str) -> str:
    """A job's line of corpus_stability in one line: whether the first fix differs and the
    spread (the ranges are the tally line's)."""
    line = re.sub(r"; points in every range: \w+$", "", spaced(line))
    line = re.sub(r" \((beyond|within) 10%\)", "", line).replace("same fix: yes; ", "")
    return line.replace("same fix: yes ", "one change ").replace("same fix: no", "fix differs")


def before_paren(line: str) -> str:
    """A line up to its first parenthesis (what follows is a footnote)."""
    return line.split(" (", 1)[0].rstrip(" ;,")


def clock_row(line: str) -> str:
    """step_time_truth's summary of a workload, up to how many captures were within 15%."""
    return re.sub(r"\s*\(\d+ unsteady.*$", "", line)


_PVM_HEAD = (r"^\d+ of \d+ predictions", r"(within 15%|OFF)\s*$")
_AUTOFIX_HEAD = (r"^\d+ of \d+ (kept|runs')", r"kept\s+\d+\.\d+ (within 15%|OFF)",
                 r"kept: (?!nothing)")

#: a corpus_predict row: job, finding, fix, change, predicted [range], measured [CI], error,
#: inside, the step ms, the corpus
_CORPUS = re.compile(r"^(\S+)\s+([A-Z]{2}\d{3})\s+(\S+)\s+(.*?)\s+(\d+\.\d+x \[[^\]]+\])\s+"
                     r"(\d+\.\d+x \[[^\]]+\])\s+(\d+\.\d+)\s+(yes|no|-)\b.*?(\w+)?\s*$")
#: the corpus' benchmarks: shown first, in a section of their own (:func:`corpus_section`)
CORPUS = ("corpus_predict", "corpus_rejudge_cpu", "corpus_stability", "corpus_autofix")


def corpus_row(line: str) -> str | None:
    """A row of corpus_predict's table as RESULTS.md shows it; a line of its tallies."""
    m = _CORPUS.match(line)
    if m is None:
        return line if re.match(r"^(tune|validate)( \(\w+\))?: ", line) else None
    if "counted once)" in line:  # another finding's first fix, the same change: shown once
        return None
    job, finding, _fix, change, pred, meas, err, inside, _corpus = m.groups()
    pred, meas = pred.replace(", ", ","), meas.replace(", ", ",")
    change = change.replace("num_workers", "workers").replace("intra_op_threads", "threads")
    return f"{job[:22]:<22} {finding} {change[:26]:<26} {pred:<17} {meas:<17} {err:>4} {inside}"


CORPUS_COLUMNS = (f"{'job':<22} {'rule':<5} {'change':<26} {'predicted':<17} {'measured':<17} "
                  f"{'m/p':>4} in")

#: name -> the benchmark; its output is benchmarks/results/<name>.txt
BENCHMARKS: dict[str, Bench] = {
    "corpus_predict": Bench(
        "First fixes on held-out jobs",
        ["benchmarks/corpus_predict.py", "--rounds", "8"],
        "A warning's first fix applied, timed unprofiled (m/p: measured / predicted). "
        "Goals (validate): 90% within 15%, 90% in range, none 5% slower.",
        (r"^\S+\s+[A-Z]{2}\d{3}\s+\S+\s+.*\d+\.\d+x \[", r"^(tune|validate): (predictions within|measured speedup inside|first fixes more)"),
        34, corpus_row, CORPUS_COLUMNS),
    "corpus_rejudge_cpu": Bench(
        "Every change of the corpus' CPU runs, by the code as it is",
        ["benchmarks/corpus_rejudge.py", "benchmarks/results/corpus_grid_validate.txt",
         "<the kept captures>"],
        "Kept captures: every worker and threads change of the grids, not only first fixes.",
        (r"^(tune|validate)( \([\w ]+\))?: \d+ of",), 2,
        lambda line: line.replace(" inside the range,", " inside,")),
    "corpus_stability": Bench(
        "The same job, captured three times",
        ["benchmarks/corpus_stability.py", "--captures", "3"],
        "Goal: one first fix within 10%.",
        (r"same (first )?fix: no|beyond 10%", r"^stability: \d+ of", r"^ranges: \d+ of"), 8,
        stability_row),
    "corpus_autofix": Bench(
        "Autofix on the validate half",
        ["benchmarks/corpus_autofix.py"],
        "Goals: kept changes in their ranges; none left slower (each job's before/after: "
        "the results file).",
        (r"^\d+ of \d+ (kept changes|runs'|tried decisions)",), 4, spaced),
    "analyze_speed": Bench(
        "Analysis speed and memory on a ~300 MB trace",
        ["benchmarks/analyze_speed.py", "--profile"],
        "A full analysis against `json.load` and a typed decode of the file, in one run; "
        "peak memory against the file.",
        (r"^ratio\s+\.json", r"^analyze time / ", r"^analyze peak RSS"), 5),
    "analyze_2gb": Bench(
        "A 2 GB trace in bounded memory",
        ["benchmarks/analyze_speed.py", "--size-mb", "2000", "--phases", "decode,analyze",
         "--repeat", "1", "--no-gz"],
        "The same on a 2 GB trace (`json.load` left out: it would need ~6x the file in RAM). "
        "Goal: under 4 GB peak memory.",
        (r"^analyze time / typed", r"^analyze peak RSS", r"analyze \.json: read by"), 3,
        lambda line: spaced(line).replace(
            "diagnose.api.analyze .json: read by 2 worker processes, the largest peaking at",
            "2 reading processes, the largest at").replace("processes together", "processes")),
    "hta_compare": Bench(
        "Against Holistic Trace Analysis on the same file",
        ["benchmarks/hta_compare.py"],
        "HTA installed in a venv of its own by the script. Goal: at least 30x faster.",
        (r"^tool\s", r"^torch-diagnose\s+-", r"^HTA\s+\d", r"^ratio HTA"), 5),
    # parse_ranks.py (8 rank traces read in a process pool) and fork_copy.py (the fork's
    # copies, predicted beside the first step after a real fork) are left out to keep this
    # page a headline one; their results files stay
    "capture_overhead": Bench(
        "Capture overhead",
        ["benchmarks/capture_overhead.py"],
        "Plain, sampled and profiled steps interleaved, or whole captures with the probes' own "
        "time. Goals: samplers under 1%; a profiled step at most 1.3x; the probes under 5% of "
        "the capture.",
        (r"^samplers", r"^profiled step / plain", r"^job\s+wall s", r"^\w+\s+\d+\.\d+\s+\d+\.\d+x",
         r"^captures: \d+", r"^each probe's part"),
        6),
    "gc_footprint": Bench(
        "What a finished session leaves in the training process",
        ["benchmarks/gc_footprint.py"],
        "Objects each full collection walks after a session, against a job never diagnosed.",
        (r"^arm\s", r"^(plain|session|plots)\s"), 4),
    "step_model_replay": Bench(
        "Step model: replay of the unmodified step on real traces",
        ["benchmarks/step_model_replay.py"],
        "Each trace's profiled steps rebuilt as a graph and replayed; error = replayed / "
        "measured - 1. Goal: median |error| <= 3%, none over 10%.",
        (r"^\d+ traces modelled",), 1),
    "step_clock_truth": Bench(
        "The unprofiled step time against the same loop timed without the tool",
        ["benchmarks/step_time_truth.py", "--rounds", "5", "--workload", "both",
         "--retries", "4"],
        "plain / capture / plain, interleaved. Goal: the report's step within 15% of the "
        "plain loop in 5 of 5 captures.",
        (r"tool/plain median",), 2, clock_row),
    "predict_vs_measured": Bench(
        "Predictions checked by timing the job without the profiler",
        ["benchmarks/predict_vs_measured.py", "--rounds", "16"],
        "benchmarks/jobs: each warning's first fix applied as autofix applies it, timed in "
        "interleaved blocks. Goal: within 15%.",
        _PVM_HEAD, 6, predicted_row, PREDICTED_COLUMNS),
    "predict_vs_measured_samples": Bench(
        "Predictions on the demo and the CPU samples",
        ["benchmarks/predict_vs_measured.py", "--samples", "--rounds", "16"],
        "As above, on the demo and the CPU samples.",
        _PVM_HEAD, 4, predicted_row, PREDICTED_COLUMNS),
    "predict_configs": Bench(
        "Every worker and thread split, predicted beside timed",
        ["benchmarks/predict_configs.py", "--repeat", "2"],
        "Every config of autofix's worker and thread ladders (`2w1t`: 2 workers, torch on "
        "one thread), predicted and timed.",
        (r"^\S+\s+\d+ of \d+ within 15%",), 4),
    "cpu_autocast": Bench(
        "CPU autocast (PR002): predicted beside measured",
        ["benchmarks/cpu_autocast.py"],
        "Corpus jobs under CPU bf16 autocast.",
        (r"^\d+ of \d+ predictions",), 1, lambda ln: "; ".join(ln.split("; ")[:2])),
    # predict_spread.py (one tuning job's predictions, capture after capture) is left out:
    # corpus_stability above is that check on the corpus; its results file stays
    "autofix_jobs": Bench(
        "Autofix on the project's own jobs: predicted beside measured",
        ["benchmarks/autofix_jobs.py"],
        "`autofix()` on fresh jobs beside the model. Goals: no job left slower; too many "
        "workers cut in 3 of 3 runs.",
        _AUTOFIX_HEAD, 8, autofix_row, AUTOFIX_COLUMNS),
    "autofix_samples": Bench(
        "Autofix on the demo and the CPU samples",
        ["benchmarks/autofix_jobs.py", "--samples"],
        "As above, on the demo and the CPU samples. Goals: the demo 1.3x faster "
        "or more; the healthy sample keeps nothing.",
        _AUTOFIX_HEAD, 5, autofix_row, AUTOFIX_COLUMNS),
    "autofix_vs_grid": Bench(
        "Autofix against an exhaustive grid",
        ["benchmarks/autofix_vs_grid.py"],
        "Goal: at least 95% of the best grid throughput with far fewer trials.",
        (r"^autofix reaches",), 1, before_paren),
    "epoch_start": Bench(
        "An epoch's start and end with DataLoader workers",
        ["benchmarks/epoch_start.py", "--workers", "2,4,6", "--reps", "4", "slow_loader"],
        "Loaders with k workers timed over whole epochs, beside the step model's prediction.",
        (r"^workers\s", r"^\s+\d+\s"), 4),
    "loop_parts": Bench(
        "Where a job's step goes for each split, timed in the loop",
        ["benchmarks/loop_parts.py", "augment_cnn", "--splits", "0,2", "2,2", "2,1", "1,2",
         "0,2", "--steps", "160"],
        "The job's loop for each (workers, threads) split, no profiler: its wait, compute and "
        "batch making, beside a session's timings.",
        (r"^workers threads", r"^\s+\d+\s+\d+\s"), 4),
    "threads_spin": Bench(
        "torch's idle threads spinning beside new workers",
        ["benchmarks/threads_spin.py", "--rounds", "7", "--captures", "3"],
        "A job waiting on its in-process loader; paired rounds.",
        (r"^num_workers",), 2, _no_rounds),
    "work_after_fetch": Bench(
        "The model's compute after each kind of fetch (tensor_rows)",
        ["benchmarks/work_after_fetch.py", "--runs", "2"],
        "The compute after a single-threaded load and after a batched fetch, and the "
        "session's timing of it.",
        (r"^variant", r"^as is"), 2, spaced),
    "watch_false_alarms": Bench(
        "Watch: false alarms and the delay to find a change",
        ["benchmarks/watch_false_alarms.py"],
        "False alarms per 10,000 steps (goal: at most 1); steps to catch a 20% slowdown (50).",
        (r"^steady run", r"^real, |^synthetic"), 3),
    "watch_overhead": Bench(
        "Watch: what it costs a step",
        ["benchmarks/watch_overhead.py", "--rounds", "15"],
        "With and without watch, interleaved, ~1 ms CPU steps (goal: ratio at most 1.01).",
        (r"^per-step host cost", r"^throughput ratio"), 2),
    "memory_whatif": Bench(
        "Memory what-ifs against the changed job run for real",
        ["benchmarks/memory_whatif.py"],
        "Held-out models: each change's predicted peak against MemTracker on the changed "
        "job. Goals: within 10%, none under by more than 5%.",
        (r"^# fake:", r"^# scaled:"), 2),
    "fuzz_reader": Bench(
        "Reader fuzzing",
        ["benchmarks/fuzz_reader.py", "--cases", "10000"],
        "Each case ends in a report or a one-line error. Goal: 0 failures.",
        (r"^failures",), 1),
}

_REJUDGE = re.compile(r"^(tune|validate)\s+(\S+)\s+([A-Z]{2}\d{3})\s+\S+\s+(.*?)\s+"
                      r"\d+\.\d+x\s+(\d+\.\d+x \[[^\]]+\])\s+(\d+\.\d+x \[[^\]]+\])\s+"
                      r"(\d+\.\d+)\s+(yes|no)(?:\s+model .*)?\s*$")  # range_fit's columns after


def rejudge_row(line: str) -> str | None:
    """A validate row of corpus_rejudge's table as RESULTS.md shows it; a tally line."""
    if re.match(r"^(tune|validate): \d+ of", line):
        return line
    m = _REJUDGE.match(line)
    if m is None or m.group(1) != "validate":
        return None
    _half, job, finding, change, pred, meas, err, inside = m.groups()
    pred, meas = pred.replace(", ", ","), meas.replace(", ", ",")
    change = change.replace("num_workers", "workers").replace("intra_op_threads", "threads")
    return f"{job[:22]:<22} {finding} {change[:24]:<24} {pred:<18} {meas:<17} {err:>4} {inside}"


REJUDGE_COLUMNS = (f"{'job (validate)':<22} {'rule':<5} {'change':<24} {'predicted':<18} "
                   f"{'measured':<17} {'m/p':>4} in")

#: the corpus on a lent GPU: in the corpus' section (the rejudge's table; the runs it reads
#: are linked from it), not among the other GPU results
CORPUS_GPU = {"corpus_rejudge_gpu": "corpus_rejudge_gpu_h200", "corpus_predict_gpu": None}

#: GPU results (benchmarks/results/*h100*.txt, *h200*.txt), by file name less its GPU
GPU: dict[str, Bench] = {
    "corpus_rejudge_gpu": Bench(
        "The corpus on a GPU: every offered fix, predicted by the code as it is",
        ["benchmarks/corpus_rejudge.py", "benchmarks/results/corpus_predict_gpu_h200.txt",
         "benchmarks/captures/h200"],
        "Each offered fix timed on a lent H200 ([runs](results/corpus_predict_gpu_h200.txt)), "
        "predicted again from the captures. Aim: median error 10%. "
        "[Plot](results/corpus_calibration_gpu_h200.svg).",
        (r"^validate\s+\S+\s+[A-Z]{2}\d{3}", r"^(tune|validate): \d+ of"), 16, rejudge_row,
        REJUDGE_COLUMNS),
    "corpus_predict_gpu": Bench(
        "The corpus on a GPU: the runs", ["bash", "benchmarks/gpu_corpus.sh"],
        "Every offered fix of each warning, timed unprofiled on the lent GPU (the file holds "
        "both runs; the rejudge above tallies them together).",
        (r"^(tune|validate): (predictions within|measured speedup inside)",), 4, spaced),
    "predict_vs_measured_gpu": Bench(
        "Predictions checked on a GPU", ["benchmarks/predict_vs_measured.py", "--gpu"],
        "Each first fix timed unprofiled.", _PVM_HEAD, 5, predicted_row, PREDICTED_COLUMNS),
    "autofix_gpu": Bench(
        "Autofix on a GPU: predicted beside measured", ["benchmarks/autofix_gpu.py"],
        "Kept changes and before/afters with predictions.", _AUTOFIX_HEAD, 6, autofix_row, AUTOFIX_COLUMNS),
    "gpu": Bench(
        "The GPU checks of benchmarks/gpu_run.sh", ["bash", "benchmarks/gpu_run.sh"],
        "Capture step / plain loop (tool/plain); GPU tests in the file.",
        (r"median unprofiled/plain", r"tool/plain median"), 6, clock_row),
    "epoch_start": Bench(
        "An epoch's start and end with workers, on a GPU machine",
        ["benchmarks/epoch_start.py"], "As on the CPU, on the lent machine's 16 CPUs.",
        (r"one-worker start", r"k=\s*\d+"), 4, spaced),
}


def run(name: str) -> None:
    b = BENCHMARKS[name]
    print(f"== {name}: python {' '.join(b.cmd)}", file=sys.stderr, flush=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, *b.cmd], cwd=REPO, env=env, capture_output=True,
                          text=True)
    text = proc.stdout
    if proc.returncode != 0:
        # progress lines redraw themselves with "\r": keep what each line finally showed
        err = [ln.rsplit("\r", 1)[-1] for ln in proc.stderr.splitlines()]
        text += f"\n[exit code {proc.returncode}; last lines of stderr:]\n" + "\n".join(err[-15:])
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.txt").write_text(text)


# ---------------------------------------------------------------------- reading results
#: the start of a numbered run in a file of them ("# Run 8 (...)", "## Run F (...)")
RUN_MARK = re.compile(r"^#{1,2} Run \w+ \(")
#: a heading over the runs before the newest ("## the run before it (...)")
EARLIER = re.compile(r"^## (the run|the runs|earlier runs)")
#: the line a results refresh puts over each run: the code it ran
CODE_AT = re.compile(r"^# code at \w+")
#: the tallies a benchmark prints, each at the start of its line
TALLY = re.compile(r"^(\d+) of (\d+) (predictions within 15%|kept changes measured within 15%"
                   r"|runs' before/after measured within 15%)")
#: the tallies' names in RESULTS.md
KINDS = {"predictions within 15%": "first fixes",
         "kept changes measured within 15%": "kept changes",
         "runs' before/after measured within 15%": "before/after"}
#: the most lines a benchmark other than the corpus' quotes of its newest run
QUOTED = 2
#: the newest runs the middle column of the tallies sums
RECENT = 4
#: a tally under this share (over all saved runs, or in the newest run) is listed as weak
WEAK = 0.8


def newest_run(text: str) -> tuple[str, bool]:
    """The newest run of a results file (its runs newest first), and whether runs follow
    it. Numbered runs end at the next run's mark; otherwise the newest run ends at the
    next run's ``# code at`` line (a refresh prepends one over each run), or at the first
    heading over earlier runs, whichever comes first (a file of several checks has
    headings of its own, and is one run)."""
    lines = text.rstrip().splitlines()
    marks = [i for i, ln in enumerate(lines) if RUN_MARK.match(ln)]
    if marks:
        end = marks[1] if len(marks) > 1 else len(lines)
    else:
        code = [i for i, ln in enumerate(lines) if CODE_AT.match(ln)]
        earlier = [i for i, ln in enumerate(lines) if EARLIER.match(ln)]
        end = min([*[i for i in code if i > 0][:1], *earlier[:1], len(lines)])
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


def _sum(runs: list[tuple[int, int]]) -> tuple[int, int]:
    return sum(x for x, _ in runs), sum(y for _, y in runs)


def _share(runs: list[tuple[int, int]], with_runs: bool = False) -> str:
    a, b = _sum(runs)
    if not b:
        return "-"
    out = f"{a} of {b} ({a / b:.0%})"
    return out + f", {len(runs)} run{'s' * (len(runs) > 1)}" if with_runs else out


def tally_table(files: list[Path]) -> list[str]:
    """The checks' tallies: the newest run's, the newest few runs', every saved run's."""
    rows = [f"| [{f.stem}](results/{f.name}) | {KINDS[kind]} | {_share(runs[:1])} | "
            f"{_share(runs[:RECENT])} | {_share(runs, True)} |"
            for f in files for kind, runs in tallies(f.read_text()).items()
            if _sum(runs)[1]]  # a check with nothing counted yet (no kept change) is left out
    if not rows:
        return []
    return ["## The checks at a glance", "",
            f"| results file | check | newest run | newest {RECENT} runs | all saved runs |",
            "|---|---|---|---|---|", *rows, ""]


def weak_list(files: list[Path]) -> list[str]:
    """The tallies under :data:`WEAK`, over all saved runs or in the newest run."""
    out = []
    for f in files:
        for kind, runs in tallies(f.read_text()).items():
            (a, b), (na, nb) = _sum(runs), _sum(runs[:1])
            if (b and a / b < WEAK) or (nb >= 2 and na / nb < WEAK):
                out.append(f"- `{f.stem}`, {KINDS[kind]}: {a} of {b} ({a / b:.0%}) over {len(runs)} "
                           f"run{'s' * (len(runs) > 1)}; {_share(runs[:1])} in the newest")
    if not out:
        return []
    return ["## Where the figures are weak", "",
            *textwrap.wrap(f"Checks under {WEAK:.0%} within 15%, over all saved runs or in the "
                           "newest (of two checks or more):", WIDTH),
            "", *out, ""]


def _when(text: str) -> str:
    """The newest run's date and code, as its own lines name them (a numbered run's heading
    first: a file's header may name the dates of all its runs)."""
    mark = next((ln for ln in text.splitlines() if RUN_MARK.match(ln)), "")
    stamp = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[ T](\d{2}:\d{2}))?")
    date = stamp.search(mark) or stamp.search(text)
    alone = re.search(r"(?<![\d:])(\d{2}:\d{2}) UTC", mark)
    time = date.group(2) if date and date.group(2) else (alone.group(1) if alone else None)
    code = (re.search(r"(?:git|code(?: at|:)?)\s+([0-9a-f]{7,40})\b", mark)
            or re.search(r"(?:git|code(?: at|:)?)\s+([0-9a-f]{7,40})\b", text))
    parts = []
    if date:
        parts.append(date.group(1) + (f" {time}" if time else ""))
    if code:
        parts.append(f"code at {code.group(1)}")
    return ", ".join(parts) or "date and code not stated"


def headline(b: Bench, text: str) -> list[str]:
    """The lines of ``text`` (a newest run) that are ``b``'s headline, wrapped."""
    pats = [re.compile(p) for p in b.headline]
    picked: list[str] = []
    for ln in text.splitlines():
        if len(picked) >= b.most:
            break
        if not any(p.search(ln) for p in pats):
            continue
        got = b.condense(ln) if b.condense is not None else ln
        if got is not None and got.strip():
            picked.append(got.rstrip())
    if picked and b.columns:
        picked.insert(0, b.columns)
    out: list[str] = []
    for ln in picked:  # an indented code block: 4 spaces, continuations 8
        out += textwrap.wrap(ln, WIDTH + 4, initial_indent="    ", subsequent_indent="        ",
                             replace_whitespace=False,
                             break_on_hyphens=False) or ["    "]
    return [ln.rstrip() for ln in out]


def command(b: Bench) -> str:
    """How ``b`` is run, from the repository root."""
    return " ".join(b.cmd) if b.cmd[0] == "bash" else f"python {' '.join(b.cmd)}"


def section(b: Bench, f: Path, level: str = "###") -> list[str]:
    """One benchmark: what it checks, its newest run's headline, where the rest is."""
    head = [f"{level} {b.title}", ""]
    if not f.exists() or not f.read_text().strip():
        return [*head, *textwrap.wrap(f"{b.what} Not run yet: `{command(b)}`.", WIDTH), ""]
    text = f.read_text()
    newest, more = newest_run(text)
    n = len(text.rstrip().splitlines())
    about = (f"{b.what} " + (f"Newest run: {_when(newest)}; every saved run: " if more
                             else f"Recorded: {_when(newest)}; all of it: ")
             + f"[`results/{f.name}`](results/{f.name}) ({n} lines).")
    lines = [*head, *textwrap.wrap(about, WIDTH, break_on_hyphens=False), ""]
    quoted = headline(b, newest)
    return lines + ([*quoted, ""] if quoted else [])


INTRO = """\
# Benchmark results

Made by `benchmarks/make_results.py` from `results/`, newest first ([scripts](README.md)); a shared
2-CPU VM, lent GPUs. Trust the validate half. A check: measured within 15% of predicted (m/p).
*First fixes*: a warning's, unprofiled; *kept changes*: autofix's; *before/after*: autofix's.
"""


def corpus_section() -> list[str]:
    """The held-out jobs first: the corpus' table (tune and validate apart), its stability
    and autofix on its validate half, and the calibration plot."""
    lines = ["## Held-out jobs: the corpus", "",
             *textwrap.wrap(
                 "Jobs the model was not built on, split by corpus/SPLIT.md: the tune half "
                 "informs the model, the validate half checks it. "
                 "[Plot](results/corpus_calibration.svg).", WIDTH), ""]
    for name in CORPUS:
        lines += section(BENCHMARKS[name], OUT / f"{name}.txt")
    for key, stem in CORPUS_GPU.items():
        if stem is not None and (OUT / f"{stem}.txt").exists():
            b = GPU[key]
            lines += section(dataclasses.replace(b, title=f"{b.title} (H200)"),
                             OUT / f"{stem}.txt")
    return lines


def assemble() -> str:
    gpu_files = sorted(OUT.glob("*h100*.txt")) + sorted(OUT.glob("*h200*.txt"))
    checked = [OUT / f"{n}.txt" for n in BENCHMARKS] + gpu_files
    present = [f for f in checked if f.exists()]
    lines = INTRO.splitlines() + [""]
    lines += corpus_section()
    lines += tally_table(present)
    lines += weak_list(present)
    lines += ["## On the development machine (CPU)", ""]
    for name, b in BENCHMARKS.items():
        if name not in CORPUS:  # the held-out jobs lead; the rest quote a few lines each
            lines += section(dataclasses.replace(b, most=min(b.most, QUOTED)), OUT / f"{name}.txt")
    lines += ["## On a GPU", "",
              *textwrap.wrap("Recorded on lent GPU machines by `bash benchmarks/gpu_run.sh` "
                             "and the scripts it runs; each file names its GPU, torch build, "
                             "date and code.", WIDTH), ""]
    for f in gpu_files:
        key = re.sub(r"_?h[12]00$", "", f.stem)
        if key in CORPUS_GPU:  # in the corpus' section
            continue
        gpu = "H100" if "h100" in f.stem else "H200"
        b = GPU.get(key, Bench(f.stem, ["bash", "benchmarks/gpu_run.sh"], "",
                               (r"^\d+ of \d+",), 4))
        lines += section(dataclasses.replace(b, title=f"{b.title} ({gpu})",
                                             most=min(b.most, QUOTED)), f)
    if not gpu_files:
        lines += ["No GPU results are saved yet.", ""]
    return "\n".join(lines).rstrip() + "\n"


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
