"""Planted bottleneck (GPU): large batches copied to the device from pageable memory.
``pin_memory=False`` and a blocking ``.to(device)`` make every batch go through a
staging buffer while the host waits (``Memcpy HtoD (Pageable -> Device)``). On CPU
there is no copy to a device: the loop runs, the symptom cannot show.

Expected finding (GPU): ``transfer``, fixes ``pin_memory`` + ``non_blocking``.

    python samples/pageable_copy.py [--out DIR] [--steps N]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _common  # first: finds torch-diagnose in a source checkout
import torch
from torch import nn
from torch.utils.data import DataLoader


def make_job(device: torch.device) -> tuple[nn.Module, Any, DataLoader]:
    """The model (on ``device``), its optimizer and the loader this sample trains."""
    torch.manual_seed(0)
    # ~50 MB batches on a GPU; smaller on CPU so the sample stays quick there
    n, side, batch = (1024, 128, 256) if device.type == "cuda" else (256, 64, 32)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # large dense inputs (like 3 x side x side crops) served from memory, not pinned
    loader = DataLoader(_common.in_memory(n, 3, side, side), batch_size=batch, shuffle=True,
                        pin_memory=False)
    return model, opt, loader


def main(out_dir: str | Path | None = None, steps: int = 5, quiet: bool = False, **kw: Any) -> Any:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # the loop copies each batch with a plain .to(device): pageable source, blocking copy
    return _common.train(*make_job(device), device, steps=steps, out_dir=out_dir, quiet=quiet,
                         **kw)


if __name__ == "__main__":
    _common.cli(main, __doc__)
