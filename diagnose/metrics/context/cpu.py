"""The CPUs and the model's threads, from the probes after the loop
(diagnose.capture.probes): how many CPUs' worth of work the CPUs gave at once, what one
thread costs the model's ops (Amdahl; the loop's own one-thread steps where it ran them:
:mod:`.loop_threads`), and how much slower the loop's forward ran than the same forward
alone."""

from __future__ import annotations

from typing import Any

from ...values import as_number

CATALOG: dict[str, tuple[str, str]] = {
    "cpu_capacity": (
        "CPUs", "CPUs' worth of work the usable CPUs did at once, timed before the loop (a "
        "Python loop's) and after it: one "
        "worker-like process per CPU making the loader's batches against one alone (a "
        "Python loop where batches cannot be made so) and a Python loop's, the most of the "
        "timings the probes' budget allowed (a Python loop's: the median of its rounds' "
        "ratios, each round one process alone then all at once, ms apart); under cpu_count "
        "where CPUs share a core (SMT siblings) or the host is busy"),
    "cpu_capacity_min": (
        "CPUs", "the least of the CPUs' capacity timings before and after the loop (and the "
        "first quartile of a Python loop's rounds): the predictions that move CPU work are "
        "made there too (their range's slow end)"),
    "cpu_capacity_max": ("CPUs", "the most of the CPUs' capacity timings before and after "
                         "the loop (and the third quartile of a Python loop's rounds)"),
    "host_pace_ms": (
        "ms", "the host's own pace: a fixed Python loop's time on one CPU alone, the median "
        "of the capacity timing's rounds as the loop began (a DataLoader's run on 2+ CPUs); "
        "captures of one job whose rounds lie apart ran on a host whose speed moved, and "
        "compare says so"),
    "host_pace_min_ms": ("ms", "the least of those rounds"),
    "host_pace_max_ms": ("ms", "the most of those rounds"),
    "forward_quiet_ms": (
        "ms", "one forward on the first batch, on torch's threads, timed after the loop "
        "(nothing else running; CPU models with more than one thread only)"),
    "model_work_quiet_ms": (
        "ms", "the same batch's forward and backward on torch's threads, after the loop"),
    "model_work_one_thread_ms": (
        "ms", "the same forward and backward on one intra-op thread"),
    "threads_one_thread_ratio": (
        "ratio", "what one thread costs against torch's threads: the loop's own steps on "
        "one thread where the session ran at least 3 (threads_loop_ratio: the whole work of "
        "a step less its wait for a batch), else model_work_one_thread_ms / "
        "model_work_quiet_ms (the model's ops alone; 1.0: they do not scale with threads; "
        "of two timings seconds apart, their ratios' geometric mean; where those disagree by "
        "15% or more, of the two of three that agree)"),
    "threads_noise_rel": (
        "ratio", "the relative noise of the thread timing threads_one_thread_ratio comes "
        "from (the loop's: threads_loop_noise_rel; after the loop: the standard error of its "
        "rounds' medians, and with two timings at least half "
        "the log of their ratios' ratio): high where something else held a CPU while it "
        "ran; the predictions that read the ratio are made at both its ends"),
    "threads_one_thread_ratio_min": (
        "ratio", "the least of threads_one_thread_ratio over the thread timings made seconds "
        "apart after the loop (a busier moment: one thread costs less against torch's "
        "threads); the threads split's predictions are made there too (their range)"),
    "threads_busy_ratio_1": (
        "ratio", "the model's forward and backward on torch's threads beside one busy process "
        "more than the CPUs those threads leave, over the same work alone (contexts saved "
        "by earlier versions; now null: the predictions read the sharing rule)"),
    "threads_busy_ratio_2": (
        "ratio", "the same beside two busy processes more than the CPUs torch's threads "
        "leave (contexts saved before one busy set was timed; now null: more busy processes "
        "are taken as one more)"),
    "threads_busy_noise_rel": (
        "ratio", "the relative noise (standard error of the median) of the busy timings' "
        "rounds (saved contexts only, as threads_busy_ratio_1)"),
    "forward_contention": (
        "ratio", "forward_unprofiled_mean_ms (else forward_unprofiled_ms, a clock without "
        "epoch marks) / forward_quiet_ms: how much slower the loop's forward ran than the "
        "same forward alone (workers or other processes on the cores), over the steady "
        "steps on average; where the steps made several forward calls "
        "(forward_calls_unprofiled: a GAN's), the loop's mean call over the quiet forward of "
        "a call in the loop's mix of models (each timed alone on its first inputs, weighted "
        "by its calls), only where every call had its model's first input shapes"),
    "backward_contention": (
        "ratio", "backward_unprofiled_mean_ms / (model_work_quiet_ms - forward_quiet_ms): how "
        "much slower the loop's backward ran than the same backward alone, over the steady "
        "steps on average; where the steps made several forward calls (a GAN's), over "
        "forward_calls_unprofiled times the quiet backward of a call in the loop's mix "
        "(each model's backward alone on its first inputs, weighted by the calls a "
        "backward went through), only where every call had its model's first input shapes"),
    "threads_one_thread_loop_ratio": (
        "ratio", "threads_one_thread_ratio as the loop's own ops ran: the model's work on one "
        "thread, at the pace the CPUs other processes left give one thread (a CPU, else the "
        "share of one they left: step_others_cpus_unprofiled, at most the loop's own "
        "contention), over its work on torch's threads at the loop's pace "
        "(forward_contention, where above 1; at most 1, threads_one_thread_ratio itself); "
        "what one thread saves of the loop's ops where other processes held CPUs (CF008); "
        "None where the contention was not measured or no CPU was left"),
    "threads_spin_ms": (
        "ms", "the CPU time one of torch's idle intra-op threads spins after a parallel op "
        "before it sleeps (GNU OpenMP's spin-wait; near 0 with OMP_WAIT_POLICY=PASSIVE): "
        "the median over a few rounds of the process's CPU time in a sleep just after an "
        "op, per pool thread; timed after the loop, for a CPU model with a DataLoader on "
        "two threads or more; beside busy workers these spins hold CPUs the workers need"),
    "optimizer_quiet_ms": (
        "ms", "the loop's optimizers' step() timed alone after the loop on copies of their "
        "parameters, gradients and state, on torch's threads (median of its rounds; where "
        "workers shared the CPUs with a CPU model): optimizer_unprofiled_ms over it is the "
        "optimizer's own contention"),
    "optimizer_values_outside_models": (
        "count", "parameter values stepped by optimizers that hold none of the models given "
        "to diagnose() (an autoencoder's decoder, a GAN's other model; 0: every optimizer's "
        "were the models'): the step's work is more than the models' work timed alone"),
}


