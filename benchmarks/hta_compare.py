"""torch-diagnose vs Holistic Trace Analysis (HTA) on the same large Kineto trace.

The project's goal: a full analysis (read + all metrics + rules) of a ~300 MB, ~1M-event
trace at least 30x faster than HTA on the same file. This script measures both:

* ours: ``diagnose.api.analyze(path)``, run by this interpreter (the project's venv);
* HTA:  ``TraceAnalysis(trace_files={0: "rank-0.json"}, trace_dir=DIR)`` (the parse: HTA
  loads every rank's trace into a DataFrame in its constructor), then its analyses
  (default ``get_temporal_breakdown`` and ``get_idle_time_breakdown``, both with
  ``visualize=False``; ``--hta-analyses`` adds ``kernels`` = ``get_gpu_kernel_breakdown`` and
  ``launch`` = ``get_cuda_kernel_launch_stats``). DIR is a temporary folder holding a
  symlink ``rank-0.json`` to the trace; naming the file in ``trace_files`` spares HTA its
  folder scan, which looks for ``"rank": N`` line by line (this file spells it ``"rank":0``,
  so the scan would read all 300 MB for nothing).

HTA lives in its own venv (``--hta-venv``, created and reused): its pandas/jupyter
dependencies never enter ours. HTA is published as ``HolisticTraceAnalysis`` (up to 0.5.0)
and, renamed, as ``traceinsight`` (0.6+; the same ``hta`` package). By default the newest
``HolisticTraceAnalysis`` release that installs and imports on this Python is used, else the
newest such ``traceinsight`` (``--hta-package`` picks one: ``traceinsight``,
``HolisticTraceAnalysis==0.2.0``, ...); the table names the version measured. If none
installs, the table says why and the script still exits 0: no HTA number is ever made up.

The trace is the one ``benchmarks/analyze_speed.py`` builds and caches (``_bench.py``: same builder, same
cache, so the same bytes): a real GPU trace replicated to ``--size-mb`` (default 300) MB.

Each measurement is a fresh child process; times are taken inside it around the work only
(imports reported apart). Peak RSS is the child's ``VmHWM`` from ``/proc/self/status`` read
at its end (``ru_maxrss`` would include the parent's peak), and for HTA also polled by the
parent, so a run that is killed still has a lower bound. HTA parses a single rank in its own
process (its worker pool is only used for several ranks), so VmHWM covers all of its work.
A run past ``--hta-timeout`` (default 1800 s) is killed and reported as ">= N s".

Run from the repository root (first run: ~1 minute to create the HTA venv)::

    python benchmarks/hta_compare.py --json hta_compare.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _bench import (
    MB,
    REPO_ROOT,
    add_trace_options,
    built_trace,
    emit,
    loadavg,
    log,
    machine_info,
    ram_text,
    tagged,
    use_this_checkout,
    vmhwm_kib,
    warm_page_cache,
)
from _bench import RESULT_TAG as _RESULT

DEFAULT_HTA_VENV = Path("/tmp/torch-diagnose-hta-venv")
HTA_PACKAGES = ("HolisticTraceAnalysis", "traceinsight")  # both install the `hta` package
HTA_TRACE_NAME = "rank-0.json"
HTA_ANALYSES = {
    "temporal": "get_temporal_breakdown",
    "idle": "get_idle_time_breakdown",
    "kernels": "get_gpu_kernel_breakdown",
    "launch": "get_cuda_kernel_launch_stats",
}
DEFAULT_ANALYSES = ("temporal", "idle")
MAX_INSTALL_TRIES = 6
_PROGRESS = "@@PROGRESS@@ "
OUR_CHECK = ("step_count", "gpu_idle_frac", "share_kernel", "idle_launch_frac")

# The HTA venv's probe: which distribution provides `hta`, its version, and whether it imports.
_PROBE = """
import json, sys
from importlib import metadata
out = {"python": sys.version.split()[0]}
for name in NAMES:
    try:
        out["dist"], out["version"] = name, metadata.version(name)
        break
    except metadata.PackageNotFoundError:
        pass
for dep in ("pandas", "numpy"):
    try:
        out[dep] = metadata.version(dep)
    except metadata.PackageNotFoundError:
        out[dep] = None
