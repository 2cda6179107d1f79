"""Reading many ranks: one after another vs in a process pool (``diagnose.api._read_all``).

The 8 DLRM rank traces in ``../shared/traces/param/dlrm_kineto`` (~0.9 MB each) are
replicated, each on its own, to several sizes per rank (copies of the rank's events with
shifted timestamps and renumbered steps: ``benchmarks/_bench.py``'s builder). For
each size, every rank is read and measured (``api._analyze_file``: decode, columns, all
trace metrics):

- **serial**: one file after another in this process;
- **parallel**: a ``ProcessPoolExecutor`` with one worker per usable CPU (pool start-up
  and returning the results included: what ``analyze`` pays).

Each figure is the best of ``--repeat`` runs (as ``timeit``: the machine may be shared,
and the least disturbed run of each is the fair comparison); a free-CPU check before and
after says how much parallelism the machine offered meanwhile. The table says from which
size the pool pays off; ``api._PARALLEL_MIN_BYTES`` is set from it. On a 2-core machine
expect at most ~2x.

    python benchmarks/parse_ranks.py [--sizes 0,4,16] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from _bench import MB, cpu_model, loadavg, write_replicated  # noqa: E402

from diagnose.analysis import _analyze_file  # noqa: E402
from diagnose.values import usable_cpus  # noqa: E402

DEFAULT_SOURCE = REPO_ROOT.parent / "shared" / "traces" / "param" / "dlrm_kineto"
DEFAULT_WORKDIR = Path("/tmp/torch-diagnose-bench/ranks")


def build_ranks(source: Path, size_mb: float, workdir: Path) -> list[Path]:
    """Each rank of ``source`` at about ``size_mb`` (the originals where size_mb is 0)."""
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        raise SystemExit(f"{source}: no rank traces")
    if size_mb <= 0:
        return files
    out_dir = workdir / f"{size_mb:g}MB"
    out_dir.mkdir(parents=True, exist_ok=True)
    built = []
    for f in files:
        name = f.name.removesuffix(".gz")
        out = out_dir / name
        if not out.is_file() or abs(out.stat().st_size - size_mb * MB) > 0.5 * MB + 0.2 * size_mb * MB:
            write_replicated(f, out, int(size_mb * MB))
        built.append(out)
    return built


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def serial(files: list[Path]) -> tuple[float, float]:
    """(wall s, CPU s) reading the files one after another in this process."""
    t0, c0 = time.perf_counter(), _cpu(resource.RUSAGE_SELF)
    for f in files:
        _analyze_file(str(f))
    return time.perf_counter() - t0, _cpu(resource.RUSAGE_SELF) - c0


def parallel(files: list[Path], workers: int) -> tuple[float, float]:
    """(wall s, CPU s of the pool's workers) reading the files in a process pool."""
    t0, c0 = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_analyze_file, map(str, files)))
    return time.perf_counter() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0


def _noop(path: str) -> str:
    return path


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


def free_cpu_check(workers: int, n: int = 2_000_000) -> float:
    """Speedup of a pure busy loop in the same pool: what the machine offers right now
    (the number of workers on an idle machine; ~1 when other work takes the CPUs)."""
    t0 = time.perf_counter()
    for _ in range(2 * workers):
        _spin(n)
    ser = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_spin, [n] * (2 * workers)))
    return ser / (time.perf_counter() - t0)


def pool_overhead(files: list[Path], workers: int) -> float:
    """Starting the pool and passing the file names through it, with no work."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_noop, map(str, files)))
    return time.perf_counter() - t0


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus_usable": usable_cpus(), "cpus_total": os.cpu_count(), "cpu": cpu_model(),
            "loadavg": loadavg()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="folder of rank traces")
    ap.add_argument("--sizes", default="0,2,4,8,16",
                    help="MB per rank, comma-separated (0: the original files)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if not args.source.is_dir():
        print(f"{args.source}: not found (the DLRM rank traces of ../shared/traces)",
              file=sys.stderr)
        return 2
    workers = usable_cpus()
    overhead = statistics.median(pool_overhead(build_ranks(args.source, 0, args.workdir),
                                               min(workers, 8)) for _ in range(args.repeat))
    free = [free_cpu_check(min(workers, 8))]
    rows = []
    for size in (float(s) for s in args.sizes.split(",")):
        files = build_ranks(args.source, size, args.workdir)
        total = sum(f.stat().st_size for f in files)
        for f in files[:1]:  # warm the page cache and imports
            _analyze_file(str(f))
        ser, par = [], []
        for _ in range(args.repeat):
            ser.append(serial(files))
            par.append(parallel(files, min(workers, len(files))))
        # best of the repeats (as timeit): the machine is shared, and the least disturbed
        # run of each is the fair comparison
        s, p = min(w for w, _ in ser), min(w for w, _ in par)
        rows.append({"mb_per_rank": round(total / len(files) / MB, 2), "ranks": len(files),
                     "total_mb": round(total / MB, 1), "serial_s": round(s, 3),
                     "serial_cpu_s": round(min(c for _, c in ser), 3),
                     "parallel_s": round(p, 3),
                     "parallel_cpu_s": round(min(c for _, c in par), 3),
                     "speedup": round(s / p, 2)})
        print(f"  {rows[-1]}", file=sys.stderr)
    free.append(free_cpu_check(min(workers, 8)))
    info = machine()
    date = dt.datetime.now().isoformat(timespec="seconds")
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])])
    print(f"machine: {info['cpu']}, {info['cpus_usable']} usable of {info['cpus_total']} CPUs, "
          f"load {info['loadavg']}, Python {info['python']}, {info['platform']}")
    print(f"date:    {date}")
    print(f"command: {command}")
    print(f"workers: {min(workers, 8)} (process pool), best of {args.repeat}; "
          f"pool start-up with no work: {overhead * 1e3:.0f} ms")
    print()
    print(f"free-CPU check (busy loop, pool vs serial; {min(workers, 8)}x when idle): "
          f"{free[0]:.2f}x before, {free[1]:.2f}x after")
    print("CPU s: CPU time of the work (this process / the pool's workers); wall well above")
    print("CPU means the machine was busy with other work (no CPU left for a second worker).")
    print()
    print("| MB per rank | ranks | total MB | serial s (CPU s) | parallel s (CPU s) | speedup |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['mb_per_rank']} | {r['ranks']} | {r['total_mb']} | {r['serial_s']:.3f} "
              f"({r['serial_cpu_s']:.2f}) | {r['parallel_s']:.3f} ({r['parallel_cpu_s']:.2f}) | "
              f"{r['speedup']:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "date": date, "command": command,
                                         "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