def cpu_metrics(ctx: dict[str, Any], m: dict[str, object]) -> dict[str, object]:
    """The :data:`CATALOG` names; ``m`` holds the step clock's metrics (the loop's
    forward)."""
    out: dict[str, object] = {}
    out["cpu_capacity"] = as_number(ctx.get("cpu_capacity"))
    span = ctx.get("cpu_capacity_span")
    lo, hi = span if isinstance(span, list | tuple) and len(span) == 2 else (None, None)
    out["cpu_capacity_min"], out["cpu_capacity_max"] = as_number(lo), as_number(hi)
    pace = ctx.get("cpu_pace_ms")
    got = [as_number(x) for x in pace] if isinstance(pace, list) and len(pace) == 3 else []
    ok = len(got) == 3 and all(x is not None and x > 0 for x in got)
    for k, x in zip(("host_pace_ms", "host_pace_min_ms", "host_pace_max_ms"),
                    got if ok else [None] * 3, strict=True):
        out[k] = x
    out.update(_forward_metrics(m, ctx.get("threads")))
    out["threads_one_thread_loop_ratio"] = _one_thread_in_loop(out, m)
    out["optimizer_values_outside_models"] = _outside_values(ctx)
    spin = as_number(ctx.get("threads_spin_ms"))
    out["threads_spin_ms"] = spin if spin is not None and spin >= 0 else None
    opt = ctx.get("optimizer_quiet")
    quiet = as_number(opt.get("step_ms")) if isinstance(opt, dict) else None
    out["optimizer_quiet_ms"] = quiet if quiet is not None and quiet > 0 else None
    threads = ctx.get("threads_span")
    least = (as_number(threads[0]) if isinstance(threads, list | tuple) and len(threads) == 2
             else None)
    ratio = out.get("threads_one_thread_ratio")
    out["threads_one_thread_ratio_min"] = (
        least if least is not None and isinstance(ratio, float) and least < ratio else None)
    loop = as_number(m.get("threads_loop_ratio"))
    if loop is not None and loop > 0:  # the loop's own steps: the change itself, paired
        out.update(threads_one_thread_ratio=loop, threads_one_thread_ratio_min=None,
                   threads_noise_rel=as_number(m.get("threads_loop_noise_rel")))
    busy = ctx.get("threads_busy")
    ratios = busy.get("busy_ratio") if isinstance(busy, dict) else None
    for e in ("1", "2"):
        v = as_number(ratios.get(e)) if isinstance(ratios, dict) else None
        out[f"threads_busy_ratio_{e}"] = v if v is not None and v > 0 else None
    noise = as_number(busy.get("noise")) if isinstance(busy, dict) else None
    out["threads_busy_noise_rel"] = noise if noise is not None and noise >= 0 else None
    return out