try:
    from hta.trace_analysis import TraceAnalysis  # noqa: F401
    out["import_ok"] = True
except Exception as e:  # any import failure means: not usable
    out["import_ok"] = False
    out["import_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
""".replace("NAMES", repr(HTA_PACKAGES))


# --------------------------------------------------------------------------- child side
def _child_ours(path: str) -> None:
    use_this_checkout()
    t0 = time.perf_counter()
    from diagnose.api import analyze

    import_s = time.perf_counter() - t0
    base = vmhwm_kib()
    emit(_PROGRESS, {"stage": "work", "monotonic": time.monotonic()})
    start = time.perf_counter()
    report = analyze(Path(path))
    work_s = time.perf_counter() - start
    check: dict[str, Any] = {k: report.metrics.get(k) for k in OUR_CHECK}
    check["findings"] = sorted(f.rule for f in report.findings)
    emit(_RESULT, {"import_s": import_s, "work_s": work_s, "peak_rss_kib": vmhwm_kib(),
                    "base_rss_kib": base, "check": check})
    os._exit(0)  # skip tearing down millions of objects: not part of the measurement


def _child_hta(trace_dir: str, analyses: str) -> None:
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found]

    import_s = time.perf_counter() - t0
    base = vmhwm_kib()
    emit(_PROGRESS, {"stage": "work", "monotonic": time.monotonic()})
    start = time.perf_counter()
    ta = TraceAnalysis(trace_files={0: HTA_TRACE_NAME}, trace_dir=trace_dir)
    parse_s = time.perf_counter() - start
    emit(_PROGRESS, {"stage": "parse", "s": parse_s})
    out: dict[str, Any] = {"import_s": import_s, "parse_s": parse_s, "analysis_s": {},
                           "rows": len(ta.t.get_trace(0)), "base_rss_kib": base, "check": {}}
    for name in analyses.split(","):
        start = time.perf_counter()
        if name == "temporal":
            df = ta.get_temporal_breakdown(visualize=False)
            out["check"]["temporal"] = {c: _plain(df[c].iloc[0]) for c in df.columns
                                        if str(c).endswith("_pctg")}
        elif name == "idle":
            idle, _ = ta.get_idle_time_breakdown(visualize=False)
            out["check"]["idle_time_by_category"] = {
                str(k): _plain(v) for k, v in idle.groupby("idle_category")["idle_time"].sum()
                .items()}
        elif name == "kernels":
            by_type, _ = ta.get_gpu_kernel_breakdown(visualize=False)
            out["check"]["kernel_types"] = len(by_type)
        elif name == "launch":
            stats = ta.get_cuda_kernel_launch_stats(visualize=False)
            out["check"]["launches"] = sum(len(v) for v in stats.values())
        else:
            raise SystemExit(f"unknown HTA analysis {name!r}")
        out["analysis_s"][name] = time.perf_counter() - start
        emit(_PROGRESS, {"stage": name, "s": out["analysis_s"][name]})
    out["peak_rss_kib"] = vmhwm_kib()
    emit(_RESULT, out)
    os._exit(0)


def _plain(x: Any) -> Any:
    """numpy scalars to plain Python numbers, for JSON."""
    return x.item() if hasattr(x, "item") else x


# ------------------------------------------------------------------------ running children
@dataclass
class ChildRun:
    rc: int | None
    wall_s: float  # the whole child, interpreter start-up included
    result: dict[str, Any] | None
    progress: list[dict[str, Any]]
    polled_peak_kib: int | None  # max VmHWM the parent saw while polling
    timed_out: bool
    work_elapsed_s: float | None  # from the child's "work" mark to its end (or its kill)
    tail: str  # the end of the child's output, for errors


def run_child(cmd: list[str], timeout: float | None, poll_s: float = 0.5) -> ChildRun:
    """Run ``cmd`` in its own session; poll its VmHWM; kill its group past ``timeout``."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, cwd=REPO_ROOT)
        peak: int | None = None
        timed_out = False
        while True:
            try:
                proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                hwm = vmhwm_kib(proc.pid)
                if hwm is not None:
                    peak = max(peak or 0, hwm)
                if timeout is not None and time.monotonic() - t0 > timeout:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)  # the group of the child we started
                    proc.wait()
                    break
        end = time.monotonic()
        out.seek(0)
        text = out.read()
    progress = tagged(text, _PROGRESS)
    result = (tagged(text, _RESULT) or [None])[-1]
    work_mark = next((p["monotonic"] for p in progress if p.get("stage") == "work"), None)
    return ChildRun(proc.returncode, end - t0, result, progress, peak, timed_out,
                    None if work_mark is None else end - work_mark, text[-3000:])


