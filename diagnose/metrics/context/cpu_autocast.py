"""A CPU model's autocast, from the probe after the loop
(diagnose.capture.probes.precision): the first batch's forward and backward under the
loop's CPU autocast against the same work in fp32, and what that difference costs a step:
the work as the loop ran it (the quiet work scaled by the loop's forward over the quiet
forward, on the session's clock), less that work at the fp32 timing's ratio."""

from __future__ import annotations

from typing import Any

from ...values import as_number

CATALOG: dict[str, tuple[str, str]] = {
    "cpu_autocast_dtype": (
        "name", "the dtype of the CPU autocast the loop's forward ran under (bfloat16, "
        "float16); None: none, or not a live capture of a CPU model"),
    "cpu_autocast_native": (
        "bool", "the CPU computes in that dtype (oneDNN's check: AVX512-BF16 or AMX for "
        "bfloat16, AVX512-FP16 or AMX-FP16 for float16); False: it is emulated"),
    "cpu_capability": (
        "name", "the vector instructions torch's CPU kernels use on this machine "
        "(torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...)"),
    "cpu_autocast_work_ms": (
        "ms", "the first batch's forward and backward under that autocast, timed after the "
        "loop on torch's threads (the median of rounds alternating with fp32)"),
    "cpu_autocast_fp32_work_ms": (
        "ms", "the same work without autocast (fp32), in the same rounds"),
    "cpu_autocast_ratio": (
        "ratio", "what autocast costs the model's work: the median of the rounds' autocast / "
        "fp32 (above 1: fp32 is faster on this CPU)"),
    "cpu_autocast_noise_rel": (
        "ratio", "the relative noise (standard error of the median) of those rounds' "
        "ratios"),
    "cpu_autocast_loop_work_ms": (
        "ms", "the model's work under autocast per unprofiled step as the loop ran it: "
        "cpu_autocast_work_ms x the loop's forward (forward_unprofiled_ms) over the same "
        "forward timed after the loop (the backward taken to slow with the forward; where "
        "the loop's forward was not timed, cpu_autocast_work_ms x the forward calls a step "
        "made, one where not timed)"),
    "cpu_autocast_saving_ms": (
        "ms", "what fp32 would take off each unprofiled step: cpu_autocast_loop_work_ms x "
        "(1 - 1 / cpu_autocast_ratio), at most the step"),
    "cpu_autocast_saving_frac": (
        "fraction", "cpu_autocast_saving_ms over the unprofiled step "
        "(step_time_unprofiled_mean_ms)"),
}


def cpu_autocast_metrics(ctx: dict[str, Any], m: dict[str, object]) -> dict[str, object]:
    """The :data:`CATALOG` names from ``ctx["cpu_autocast"]``; ``m`` holds the step
    clock's metrics (the unprofiled step, its forward calls). All None where the probe did
    not run."""
    out: dict[str, object] = dict.fromkeys(CATALOG)
    got = ctx.get("cpu_autocast")
    if not isinstance(got, dict):
        return out
    dtype, cap = got.get("dtype"), got.get("capability")
    out["cpu_autocast_dtype"] = dtype if isinstance(dtype, str) else None
    out["cpu_capability"] = cap if isinstance(cap, str) else None
    native = got.get("native")
    out["cpu_autocast_native"] = native if isinstance(native, bool) else None
    work, fp32 = as_number(got.get("work_ms")), as_number(got.get("work_fp32_ms"))
    ratio, noise = as_number(got.get("ratio")), as_number(got.get("noise"))
    if work is None or fp32 is None or work <= 0 or fp32 <= 0 or ratio is None or ratio <= 0:
        return out
    out["cpu_autocast_work_ms"], out["cpu_autocast_fp32_work_ms"] = work, fp32
    out["cpu_autocast_ratio"] = ratio
    out["cpu_autocast_noise_rel"] = noise if noise is not None and noise >= 0 else None
    calls = as_number(m.get("forward_calls_unprofiled"))
    step = as_number(m.get("step_time_unprofiled_mean_ms"))
    loop, quiet = as_number(m.get("forward_unprofiled_ms")), as_number(got.get("forward_ms"))
    loop_work = (work * loop / quiet if loop is not None and loop > 0 and quiet
                 and quiet > 0 else work * (calls if calls and calls > 0 else 1.0))
    out["cpu_autocast_loop_work_ms"] = round(loop_work, 4)
    saving = max(loop_work * (1.0 - 1.0 / ratio), 0.0)
    if step is not None and step > 0:
        saving = min(saving, step)
        out["cpu_autocast_saving_frac"] = round(saving / step, 4)
    out["cpu_autocast_saving_ms"] = round(saving, 4)
    return out