def _outside_values(ctx: dict[str, Any]) -> int | None:
    """The parameter values of the optimizers the capture saw step no model given
    (``capture.step_signals.other_optimizers``); None where the capture did not say."""
    cap = ctx.get("capture")
    sig = cap.get("step_signals") if isinstance(cap, dict) else None
    others = sig.get("other_optimizers") if isinstance(sig, dict) else None
    if not isinstance(others, list):
        return None
    got = [as_number(o.get("values")) if isinstance(o, dict) else None for o in others]
    return None if any(v is None for v in got) else int(sum(v or 0 for v in got))


def _one_thread_in_loop(out: dict[str, object], m: dict[str, object]) -> float | None:
    """``threads_one_thread_loop_ratio``: where the loop's ops ran slower than timed alone
    (forward contention c above 1: a load the quiet timing did not meet), the quiet ratio
    of one thread's work to torch's threads' at one thread's pace beside the other
    processes (1 where they left a CPU or more, 1 / the share of one otherwise, at most c:
    the load the loop met) over c; the quiet ratio itself where c is at most 1 (the timing
    met the same load as the loop)."""
    ratio, c = as_number(out.get("threads_one_thread_ratio")), as_number(
        out.get("forward_contention"))
    n, others = as_number(m.get("cpu_count")), as_number(m.get("step_others_cpus_unprofiled"))
    if ratio is None or c is None:
        return None
    if c <= 1:
        return ratio
    left = n - others if n is not None and others is not None else None
    if left is not None and left <= 0:
        return None
    pace = min(1.0 / left, c) if left is not None and left < 1 else 1.0
    return round(ratio * pace / c, 4)


def _forward_metrics(m: dict[str, object], th: Any) -> dict[str, object]:
    """The forward's thread scaling and contention (diagnose.capture.probes.compute)."""
    out: dict[str, object] = {}
    if not isinstance(th, dict):
        return out
    quiet = as_number(th.get("forward_ms"), finite=False)
    work = as_number(th.get("work_ms"), finite=False)
    one = as_number(th.get("work_1thread_ms"), finite=False)
    out["forward_quiet_ms"], out["model_work_quiet_ms"] = quiet, work
    out["model_work_one_thread_ms"] = one
    if work and work > 0 and one is not None:
        out["threads_one_thread_ratio"] = round(one / work, 4)
    noise = as_number(th.get("noise"))
    out["threads_noise_rel"] = noise if noise is not None and noise >= 0 else None
    calls = m.get("forward_calls_unprofiled")
    per_call = as_number(th.get("forward_per_call_ms"), finite=False)
    loop = as_number(m.get("forward_unprofiled_mean_ms"), finite=False)
    if loop is None:
        loop = as_number(m.get("forward_unprofiled_ms"), finite=False)
    if loop is None or not isinstance(calls, int) or isinstance(calls, bool):
        return out
    if quiet and quiet > 0 and calls == 1:
        # the quiet timing is one forward: set beside a loop that made one a step, as the
        # steady steps' mean (the mean step is what the predictions start from)
        out["forward_contention"] = round(loop / quiet, 4)
        back = as_number(m.get("backward_unprofiled_mean_ms"), finite=False)
        if back is not None and work is not None and work > quiet:
            out["backward_contention"] = round(back / (work - quiet), 4)
    elif calls > 1 and per_call and per_call > 0:
        # several calls a step (a GAN's discriminator three times, its generator once):
        # the loop's mean call against the quiet forward of a call made in that mix
        out["forward_contention"] = round(loop / calls / per_call, 4)
        back = as_number(m.get("backward_unprofiled_mean_ms"), finite=False)
        quiet_back = as_number(th.get("backward_per_call_ms"), finite=False)
        if back is not None and quiet_back and quiet_back > 0:
            out["backward_contention"] = round(back / (calls * quiet_back), 4)
    return out