# ------------------------------------------------------------------------ the HTA venv
@dataclass
class HtaEnv:
    python: Path | None
    dist: str | None = None
    version: str | None = None
    pandas: str | None = None
    numpy: str | None = None
    reused: bool = False
    install_s: float | None = None
    error: str | None = None  # set: HTA is not usable
    tried: list[str] = field(default_factory=list)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:4])


def _probe(python: Path) -> dict[str, Any] | None:
    try:
        cp = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True,
                            timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        return json.loads(cp.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _pip(python: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          timeout=timeout)


def _pip_error(cp: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (cp.stderr + cp.stdout).splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("ERROR")]
    return (errs or lines or [f"pip exit {cp.returncode}"])[-1][:300]


def _candidates(python: Path, spec: str) -> list[str]:
    """Requirement strings to try, best first."""
    if spec != "auto":
        if "==" in spec:
            return [spec]
        names = [spec]
    else:
        names = list(HTA_PACKAGES)
    found: list[str] = []
    for name in names:  # in HTA_PACKAGES order; each name's releases newest first
        try:
            cp = _pip(python, "index", "versions", name, timeout=300)
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"Available versions:\s*(.+)", cp.stdout)
        if m:
            versions = [v for v in m.group(1).replace(" ", "").split(",") if v]
            found += [f"{name}=={v}" for v in sorted(versions, key=_vkey, reverse=True)
                      [:MAX_INSTALL_TRIES]]
    return found or names  # the index could not list versions: let pip pick


def _wanted(spec: str, probe: dict[str, Any]) -> bool:
    if spec == "auto":
        return True
    name, _, ver = spec.partition("==")
    return (probe.get("dist") or "").lower() == name.lower() and (not ver
                                                                   or probe.get("version") == ver)


def ensure_hta(venv: Path, spec: str, log: Any) -> HtaEnv:
    """A venv at ``venv`` with HTA importable, made or reused; ``error`` says why not."""
    python = venv / "bin" / "python"
    candidates: list[str] | None = None
    if python.exists():
        probe = _probe(python)
        if probe and probe.get("import_ok") and _wanted(spec, probe):
            candidates = _candidates(python, spec)
            have = f"{probe['dist']}=={probe['version']}".lower()
            # auto: reuse only the newest release (or any, when the index can't be listed)
            if spec != "auto" or "==" not in candidates[0] or candidates[0].lower() == have:
                log(f"reusing {probe['dist']} {probe['version']} in {venv}")
                return HtaEnv(python, probe["dist"], probe["version"], probe.get("pandas"),
                              probe.get("numpy"), reused=True)
    else:
        log(f"creating venv {venv} ...")
        try:
            cp = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True,
                                text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            return HtaEnv(None, error=f"cannot create venv {venv}: {e}")
        if cp.returncode != 0 or not python.exists():
            return HtaEnv(None, error=f"cannot create venv {venv}: {_pip_error(cp)}")
    t0 = time.perf_counter()
    env = HtaEnv(python)
    reasons: list[str] = []
    for req in candidates or _candidates(python, spec):
        env.tried.append(req)
        log(f"pip install {req} into {venv} ...")
        # both names ship the `hta` package: never leave the other one underneath
        _pip(python, "uninstall", "-y", *HTA_PACKAGES, timeout=600)
        try:
            cp = _pip(python, "install", req)
        except (OSError, subprocess.SubprocessError) as e:
            reasons.append(f"{req}: {e}")
            continue
        if cp.returncode != 0:
            reasons.append(f"{req}: {_pip_error(cp)}")
            log(f"  failed: {reasons[-1]}")
            continue
        probe = _probe(python)
        if not probe or not probe.get("import_ok"):
            why = (probe or {}).get("import_error", "probe failed")
            reasons.append(f"{req}: installs but does not import ({why})")
            log(f"  {reasons[-1]}")
            continue
        env.dist, env.version = probe["dist"], probe["version"]
        env.pandas, env.numpy = probe.get("pandas"), probe.get("numpy")
        env.install_s = time.perf_counter() - t0
        log(f"  installed {env.dist} {env.version} (pandas {env.pandas}) "
            f"in {env.install_s:.0f} s")
        return env
    env.error = "; ".join(reasons) if reasons else f"no release of {spec} found"
    return env


