"""Re-record the small CPU traces bundled in samples/traces/cpu/ (used by `make demo` and tests).

    python samples/record_traces.py [--dest samples/traces/cpu]

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
import slow_loader  # noqa: E402

SAMPLES = {"slow_loader": slow_loader.main, "healthy": healthy.main}


def record(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name, main in SAMPLES.items():
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
    record(ap.parse_args().dest)
