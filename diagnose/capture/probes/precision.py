"""The model's work under the loop's CPU autocast against the same work in fp32.

Autocast to bfloat16 or float16 on the CPU pays only where the CPU computes in that
precision (AVX512-BF16, AMX); elsewhere oneDNN and ATen emulate it, converting each
operand, and the model's ops run slower than in fp32. Which way it goes is not read from
the CPU's flags but timed: the first batch's forward and backward, as the loop ran them
(:func:`~.compute.models_work`), alternately under the recorded autocast and without it,
on torch's threads as they are. The ratio of each round's pair is the measure (a round's
two works share the host's moment); their median is the point, its standard error the
noise. Nothing of the run changes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from ...stepmodel.calibration import THREADS_NOISE_MAX
from .common import SLOW_S, cannot_afford, median_noise, out_of_time, settled, timed
from .compute import ROUNDS, Inputs, cpu_pairs, models_work, on_cpu, recorded_autocast

#: rounds of (under autocast, in fp32) after a warm-up round of each: ROUNDS at least, then
#: more, up to MAX_ROUNDS within ROUNDS_S seconds in all, until both medians are settled
MAX_ROUNDS = 20
ROUNDS_S = 0.3


def cpu_autocast(model: Any) -> str | None:
    """The dtype's name ("bfloat16", "float16") of the CPU autocast the loop's first
    forward of ``model`` ran under (:class:`~.compute.ForwardTimer` records it), else
    None."""
    for dev, dtype in recorded_autocast(model):
        if dev == "cpu":
            return str(dtype).removeprefix("torch.")
    return None


def cpu_native(dtype: str) -> bool | None:
    """Does this CPU compute in ``dtype`` (oneDNN's own check: AVX512-BF16 or AMX for
    bfloat16, AVX512-FP16 or AMX-FP16 for float16)? None where torch cannot say."""
    import torch

    ask = {"bfloat16": "_is_mkldnn_bf16_supported",
           "float16": "_is_mkldnn_fp16_supported"}.get(dtype)
    try:
        return bool(getattr(torch.ops.mkldnn, ask)()) if ask else None
    except (AttributeError, RuntimeError):
        return None


def cpu_capability() -> str | None:
    """The vector instructions torch's CPU kernels use here ("AVX2", "AVX512", ...)."""
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return None


@timed("cpu_autocast")
def time_autocast(model: Any, inputs: Inputs | None,
                  others: Sequence[tuple[Any, Inputs]] = ()) -> dict[str, Any] | None:
    """The model's work on ``inputs`` under the loop's CPU autocast and in fp32 (module
    doc): ``work_ms`` and ``work_fp32_ms`` (medians; ``forward_ms``: the forward within the
    work under autocast, to set beside the loop's own), ``ratio`` (the median of the rounds'
    autocast / fp32), ``noise`` (the relative standard error of that median; one round:
    the most a prediction reads), the dtype, whether the CPU computes in it, and its
    vector instructions. ``others``: the loop's other models with their first inputs, in
    the same work. None where the loop's forward ran under no CPU autocast, or on no CPU
    model."""
    if inputs is None or model is None or not on_cpu(model):
        return None
    dtype = cpu_autocast(model)
    if dtype is None:
        return None
    pairs = cpu_pairs(model, inputs, others)
    cast: list[float] = []
    plain: list[float] = []
    forward: list[float] = []
    start = time.perf_counter()
    with models_work(pairs) as (fwd, under), models_work(pairs, cast=False) as (_, fp32):
        for k in range(MAX_ROUNDS + 1):
            if k > ROUNDS and (time.perf_counter() - start > ROUNDS_S or out_of_time()
                               or settled(cast, plain)):
                break
            t0 = time.perf_counter()
            cast.append(under())
            forward.append(fwd())
            plain.append(fp32())
            round_s = time.perf_counter() - t0
            if round_s > 3 * SLOW_S:
                break  # a work too slow for more rounds: its one round is the timing
            if k == 0:  # the first round warms both up, and measures a round
                for v in (cast, forward, plain):
                    v.clear()
                if cannot_afford(round_s, ROUNDS):
                    return None
    if not cast:
        return None
    ratios = [a / b for a, b in zip(cast, plain, strict=True) if b > 0]
    noise = median_noise(ratios) if len(ratios) > 1 else None
    return {"dtype": dtype, "work_ms": round(statistics.median(cast) * 1e3, 4),
            "forward_ms": round(statistics.median(forward) * 1e3, 4),
            "work_fp32_ms": round(statistics.median(plain) * 1e3, 4),
            "ratio": round(statistics.median(ratios), 4) if ratios else None,
            "rounds": len(cast), "noise": THREADS_NOISE_MAX if noise is None else noise,
            "native": cpu_native(dtype), "capability": cpu_capability()}
