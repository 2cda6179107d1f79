"""How fast and how lean is ``diagnose.api.analyze`` on a large trace?

Builds a large uncompressed Kineto trace (default ~300 MB) by replicating a real
GPU trace with shifted timestamps (``_bench.py``), gzips it once, and writes the same
events on one line (as ``json.dump`` with no indent writes them, or tools that re-export
or merge traces), then compares on those same files:

1. ``json.load`` (stdlib) of the file;
2. a bare typed msgspec decode: ``decode(read_bytes(path), path)``;
3. the full analysis: ``diagnose.api.analyze(path)`` (read, all metrics, all rules).

Each measurement runs in a fresh child process, so its peak RSS is its own; the time
is taken inside the child around the work only (the import time is reported on its
own). Each phase runs ``--repeat`` times: median time, max peak RSS. The peak RSS is
the child's ``VmHWM`` (/proc/self/status): ``ru_maxrss`` survives fork+exec on Linux,
so in a child it is at least the parent's own peak; it is recorded in the JSON too.
The built files are cached in ``--workdir`` and reused while they match.

Run from the repository root (2-core machine: about 3 minutes at 300 MB, plus a few
seconds to build the files the first time)::

    python benchmarks/analyze_speed.py --size-mb 300 --repeat 3 --json speed.json

``--profile`` adds one analyze() under cProfile: its top cumulative entries in diagnose/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _bench import (
    GZIP_LEVEL,
    MB,
    RESULT_TAG,
    BuiltTrace,
    add_trace_options,
    build_gzip,
    build_one_line,
    built_trace,
    emit,
    log,
    machine_info,
    peak_rss_kib,
    ram_text,
    ru_maxrss_kib,
    tagged,
    usable_cpus,
    use_this_checkout,
    warm_page_cache,
)
from _bench import loadavg as _loadavg

PHASES = ("json", "decode", "gunzip", "analyze")
PHASE_LABELS = {
    "json": "json.load (stdlib)",
    "decode": "msgspec typed decode",
    "gunzip": "decompression only",
    "analyze": "diagnose.api.analyze",
}
#: the inputs, as the tables name them: the Kineto-layout file, its gzip, the one-line file
INPUTS = {"json": ".json", "json.gz": ".json.gz", "line": "one line"}
CHECK_METRICS = ("step_count", "kernels_per_step", "launches_per_step", "share_kernel",
                 "idle_launch_frac")

# --------------------------------------------------------------------------- child side
def _child(phase: str, path_str: str) -> None:
    """Runs in a fresh process: import, do one phase, print the numbers as one JSON line."""
    use_this_checkout()
    path = Path(path_str)
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if phase == "json":
        imported = time.perf_counter()
        rss_base = peak_rss_kib()
        start = time.perf_counter()
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                doc = json.load(f)
        else:
            with open(path, "rb") as f:
                doc = json.load(f)
        work = time.perf_counter() - start
        out["events"] = len(doc["traceEvents"])
    elif phase == "gunzip":  # the decompression itself, by the inflater the reader uses
        from diagnose.trace import inflate

        imported = time.perf_counter()
        rss_base = peak_rss_kib()
        start = time.perf_counter()
        d, n = inflate.gzip_member(), 0
        out["inflater"] = inflate.NAME
        with open(path, "rb") as f:
            while block := f.read(2**20):
                n += len(d.decompress(block))
        work = time.perf_counter() - start
        out["bytes"] = n
    elif phase == "decode":
        from diagnose.trace.decode import decode, read_bytes

        imported = time.perf_counter()
        rss_base = peak_rss_kib()
        start = time.perf_counter()
        dec = decode(read_bytes(path), path)
        work = time.perf_counter() - start
        out["events"] = len(dec.events)
    elif phase in ("analyze", "profile"):
        from diagnose.api import analyze

        imported = time.perf_counter()
        rss_base = peak_rss_kib()
        if phase == "profile":
            _profile(analyze, path)
            return
        import diagnose.model_apart as an

        model_s = [0.0]  # the step model's time on the analysis' path: built here, or
        build, apart = an.model_and_memory, an.start  # waited for from its fork

        def timed(f: Any) -> Any:
            def run(*a: Any, **k: Any) -> Any:
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    model_s[0] += time.perf_counter() - t
            return run

        def timed_apart(*a: Any, **k: Any) -> Any:
            wait = apart(*a, **k)
            return None if wait is None else timed(wait)

        an.model_and_memory = timed(build)  # type: ignore[assignment]
        an.start = timed_apart  # type: ignore[assignment]
        start = time.perf_counter()
        report = analyze(path)
        work = time.perf_counter() - start
        out["model_s"] = model_s[0]
        out["check"] = {k: report.metrics.get(k) for k in CHECK_METRICS}
        out["check"]["findings"] = sorted(f.rule for f in report.findings)
    else:
        raise SystemExit(f"unknown phase {phase!r}")
    # worker processes the work started (the parallel reader): the largest one's peak
    # (ru_maxrss of waited-for children; it includes what a forked child shared with us)
    children = int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    out.update(import_s=imported - t0, work_s=work, peak_rss_kib=peak_rss_kib(),
               base_rss_kib=rss_base, ru_maxrss_kib=ru_maxrss_kib(),
               children_peak_kib=children,
               workers=usable_cpus() if children and phase in ("decode", "analyze") else 0)
    emit(RESULT_TAG, out)
    os._exit(0)  # skip tearing down millions of objects: not part of the measurement


def _rollup_kib(pid: int, fields: tuple[str, ...]) -> int:
    """The sum of ``fields`` (kB) of a process's /proc/PID/smaps_rollup; 0 where it is
    gone."""
    got = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                name = line.split(":", 1)[0]
                if name in fields:
                    got += int(line.split()[1])
    except (OSError, ValueError):
        return 0
    return got


def _together_kib(path: Path) -> int:
    """The most memory one analyze() child and its worker processes held at one moment:
    the child's RSS (as the peak RSS column counts it) and each worker's own pages (its
    USS: the pages it shares with the child are in that RSS already), sampled from this
    process every TOGETHER_EVERY_S (a thread in the child would turn its parallel reader
    off: it forks only where no other thread runs), and at least the child's own peak (a
    spike can fall between two samples). The workers' peaks added to the child's
    over-count: a forked worker's peak includes the pages it shares with its parent, and
    the peaks need not come at the same time."""
    import psutil

    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                             "analyze", str(path)], stdout=subprocess.PIPE, text=True)
    most = 0
    try:
        child = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                kids = [c.pid for c in child.children(recursive=True)]
            except psutil.Error:
                kids = []
            own = sum(_rollup_kib(k, ("Private_Clean", "Private_Dirty")) for k in kids)
            most = max(most, _rollup_kib(proc.pid, ("Rss",)) + own)
            time.sleep(TOGETHER_EVERY_S)
    finally:
        out, _ = proc.communicate()
    results = tagged(out, RESULT_TAG)
    if proc.returncode != 0 or not results:
        raise SystemExit(f"analyze on {path} failed (exit {proc.returncode})")
    return max(most, int(results[-1]["peak_rss_kib"]))


#: how often the memory of all processes together is sampled (s)
TOGETHER_EVERY_S = 0.005


def _profile(analyze: Any, path: Path, top: int = 10) -> None:
    """Where the time goes. 1) analyze() as run (the parent's view: with the parallel
    reader the decoding happens in worker processes, which cProfile does not see); 2) the
    same read in this one process (``read_trace(path, workers=1)``: the code the workers
    run), by own time, everything included, so the per-event work shows for what it is:
    msgspec's decoder and numpy.fromiter over C-level maps, not Python code per event."""
    import cProfile
    import pstats

    from diagnose.trace import read_trace

    prof = cProfile.Profile()
    prof.enable()
    analyze(path)
    prof.disable()
    stats = pstats.Stats(prof, stream=sys.stdout)
    print(f"1) top {top} cumulative entries under diagnose/ (cProfile, one analyze() of "
          f"{path.name})")
    stats.sort_stats("cumulative").print_stats(f"{os.sep}diagnose{os.sep}", top)
    prof = cProfile.Profile()
    prof.enable()
    trace = read_trace(path, workers=1)
    prof.disable()
    stats = pstats.Stats(prof, stream=sys.stdout)
    calls = stats.total_calls  # type: ignore[attr-defined]
    print(f"2) top {top} entries by own time, read_trace(workers=1) of the same file in one "
          f"process: {calls:,} function calls for {trace.n_events_total:,} events "
          f"({calls / max(trace.n_events_total, 1):.4f} per event)")
    stats.sort_stats("tottime").print_stats(top)
    sys.stdout.flush()
    os._exit(0)


