"""Precision fixes: fp32 math where tensor cores could do it in lower precision."""

from __future__ import annotations

from ...stepmodel import transforms as tr
from ..config import TrainConfig
from ..facts import cuda
from ..unit import Facts, Fix


class Amp(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return cuda(facts) and config.amp_dtype is None

    def search(self, config: TrainConfig, facts: Facts) -> list[TrainConfig]:
        return [config.replace(amp_dtype="bfloat16" if facts.get("bf16_supported")
                               else "float16")]


class ConvNetOnCuda(Fix):
    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return cuda(facts) and facts.get("model_has_conv") is True


AMP = Amp("amp", "Automatic mixed precision (bf16, or fp16 with GradScaler)", """
# before
loss = loss_fn(model(x), y)
loss.backward()
opt.step()
# after: GEMMs and convolutions run on tensor cores
with torch.autocast("cuda", dtype=torch.bfloat16):       # Ampere or newer
    loss = loss_fn(model(x), y)
loss.backward()
opt.step()
# on GPUs without bf16 (e.g. V100): dtype=torch.float16 with a GradScaler
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    loss = loss_fn(model(x), y)
scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
""", category="precision", auto=True, needs="a CUDA device and an fp32 step",
    transform=tr.amp)

CHANNELS_LAST = ConvNetOnCuda("channels_last", "channels_last memory format for convolution "
                              "nets", """
# before
model = model.cuda()
# after: NHWC layout that tensor-core convolutions prefer
model = model.cuda().to(memory_format=torch.channels_last)
x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
""", category="precision", auto=True, change={"channels_last": True},
    transform=tr.cannot("cannot tell: the NHWC kernels' times are not in the trace"),
    needs="a convolution net on a CUDA device")

#: The registered units of this category (a test checks that each one declared is here).
FIXES = (AMP, CHANNELS_LAST)
