"""The diagnosis' predictions on the corpus of held-out training jobs, checked as a user
would check them, one table per half (tune / validate).

    python benchmarks/corpus_predict.py                        # every job, both halves
    python benchmarks/corpus_predict.py --half validate --rounds 12
    python benchmarks/corpus_predict.py jpeg_folder_convnet csv_rows_mlp --rounds 3

The corpus is benchmarks/corpus (committed: jobs written for the project) and, where
$TORCH_DIAGNOSE_CORPUS names a folder holding another corpus package (the same
``names``/``half``/``split``/``make`` functions), that corpus too (``_corpus.py``); job names must not clash, and each row's last column says
which corpus the job is from (``repo`` or ``extra``).

For each job (``make_job()`` of its module): a diagnosis of its own loop
(``with diagnose(model, loader)`` around its loop body, ``train_step``; every model where
it has several; ``d.step()`` only where the job says nothing else ends a step,
``marks_steps``). Then, for every warning or critical finding, exactly the change its first
fix predicts (JSON ``fixes[0].predicted.change``) is made real and timed without the
profiler, as benchmarks/predict_vs_measured.py does (whose pieces this imports): the loader
rebuilt as autofix rebuilds it, torch's threads set, the collector frozen; here also the
optimizer's ``foreach``/``fused`` flags set on its groups for the changed arm's blocks,
autocast around the step for ``amp_dtype``, the batch moved ``non_blocking`` ahead of
the step on CUDA, and the models' ``channels_last`` / ``cudnn_benchmark`` / ``compile``
(``_model_settings``). ``--every-fix`` times each offered fix, not only the first (a lent
GPU's rows); ``--job-seconds`` stops a job that runs longer. The two arms run in interleaved blocks in one process, in turns
(baseline, changed; changed, baseline; ...; ``--steps`` steps after the warm-up), or each
in processes of its own where the change is to the garbage collector or the diagnosed
loop made full collections. A change that two findings name as their first fix is timed
once, and counted once in the tallies; a row whose baseline arm lies 1.5x or more from
the diagnosis' own unprofiled step says so (the host's load moved between them).

Columns: predicted speedup and the range its changed step's ms range gives (base / hi,
base / lo), measured speedup (mean block ratio) with its paired bootstrap 95% interval,
error = measured / predicted, whether the measured speedup lies inside the range, the two
arms' mean steps, and the corpus. A loader whose epoch is short (at most 100 batches) is
timed in whole epochs, each arm's epochs interleaved (``_epoch_steps``). Tallies per half
(and per corpus, where there are two): within 15% of the prediction, inside the range, no
first fix more than 5% slower, and the share of warning/critical findings carrying a
prediction.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # predict_vs_measured (which sets up the rest), `import corpus`

import predict_vs_measured as pvm  # noqa: E402
from _corpus import (  # noqa: E402  (the corpora in use, their jobs)
    load_corpora,
    load_corpus,
    make,
)
from _run import first_offered, offered_fixes, print_header  # noqa: E402

#: the model's settings an arm's blocks set and undo (_model_settings)
MODEL_SETTINGS = {"channels_last", "cudnn_benchmark", "compile"}
#: changes timed here: predict_vs_measured's, the optimizer's kernels, the model's settings
TIMED = set(pvm.TIMED) | {"optimizer_foreach", "optimizer_fused"} | MODEL_SETTINGS
#: the loader's fields (a job without a DataLoader cannot take them)
LOADER_FIELDS = {"num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                 "batched_fetch", "batch_size"}


# ------------------------------------------------------------------ the diagnosis
def diagnose_job(job: dict[str, Any], out: str) -> dict[str, Any]:
    """The job's own loop inside ``with diagnose(model, loader)``; the report's JSON."""
    from diagnose import diagnose

    manual = job.get("marks_steps", job["loader"] is None and job["optimizer"] is None)
    d = diagnose(job.get("models") or job["model"], job["loader"], out_dir=out,
                 print_report=False)
    batches = job["batches"]()
    with d:
        for batch in batches:
            job["train_step"](batch)
            if manual:
                d.step()
            if d.done:
                break
    # the loader's workers stop here, not during the timing that follows (a job without a
    # loader hands out a plain iterator)
    getattr(batches, "close", lambda: None)()
    return d.report.to_json()


# ------------------------------------------------------------------ an arm: a change made real
@dataclass
class Arm:
    loader: Any  # the rebuilt DataLoader, or None (the job has none)
    threads: int | None
    freeze: bool
    cfg: Any
    opt_flags: dict[str, Any] = field(default_factory=dict)
    model: dict[str, bool] = field(default_factory=dict)  # MODEL_SETTINGS the arm sets


def make_arm(job: dict[str, Any], change: dict[str, Any]) -> Arm:
    if job["loader"] is not None:
        loader, threads, freeze, cfg = pvm._arm(job, change)
    else:
        from diagnose.fixes import TrainConfig

        base = TrainConfig.from_objects(None, job["optimizer"])
        cfg = base.replace(**{k: v for k, v in change.items()
                              if k not in LOADER_FIELDS and hasattr(base, k)})
        loader = None
        threads = getattr(cfg, "intra_op_threads", None)
        freeze = bool(getattr(cfg, "gc_freeze", False))
    flags = {k: v for k, v in (("foreach", change.get("optimizer_foreach")),
                               ("fused", change.get("optimizer_fused"))) if v is not None}
    arm = Arm(loader, threads, freeze, cfg, flags)
    arm.model = {k: True for k in MODEL_SETTINGS if change.get(k)}
    return arm


def _models(job: dict[str, Any]) -> list[Any]:
    models = job.get("models") or job["model"]
    return list(models.values()) if isinstance(models, dict) else \
        list(models) if isinstance(models, (list, tuple)) else [models]


@contextlib.contextmanager
def _model_settings(job: dict[str, Any], on: dict[str, bool]):
    """The job's models with the arm's settings for the block, undone after it:
    ``channels_last`` (the weights, and the optimizer's state shaped like them, in that
    layout: the inputs follow the first convolution's), ``cudnn_benchmark``, ``compile``
    (``Module.compile``; its compiling falls in the block's warm-up)."""
    import torch

    if not on:
        yield
        return
    models, opt = _models(job), job.get("optimizer")
    bench = torch.backends.cudnn.benchmark

    def layout(fmt: Any) -> None:
        for m in models:
            m.to(memory_format=fmt)
        for st in (opt.state.values() if opt is not None else ()):
            for k, v in st.items():
                if torch.is_tensor(v) and v.dim() == 4:
                    st[k] = v.contiguous(memory_format=fmt)

    if on.get("channels_last"):
        layout(torch.channels_last)
    if on.get("cudnn_benchmark"):
        torch.backends.cudnn.benchmark = True
    if on.get("compile"):
        for m in models:
            m.compile()
    try:
        yield
    finally:
        if on.get("compile"):
            for m in models:
                m._compiled_call_impl = None
        torch.backends.cudnn.benchmark = bench
        if on.get("channels_last"):
            layout(torch.contiguous_format)


@contextlib.contextmanager
def _optimizer_flags(opt: Any, flags: dict[str, Any]):
    """The optimizer's groups with ``flags`` for the block (its step reads them per group)."""
    if opt is None or not flags:
        yield
        return
    before = [{k: g.get(k) for k in flags} for g in opt.param_groups]
    for g in opt.param_groups:
        g.update(flags)
    try:
        yield
    finally:
        for g, b in zip(opt.param_groups, before, strict=True):
            g.update(b)


@contextlib.contextmanager
def _settings(job: dict[str, Any], a: Arm):
    """The arm's process-wide settings for a block: torch's threads, the collector frozen,
    the optimizer's flags, the models' settings; undone after it."""
    with pvm._threads(a.threads), pvm._frozen(a.freeze), \
            _optimizer_flags(job["optimizer"], a.opt_flags), _model_settings(job, a.model):
        yield


def _batches(job: dict[str, Any], arm: Arm) -> Any:
    if arm.loader is not None:
        from corpus._common import forever

        return forever(arm.loader)
    return job["batches"]()


def _step(job: dict[str, Any], batch: Any, cfg: Any) -> None:
    """One step of the job's own loop body, with ``cfg``'s transfer and precision."""
    import torch

    from diagnose.autofix.trial import to_device

    dev = job["device"]
    if dev.type == "cuda" and getattr(cfg, "non_blocking", False):
        batch = to_device(batch, dev, True, False)
    amp_dtype = getattr(cfg, "amp_dtype", None)
    amp = (torch.autocast(dev.type, dtype=getattr(torch, amp_dtype)) if amp_dtype
           else contextlib.nullcontext())
    with amp:
        job["train_step"](batch)


def _sync(job: dict[str, Any]) -> None:
    pvm._sync({"device": job["device"]})


def _ready(a: Arm) -> int:
    """The batches an arm's workers keep ready (prefetch_factor a worker)."""
    if a.loader is None:
        return 0
    return (getattr(a.cfg, "prefetch_factor", None) or 2) * (getattr(a.cfg, "num_workers", 0) or 0)


#: a loader whose epoch is at most this many batches, or takes at most WHOLE_EPOCH_S at the
#: diagnosed step, is timed in whole epochs (:func:`_epoch_steps`)
WHOLE_EPOCH_MAX = 100
WHOLE_EPOCH_S = 4.0
#: a longer epoch that takes at most this at the diagnosed step is run once, untimed, before
#: an arm's timed steps (:func:`_first_epoch`)
FIRST_EPOCH_S = 20.0


def _first_epoch(job: dict[str, Any], a: Arm, it: Any, done: int, step_ms: float | None) -> int:
    """Run the rest of the arm's first epoch untimed (``done`` of its batches taken from
    ``it``, the loader's batches epoch after epoch) where its epoch is known and takes at
    most :data:`FIRST_EPOCH_S` at ``step_ms``; the batches run. A job's first epoch can be
    slower than the rest: a tokenizer or decode cache in the training process warms over
    it, and a long job's pace is the later epochs' (blocks timed within the first epoch
    timed a cold cache)."""
    try:
        n = len(a.loader)
    except TypeError:  # no loader, or an iterable one
        return 0
    if step_ms is None or n <= done or n * step_ms > FIRST_EPOCH_S * 1e3:
        return 0
    for _ in range(n - done):
        _step(job, next(it), a.cfg)
    return n - done


def _epoch_steps(arms: list[Arm], step_ms: float | None = None) -> int | None:
    """The batches of an epoch where every arm's loader has one of at most
    :data:`WHOLE_EPOCH_MAX`, or one that takes at most :data:`WHOLE_EPOCH_S` at
    ``step_ms``; else None. Such a loop is timed in whole epochs, each from ``iter()`` to
    its last batch: workers that are not persistent restart at every epoch and finish its
    batches early (the last steps take them from the queue, fast), and for some tens of
    steps after a fork the training process pays for the pages it shares with the new
    workers, so a block of a few steps would time whichever part of that cycle it fell on
    (all of a few rounds' blocks can fall in one epoch's first steps), and its restart now
    and then. An epoch's end shuts the workers down, so none works while the other arm is
    timed."""
    got = set()
    for a in arms:
        try:
            got.add(len(a.loader))
        except TypeError:  # no loader, or an iterable one
            return None
    n = got.pop() if len(got) == 1 else None
    if n is None or n <= 0:
        return None
    short = n <= WHOLE_EPOCH_MAX or (step_ms is not None and n * step_ms <= WHOLE_EPOCH_S * 1e3)
    return n if short else None


def _time_epochs(job: dict[str, Any], arms: list[Arm], rounds: int, n: int
                 ) -> list[list[float]]:
    """Mean step (ms) of each arm per round over one whole epoch of ``n`` batches (its
    start and end included), the arms' epochs interleaved after one untimed epoch each,
    in turns (:func:`_turns`)."""
    out: list[list[float]] = [[] for _ in arms]
    for r in range(rounds + 1):
        for i in _turns(len(arms), r):
            a = arms[i]
            with _settings(job, a):
                _sync(job)
                t0 = time.perf_counter()
                for batch in a.loader:
                    _step(job, batch, a.cfg)
                _sync(job)
                if r:
                    out[i].append((time.perf_counter() - t0) / n * 1e3)
    return out


def _turns(n: int, r: int) -> list[int]:
    """The arms' order in round ``r``: forwards, then backwards (A B, B A, ...), so that
    neither arm always runs first, after the other's loader or right after a warm-up."""
    return list(range(n)) if r % 2 == 0 else list(reversed(range(n)))


def time_arms(job: dict[str, Any], arms: list[Arm], rounds: int, steps: int,
              step_ms: float | None = None) -> list[list[float]]:
    """Mean step (ms) of each arm per round, the arms' blocks interleaved in turns
    (:func:`_turns`); each block after a warm-up of 3 steps and the batches the busiest
    arm's workers keep ready. A loader with a short epoch (in batches, or in time at the
    diagnosed ``step_ms``) is timed in whole epochs instead (:func:`_epoch_steps`); a longer
    one that fits :data:`FIRST_EPOCH_S` runs its first epoch untimed (:func:`_first_epoch`)."""
    n = _epoch_steps(arms, step_ms)
    if n is not None:
        return _time_epochs(job, arms, rounds, n)
    its = [_batches(job, a) for a in arms]
    out: list[list[float]] = [[] for _ in arms]
    warm = 3 + max(_ready(a) for a in arms)
    try:
        for a, it in zip(arms, its, strict=True):
            with _settings(job, a):
                _first_epoch(job, a, it, 0, step_ms)
        for r in range(rounds):
            for i in _turns(len(arms), r):
                a = arms[i]
                with _settings(job, a):
                    t0 = 0.0
                    for k in range(warm + steps):
                        if k == warm:
                            _sync(job)
                            t0 = time.perf_counter()
                        _step(job, next(its[i]), a.cfg)
                    _sync(job)
                    out[i].append((time.perf_counter() - t0) / steps * 1e3)
    finally:
        for it in its:
            getattr(it, "close", lambda: None)()  # a job without a loader: any iterator
    return out


def time_apart(name: str, change: dict[str, Any], rounds: int) -> list[list[float]]:
    """Each arm in processes of its own, alternating (predict_vs_measured's reasons)."""
    out: list[list[float]] = [[], []]
    arms = ({}, change)
    for r in range(rounds):
        for arm in ((0, 1) if r % 2 == 0 else (1, 0)):
            done = subprocess.run([sys.executable, __file__, "--apart", name,
                                   json.dumps(arms[arm])],
                                  capture_output=True, text=True, check=True)
            out[arm].append(float(done.stdout.split()[-1]))
    return out


def _apart(name: str, change: dict[str, Any]) -> None:
    """One process of :func:`time_apart`: prints its mean step (ms). A warm-up of 10 steps
    and the batches the workers keep ready; then, where the loader's epoch is short
    (:func:`_epoch_steps`, at the warm-up's step), one untimed epoch and whole epochs
    timed, at least ``APART_STEPS`` steps (so that the restarts of workers that are not
    persistent, and the steps after them, count as often as in the job); else
    ``APART_STEPS`` steps after the warm-up, past the first epoch where it fits
    :data:`FIRST_EPOCH_S` (:func:`_first_epoch`; then the warm-up again at the second's
    start)."""
    job = make(name)
    a = make_arm(job, change)
    warm = 10 + _ready(a)
    it = _batches(job, a)
    with _settings(job, a):
        t0 = time.perf_counter()
        for _ in range(warm):
            _step(job, next(it), a.cfg)
        _sync(job)
        step_ms = (time.perf_counter() - t0) / warm * 1e3
        n = None if a.loader is None else _epoch_steps([a], step_ms)
        if n is None and _first_epoch(job, a, it, warm, step_ms):
            for _ in range(warm):  # the next epoch's start, as the first's was
                _step(job, next(it), a.cfg)
        if n is not None:
            getattr(it, "close", lambda: None)()
            epochs = 1 + -(-pvm.APART_STEPS // n)
            for e in range(epochs):
                if e == 1:
                    _sync(job)
                    t0 = time.perf_counter()
                for batch in a.loader:
                    _step(job, batch, a.cfg)
            _sync(job)
            print(f"{(time.perf_counter() - t0) / ((epochs - 1) * n) * 1e3:.4f}")
            return
        for k in range(warm + pvm.APART_STEPS):
            if k == warm:
                _sync(job)
                t0 = time.perf_counter()
            _step(job, next(it), a.cfg)
        _sync(job)
    print(f"{(time.perf_counter() - t0) / pvm.APART_STEPS * 1e3:.4f}")


# ------------------------------------------------------------------ the table
@dataclass
class Tally:
    findings: int = 0
    predicted: int = 0
    rows: int = 0
    within: int = 0
    inside: int = 0
    ranged: int = 0
    slower: int = 0
    fixes: str = "first fixes"  # what the rows time (--every-fix: "fixes")
    # each printed range's half-width over its point (issue 48's goal: a median of 15%)
    widths: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        def pct(a: int, b: int) -> str:
            return f"{a} of {b}" + (f" ({100 * a / b:.0f}%)" if b else "")

        return [f"predictions within 15% of the measured speedup: {pct(self.within, self.rows)}",
                f"measured speedup inside the predicted range:    {pct(self.inside, self.ranged)}"
                + (f", median half-width {statistics.median(self.widths):.0%}"
                   if self.widths else ""),
                f"{self.fixes + ' more than 5% slower:':<48} {pct(self.slower, self.rows)}",
                f"warning/critical findings with a prediction:     "
                f"{pct(self.predicted, self.findings)}"]


HEAD = (f"{'job':<40} {'finding':<8} {'first fix':<14} {'change':<36} "
        f"{'predicted [range]':>21} {'measured [95% CI]':>21} {'error':>6}  inside"
        f"  {'(ms: before -> after)':<24} corpus")


def _fmt_range(pred: dict[str, Any]) -> tuple[str, tuple[float, float] | None]:
    rng = pred.get("range")
    base = pred["step_ms"] * pred["speedup"]  # the diagnosis' own base step
    if not rng or len(rng) != 2 or not rng[0] > 0 or not rng[1] > 0:
        return f"{pred['speedup']:.2f}x", None
    lo, hi = base / rng[1], base / rng[0]
    return f"{pred['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]", (lo, hi)


class _OutOfTime(Exception):
    pass


def _out_of_time(signum: int, frame: Any) -> None:
    raise _OutOfTime


def run_job(name: str, args: argparse.Namespace, tallies: list[Tally]) -> None:
    """The job's rows; each is counted in every tally of ``tallies`` (the half's, the
    corpus' within the half). With ``--job-seconds`` a job still running then is stopped
    (a line says so; the rows it printed stay counted): a lent device's time is short."""
    label = load_corpora().where[name]
    tally = Tally()
    if args.job_seconds:
        signal.signal(signal.SIGALRM, _out_of_time)
        signal.alarm(args.job_seconds)
    try:
        _rows(name, args, tally, label)
    except _OutOfTime:
        print(f"{name:<40} stopped after {args.job_seconds} s (--job-seconds)  {label}")
    except Exception as e:  # noqa: BLE001 - one job's failure is a line of the table
        first = (str(e).splitlines() or [""])[0][:120]
        print(f"{name:<40} failed: {type(e).__name__}: {first}  {label}")
    finally:
        signal.alarm(0)
        for t in tallies:
            for f in ("findings", "predicted", "rows", "within", "inside", "ranged", "slower"):
                setattr(t, f, getattr(t, f) + getattr(tally, f))
            t.widths += tally.widths


#: a baseline arm whose mean step lies this far (a ratio) from the diagnosis' unprofiled
#: step was timed on a host busier or quieter than the diagnosis saw: the row says so
BUSY_RATIO = 1.5


def _busy_note(report: dict[str, Any], base_ms: list[float]) -> str:
    """"  (baseline 93.8 ms against the diagnosis' 43.8: ...)" where the baseline arm's mean
    step is :data:`BUSY_RATIO` or more from the diagnosis' own unprofiled step, else ""."""
    m = report.get("metrics", {})
    diag = m.get("step_time_unprofiled_mean_ms") or m.get("step_time_unprofiled_median_ms")
    if not isinstance(diag, int | float) or diag <= 0 or not base_ms:
        return ""
    base = statistics.fmean(base_ms)
    ratio = base / diag
    if 1 / BUSY_RATIO < ratio < BUSY_RATIO:
        return ""
    return (f"  (baseline {base:.1f} ms against the diagnosis' {diag:.1f} ms: the host's "
            "load moved, or the timing is of other steps)")


def _rows(name: str, args: argparse.Namespace, tally: Tally, label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(args.keep / name) if args.keep else tmp
        report = diagnose_job(make(name), out)
    if args.keep:
        (args.keep / name / "report.json").write_text(json.dumps(report))
    serious = [f for f in report["findings"] if f["severity"] in ("warning", "critical")]
    for f in serious:
        if f.get("fixes") and first_offered(f) is None:
            print(f"{name:<40} {f['rule']:<8} no fix offered: every fix is predicted to "
                  f"slow the job  {label}")
    firsts = [(f["rule"], fix) for f in serious if (fix := first_offered(f)) is not None]
    tally.findings += len(firsts)
    tally.predicted += sum(bool(fix.get("predicted")) for _, fix in firsts)
    if not firsts:
        print(f"{name:<40} no warning or critical finding with a fix  {label}")
        return
    # --every-fix: each offered fix of a finding (a lent GPU's rows: AMP, pinning, ...)
    tried = ([(f["rule"], fix) for f in serious for fix in offered_fixes(f)]
             if args.every_fix else firsts)
    # a compile last: its compiling may outlast --job-seconds
    tried.sort(key=lambda rf: bool((rf[1].get("predicted") or {}).get("change", {}).get("compile")))
    timed: dict[frozenset[tuple[str, Any]], tuple[str, list[list[float]]]] = {}
    for rule, fix in tried:
        pred = fix.get("predicted")
        if not pred:
            print(f"{name:<40} {rule:<8} {fix['id']:<14} no prediction: "
                  f"{fix.get('predicted_why')}  {label}")
            continue
        change = pred["change"]
        if not change:  # a change to the code (a CUDA graph, a sync taken out): no setting
            print(f"{name:<40} {rule:<8} {fix['id']:<14} not timed here: a change to the "
                  f"code, no setting  {label}")
            continue
        job = make(name)
        untimed = set(change) - TIMED
        if job["loader"] is None:
            untimed |= set(change) & LOADER_FIELDS
        ch = ", ".join(f"{k}={v}" for k, v in change.items())
        if untimed:
            print(f"{name:<40} {rule:<8} {fix['id']:<14} {ch:<36} not timed here: "
                  f"{', '.join(sorted(untimed))}  {label}")
            continue
        key = frozenset(change.items())
        again = timed.get(key)
        if again is not None:  # another finding's first fix, the same change: timed once
            del job
            times = again[1]
        else:
            full = report.get("metrics", {}).get("gc_pause_full_ms")
            if set(change) == {"gc_freeze"} or (full or 0) > 0:
                del job
                times = time_apart(name, change, max(4, args.rounds // 2))
            else:
                times = time_arms(job, [make_arm(job, {}), make_arm(job, change)],
                                  args.rounds, args.steps,
                                  pred["step_ms"] * pred["speedup"])
            timed[key] = (rule, times)
        sp, lo, hi = pvm._ratio_ci(times[0], times[1])
        err = sp / pred["speedup"]
        said, rng = _fmt_range(pred)
        inside = None if rng is None else rng[0] <= sp <= rng[1]
        if again is None:  # a change counts once in the tallies, however many name it
            tally.rows += 1
            tally.within += 0.85 <= err <= 1.15
            tally.ranged += inside is not None
            tally.inside += bool(inside)
            tally.slower += sp < 0.95
            if rng is not None:
                tally.widths.append((rng[1] - rng[0]) / 2 / pred["speedup"])
        print(f"{name:<40} {rule:<8} {fix['id']:<14} {ch:<36} {said:>21} "
              f"{f'{sp:.2f}x [{lo:.2f}, {hi:.2f}]':>21} {err:6.2f}  "
              f"{'-' if inside is None else 'yes' if inside else 'no'}"
              f"  {f'({statistics.fmean(times[0]):.1f} -> {statistics.fmean(times[1]):.1f} ms)':<24}"
              f" {label}{_busy_note(report, times[0])}"
              f"{f'  (timed for {again[0]}: counted once)' if again is not None else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="*", help="corpus job names (default: every job in the half)")
    ap.add_argument("--half", choices=("tune", "validate", "all"), default="all")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--every-fix", action="store_true",
                    help="time every offered fix of a finding, not only its first")
    ap.add_argument("--job-seconds", type=int, default=0, metavar="S",
                    help="stop a job still running after S seconds (default: no limit)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep each job's diagnosis (its run folder) under DIR/<job>")
    ap.add_argument("--apart", nargs=2, metavar=("JOB", "CHANGE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    corpora = load_corpus()
    warnings.filterwarnings("ignore")  # the jobs' own (e.g. "4 workers on 2 CPUs")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if args.apart:
        _apart(args.apart[0], json.loads(args.apart[1]))
        return 0
    unknown = set(args.jobs) - set(corpora.names())
    if unknown:
        ap.error(f"not in the corpus: {', '.join(sorted(unknown))}")
    halves = corpora.split(args.jobs or None)
    print_header("the corpus' first fixes, predicted and timed without the profiler",
                 "corpus_predict.py")
    for label, pkg in corpora.packages.items():
        where = Path(pkg.__file__).resolve().parent
        shown = where.relative_to(HERE.parent) if where.is_relative_to(HERE.parent) else where
        print(f"# corpus {label}: {shown} ({len(pkg.names())} jobs)")
    print()
    for half in ("tune", "validate"):
        if args.half not in ("all", half) or not halves[half]:
            continue
        print(f"## {half} half ({len(halves[half])} jobs)")
        print(HEAD)
        print("-" * len(HEAD))
        what = "fixes" if args.every_fix else "first fixes"
        tally = Tally(fixes=what)
        by_corpus = {label: Tally(fixes=what) for label in corpora.packages}
        for name in halves[half]:
            run_job(name, args, [tally, by_corpus[corpora.where[name]]])
        print()
        for line in tally.lines():
            print(f"{half}: {line}")
        used = [label for label in by_corpus if any(corpora.where[n] == label
                                                    for n in halves[half])]
        if len(used) > 1:
            for label in used:
                for line in by_corpus[label].lines():
                    print(f"{half} ({label}): {line}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
