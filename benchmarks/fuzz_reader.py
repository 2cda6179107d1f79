"""Fuzz the trace reader and the whole analysis: every case must end in a Report or
the project's own one-line error (DiagnoseError), never any other exception.

    python benchmarks/fuzz_reader.py [--cases 10000] [--seed 0]

Cases come from tests/fuzz_strategies.py (hypothesis): generated traces with missing
fields, wrong types, NaN/negative/huge numbers, numbers as strings, then mutated
(truncated, flipped bytes, inserted garbage, gzip of the document or of garbage, deep
nesting, binary garbage). Strings are full of what a cut could take for structure
(brackets, commas, quotes, backslashes, fake events, long runs across every window).
Each case's document is written both as torch.profiler writes it (indented) and on one
line (compact), and each of those two files and the mutated one is read by every chunked
reader (streaming, byte ranges, pipelined; cut into tiny pieces), which must give the
whole read's Trace, fall back to the whole read, or refuse what it refuses
(tests/readers.py). Prints a table of outcomes and the failure count (goal: 0).

    python benchmarks/fuzz_reader.py --shapes [--cases 2000] [--seed 0]

runs the shapes of real traces instead (tests/fuzz_strategies.py ``MUTATIONS``, chains of
one to four, on every bundled trace in samples/traces and the small ones of
../shared/traces): each through the command line's analysis in this process, which must
print a report or exit 2 with one line, and whose step model must not have failed.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from diagnose import analyze  # noqa: E402
from diagnose.errors import DiagnoseError  # noqa: E402
from tests.fuzz_strategies import COMPACT, trace_case  # noqa: E402
from tests.readers import check_chunked_reads  # noqa: E402

#: real traces the --shapes mode mutates: every bundled one, and the small shared ones
SHARED_SMALL_BYTES = 200_000


def _real_traces() -> list[Path]:
    bundled = sorted((REPO / "samples" / "traces").rglob("*.json.gz"))
    shared = REPO.parent / "shared" / "traces"
    small = sorted(p for p in shared.rglob("*.json*") if p.stat().st_size < SHARED_SMALL_BYTES
                   ) if shared.is_dir() else []
    return bundled + small


def shapes(cases: int, seed_: int) -> int:
    """Chains of MUTATIONS on real traces, each analysed as the command line does it."""
    import contextlib
    import gzip
    import io
    import json
    import random

    from diagnose import cli
    from diagnose.stepmodel.step import FAILED
    from tests.fuzz_strategies import MUTATIONS, mutate

    traces = _real_traces()
    docs = {}
    for p in traces:
        with gzip.open(p) if p.name.endswith(".gz") else open(p, "rb") as f:
            d = json.load(f)
        docs[p] = d if isinstance(d, dict) else {"traceEvents": d}
    path = Path(tempfile.mkdtemp(prefix="fuzz-shapes-")) / "case.pt.trace.json"
    outcomes: collections.Counter[str] = collections.Counter()
    failures: list[tuple[str, str]] = []
    rng = random.Random(seed_)
    names = list(MUTATIONS)
    t0 = time.perf_counter()
    for i in range(cases):
        src = rng.choice(traces)
        chain = [rng.choice(names) for _ in range(rng.randint(1, 4))]
        fmt = rng.choice(["json"] * 10 + ["text"] * 9 + ["html"])
        case = f"{src.name} <- {' + '.join(chain)} (seed {i}, {fmt})"
        path.write_text(json.dumps(mutate(docs[src], chain, i), default=str))
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(["analyze", str(path), "--format", fmt])
        except Exception:  # the one thing that must never happen
            failures.append((traceback.format_exc(limit=4), case))
            continue
        lines = err.getvalue().strip().splitlines()
        if rc == 2 and len(lines) == 1:
            msg = lines[0].split(f"{path}: ", 1)[-1].split(" (")[0]
            outcomes["error: " + msg[:48]] += 1
        elif rc != 0 or not out.getvalue().strip():
            failures.append((f"exit {rc}: {err.getvalue()[:300]}", case))
        elif FAILED in out.getvalue():
            failures.append(("the step model failed", case))
        else:
            outcomes["report"] += 1
    dt = time.perf_counter() - t0
    print("torch-diagnose: shapes of real traces")
    print(f"machine : {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"command : python benchmarks/fuzz_reader.py --shapes --cases {cases} --seed {seed_}")
    print(f"traces  : {len(traces)}; mutations: {len(names)}")
    print(f"\n{'outcome':60s} {'cases':>8s}")
    print("-" * 69)
    for k, v in outcomes.most_common():
        print(f"{k:60s} {v:8d}")
    print("-" * 69)
    print(f"{'failures (a traceback, an unclear error, a failed step model)':60s} "
          f"{len(failures):8d}")
    print(f"{'time':60s} {dt:7.1f}s")
    for tb_text, case in failures[:5]:
        print("\nFAILURE on", case)
        print(tb_text)
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shapes", action="store_true",
                    help="mutate real traces into other shapes (default: generated files)")
    args = ap.parse_args()
    if args.shapes:
        return shapes(args.cases or 2_000, args.seed)
    args.cases = args.cases or 10_000
    outcomes: collections.Counter[str] = collections.Counter()
    chunked: collections.Counter[str] = collections.Counter()
    failures: list[tuple[str, bytes]] = []
    work = Path(tempfile.mkdtemp(prefix="fuzz-reader-"))
    path = work / "case.pt.trace.json"

    @seed(args.seed)
    @settings(max_examples=args.cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(trace_case())
    def run(files: dict[str, bytes]) -> None:
        for layout, data in files.items():
            path.write_bytes(data)
            kind = "compact" if layout in COMPACT else layout.split()[0]
            try:
                seen, problems = check_chunked_reads(path)
            except Exception:  # noqa: BLE001 - the reference read itself broke: a failure
                seen, problems = [], [traceback.format_exc(limit=3)]
            chunked.update(f"{kind:8s} {s}" for s in seen)
            failures.extend((f"chunked read ({layout}): {p}", data) for p in problems)
        data = files["mutated"]
        path.write_bytes(data)
        try:
            report = analyze(path)
            report.to_json()
            report.render_text()
            outcomes["report"] += 1
        except DiagnoseError as e:
            msg = str(e)
            if not msg or "\n" in msg:
                failures.append((f"badly worded error: {msg!r}", data))
            else:
                outcomes["error: " + msg.split(": ", 1)[-1].split(" (")[0][:48]] += 1
        except Exception:  # the one thing that must never happen
            failures.append((traceback.format_exc(limit=3), data))

    t0 = time.perf_counter()
    run()
    dt = time.perf_counter() - t0
    total = sum(outcomes.values()) + sum(1 for f, _ in failures if not f.startswith("chunked"))
    print("torch-diagnose: reader fuzz")
    print(f"machine : {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"date    : {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"command : python benchmarks/fuzz_reader.py --cases {args.cases} --seed {args.seed}")
    print(f"\n{'outcome':60s} {'cases':>8s}")
    print("-" * 69)
    for k, v in outcomes.most_common():
        print(f"{k:60s} {v:8d}")
    print("-" * 69)
    print(f"\n{'file (indented, compact, mutated) / chunked reader: outcome':60s} "
          f"{'cases':>8s}")
    print("-" * 69)
    for k, v in sorted(chunked.items()):
        print(f"{k:60s} {v:8d}")
    print("-" * 69)
    print(f"{'cases run':60s} {total:8d}")
    print(f"{'failures (any other exception, or a chunked read that differs)':60s} "
          f"{len(failures):8d}")
    print(f"{'time':60s} {dt:7.1f}s")
    kinds = collections.Counter(f.splitlines()[0][:100] for f, _ in failures)
    for k, v in kinds.most_common():
        print(f"  failure: {k}  x{v}")
    for tb_text, data in failures[:5]:
        print("\nFAILURE on", repr(data[:200]))
        print(tb_text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
