"""A stand-in for ``pynvml`` (no GPU here) with the calls the watch's GPU sampler makes,
its total-energy counter included: the board draws ``watts``, and the counter (mJ) moves
in 100 ms steps as NVML's does."""

from __future__ import annotations

import time
import types
from typing import Any

import pytest


def fake_pynvml(watts: float = 250.0, *, energy: bool = True) -> types.ModuleType:
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
        pass

    nv.NVMLError = NVMLError
    nv.NVMLError_NotSupported = NVMLError_NotSupported
    nv.NVML_CLOCK_SM = 1
    nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    t0 = time.monotonic()
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetHandleByUUID = lambda u: "handle"
    nv.nvmlDeviceGetHandleByPciBusId = lambda p: "handle"
    nv.nvmlDeviceGetHandleByIndex = lambda i: "handle"
    nv.nvmlDeviceGetName = lambda h: b"Fake GPU"
    nv.nvmlDeviceGetUUID = lambda h: "GPU-fake"
    nv.nvmlSystemGetDriverVersion = lambda: "999.1"
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=16 << 30, used=4 << 30)
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=90, memory=40)
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1410
    nv.nvmlDeviceGetPowerUsage = lambda h: int(watts * 1000)
    nv.nvmlDeviceGetPcieThroughput = lambda h, kind: 1000
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: []

    def total_energy(h: Any) -> int:
        if not energy:
            raise NVMLError_NotSupported("Not Supported")
        ticks = int((time.monotonic() - t0) * 10)  # the counter updates every 100 ms
        return 5_000_000 + int(ticks * 0.1 * watts * 1000)

    nv.nvmlDeviceGetTotalEnergyConsumption = total_energy
    return nv


def install(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> types.ModuleType:
    import sys

    nv = fake_pynvml(**kw)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv
