"""How fast and how lean is ``diagnose.api.analyze`` on a large trace?

Builds a large uncompressed Kineto trace (default ~300 MB) by replicating a real
GPU trace with shifted timestamps, gzips it once, then compares on those same files:

1. ``json.load`` (stdlib) of the file;
2. a bare typed msgspec decode: ``decode(read_bytes(path), path)``;
3. the full analysis: ``diagnose.api.analyze(path)`` (read, all metrics, all rules).

Each measurement runs in a fresh child process, so its peak RSS is its own; the time
is taken inside the child around the work only (the import time is reported on its
own). Each phase runs ``--repeat`` times: median time, max peak RSS. The peak RSS is
the child's ``VmHWM`` (/proc/self/status): ``ru_maxrss`` survives fork+exec on Linux,
so in a child it is at least the parent's own peak; it is recorded in the JSON too.

Replication: copy k of the source's events has every ``ts`` shifted by
k * (span of the trace + gap), ``ProfilerStep#N`` renumbered so steps stay unique and
ordered, and ``correlation`` / ``External id`` / flow ids offset by k * a power of ten,
so launches still link to their kernels. Metadata ('M') events are written once.
The built files are cached in ``--workdir`` and reused while they match.

Run from the repository root (2-core machine: about 2 minutes at 300 MB, plus a few
seconds to build the file the first time)::

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
import platform
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = Path(
    "/work/shared/traces/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
)
DEFAULT_WORKDIR = Path("/tmp/torch-diagnose-bench")
REPO_ROOT = Path(__file__).resolve().parents[1]
MB = 1e6  # sizes are in MB = 10^6 bytes throughout
BUILD_VERSION = 1  # bump when the way the file is built changes (invalidates the cache)
GAP_US = 1000  # idle gap between two copies of the source trace
GZIP_LEVEL = 6
PHASES = ("json", "decode", "gunzip", "analyze")
PHASE_LABELS = {
    "json": "json.load (stdlib)",
    "decode": "msgspec typed decode",
    "gunzip": "decompression only",
    "analyze": "diagnose.api.analyze",
}
CHECK_METRICS = ("step_count", "kernels_per_step", "launches_per_step", "share_kernel",
                 "idle_launch_frac")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_RESULT_TAG = "@@RESULT@@ "


# --------------------------------------------------------------------------- child side
def _child(phase: str, path_str: str) -> None:
    """Runs in a fresh process: import, do one phase, print the numbers as one JSON line."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))  # this checkout's diagnose, not an installed one
    path = Path(path_str)
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if phase == "json":
        imported = time.perf_counter()
        rss_base = _peak_rss_kib()
        start = time.perf_counter()
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                doc = json.load(f)
        else:
            with open(path, "rb") as f:
                doc = json.load(f)
        work = time.perf_counter() - start
        out["events"] = len(doc["traceEvents"])
    elif phase == "gunzip":  # the decompression itself: zlib over the file, output dropped
        import zlib

        imported = time.perf_counter()
        rss_base = _peak_rss_kib()
        start = time.perf_counter()
        d, n = zlib.decompressobj(wbits=31), 0
        with open(path, "rb") as f:
            while block := f.read(2**20):
                n += len(d.decompress(block))
        work = time.perf_counter() - start
        out["bytes"] = n
    elif phase == "decode":
        from diagnose.trace.decode import decode, read_bytes

        imported = time.perf_counter()
        rss_base = _peak_rss_kib()
        start = time.perf_counter()
        dec = decode(read_bytes(path), path)
        work = time.perf_counter() - start
        out["events"] = len(dec.events)
    elif phase in ("analyze", "profile"):
        from diagnose.api import analyze

        imported = time.perf_counter()
        rss_base = _peak_rss_kib()
        if phase == "profile":
            _profile(analyze, path)
            return
        start = time.perf_counter()
        report = analyze(path)
        work = time.perf_counter() - start
        out["check"] = {k: report.metrics.get(k) for k in CHECK_METRICS}
        out["check"]["findings"] = sorted(f.rule for f in report.findings)
    else:
        raise SystemExit(f"unknown phase {phase!r}")
    # worker processes the work started (the parallel reader): the largest one's peak
    # (ru_maxrss of waited-for children; it includes what a forked child shared with us)
    children = int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    out.update(import_s=imported - t0, work_s=work, peak_rss_kib=_peak_rss_kib(),
               base_rss_kib=rss_base, ru_maxrss_kib=_ru_maxrss_kib(),
               children_peak_kib=children, workers=_usable_cpus() if children else 0)
    sys.stdout.write(_RESULT_TAG + json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip tearing down millions of objects: not part of the measurement


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


def _ru_maxrss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def _peak_rss_kib() -> int:
    """This process's peak RSS in KiB: VmHWM, else ru_maxrss (which counts the parent's)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return _ru_maxrss_kib()


# ------------------------------------------------------------------------ building files
@dataclass
class BuiltTrace:
    path: Path
    bytes: int
    events: int
    copies: int
    source: str
    source_events: int
    build_s: float | None  # None: reused from the cache
    gz_path: Path | None = None
    gz_bytes: int | None = None
    gz_build_s: float | None = None


def _stem(p: Path) -> str:
    n = p.name
    for suf in (".json.gz", ".json"):
        if n.endswith(suf):
            return n[: -len(suf)]
    return p.stem


def _source_key(source: Path, size_mb: float) -> dict[str, Any]:
    st = source.stat()
    return {"version": BUILD_VERSION, "source": str(source.resolve()), "source_bytes": st.st_size,
            "source_mtime_ns": st.st_mtime_ns, "size_mb": size_mb}


def _read_meta(meta_path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def build_trace(source: Path, size_mb: float, workdir: Path) -> BuiltTrace:
    """The replicated trace for ``size_mb``, built now or reused from ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{_stem(source)}.{size_mb:g}MB.kineto.json"  # Kineto line layout
    meta_path = out.with_name(out.name + ".meta")
    key = _source_key(source, size_mb)
    meta = _read_meta(meta_path)
    if (meta and all(meta.get(k) == v for k, v in key.items()) and out.is_file()
            and out.stat().st_size == meta.get("bytes")):
        return BuiltTrace(out, meta["bytes"], meta["events"], meta["copies"], str(source),
                          meta["source_events"], None)
    meta_path.unlink(missing_ok=True)
    out.with_name(out.name + ".gz").unlink(missing_ok=True)
    t0 = time.perf_counter()
    copies, events, source_events = _write_replicated(source, out, int(size_mb * MB))
    build_s = time.perf_counter() - t0
    size = out.stat().st_size
    meta_path.write_text(json.dumps({**key, "bytes": size, "events": events, "copies": copies,
                                     "source_events": source_events}))
    return BuiltTrace(out, size, events, copies, str(source), source_events, build_s)


def _write_replicated(source: Path, out: Path, target_bytes: int) -> tuple[int, int, int]:
    """Write ``source``'s events replicated to about ``target_bytes``; (copies, events, source)."""
    import msgspec

    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = msgspec.json.decode(raw)
    del raw
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise SystemExit(f"{source}: not a Chrome/Kineto trace with a traceEvents list")
    events: list[Any] = [e for e in doc.pop("traceEvents") if isinstance(e, dict)]
    meta_events = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]

    # What each copy changes, found once: (event, original value) pairs.
    ts_items = [(e, e["ts"]) for e in body if _num(e.get("ts"))]
    if not ts_items:
        raise SystemExit(f"{source}: no event has a numeric ts")
    ends = [t + (e["dur"] if _num(e.get("dur")) else 0) for e, t in ts_items]
    span = math.ceil(max(ends) - min(t for _, t in ts_items))
    ts_stride = span + GAP_US  # an integer: shifting keeps the timestamps' exact digits
    id_items: list[tuple[dict[str, Any], str, int]] = []
    for e in body:
        args = e.get("args")
        if isinstance(args, dict):
            for k in ("correlation", "External id", "external id"):
                v = args.get(k)
                if isinstance(v, int) and not isinstance(v, bool):
                    id_items.append((args, k, v))
    flow_items = [(e, e["id"]) for e in body
                  if e.get("ph") in ("s", "t", "f") and isinstance(e.get("id"), int)]
    max_id = max([v for _, _, v in id_items] + [v for _, v in flow_items] + [1])
    id_stride = 10 ** len(str(max_id))  # a power of ten: ids of copy k read as k0...0 + id
    step_items = [(e, int(m.group(1))) for e in body
                  if isinstance(e.get("name"), str) and (m := _STEP.match(e["name"]))]
    step_nums = [n for _, n in step_items]
    step_stride = (max(step_nums) - min(step_nums) + 1) if step_nums else 0

    enc = msgspec.json.Encoder()
    # the header: every top-level key but traceEvents, then the events array (last)
    head = enc.encode(doc)
    head = head[:-1] + (b',"traceEvents":[' if doc else b'"traceEvents":[')

    def lines(evs: list[Any]) -> bytes:
        # Kineto's layout: every event starts on its own line, at the array's indent
        return b"\n  " + b",\n  ".join(map(enc.encode, evs)) if evs else b""

    first = lines(meta_events)
    copy0 = lines(body)
    fixed = len(head) + len(first) + 2
    copies = max(1, round((target_bytes - fixed) / (len(copy0) + 1)))

    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(first)
        sep = b"," if first else b""
        for k in range(copies):
            if k:
                shift, id_shift = k * ts_stride, k * id_stride
                for e, t in ts_items:
                    e["ts"] = t + shift
                for d, key, v in id_items:
                    d[key] = v + id_shift
                for e, v in flow_items:
                    e["id"] = v + id_shift
                for e, n in step_items:
                    e["name"] = f"ProfilerStep#{n + k * step_stride}"
                chunk = lines(body)
            else:
                chunk = copy0
            f.write(sep)
            f.write(chunk)
            sep = b","
        f.write(b"\n]}")
    os.replace(tmp, out)
    return copies, len(meta_events) + copies * len(body), len(events)


