"""TensorBoard: ``torch-diagnose tensorboard PATH...`` and ``diagnose(..., tensorboard=LOGDIR)``.

One analysis becomes one TensorBoard run, ``<logdir>/<run>/``::

    events.out.tfevents.*                 scalars and the findings as markdown text
    diagnose.json                         the report, autofix rows and plots for the "diagnose"
                                          tab (:mod:`diagnose.report.tb_plugin`)
    <worker>.<span>.pt.trace.json.gz      a copy of each trace, adapted for torch-tb-profiler
    rank<N>/events.out.tfevents.*         per-rank scalars, when several ranks were analysed

Scalars and text are written with TensorBoard's own event-file writer and summary
protos (``tensorboard.summary.writer`` + ``summary_v2.*_pb``): no torch needed.

Why the trace copy is adapted: torch-tb-profiler 0.4.3 (the plugin's last release) drops
a ``user_annotation`` event unless it is ``ProfilerStep#N`` or a collective
(``profiler/trace.py: create_trace_event``), and counts DataLoader time only from ``cpu_op``
events named ``enumerate(DataLoader)#...`` (``profiler/event_parser.py``); current PyTorch
writes that range as ``user_annotation``, so its Overview shows 0% DataLoader. The copy
therefore gets, and nothing else changes:

1. ``user_annotation`` events named ``enumerate(DataLoader)#...`` / ``enumerate(DataPipe)#...``
   re-categorised as ``cpu_op``, as PyTorch wrote them before 1.10;
2. ``gpu_user_annotation`` events named ``ProfilerStep#N`` re-categorised as
   ``gpu_user_annotation_step``: the plugin maps ``gpu_user_annotation`` to the same type
   as ``user_annotation`` and would count the device-side copy of each step as one more
   host step;
3. a trace written as a bare list of events wrapped in ``{"traceEvents": [...]}``;
4. the file named ``<worker>.<span>.pt.trace.json.gz`` (``consts.WORKER_PATTERN``), with a
   span added where the name has none.

Events are rewritten one by one from their raw bytes; every other event, and every
top-level key, is copied byte for byte. A trace that needs none of this is copied as is.
The user's files are only read.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import DiagnoseError, TraceError
from ..trace.decode import read_bytes
from ..values import as_number
from .tb_plugin.runfile import RUN_FILE, write_run_file
from .tb_text import GPU_STEP_CAT, findings_markdown, notes_markdown

if TYPE_CHECKING:
    from ..result import Analysis

__all__ = [
    "DEFAULT_LOGDIR",
    "TraceCopy",
    "WriteResult",
    "adapt_trace",
    "serve",
    "write_logdir",
    "write_session_logdir",
]

DEFAULT_LOGDIR = "diagnose-tb"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6006
INSTALL_HINT = "pip install 'torch-diagnose[tensorboard]'"

# torch_tb_profiler/consts.py WORKER_PATTERN: <worker>[.<span digits>].pt.trace.json[.gz]
_PLUGIN_FILE = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?$")
_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")
_DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
DATALOADER_CAT = "cpu_op"
_EVENT_CHUNK = 20_000
_STOP_WAIT_S = 10.0


# ------------------------------------------------------------------------- trace copies
@dataclass
class TraceCopy:
    """One trace written for the plugin."""

    source: str
    path: Path
    events: int
    dataloader_events: int  # user_annotation -> cpu_op
    gpu_step_events: int  # gpu_user_annotation ProfilerStep#N -> gpu_user_annotation_step
    wrapped: bool  # a bare event list wrapped in {"traceEvents": [...]}

    @property
    def adapted(self) -> bool:
        return bool(self.dataloader_events or self.gpu_step_events or self.wrapped)


class _Head(msgspec.Struct, gc=False):
    """The two fields that decide whether an event needs rewriting."""

    cat: Any = None
    name: Any = None


def _new_category(cat: Any, name: Any) -> str | None:
    if not isinstance(cat, str) or not isinstance(name, str):
        return None
    low = cat.lower()  # the plugin compares lowercased categories
    if low == "user_annotation" and name.startswith(_DATALOADER_PREFIXES):
        return DATALOADER_CAT
    if low == "gpu_user_annotation" and name.startswith("ProfilerStep#"):
        return GPU_STEP_CAT
    return None


def _heads(raws: list[msgspec.Raw]) -> list[_Head | None]:
    dec = msgspec.json.Decoder(_Head)
    out: list[_Head | None] = []
    for r in raws:
        try:
            out.append(dec.decode(r))
        except msgspec.DecodeError:  # not an object (or odd types): the plugin skips it too
            out.append(None)
    return out


def adapt_trace(src: str | os.PathLike[str], dst_dir: str | os.PathLike[str],
                name: str) -> TraceCopy:
    """Write ``dst_dir/name`` (``<worker>.<span>.pt.trace.json[.gz]``) from ``src``.

    ``name`` should end in ``.pt.trace.json.gz``; when the trace needs no change and is
    a plain ``.json`` file, the copy keeps it plain (``.pt.trace.json``).
    """
    src = Path(src)
    data = read_bytes(src)
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
    except msgspec.DecodeError as e:
        raise TraceError(src, f"not valid JSON ({str(e).splitlines()[0][:120]})") from None
    wrapped = isinstance(top, list)
    rest: dict[str, msgspec.Raw]
    if isinstance(top, list):
        raws, rest = top, {}
    else:
        if "traceEvents" not in top:
            raise TraceError(src, "no 'traceEvents' in the file: not a torch.profiler/Chrome trace")
        try:
            raws = msgspec.json.decode(top["traceEvents"], type=list[msgspec.Raw])
        except msgspec.DecodeError:
            raise TraceError(src, "'traceEvents' is not a list") from None
        rest = top
    try:
        heads: list[_Head | None] = list(msgspec.json.decode(
            top["traceEvents"] if isinstance(top, dict) else data, type=list[_Head]))
    except msgspec.DecodeError:
        heads = _heads(raws)
    events: list[msgspec.Raw | bytes] = list(raws)
    n_dl = n_step = 0
    for i, h in enumerate(heads):
        new_cat = _new_category(h.cat, h.name) if h is not None else None
        if new_cat is None:
            continue
        obj = msgspec.json.decode(raws[i])
        obj["cat"] = new_cat
        events[i] = msgspec.json.encode(obj)
        if new_cat == DATALOADER_CAT:
            n_dl += 1
        else:
            n_step += 1
    dst_dir = Path(dst_dir)
    out = dst_dir / name
    copy = TraceCopy(str(src), out, len(raws), n_dl, n_step, wrapped)
    tmp = dst_dir / f".{name}.tmp"
    try:
        if not copy.adapted:
            # nothing to change: the very bytes, gzipped if the original was
            if not src.name.endswith(".gz"):
                out = copy.path = dst_dir / name.removesuffix(".gz")
                tmp.write_bytes(data)
            else:
                tmp.write_bytes(src.read_bytes())
        else:
            with gzip.open(tmp, "wb", compresslevel=6) as f:
                _write_document(f, rest, events)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise DiagnoseError(f"{out}: cannot write the trace copy ({e.strerror or e})") from None
    return copy


def _write_document(f: Any, rest: dict[str, msgspec.Raw],
                    events: Sequence[msgspec.Raw | bytes]) -> None:
    f.write(b"{")
    first = True
    keys = list(rest) if rest else ["traceEvents"]
    for key in keys:
        if not first:
            f.write(b",\n")
        first = False
        f.write(msgspec.json.encode(key) + b":")
        if key != "traceEvents":
            f.write(memoryview(rest[key]))
            continue
        f.write(b"[\n")
        for lo in range(0, len(events), _EVENT_CHUNK):
            if lo:
                f.write(b",\n")
            f.write(b",\n".join(events[lo:lo + _EVENT_CHUNK]))
        f.write(b"\n]")
    f.write(b"}\n")


def _strip_suffix(name: str) -> str:
    for suf in _TRACE_SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _safe(name: str, fallback: str) -> str:
    s = _UNSAFE.sub("_", name).strip("._")
    return s or fallback


def copy_name(src: Path, taken: set[tuple[str, str]]) -> str:
    """The plugin's file name for ``src``: its own ``<worker>.<span>`` where it has one."""
    m = _PLUGIN_FILE.match(src.name)
    if m:
        worker, span = _safe(m.group(1), "worker"), (m.group(2) or "")[1:]
    else:
        worker, span = _safe(_strip_suffix(src.name), "worker"), ""
    if not span:
        try:
            span = str(int(src.stat().st_mtime * 1000))
        except OSError:
            span = str(int(time.time() * 1000))
    base, n = worker, 1
    while (worker, span) in taken:
        n += 1
        worker = f"{base}_{n}"
    taken.add((worker, span))
    return f"{worker}.{span}.pt.trace.json.gz"