# ----------------------------------------------------------------------------- measuring
@dataclass
class Ours:
    times_s: list[float]
    import_s: list[float]
    peak_rss_kib: int | None
    check: dict[str, Any] | None

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)


@dataclass
class Hta:
    status: str  # ok | timeout | killed | failed | not installable
    reason: str | None = None
    import_s: float | None = None
    parse_s: float | None = None
    analysis_s: dict[str, float] = field(default_factory=dict)
    total_s: float | None = None  # parse + analyses (median over runs)
    totals_s: list[float] = field(default_factory=list)
    lower_bound_s: float | None = None  # timed out / killed: it ran at least this long
    peak_rss_kib: int | None = None
    peak_is_lower_bound: bool = False
    rows: int | None = None
    check: dict[str, Any] | None = None


def measure_ours(python: str, path: Path, repeat: int, log: Any) -> Ours:
    runs: list[dict[str, Any]] = []
    for i in range(repeat):
        log(f"ours: diagnose.api.analyze, run {i + 1}/{repeat} ...")
        cr = run_child([python, str(Path(__file__).resolve()), "--child", "ours", str(path)],
                       None)
        if cr.rc != 0 or cr.result is None:
            raise SystemExit(f"diagnose.api.analyze failed (exit {cr.rc}):\n{cr.tail}")
        runs.append(cr.result)
    peaks = [r["peak_rss_kib"] for r in runs if r["peak_rss_kib"] is not None]
    return Ours([r["work_s"] for r in runs], [r["import_s"] for r in runs],
                max(peaks) if peaks else None, runs[-1]["check"])