def build_gzip(bt: BuiltTrace) -> None:
    """Gzip the built trace once (cached next to it, keyed by the .json's size)."""
    gz = bt.path.with_name(bt.path.name + ".gz")
    meta_path = bt.path.with_name(bt.path.name + ".meta")
    meta = _read_meta(meta_path) or {}
    if gz.is_file() and meta.get("gz_bytes") == gz.stat().st_size and meta.get("bytes") == bt.bytes:
        bt.gz_path, bt.gz_bytes = gz, gz.stat().st_size
        return
    t0 = time.perf_counter()
    tmp = gz.with_name(gz.name + ".tmp")
    with open(bt.path, "rb") as src, gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as dst:
        shutil.copyfileobj(src, dst, 16 * 2**20)
    os.replace(tmp, gz)
    bt.gz_build_s = time.perf_counter() - t0
    bt.gz_path, bt.gz_bytes = gz, gz.stat().st_size
    meta_path.write_text(json.dumps({**meta, "gz_bytes": bt.gz_bytes}))


def _warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 * 2**20):
            pass


# ----------------------------------------------------------------------------- measuring
@dataclass
class PhaseResult:
    phase: str
    label: str
    input: str  # "json" or "json.gz"
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

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def to_json(self, file_bytes: int) -> dict[str, Any]:
        d = asdict(self)
        d.update(median_s=self.median_s, median_import_s=statistics.median(self.import_s),
                 peak_rss_bytes=self.peak_rss_kib * 1024,
                 peak_rss_over_file=self.peak_rss_kib * 1024 / file_bytes)
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
    lines = [ln for ln in stdout.splitlines() if ln.startswith(_RESULT_TAG)]
    if not lines:
        raise SystemExit(f"{phase} on {path}: the child printed no result:\n{stdout[-2000:]}")
    return json.loads(lines[-1][len(_RESULT_TAG):]), wall


