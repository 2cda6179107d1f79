"""What the benchmark scripts share: the machine they ran on, peak memory of processes,
results passed back from child processes, and the large trace they measure.

The large trace is a real GPU trace replicated to a size: copy k of the source's events
has every ``ts`` shifted by k * (span of the trace + gap), ``ProfilerStep#N`` renumbered
so steps stay unique and ordered, and ``correlation`` / ``External id`` / flow ids offset
by k * a power of ten, so launches still link to their kernels. Metadata ('M') events are
written once. It is written as Kineto writes traces (each event on its own line) and, from
the same events, on one line (as ``json.dump`` with no indent, or tools that re-export or
merge traces, write them). Built files are cached in a work folder and reused while they
match.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = Path(
    "/work/shared/traces/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
)
DEFAULT_WORKDIR = Path("/tmp/torch-diagnose-bench")
MB = 1e6  # sizes are in MB = 10^6 bytes throughout
BUILD_VERSION = 1  # bump when the way the file is built changes (invalidates the cache)
GAP_US = 1000  # idle gap between two copies of the source trace
GZIP_LEVEL = 6
RESULT_TAG = "@@RESULT@@ "
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


# ------------------------------------------------------------------ autofix: predicted beside measured
DECISION_HEAD = (f"{'job':<17} {'run':>3} {'fix':<15} {'change':<34} {'predicted':>9} "
                 f"{'measured [95% CI]':>22}  {'decision':<9} meas/pred")


@dataclass
class DecisionTally:
    """Counts over autofix decisions: trials run (and those carrying a prediction), kept
    changes (and those measured within 15% of their prediction), and runs that kept
    something: their before/after measurement against the model's tuned step (the trial
    that kept a change stops once its interval clears the keep threshold, so a large gain
    is kept on a wide interval: too_many_workers 1.67x [1.28, 2.18] where the before/after
    of the same change timed 1.48x [1.40, 1.56]; the before/after is the closer look)."""

    tried: int = 0
    tried_pred: int = 0
    kept: int = 0
    kept_within: int = 0
    tuned: int = 0
    tuned_within: int = 0

    def rows(self, job: str, run: int, result: Any) -> list[str]:
        """One line per decision of an autofix ``result`` that has a prediction or a
        measurement (the columns of DECISION_HEAD), counting as it goes."""
        out = []
        for d in result.decisions:
            s = d.speedup
            if s is None and d.predicted_speedup is None:
                continue
            if s is not None and d.fix != "confirmation":  # a fix's trial ran
                self.tried += 1
                self.tried_pred += d.predicted_speedup is not None
            meas = "-" if s is None else f"{s.ratio:.2f}x [{s.lo:.2f}, {s.hi:.2f}]"
            err = ""
            if d.status == "kept" and s is not None and d.predicted_speedup:
                e = s.ratio / d.predicted_speedup
                self.kept += 1
                self.kept_within += 0.85 <= e <= 1.15
                err = f"{e:.2f} {'within 15%' if 0.85 <= e <= 1.15 else 'OFF'}"
            pred = "-" if d.predicted_speedup is None else f"{d.predicted_speedup:.2f}x"
            out.append(f"{job:<17} {run:>3} {d.fix:<15} {d.change[:34]:<34} "
                       f"{pred:>9} {meas:>22}  {d.status:<9} {err}")
        f, tuned = result.final, getattr(result, "predicted_tuned_ms", None)
        iv = None if f is None else f.interval
        if iv is not None and tuned and f.base_ms:
            self.tuned += 1
            self.tuned_within += 0.85 <= iv.ratio / (f.base_ms / tuned) <= 1.15
        return out

    def totals(self) -> list[str]:
        return [f"{self.tried_pred} of {self.tried} tried decisions carried a prediction",
                f"{self.kept_within} of {self.kept} kept changes measured within 15% of their "
                "prediction",
                f"{self.tuned_within} of {self.tuned} runs' before/after measured within 15% "
                "of the model's tuned step"]


def before_after(result: Any) -> str:
    """An autofix result's kept changes measured together, beside the model's tuned step."""
    f = result.final
    iv = None if f is None else f.interval
    text = ("nothing kept" if f is None else
            f"{f.base_ms:.2f} -> {f.cand_ms:.2f} ms measured "
            f"({iv.ratio:.2f}x [{iv.lo:.2f}, {iv.hi:.2f}])"
            if iv is not None and f.base_ms and f.cand_ms else "no measurement")
    if result.predicted_tuned_ms is not None:
        text += f", predicted {result.predicted_tuned_ms:.2f} ms"
    return text + ("  LEFT SLOWER" if iv is not None and iv.hi < 1.0 else "")


# ------------------------------------------------------------------ the machine, processes
def use_this_checkout() -> None:
    """Import this checkout's ``diagnose``, not an installed one."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))