# ---------------------------------------------------------------------------- events
class _Events:
    """A TensorBoard event file (scalars and text); torch-free."""

    def __init__(self, logdir: Path) -> None:
        try:
            from tensorboard.compat.proto import event_pb2
            from tensorboard.plugins.scalar.summary_v2 import scalar_pb
            from tensorboard.plugins.text.summary_v2 import text_pb
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as e:
            raise DiagnoseError(
                f"writing TensorBoard logs needs the tensorboard package ({e.name or e} "
                f"is missing): {INSTALL_HINT}") from None
        self._event = event_pb2.Event
        self._scalar_pb = scalar_pb
        self._text_pb = text_pb
        self._w = EventFileWriter(str(logdir), max_queue_size=1000)
        self.tags: set[str] = set()

    def scalar(self, tag: str, value: float, step: int, *, wall_time: float | None = None,
               description: str | None = None) -> None:
        first = tag not in self.tags
        self.tags.add(tag)
        summary = self._scalar_pb(tag, float(value), description=description if first else None)
        self._w.add_event(self._event(wall_time=wall_time if wall_time is not None else time.time(),
                                      step=int(step), summary=summary))

    def text(self, tag: str, markdown: str, *, description: str | None = None) -> None:
        self.tags.add(tag)
        summary = self._text_pb(tag, markdown, description=description)
        self._w.add_event(self._event(wall_time=time.time(), step=0, summary=summary))

    def close(self) -> None:
        self._w.close()