# ----------------------------------------------------------------------------- measuring
@dataclass
class PhaseResult:
    phase: str
    label: str
    input: str  # a key of INPUTS
    file_bytes: int  # the size of the input, uncompressed
    times_s: list[float]
    import_s: list[float]
    process_s: list[float]  # wall time of the whole child, interpreter start-up included
    peak_rss_kib: int  # VmHWM at the end of the child
    base_rss_kib: int  # VmHWM after the imports, before the work
    ru_maxrss_kib: int  # for reference: includes the parent's peak (inherited across exec)
    children_peak_kib: int = 0  # largest worker process's peak (parallel reader), 0 if none
    workers: int = 0  # worker processes the parallel reader may use
    events: int | None = None
    check: dict[str, Any] | None = None
    model_s: list[float] | None = None  # analyze: the step model's time on the analysis' path
    together_kib: int | None = None  # analyze: all its processes' PSS at once, at the most

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def peak_over_file(self) -> float:
        return self.peak_rss_kib * 1024 / self.file_bytes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(median_s=self.median_s, median_import_s=statistics.median(self.import_s),
                 peak_rss_bytes=self.peak_rss_kib * 1024, peak_rss_over_file=self.peak_over_file)
        return d


def _run_child(phase: str, path: Path) -> tuple[str, float]:
    """Run one child; (its stdout, its wall time including interpreter start-up)."""
    t0 = time.perf_counter()
    cp = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", phase,
                         str(path)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if cp.returncode != 0:
        raise SystemExit(f"{phase} on {path} failed (exit {cp.returncode}):\n"
                         f"{cp.stdout[-2000:]}{cp.stderr[-4000:]}")
    return cp.stdout, wall