def vmhwm_kib(pid: int | str = "self") -> int | None:
    """A process's peak RSS (VmHWM) in KiB, None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def ru_maxrss_kib() -> int:
    """ru_maxrss of this process (KiB on Linux): survives fork+exec, so in a child it is at
    least the parent's own peak."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB: VmHWM, else ru_maxrss (which counts the parent's)."""
    return vmhwm_kib() or ru_maxrss_kib()


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo, None where it does not say."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh
                         if ln.startswith("model name")), None)
    except OSError:
        return None


def git_revision() -> str | None:
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


def machine_info() -> dict[str, Any]:
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {"cpu": cpu_model() or platform.processor() or platform.machine(),
            "cores": usable_cpus(), "ram_bytes": ram, "os": platform.platform(),
            "python": platform.python_version(), "numpy": version("numpy"),
            "msgspec": version("msgspec"), "isal": version("isal"), "loadavg_start": loadavg(), "code": git_revision()}


def ram_text(info: dict[str, Any]) -> str:
    return f"{info['ram_bytes'] / 2**30:.1f} GiB RAM" if info.get("ram_bytes") else "RAM unknown"


def log(msg: str) -> None:
    """Progress, on stderr (stdout is the result)."""
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------ results from child processes
def emit(tag: str, obj: dict[str, Any]) -> None:
    """Print ``obj`` as one tagged JSON line, for the parent (see ``tagged``)."""
    sys.stdout.write(tag + json.dumps(obj) + "\n")
    sys.stdout.flush()


def tagged(text: str, tag: str) -> list[dict[str, Any]]:
    """The objects a child printed with ``emit(tag, ...)``, in order."""
    return [json.loads(ln[len(tag):]) for ln in text.splitlines() if ln.startswith(tag)]


def warm_page_cache(path: Path) -> None:
    """Read the file once, so that every measured run reads it from memory."""
    with open(path, "rb") as f:
        while f.read(64 * 2**20):
            pass


# ------------------------------------------------------------------------ building traces
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
    line_path: Path | None = None  # the same events on one line (build_one_line)
    line_bytes: int | None = None
    line_build_s: float | None = None


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
    for variant in (_gz_path(out), _line_path(out)):
        variant.unlink(missing_ok=True)
    t0 = time.perf_counter()
    copies, events, source_events = write_replicated(source, out, int(size_mb * MB))
    build_s = time.perf_counter() - t0
    size = out.stat().st_size
    meta_path.write_text(json.dumps({**key, "bytes": size, "events": events, "copies": copies,
                                     "source_events": source_events}))
    return BuiltTrace(out, size, events, copies, str(source), source_events, build_s)


def write_replicated(source: Path, out: Path, target_bytes: int, one_line: bool = False,
                     copies: int | None = None) -> tuple[int, int, int]:
    """Write ``source``'s events replicated to about ``target_bytes`` (or ``copies`` times);
    (copies, events, source). ``one_line``: the same bytes but for the line breaks and
    indentation before events."""
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
    indent = b"" if one_line else b"\n  "  # Kineto: every event on its own line

    def lines(evs: list[Any]) -> bytes:
        return indent + (b"," + indent).join(map(enc.encode, evs)) if evs else b""

    first = lines(meta_events)
    copy0 = lines(body)
    fixed = len(head) + len(first) + 2
    copies = copies or max(1, round((target_bytes - fixed) / (len(copy0) + 1)))

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
        f.write(b"]}" if one_line else b"\n]}")
    os.replace(tmp, out)
    return copies, len(meta_events) + copies * len(body), len(events)


def _gz_path(p: Path) -> Path:
    return p.with_name(p.name + ".gz")


def _line_path(p: Path) -> Path:
    return p.with_name(p.name.replace(".kineto.json", ".one-line.json"))


def _cached(bt: BuiltTrace, key: str, path: Path) -> tuple[dict[str, Any], bool]:
    """(the trace's cache record, whether ``path`` is the variant recorded there)."""
    meta = _read_meta(bt.path.with_name(bt.path.name + ".meta")) or {}
    ok = (path.is_file() and meta.get(key) == path.stat().st_size
          and meta.get("bytes") == bt.bytes)
    return meta, ok


def _record(bt: BuiltTrace, meta: dict[str, Any], key: str, path: Path) -> None:
    bt.path.with_name(bt.path.name + ".meta").write_text(
        json.dumps({**meta, key: path.stat().st_size}))


def build_gzip(bt: BuiltTrace) -> None:
    """Gzip the built trace once (cached next to it, keyed by the .json's size)."""
    gz = _gz_path(bt.path)
    meta, ok = _cached(bt, "gz_bytes", gz)
    if not ok:
        t0 = time.perf_counter()
        tmp = gz.with_name(gz.name + ".tmp")
        with open(bt.path, "rb") as src, gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 16 * 2**20)
        os.replace(tmp, gz)
        bt.gz_build_s = time.perf_counter() - t0
        _record(bt, meta, "gz_bytes", gz)
    bt.gz_path, bt.gz_bytes = gz, gz.stat().st_size


def build_one_line(bt: BuiltTrace) -> None:
    """The same events on one line (cached next to the trace): built by the same code from
    the same source, so it differs from the trace only by the line breaks before events."""
    out = _line_path(bt.path)
    meta, ok = _cached(bt, "line_bytes", out)
    if not ok:
        t0 = time.perf_counter()
        write_replicated(Path(bt.source), out, 0, one_line=True, copies=bt.copies)
        bt.line_build_s = time.perf_counter() - t0
        _record(bt, meta, "line_bytes", out)
    bt.line_path, bt.line_bytes = out, out.stat().st_size


def add_trace_options(ap: argparse.ArgumentParser) -> None:
    """--size-mb, --source, --workdir: which large trace (see ``built_trace``)."""
    ap.add_argument("--size-mb", type=float, default=300.0,
                    help="size of the built uncompressed trace in MB (default 300)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                    help="real trace to replicate (.json or .json.gz)")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                    help=f"where built traces are cached (default {DEFAULT_WORKDIR})")


def built_trace(args: argparse.Namespace) -> BuiltTrace:
    """The large trace the options name, built or taken from the cache (said on stderr)."""
    log(f"building ~{args.size_mb:g} MB trace from {args.source.name} "
        f"(cached in {args.workdir}) ...")
    bt = build_trace(args.source, args.size_mb, args.workdir)
    log(f"  {bt.path} ({bt.bytes / MB:,.1f} MB, {bt.events:,} events, "
        + (f"built in {bt.build_s:.1f} s)" if bt.build_s is not None else "cached)"))
    return bt