def _describe(name: str) -> str | None:
    from ..metrics import CATALOG

    unit, doc = CATALOG.get(name, ("", ""))
    if not doc:
        return None
    return f"{doc} ({unit})" if unit else doc


def _write_metrics(ev: _Events, metrics: dict[str, Any], wall: float) -> int:
    n = 0
    for name, v in metrics.items():
        x = as_number(v)
        if x is None:
            continue
        ev.scalar(f"metrics/{name}", x, 0, wall_time=wall, description=_describe(name))
        n += 1
    return n


def _write_series(ev: _Events, series: dict[str, list[float]], wall: float) -> int:
    n = 0
    for name, values in series.items():
        for i, v in enumerate(values):
            x = as_number(v)
            if x is not None:
                ev.scalar(f"step/{name}", x, i, wall_time=wall)
                n += 1
    steps, dl = series.get("step_ms") or [], series.get("dataloader_ms") or []
    for i, (s, d) in enumerate(zip(steps, dl, strict=False)):
        s_, d_ = as_number(s), as_number(d)
        if s_ and d_ is not None:
            ev.scalar("step/dataloader_share", d_ / s_, i, wall_time=wall,
                      description="DataLoader share of this step, as the step-time breakdown "
                                  "(and torch-tb-profiler's Overview) counts it")
            n += 1
    return n


def _write_samples(ev: _Events, samples: dict[str, Any] | None) -> int:
    """Sampler time series: one tag per numeric field, the tick index as step."""
    if not isinstance(samples, dict) or not isinstance(samples.get("series"), dict):
        return 0
    n = 0
    for sampler, cols in sorted(samples["series"].items()):
        if not isinstance(cols, dict) or not isinstance(cols.get("t"), list):
            continue
        ts = cols["t"]
        for fld, values in sorted(cols.items()):
            if fld == "t" or not isinstance(values, list):
                continue
            for i, (t, v) in enumerate(zip(ts, values, strict=False)):
                tag = f"samples/{sampler}/{fld}"
                if isinstance(v, list):  # per-core values: their mean
                    nums = [x for x in map(as_number, v) if x is not None]
                    x = sum(nums) / len(nums) if nums else None
                    tag += "_mean"
                else:
                    x = as_number(v)
                if x is not None:
                    ev.scalar(tag, x, i, wall_time=as_number(t))
                    n += 1
    return n


# --------------------------------------------------------------------------- logdir
@dataclass
class WriteResult:
    run_dir: Path
    run: str
    copies: list[TraceCopy] = field(default_factory=list)
    scalars: int = 0
    tags: list[str] = field(default_factory=list)


def default_run_name(report: Analysis) -> str:
    src = Path(report.source[0]) if report.source else Path("run")
    name = _strip_suffix(src.name) if src.name else src.resolve().name
    return _safe(name, "run")


def _ours(p: Path) -> bool:
    n = p.name
    return n == RUN_FILE or n.startswith("events.out.tfevents.") or bool(_PLUGIN_FILE.match(n))


def _prepare_run_dir(run_dir: Path, sources: Iterable[Path], overwrite: bool) -> None:
    srcs = {s.resolve() for s in sources}
    rd = run_dir.resolve()
    if rd in srcs or rd in {s.parent for s in srcs}:
        raise DiagnoseError(f"{run_dir}: is where a source trace lies; choose another --logdir "
                            "or --run (the originals are never written to)")
    if run_dir.exists() and not run_dir.is_dir():
        raise DiagnoseError(f"{run_dir}: exists and is not a folder")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        if not overwrite:
            raise DiagnoseError(f"{run_dir}: run already exists (use --run NAME, or --overwrite "
                                "to replace what torch-diagnose wrote there)")
        # replace only what this module writes: event files and trace copies
        for p in [run_dir, *(d for d in run_dir.iterdir() if d.is_dir()
                             and re.fullmatch(r"rank\d+", d.name))]:
            for f in p.iterdir():
                if f.is_file() and _ours(f) and f.resolve() not in srcs:
                    f.unlink()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DiagnoseError(f"{run_dir}: cannot create the run folder ({e.strerror or e})") from None