def run_all(inputs: list[Path], repeat: int, log: Callable[[str], None],
            phases: tuple[str, ...] = PHASES) -> list[PhaseResult]:
    """Every phase on every input, ``repeat`` rounds. A round runs each phase once, so a
    burst of load from elsewhere on the machine spreads over all phases, not one."""
    runs: dict[tuple[str, Path], list[tuple[dict[str, Any], float]]] = {
        (phase, p): [] for p in inputs for phase in phases
        if phase != "gunzip" or p.name.endswith(".gz")}
    for i in range(repeat):
        log(f"round {i + 1}/{repeat}: " + ", ".join(PHASE_LABELS.values())
            + f" on {len(inputs)} file(s) ...")
        for (phase, p), acc in runs.items():
            acc.append(_child_result(phase, p))
    return [_summarise(phase, p, acc) for (phase, p), acc in runs.items()]


def _summarise(phase: str, path: Path, runs: list[tuple[dict[str, Any], float]]) -> PhaseResult:
    last = runs[-1][0]
    return PhaseResult(
        phase=phase,
        label=PHASE_LABELS[phase],
        input="json.gz" if path.name.endswith(".gz") else "json",
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
    )


# ------------------------------------------------------------------------------ reporting
def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {"cpu": cpu, "cores": cores, "ram_bytes": ram, "os": platform.platform(),
            "python": platform.python_version(), "numpy": version("numpy"),
            "msgspec": version("msgspec"), "loadavg_start": _loadavg(), "code": _git_revision()}