def measure_hta(env: HtaEnv, path: Path, analyses: list[str], timeout: float, repeat: int,
                log: Any) -> Hta:
    if env.error or env.python is None:
        return Hta("not installable", reason=env.error)
    results: list[dict[str, Any]] = []
    polled: list[int] = []
    with tempfile.TemporaryDirectory(prefix="hta-trace-") as d:
        (Path(d) / HTA_TRACE_NAME).symlink_to(path.resolve())
        for i in range(repeat):
            log(f"HTA: TraceAnalysis + {', '.join(analyses)}, run {i + 1}/{repeat} "
                f"(timeout {timeout:g} s) ...")
            cr = run_child([str(env.python), str(Path(__file__).resolve()), "--child", "hta", d,
                            ",".join(analyses)], timeout)
            if cr.polled_peak_kib:
                polled.append(cr.polled_peak_kib)
            if cr.rc == 0 and cr.result is not None:
                results.append(cr.result)
                log(f"  parse {cr.result['parse_s']:.1f} s, analyses "
                    + ", ".join(f"{k} {v:.1f} s" for k, v in cr.result["analysis_s"].items()))
                continue
            # failed: keep what it reached, as lower bounds only
            parse = next((p["s"] for p in cr.progress if p.get("stage") == "parse"), None)
            done = {p["stage"]: p["s"] for p in cr.progress if p.get("stage") in HTA_ANALYSES}
            bound = cr.work_elapsed_s
            if cr.timed_out:
                status, reason = "timeout", f"killed after the {timeout:g} s timeout"
            elif cr.rc is not None and cr.rc in (-signal.SIGKILL, 137):
                status, reason = "killed", "killed by SIGKILL (out of memory?)"
            else:
                status = "failed"
                last = [ln for ln in cr.tail.splitlines() if ln.strip()]
                reason = f"exit {cr.rc}: {last[-1][:200] if last else ''}"
            log(f"  {status}: {reason}")
            return Hta(status, reason=reason, parse_s=parse, analysis_s=done,
                       lower_bound_s=bound if status != "failed" else None,
                       peak_rss_kib=max(polled) if polled else None, peak_is_lower_bound=True)
    totals = [r["parse_s"] + sum(r["analysis_s"].values()) for r in results]
    mid = results[totals.index(sorted(totals)[(len(totals) - 1) // 2])]  # the median run
    peaks = [r["peak_rss_kib"] for r in results if r.get("peak_rss_kib") is not None]
    return Hta("ok", import_s=mid["import_s"], parse_s=mid["parse_s"],
               analysis_s=mid["analysis_s"], total_s=statistics.median(totals),
               totals_s=totals, peak_rss_kib=max(peaks or polled or [0]) or None,
               rows=mid["rows"], check=mid["check"])


# ------------------------------------------------------------------------------ reporting
def ratio(hta: Hta, ours: Ours) -> tuple[float | None, bool]:
    """(HTA total / ours, is a lower bound); None when HTA has no time at all."""
    if hta.total_s is not None:
        return hta.total_s / ours.median_s, False
    if hta.lower_bound_s is not None:
        return hta.lower_bound_s / ours.median_s, True
    return None, False


def _s(x: float | None, lower: bool = False) -> str:
    if x is None:
        return "-"
    return f">= {x:.1f}" if lower else f"{x:.2f}"


def _mb(kib: int | None, lower: bool = False) -> str:
    if kib is None:
        return "-"
    return (">= " if lower else "") + f"{kib * 1024 / MB:,.0f}"


def render(info: dict[str, Any], command: str, date: str, bt: Any, env: HtaEnv, ours: Ours,
           hta: Hta, analyses: list[str], repeat: int, hta_repeat: int) -> str:
    hta_ver = (f"{env.dist} {env.version} (pandas {env.pandas}, numpy {env.numpy})"
               if env.version else f"not installable: {env.error}")
    lines = [
        "torch-diagnose vs Holistic Trace Analysis: full analysis of one large trace",
        f"machine : {info['cpu']}, {info['cores']} cores, {ram_text(info)}",
        f"load avg: at start {info['loadavg_start']}, at end {info.get('loadavg_end')}"
        "  (1/5/15 min; the machine is shared)",
        f"software: Python {info['python']}, torch-diagnose at git {info['code']}",
        f"HTA     : {hta_ver}",
        f"date    : {date}",
        f"command : {command}   (from the repository root)",
        f"file    : {bt.path}",
        f"          {bt.bytes / MB:,.1f} MB, {bt.events:,} events "
        f"({Path(bt.source).name} x {bt.copies})",
        f"method  : fresh process per run, time around the work only (imports apart); ours: "
        f"median of {repeat},",
        f"          HTA: median of {hta_repeat}; peak RSS = the child's VmHWM; MB = 10^6 bytes",
        "          ours = diagnose.api.analyze(path): read + all metrics + all rules",
        "          HTA  = TraceAnalysis(trace_files={0: 'rank-0.json'}, trace_dir=DIR) [parse]"
        f" + {', '.join(HTA_ANALYSES[a] + '(visualize=False)' for a in analyses)} [analysis]",
        "",
    ]
    hdr = (f"{'tool':<16} {'parse s':>9} {'analysis s':>11} {'total s':>10} {'import s':>9} "
           f"{'peak RSS MB':>12}")
    lines += [hdr, "-" * len(hdr)]
    lines.append(f"{'torch-diagnose':<16} {'-':>9} {'-':>11} {ours.median_s:>10.2f} "
                 f"{statistics.median(ours.import_s):>9.2f} {_mb(ours.peak_rss_kib):>12}")
    if hta.status == "not installable":
        lines.append(f"{'HTA':<16} not installable: {hta.reason}")
    else:
        lb = hta.status != "ok"
        analysis = sum(hta.analysis_s.values()) if hta.analysis_s else None
        total = hta.total_s if not lb else hta.lower_bound_s
        lines.append(f"{'HTA':<16} {_s(hta.parse_s):>9} {_s(analysis):>11} {_s(total, lb):>10} "
                     f"{_s(hta.import_s):>9} {_mb(hta.peak_rss_kib, hta.peak_is_lower_bound):>12}")
        if lb:
            lines.append(f"{'':<16} {hta.status}: {hta.reason}")
        if hta.analysis_s:
            lines.append(f"{'':<16} analyses: " + ", ".join(
                f"{HTA_ANALYSES[k]} {v:.2f} s" for k, v in hta.analysis_s.items()))
    lines.append("")
    r, lower = ratio(hta, ours)
    if r is None:
        lines.append("ratio HTA total / ours: - (no HTA time)")
    else:
        lines.append(f"ratio HTA total / ours: {'>= ' if lower else ''}{r:.1f}x   (goal: >= 30x)")
        if hta.peak_rss_kib and ours.peak_rss_kib:
            lines.append(f"ratio HTA peak RSS / ours: {'>= ' if hta.peak_is_lower_bound else ''}"
                         f"{hta.peak_rss_kib / ours.peak_rss_kib:.1f}x")
    lines.append("")
    if ours.check:
        lines.append("check, ours: " + ", ".join(f"{k}={v}" for k, v in ours.check.items()))
    if hta.check:
        lines.append(f"check, HTA : rows={hta.rows:,}, " + ", ".join(
            f"{k}={v}" for k, v in hta.check.items()))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_trace_options(ap)
    ap.add_argument("--hta-venv", type=Path, default=DEFAULT_HTA_VENV,
                    help=f"venv for HTA, created or reused (default {DEFAULT_HTA_VENV})")
    ap.add_argument("--hta-package", default="auto",
                    help="auto (newest HolisticTraceAnalysis that works, else traceinsight), "
                         "a name, or name==version")
    ap.add_argument("--hta-timeout", type=float, default=1800.0,
                    help="seconds before an HTA run is killed (default 1800)")
    ap.add_argument("--hta-analyses", default=",".join(DEFAULT_ANALYSES),
                    help=f"comma list of {', '.join(HTA_ANALYSES)} "
                         f"(default {','.join(DEFAULT_ANALYSES)})")
    ap.add_argument("--repeat", type=int, default=3, help="runs of ours (default 3)")
    ap.add_argument("--hta-repeat", type=int, default=1, help="runs of HTA (default 1)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="also write the numbers here")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "ours":
            _child_ours(*rest)
        elif kind == "hta":
            _child_hta(*rest)
        raise SystemExit(f"unknown child {kind!r}")
    analyses = [a.strip() for a in args.hta_analyses.split(",") if a.strip()]
    bad = [a for a in analyses if a not in HTA_ANALYSES]
    if bad or not analyses:
        ap.error(f"--hta-analyses: unknown {bad}; choose from {', '.join(HTA_ANALYSES)}")
    if args.repeat < 1 or args.hta_repeat < 1 or args.size_mb <= 0 or args.hta_timeout <= 0:
        ap.error("--repeat, --hta-repeat, --size-mb and --hta-timeout must be positive")

    command = shlex.join(["python", "benchmarks/hta_compare.py",
                          *(sys.argv[1:] if argv is None else argv)])
    date = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    info = machine_info()
    env = ensure_hta(args.hta_venv, args.hta_package, log)
    if env.error:
        print(f"HTA not installable: {env.error}", flush=True)
    bt = built_trace(args)  # analyze_speed.py's builder and cache: the same file
    warm_page_cache(bt.path)  # both read it from memory

    ours = measure_ours(sys.executable, bt.path, args.repeat, log)
    log(f"  ours: median {ours.median_s:.2f} s")
    hta = measure_hta(env, bt.path, analyses, args.hta_timeout, args.hta_repeat, log)
    info["loadavg_end"] = loadavg()
    print(render(info, command, date, bt, env, ours, hta, analyses, args.repeat,
                 args.hta_repeat))
    if args.json:
        r, lower = ratio(hta, ours)
        payload = {
            "benchmark": "hta_compare", "date": date, "command": command, "machine": info,
            "file": {"path": str(bt.path), "bytes": bt.bytes, "events": bt.events,
                     "copies": bt.copies, "source": bt.source},
            "hta_env": asdict(env) | {"python": str(env.python) if env.python else None},
            "hta_analyses": [HTA_ANALYSES[a] for a in analyses],
            "ours": asdict(ours) | {"median_s": ours.median_s},
            "hta": asdict(hta),
            "ratio_hta_total_over_ours": None if r is None or math.isnan(r) else r,
            "ratio_is_lower_bound": lower,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
