"""Re-record the small traces bundled in samples/traces/ (used by `make demo` and tests).

    python samples/record_traces.py [--dest samples/traces/cpu] [--samples a,b,...]

On a CUDA machine: ``--dest samples/traces/gpu --samples all`` records every sample that
writes a trace (the GPU traces bundled there were recorded so; see samples/README.md).

Each sample runs under ``diagnose`` with 3 profiled steps and ``record_shapes`` off
(small files); its trace is copied out of the run folder.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    from diagnose.runfolder import trace_files
except ImportError:  # running from a source checkout that is not installed
    sys.path.insert(0, str(HERE.parent))
    from diagnose.runfolder import trace_files

import healthy  # noqa: E402
import pageable_copy  # noqa: E402
import slow_loader  # noqa: E402
import small_kernels  # noqa: E402
import sync_in_loop  # noqa: E402

SAMPLES = {"slow_loader": slow_loader.main, "healthy": healthy.main,
           "pageable_copy": pageable_copy.main, "small_kernels": small_kernels.main,
           "sync_in_loop": sync_in_loop.main}
DEFAULT = ("slow_loader", "healthy")


def record(dest: Path, names: tuple[str, ...] = DEFAULT) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        main = SAMPLES[name]
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp, steps=3, quiet=True, record_shapes=False)
            runs = sorted(Path(tmp).iterdir())
            traces = trace_files(runs[-1])
            if len(traces) != 1:
                raise SystemExit(f"{name}: expected one trace in {runs[-1]}, found {traces}")
            target = dest / f"{name}.pt.trace.json.gz"
            shutil.copyfile(traces[0], target)
            print(f"{target}  {target.stat().st_size / 1024:.0f} KiB")
            out.append(target)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=HERE / "traces" / "cpu")
    ap.add_argument("--samples", default=",".join(DEFAULT),
                    help=f"comma-separated, or 'all' ({', '.join(SAMPLES)})")
    args = ap.parse_args()
    names = tuple(SAMPLES) if args.samples == "all" else tuple(args.samples.split(","))
    unknown = [n for n in names if n not in SAMPLES]
    if unknown:
        ap.error(f"unknown sample(s) {', '.join(unknown)}: choose from {', '.join(SAMPLES)}")
    record(args.dest, names)