def _git_revision() -> str | None:
    """The checkout's commit, with '+dirty' when diagnose/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--",
                                "diagnose", "rules"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def compute_ratios(results: list[PhaseResult], bt: BuiltTrace) -> dict[str, float]:
    by = {(r.phase, r.input): r for r in results}
    out: dict[str, float] = {}
    for inp in ("json", "json.gz"):
        a = by.get(("analyze", inp))
        if a is None:
            continue
        sfx = "" if inp == "json" else "_gz"
        if ("json", inp) in by:
            out[f"analyze_over_json_load_time{sfx}"] = _ratio(a.median_s,
                                                               by[("json", inp)].median_s)
        if ("decode", inp) in by:
            out[f"analyze_over_typed_decode_time{sfx}"] = _ratio(a.median_s,
                                                                  by[("decode", inp)].median_s)
        out[f"analyze_peak_rss_over_file_size{sfx}"] = a.peak_rss_kib * 1024 / bt.bytes
    if ("analyze", "json.gz") in by and ("analyze", "json") in by:
        gz, plain = by[("analyze", "json.gz")].median_s, by[("analyze", "json")].median_s
        out["analyze_time_gz_over_json"] = _ratio(gz, plain)
        if ("gunzip", "json.gz") in by:
            out["gz_extra_over_gunzip_time"] = _ratio(gz - plain, by[("gunzip", "json.gz")].median_s)
    return out


def render(info: dict[str, Any], command: str, date: str, bt: BuiltTrace,
           results: list[PhaseResult], ratios: dict[str, float], repeat: int,
           source_check: dict[str, Any] | None) -> str:
    ram = f"{info['ram_bytes'] / 2**30:.1f} GiB RAM" if info["ram_bytes"] else "RAM unknown"
    lines = [
        "torch-diagnose: analysis speed on a large trace",
        f"machine : {info['cpu']}, {info['cores']} cores, {ram}",
        f"software: Python {info['python']}, numpy {info['numpy']}, msgspec {info['msgspec']},"
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
    lines += [
        f"method  : each run is a fresh process; time around the work only; median of {repeat}"
        " rounds,",
        "          each round runs every phase once (interleaved);",
        "          peak RSS = max over runs of the child's VmHWM; base RSS = after imports;",
        "          MB = 10^6 bytes;",
        "          peak/file = peak RSS / uncompressed .json size",
        "",
    ]
    hdr = (f"{'phase':<22} {'input':<8} {'median s':>9} {'min s':>7} {'max s':>7} "
           f"{'import s':>9} {'peak RSS MB':>12} {'base RSS MB':>12} {'peak/file':>10}")
    lines += [hdr, "-" * len(hdr)]
    for r in results:
        lines.append(
            f"{r.label:<22} {'.' + r.input:<8} {r.median_s:>9.2f} {min(r.times_s):>7.2f} "
            f"{max(r.times_s):>7.2f} {statistics.median(r.import_s):>9.2f} "
            f"{r.peak_rss_kib * 1024 / MB:>12,.0f} {r.base_rss_kib * 1024 / MB:>12,.0f} "
            f"{r.peak_rss_kib * 1024 / bt.bytes:>9.2f}x")
    for r in results:
        if r.children_peak_kib:
            total = (r.peak_rss_kib + r.workers * r.children_peak_kib) * 1024
            lines.append(
                f"  {r.label} .{r.input}: read by {r.workers} worker processes, the largest "
                f"peaking at {r.children_peak_kib * 1024 / MB:,.0f} MB; all processes together "
                f"<= {total / MB:,.0f} MB = {total / bt.bytes:.2f}x the file (upper bound)")
    lines.append("")
    names = {
        "analyze_over_json_load_time": "analyze time / json.load time",
        "analyze_over_typed_decode_time": "analyze time / typed decode time",
        "analyze_peak_rss_over_file_size": "analyze peak RSS / file size",
    }
    lines.append(f"{'ratio':<36} {'.json':>8} {'.json.gz':>9}")
    lines.append("-" * 55)
    for k, label in names.items():
        a, b = ratios.get(k), ratios.get(k + "_gz")
        lines.append(f"{label:<36} {_fmt(a):>8} {_fmt(b):>9}")
    if "analyze_time_gz_over_json" in ratios:
        lines.append(f"{'analyze time .json.gz / .json':<36} "
                     f"{_fmt(ratios['analyze_time_gz_over_json']):>8}")
    if "gz_extra_over_gunzip_time" in ratios:
        lines.append(f"{'(.json.gz - .json) / decompression':<36} "
                     f"{_fmt(ratios['gz_extra_over_gunzip_time']):>8}   (what .gz adds, "
                     "against the decompression alone)")
    checks = [r.check for r in results if r.check]
    if checks:
        lines += ["", "analysis check, replicated file: "
                  + ", ".join(f"{k}={v}" for k, v in checks[0].items())]
    if source_check:
        lines.append("                source trace:    "
                     + ", ".join(f"{k}={v}" for k, v in source_check.items()))
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}x"


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size-mb", type=float, default=300.0,
                    help="size of the built uncompressed trace in MB (default 300)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                    help="real trace to replicate (.json or .json.gz)")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help=f"where built traces are cached (default {DEFAULT_WORKDIR})")
    ap.add_argument("--repeat", type=int, default=3, help="runs per phase (default 3)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="also write the numbers here")
    ap.add_argument("--no-gz", action="store_true", help="skip the .json.gz measurements")
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

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(f"building ~{args.size_mb:g} MB trace from {args.source.name} ...")
    bt = build_trace(args.source, args.size_mb, args.workdir)
    log(f"  {bt.path} ({bt.bytes / MB:,.1f} MB, {bt.events:,} events, "
        + (f"built in {bt.build_s:.1f} s)" if bt.build_s is not None else "cached)"))
    inputs = [bt.path]
    if not args.no_gz:
        build_gzip(bt)
        assert bt.gz_path is not None
        inputs.append(bt.gz_path)
        log(f"  {bt.gz_path.name} ({(bt.gz_bytes or 0) / MB:,.1f} MB, "
            + (f"gzipped in {bt.gz_build_s:.1f} s)" if bt.gz_build_s is not None else "cached)"))
    for p in inputs:
        _warm_page_cache(p)

    phases = tuple(p for p in args.phases.split(",") if p)
    if not phases or set(phases) - set(PHASES):
        ap.error(f"--phases takes a subset of {','.join(PHASES)}")
    results = run_all(inputs, args.repeat, log, phases)
    source_check = _child_result("analyze", args.source)[0].get("check")
    info["loadavg_end"] = _loadavg()
    ratios = compute_ratios(results, bt)
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
                     "gz_bytes": bt.gz_bytes, "gz_level": GZIP_LEVEL, "gz_build_s": bt.gz_build_s},
            "repeat": args.repeat,
            "phases": [r.to_json(bt.bytes) for r in results],
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