def _child_result(phase: str, path: Path) -> tuple[dict[str, Any], float]:
    stdout, wall = _run_child(phase, path)
    results = tagged(stdout, RESULT_TAG)
    if not results:
        raise SystemExit(f"{phase} on {path}: the child printed no result:\n{stdout[-2000:]}")
    return results[-1], wall


def run_all(inputs: dict[str, Path], repeat: int, file_bytes: dict[str, int],
            phases: tuple[str, ...] = PHASES) -> list[PhaseResult]:
    """Every phase on every input (a key of INPUTS -> its path), ``repeat`` rounds. A round
    runs each phase once, so a burst of load from elsewhere on the machine spreads over all
    phases, not one."""
    runs: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = {
        (phase, inp): [] for inp in inputs for phase in phases
        if phase != "gunzip" or inp == "json.gz"}
    for i in range(repeat):
        log(f"round {i + 1}/{repeat}: " + ", ".join(PHASE_LABELS.values())
            + f" on {len(inputs)} file(s) ...")
        for (phase, inp), acc in runs.items():
            acc.append(_child_result(phase, inputs[inp]))
    out = [_summarise(phase, inp, file_bytes[inp], acc) for (phase, inp), acc in runs.items()]
    if "analyze" in phases and Path("/proc/self/smaps_rollup").exists():
        log("and once more each, all the analysis' processes' memory sampled together ...")
        for r in out:
            if r.phase == "analyze":
                r.together_kib = _together_kib(inputs[r.input])
    return out


