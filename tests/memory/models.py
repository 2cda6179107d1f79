"""Small models with sizes worked out by hand, shared by the memory tests."""

from __future__ import annotations

import torch
from torch import nn

IN, HID, OUT, BATCH = 64, 256, 8, 32
#: two bias-free Linears: (64 x 256 + 256 x 8) float32 = 18,432 x 4 bytes
PARAM_BYTES = (IN * HID + HID * OUT) * 4
#: Adam: exp_avg and exp_avg_sq per parameter, and a float32 step scalar per tensor (2)
ADAM_STATE_BYTES = 2 * PARAM_BYTES + 2 * 4
#: the ReLU's output, saved by the second Linear for its weight's gradient
RELU_OUT_BYTES = BATCH * HID * 4


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HID, bias=False), nn.ReLU(), nn.Linear(HID, OUT, bias=False))


def tower(depth: int = 4, width: int = 128) -> nn.Module:
    """Blocks of Linear-GELU-Linear-LayerNorm: what checkpointing frees is inside blocks."""
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                            nn.LayerNorm(width)) for _ in range(depth)]
    return nn.Sequential(*blocks, nn.Linear(width, OUT))


def batch(n: int = BATCH, width: int = IN) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, width, generator=g), torch.randint(0, OUT, (n,), generator=g)


def loss(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return nn.functional.cross_entropy(model(b[0]), b[1])
