"""GEMM/convolution precision from kernel names, and what AMP could save on this GPU."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..trace import Trace
from .declare import DEVICE_PROPERTIES, GPU, KERNEL_NAMES, NVIDIA, Metric, rnd

#: a convolution's kernel (forward or backward) by its name
CONV_KERNEL = re.compile(r"scudnn|hcudnn|implicit_convolve|winograd|convolve|_fprop|wgrad|dgrad|conv2d|conv_|"
                   r"cudnn_.*(conv|infer|train)", re.IGNORECASE)
_GEMM = re.compile(
    r"gemm|gemv|cutlass|xmma|nvjet|cublas|scudnn|hcudnn|implicit_convolve|winograd|"
    r"convolve|_fprop|wgrad|dgrad|conv2d|conv_|cudnn_.*(conv|infer|train)",
    re.IGNORECASE,
)
_FP32_SIMT = re.compile(
    r"sgemm|scudnn|_simt_|implicit_convolve_sgemm|<float, float|<float,\s*float|_ffma_|f32f32_f32f32_f32|"
    r"winograd.*<float|wgrad_alg\d_engine<float|dgrad_engine<float|gemv2T_kernel_val<int, int, float",
    re.IGNORECASE,
)
_TENSOR_CORE = re.compile(
    r"h884|h1688|h16816|s1688|s16816|i8816|i16832|hmma|imma|tensorop|tf32|bf16|f16|fp16|"
    r"xmma|gmma|nvjet|sm\d\d_|hgemm|_h\d{3,}|884|1688|16816|bgemm",
    re.IGNORECASE,
)

# Tensor cores vs fp32 SIMT, peak dense throughput ratio by CUDA compute capability, from
# NVIDIA's datasheets (fp16/bf16 tensor-core FLOP/s with fp32 accumulation / fp32 FLOP/s):
# V100 125/15.7, T4 65/8.1, A100 312/19.5, A10 125/31.2 (GeForce/L40 parts lower: ~2),
# H100 SXM 989/67. The speedup we expect of AMP for the fp32 GEMM/conv time is half the
# peak ratio, at most 4x: real GEMMs are not all compute-bound (tile shapes, memory).
_TC_PEAK_RATIO = ((9, 14.8), (8.9, 2.0), (8.6, 2.0), (8, 16.0), (7.5, 8.0), (7, 8.0))
TC_SPEEDUP_CAP = 4.0

METRICS = (
    Metric("gemm_kernel_frac", "fraction",
           "GEMM/convolution kernel time / all kernel time", (GPU,)),
    Metric("gemm_fp32_frac", "fraction",
           "Of GEMM/conv time whose precision the kernel name tells: share in fp32 "
           "SIMT kernels (no tensor cores)", (GPU, KERNEL_NAMES)),
    Metric("gemm_tensorcore_frac", "fraction",
           "Of GEMM/conv time whose precision the kernel name tells: share on tensor cores",
           (GPU, KERNEL_NAMES)),
    Metric("gemm_fp32_ms_per_step", "ms", "fp32 SIMT GEMM/conv kernel time per step",
           (GPU, KERNEL_NAMES)),
    Metric("conv_kernel_ms_per_step", "ms", "Convolution kernel time per step (cuDNN, by name)",
           (GPU,)),
    Metric("tensor_core_peak_ratio", "ratio",
           "Peak fp16/bf16 tensor-core vs fp32 SIMT throughput of this GPU (NVIDIA datasheets, "
           "by compute capability)", (GPU, DEVICE_PROPERTIES, NVIDIA)),
    Metric("tensor_core_speedup", "ratio",
           f"Speedup expected of AMP for fp32 GEMM/conv kernels: half the peak ratio, at most "
           f"{TC_SPEEDUP_CAP:g}x (conservative)", (GPU, DEVICE_PROPERTIES, NVIDIA)),
    Metric("gemm_fp32_saving_ms_per_step", "ms",
           "fp32 SIMT GEMM/conv time per step that AMP is expected to save: "
           "gemm_fp32_ms_per_step * (1 - 1/tensor_core_speedup)",
           (GPU, KERNEL_NAMES, DEVICE_PROPERTIES, NVIDIA)),
)


def _name_flags(names: list[str], ids: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Per name id: whether ``pattern`` finds the name, asked only of the names ``ids``
    (the kernels'; a trace's name table is mostly host ops), False for the others."""
    out = np.zeros(len(names), bool)
    out[ids] = np.fromiter((bool(pattern.search(names[i])) for i in ids.tolist()), bool, len(ids))
    return out


def peak_ratio(cc_major: int | None, cc_minor: int | None, tensor_cores: bool | None
               ) -> float | None:
    """Peak tensor-core / fp32 SIMT throughput for a compute capability (None: unknown)."""
    if not tensor_cores or cc_major is None:
        return None
    ccf = cc_major + (cc_minor or 0) / 10
    return next((r for lo, r in _TC_PEAK_RATIO if ccf >= lo), None)


def precision_metrics(t: Trace, kernels: np.ndarray, n_steps: int, has_gpu: bool,
                      device: dict[str, Any]) -> dict[str, Any]:
    """The METRICS above. ``kernels``: the kernels in the window (a mask); ``device``: the
    device metrics (``device_cc_major``, ``device_cc_minor``, ``device_has_tensor_cores``)."""
    names = t.names
    kd_sum = t.dur[kernels].sum()
    if len(names):
        ids = np.unique(t.name_id[kernels])
        is_simt = _name_flags(names, ids, _FP32_SIMT)
        is_tc = _name_flags(names, ids, _TENSOR_CORE) & ~is_simt
        g = kernels & _name_flags(names, ids, _GEMM)[t.name_id]
        simt = t.dur[g & is_simt[t.name_id]].sum()
        tc = t.dur[g & is_tc[t.name_id]].sum()
        gemm_total = t.dur[g].sum()
        conv = t.dur[kernels & _name_flags(names, ids, CONV_KERNEL)[t.name_id]].sum()
    else:
        simt = tc = gemm_total = conv = 0.0
    classified = simt + tc
    peak = peak_ratio(device.get("device_cc_major"), device.get("device_cc_minor"),
                      device.get("device_has_tensor_cores"))
    speedup = min(peak / 2, TC_SPEEDUP_CAP) if peak else None
    gpu, named = has_gpu, has_gpu and classified > 0
    return {
        "gemm_kernel_frac": rnd(gemm_total / kd_sum) if gpu and kd_sum > 0 else None,
        "gemm_fp32_frac": rnd(simt / classified) if named else None,
        "gemm_tensorcore_frac": rnd(tc / classified) if named else None,
        "gemm_fp32_ms_per_step": rnd(simt / 1e3 / n_steps, 3) if named else None,
        "conv_kernel_ms_per_step": rnd(conv / 1e3 / n_steps, 3) if gpu else None,
        "tensor_core_peak_ratio": peak,
        "tensor_core_speedup": speedup,
        "gemm_fp32_saving_ms_per_step": rnd(simt / 1e3 / n_steps * (1 - 1 / speedup), 3)
        if named and speedup else None,
    }
