"""The watch's ~1 Hz samplers: the session's host and NVML samplers, the GPU one with its
total-energy counter, each row also handed to the watch as it is taken.

:class:`EnergyNvmlSampler` is :class:`~diagnose.capture.samplers.NvmlSampler` plus
``energy_mj``, NVML's total energy since the driver loaded (``nvmlDeviceGetTotalEnergy
Consumption``, Volta and newer; it updates about every 100 ms, so the watch counts it over
windows of many steps, never per step). A board or binding without it reads None and
:attr:`~EnergyNvmlSampler.energy_why` says why; the other fields go on.

:class:`Tee` wraps any sampler: each row gets the watch's step count at that moment
(``step``) and goes to ``on_row(name, unix_s, row)`` on the sampler thread, then on to
``samples.jsonl`` as usual (:class:`~diagnose.capture.samplers.SamplerThread`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from diagnose.capture.samplers import HostSampler, NvmlSampler, Sampler, UnavailableSampler

__all__ = ["EnergyNvmlSampler", "Tee", "watch_samplers"]


class EnergyNvmlSampler(NvmlSampler):
    """GPU utilisation, memory, power (as NvmlSampler) and the total-energy counter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.energy_why: str | None = None  # why energy_mj is None (once known)

    def sample(self) -> dict[str, Any]:
        row = super().sample()
        row["energy_mj"] = self._energy()
        return row

    def _energy(self) -> int | None:
        if self.energy_why is not None:
            return None
        nv = self._nvml
        try:
            return int(nv.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception as e:  # NotSupported (pre-Volta), old bindings, a driver error
            not_supported = getattr(nv, "NVMLError_NotSupported", ())
            self.energy_why = (
                "this GPU has no NVML total-energy counter (Volta or newer has one)"
                if not_supported and isinstance(e, not_supported)
                else f"NVML total-energy counter unreadable: {type(e).__name__}: {e}")
            return None


class Tee(Sampler):
    """``inner``'s rows, each with ``step`` (the watch's step count when it was taken),
    also handed to ``on_row``. A failure in ``on_row`` is the watch's, not the sampler's:
    it is kept in :attr:`errors` and the row still goes to the file."""

    def __init__(self, inner: Sampler, step: Callable[[], int],
                 on_row: Callable[[str, float, dict[str, Any]], None]) -> None:
        self.inner = inner
        self.name = inner.name
        self._step = step
        self._on_row = on_row
        self.errors: list[str] = []

    def open(self) -> dict[str, Any]:
        return self.inner.open()

    def sample(self) -> dict[str, Any]:
        row = self.inner.sample()
        row["step"] = self._step()
        try:
            self._on_row(self.name, time.time(), row)
        except Exception as e:
            if len(self.errors) < 10:
                self.errors.append(f"{type(e).__name__}: {e}")
        return row

    def close(self) -> None:
        self.inner.close()


def watch_samplers(*, step: Callable[[], int], on_row: Callable[[str, float, dict[str, Any]], None],
                   device: dict[str, Any], gpu: int | None,
                   worker_pids: Callable[[], list[int]] | None
                   ) -> tuple[list[Tee], EnergyNvmlSampler | None]:
    """The watch's two samplers, each in a :class:`Tee`: the host (with the loader's
    workers, read off its iterators by ``worker_pids``, else this process's children
    listed from /proc) and the GPU ``gpu`` (default: the model's ``device`` when it is
    CUDA; else a sampler that says there is none); and the GPU's, for its energy."""
    host: Sampler = HostSampler(worker_pids=worker_pids)
    index = gpu if gpu is not None else (
        device.get("index") if device.get("type") == "cuda" else None)
    energy: EnergyNvmlSampler | None = None
    dev: Sampler
    if index is not None:
        energy = EnergyNvmlSampler(index=int(index),
                                   uuid=device.get("uuid") if gpu is None else None,
                                   pci_bus_id=device.get("pci_bus_id") if gpu is None else None)
        dev = energy
    else:
        dev = UnavailableSampler("gpu", "no CUDA device visible to torch")
    return [Tee(host, step, on_row), Tee(dev, step, on_row)], energy