def _summarise(phase: str, inp: str, file_bytes: int,
               runs: list[tuple[dict[str, Any], float]]) -> PhaseResult:
    last = runs[-1][0]
    return PhaseResult(
        phase=phase,
        label=PHASE_LABELS[phase],
        input=inp,
        file_bytes=file_bytes,
        times_s=[r["work_s"] for r, _ in runs],
        import_s=[r["import_s"] for r, _ in runs],
        process_s=[wall for _, wall in runs],
        peak_rss_kib=max(r["peak_rss_kib"] for r, _ in runs),
        base_rss_kib=max(r["base_rss_kib"] for r, _ in runs),
        ru_maxrss_kib=max(r["ru_maxrss_kib"] for r, _ in runs),
        children_peak_kib=max(r.get("children_peak_kib", 0) for r, _ in runs),
        workers=max(r.get("workers", 0) for r, _ in runs),
        events=last.get("events"),
        check=last.get("check"),
        model_s=[r["model_s"] for r, _ in runs] if all("model_s" in r for r, _ in runs)
        else None,
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


#: ratio names: analyze_over_json_load_time + the input's suffix
_SUFFIX = {"json": "", "json.gz": "_gz", "line": "_one_line"}


def compute_ratios(results: list[PhaseResult]) -> dict[str, float]:
    by = {(r.phase, r.input): r for r in results}
    out: dict[str, float] = {}
    for inp, sfx in _SUFFIX.items():
        a = by.get(("analyze", inp))
        if a is None:
            continue
        if ("json", inp) in by:
            out[f"analyze_over_json_load_time{sfx}"] = _ratio(a.median_s,
                                                               by[("json", inp)].median_s)
        if ("decode", inp) in by:
            out[f"analyze_over_typed_decode_time{sfx}"] = _ratio(a.median_s,
                                                                  by[("decode", inp)].median_s)
        out[f"analyze_peak_rss_over_file_size{sfx}"] = a.peak_over_file
    if ("analyze", "json.gz") in by and ("analyze", "json") in by:
        gz, plain = by[("analyze", "json.gz")].median_s, by[("analyze", "json")].median_s
        out["analyze_time_gz_over_json"] = _ratio(gz, plain)
        if ("gunzip", "json.gz") in by:
            out["gz_extra_over_gunzip_time"] = _ratio(gz - plain, by[("gunzip", "json.gz")].median_s)
    if ("analyze", "line") in by and ("analyze", "json") in by:
        out["analyze_time_one_line_over_json"] = _ratio(by[("analyze", "line")].median_s,
                                                         by[("analyze", "json")].median_s)
    return out


def render(info: dict[str, Any], command: str, date: str, bt: BuiltTrace,
           results: list[PhaseResult], ratios: dict[str, float], repeat: int,
           source_check: dict[str, Any] | None) -> str:
    lines = [
        "torch-diagnose: analysis speed on a large trace",
        f"machine : {info['cpu']}, {info['cores']} cores, {ram_text(info)}",
        f"software: Python {info['python']}, numpy {info['numpy']}, msgspec {info['msgspec']},"
        f" isal {info.get('isal') or 'absent (zlib inflates)'},"
        f" {info['os']}",
        f"code    : torch-diagnose at git {info['code']}",
        f"date    : {date}   (load average at start {info['loadavg_start']},"
        f" at end {info.get('loadavg_end')})",
        f"command : {command}   (from the repository root)",
        f"source  : {Path(bt.source).name} ({bt.source_events:,} events) x {bt.copies} copies",
        f"file    : {bt.path}  {bt.bytes / MB:,.1f} MB, {bt.events:,} events",
    ]
    if bt.gz_path is not None and bt.gz_bytes is not None:
        lines.append(f"gzipped : {bt.gz_path.name}  {bt.gz_bytes / MB:,.1f} MB "
                     f"(level {GZIP_LEVEL}, {bt.bytes / bt.gz_bytes:.1f}x smaller)")
    if bt.line_path is not None and bt.line_bytes is not None:
        lines.append(f"one line: {bt.line_path.name}  {bt.line_bytes / MB:,.1f} MB (the same "
                     "events with no line breaks, as json.dump writes them)")
    lines += [
        f"method  : each run is a fresh process; time around the work only; median of {repeat}"
        " rounds,",
        "          each round runs every phase once (interleaved);",
        "          peak RSS = max over runs of the child's VmHWM; base RSS = after imports;",
        "          MB = 10^6 bytes;",
        "          peak/file = peak RSS / uncompressed .json size (one line: its own size)",
        "",
    ]
    hdr = (f"{'phase':<22} {'input':<8} {'median s':>9} {'min s':>7} {'max s':>7} "
           f"{'import s':>9} {'peak RSS MB':>12} {'base RSS MB':>12} {'peak/file':>10}")
    lines += [hdr, "-" * len(hdr)]
    for r in results:
        lines.append(
            f"{r.label:<22} {INPUTS[r.input]:<8} {r.median_s:>9.2f} {min(r.times_s):>7.2f} "
            f"{max(r.times_s):>7.2f} {statistics.median(r.import_s):>9.2f} "
            f"{r.peak_rss_kib * 1024 / MB:>12,.0f} {r.base_rss_kib * 1024 / MB:>12,.0f} "
            f"{r.peak_over_file:>9.2f}x")
    for r in results:
        if r.children_peak_kib and r.workers:
            total = (r.peak_rss_kib + r.workers * r.children_peak_kib) * 1024
            lines.append(
                f"  {r.label} {INPUTS[r.input]}: read by {r.workers} worker processes, the "
                f"largest peaking at {r.children_peak_kib * 1024 / MB:,.0f} MB; all processes "
                f"together <= {total / MB:,.0f} MB = {total / r.file_bytes:.2f}x the file "
                "(upper bound)")
        if r.together_kib:
            t = r.together_kib * 1024
            lines.append(
                f"  {r.label} {INPUTS[r.input]}: all its processes at once, at the most "
                f"{t / MB:,.0f} MB = {t / r.file_bytes:.2f}x the file (one more run: its RSS "
                f"and the workers' own pages, every {TOGETHER_EVERY_S * 1e3:.0f} ms)")
    for r in results:
        if r.model_s:
            m = statistics.median(r.model_s)
            lines.append(
                f"  {r.label} {INPUTS[r.input]}: of which the step model (graph of a few "
                f"steps, replay; on a large trace built in a forked process beside the "
                f"metrics: the wait for it) {m:.3f} s median = {m / r.median_s:.1%} of the "
                "analysis")
    lines.append("")
    names = {
        "analyze_over_json_load_time": "analyze time / json.load time",
        "analyze_over_typed_decode_time": "analyze time / typed decode time",
        "analyze_peak_rss_over_file_size": "analyze peak RSS / file size",
    }
    lines.append(f"{'ratio':<36} {'.json':>8} {'.json.gz':>9} {'one line':>9}")
    lines.append("-" * 65)
    for k, label in names.items():
        a, b, c = (ratios.get(k + sfx) for sfx in _SUFFIX.values())
        lines.append(f"{label:<36} {_fmt(a):>8} {_fmt(b):>9} {_fmt(c):>9}")
    if "analyze_time_gz_over_json" in ratios:
        lines.append(f"{'analyze time .json.gz / .json':<36} "
                     f"{_fmt(ratios['analyze_time_gz_over_json']):>8}")
    if "gz_extra_over_gunzip_time" in ratios:
        lines.append(f"{'(.json.gz - .json) / decompression':<36} "
                     f"{_fmt(ratios['gz_extra_over_gunzip_time']):>8}   (what .gz adds, "
                     "against the decompression alone)")
    if "analyze_time_one_line_over_json" in ratios:
        lines.append(f"{'analyze time one line / .json':<36} "
                     f"{_fmt(ratios['analyze_time_one_line_over_json']):>8}")
    checks = {r.input: r.check for r in results if r.check}
    if checks:
        first = next(iter(checks.values()))
        lines += ["", "analysis check, replicated file: "
                  + ", ".join(f"{k}={v}" for k, v in first.items())]
    if "line" in checks:
        lines.append("                one-line file:   "
                     + ", ".join(f"{k}={v}" for k, v in checks["line"].items()))
    if source_check:
        lines.append("                source trace:    "
                     + ", ".join(f"{k}={v}" for k, v in source_check.items()))
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}x"


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_trace_options(ap)
    ap.add_argument("--repeat", type=int, default=3, help="runs per phase (default 3)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="also write the numbers here")
    ap.add_argument("--no-gz", action="store_true", help="skip the .json.gz measurements")
    ap.add_argument("--no-one-line", action="store_true",
                    help="skip the measurements of the same events written on one line")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help="comma-separated subset of json,decode,analyze (e.g. skip json.load "
                         "on a multi-GB file: it needs ~6x the file size in RAM)")
    ap.add_argument("--profile", action="store_true",
                    help="also run analyze() once under cProfile and print the top entries")
    ap.add_argument("--child", nargs=2, metavar=("PHASE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    if args.repeat < 1 or args.size_mb <= 0:
        ap.error("--repeat and --size-mb must be positive")
    command = shlex.join(["python", "benchmarks/analyze_speed.py",
                          *(sys.argv[1:] if argv is None else argv)])
    date = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    info = machine_info()
    bt = built_trace(args)
    inputs, sizes = {"json": bt.path}, {"json": bt.bytes}
    if not args.no_gz:
        build_gzip(bt)
        assert bt.gz_path is not None
        inputs["json.gz"], sizes["json.gz"] = bt.gz_path, bt.bytes
        log(f"  {bt.gz_path.name} ({(bt.gz_bytes or 0) / MB:,.1f} MB, "
            + (f"gzipped in {bt.gz_build_s:.1f} s)" if bt.gz_build_s is not None else "cached)"))
    if not args.no_one_line:
        build_one_line(bt)
        assert bt.line_path is not None and bt.line_bytes is not None
        inputs["line"], sizes["line"] = bt.line_path, bt.line_bytes
        log(f"  {bt.line_path.name} ({bt.line_bytes / MB:,.1f} MB, "
            + (f"built in {bt.line_build_s:.1f} s)" if bt.line_build_s is not None
               else "cached)"))
    for p in inputs.values():
        warm_page_cache(p)

    phases = tuple(p for p in args.phases.split(",") if p)
    if not phases or set(phases) - set(PHASES):
        ap.error(f"--phases takes a subset of {','.join(PHASES)}")
    results = run_all(inputs, args.repeat, sizes, phases)
    source_check = _child_result("analyze", args.source)[0].get("check")
    info["loadavg_end"] = _loadavg()
    ratios = compute_ratios(results)
    print(render(info, command, date, bt, results, ratios, args.repeat, source_check))
    profile = None
    if args.profile:
        log("profiling analyze() ...")
        profile = _run_child("profile", bt.path)[0]
        print("\n" + profile)
    if args.json:
        payload = {
            "benchmark": "analyze_speed",
            "date": date,
            "command": command,
            "machine": info,
            "file": {"path": str(bt.path), "bytes": bt.bytes, "events": bt.events,
                     "copies": bt.copies, "source": bt.source,
                     "source_events": bt.source_events, "build_s": bt.build_s,
                     "gz_path": str(bt.gz_path) if bt.gz_path else None,
                     "gz_bytes": bt.gz_bytes, "gz_level": GZIP_LEVEL, "gz_build_s": bt.gz_build_s,
                     "line_path": str(bt.line_path) if bt.line_path else None,
                     "line_bytes": bt.line_bytes, "line_build_s": bt.line_build_s},
            "repeat": args.repeat,
            "phases": [r.to_json() for r in results],
            "ratios": ratios,
            "source_check": source_check,
            "profile": profile,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