def write_logdir(report: Analysis, logdir: str | os.PathLike[str] = DEFAULT_LOGDIR, *,
                 run: str | None = None, overwrite: bool = False,
                 traces: bool = True, autofix: Any = None) -> WriteResult:
    """Write ``report`` (and adapted copies of its traces) as the run ``<logdir>/<run>``.

    ``autofix``: what ``diagnose.autofix.autofix`` returned, or ``(label, before_ms, after_ms)``
    rows, for the diagnose tab's before/after table and plot.
    """
    name = _safe(run, "run") if run else default_run_name(report)
    run_dir = Path(logdir) / name
    sources = [Path(r.path) for r in report.ranks]
    _prepare_run_dir(run_dir, sources, overwrite)
    res = WriteResult(run_dir, name)
    if traces:
        taken: set[tuple[str, str]] = set()
        for src in sources:
            res.copies.append(adapt_trace(src, run_dir, copy_name(src, taken)))
    wall = time.time()
    ev = _Events(run_dir)
    try:
        res.scalars += _write_metrics(ev, report.metrics, wall)
        res.scalars += _write_series(ev, report.series, wall)
        res.scalars += _write_samples(ev, report.samples)
        ev.text("findings", findings_markdown(report),
                description="torch-diagnose findings, worst first")
        ev.text("notes", notes_markdown(report, res.copies),
                description="rules not evaluated, notes, and how the traces were adapted")
    finally:
        ev.close()
    res.tags = sorted(ev.tags)
    write_run_file(run_dir, report, autofix, [c.path.name for c in res.copies])
    if len(report.ranks) > 1:
        for i, r in enumerate(report.ranks):
            sub = run_dir / f"rank{r.rank if r.rank is not None else i}"
            sub.mkdir(exist_ok=True)
            rev = _Events(sub)
            try:
                res.scalars += _write_metrics(rev, r.metrics, wall)
                res.scalars += _write_series(rev, r.series, wall)
            finally:
                rev.close()
    return res


def write_session_logdir(report: Analysis, run_dir: str | os.PathLike[str],
                         tensorboard: str | os.PathLike[str] | bool) -> Path:
    """``diagnose(..., tensorboard=...)``: the run named after the run folder; returns its path."""
    logdir = Path(DEFAULT_LOGDIR) if isinstance(tensorboard, bool) else Path(tensorboard)
    base = _safe(Path(run_dir).name, "run")
    name, n = base, 1
    while (logdir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return write_logdir(report, logdir, run=name).run_dir


# ------------------------------------------------------------------------------ serve
def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _free_port(host: str) -> int:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _check_port(host: str, port: int) -> None:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.bind((host, port))
    except OSError as e:
        raise DiagnoseError(f"cannot serve on {host}:{port} ({e.strerror or e}); "
                            "choose another --port (0: any free port) or --host") from None


def tensorboard_command(logdir: str | os.PathLike[str], host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", os.fspath(logdir),
            "--host", host, "--port", str(port)]


def stop_process(proc: subprocess.Popen[Any], timeout: float = _STOP_WAIT_S) -> None:
    """Terminate ``proc`` (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve(logdir: str | os.PathLike[str], host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          *, out: Any = None) -> int:
    """Run TensorBoard on ``logdir`` until it exits or Ctrl-C; returns its exit status (0 on Ctrl-C)."""
    out = out or sys.stdout
    if importlib.util.find_spec("tensorboard") is None:
        raise DiagnoseError(f"--serve needs TensorBoard: {INSTALL_HINT}")
    if importlib.util.find_spec("torch_tb_profiler") is None:
        print("torch-diagnose: warning: torch-tb-profiler is not installed: the PyTorch Profiler "
              f"tab will be missing ({INSTALL_HINT})", file=sys.stderr)
    port = _free_port(host) if port == 0 else port
    _check_port(host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"torch-diagnose: note: serving on {host}: reachable from other machines",
              file=sys.stderr)
    proc = subprocess.Popen(tensorboard_command(logdir, host, port))
    print(f"TensorBoard: http://{_url_host(host)}:{port}/  (PyTorch Profiler tab: "
          f"#pytorch_profiler; Ctrl-C stops it)", file=out, flush=True)
    try:  # SIGTERM (a kill, a service stop) stops its server too, as Ctrl-C does
        term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread: SIGTERM's handler stays
        term = None
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop_process(proc)
        print("TensorBoard stopped.", file=out, flush=True)
        return 0
    finally:
        stop_process(proc)
        if term is not None:
            signal.signal(signal.SIGTERM, term)
