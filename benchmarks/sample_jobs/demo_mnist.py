"""``torch-diagnose demo``'s workload: the MNIST tutorial with per-sample augmentation."""

from __future__ import annotations

from typing import Any


def make_job() -> dict[str, Any]:
    from diagnose.demo import build

    w = build()
    return {"model": w.model, "loader": w.loader, "optimizer": w.optimizer,
            "loss_fn": w.loss_fn}
