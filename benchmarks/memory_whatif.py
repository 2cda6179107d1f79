"""Memory what-ifs against the changed job run for real.

Held-out models (an MLP tower with AdamW, a small convnet with SGD and momentum, a small
transformer encoder with AdamW, an MLP with Adam stepped under bf16 autocast every 4
micro-batches): one step is tracked at the base batch, each change's peak
is predicted (re-run under FakeTensorMode, and scaled from the measured kinds), and the
changed job is then run for real on copies of the model under torch's MemTracker (on a
GPU, --gpu: torch.cuda.max_memory_allocated): pred/true beside each. Target: within 10%,
no under-prediction beyond 5% (an under-prediction is an out-of-memory error).

    .venv/bin/python benchmarks/memory_whatif.py [--gpu] [--models mlp,conv,transformer,accum]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import loadavg, machine_info, ram_text  # noqa: E402


def _models(device: str):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    def mlp() -> tuple:
        d = 256
        blocks = [nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                nn.LayerNorm(d)) for _ in range(6)]
        m = nn.Sequential(*blocks, nn.Linear(d, 10)).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        batch = (torch.randn(256, d, device=device), torch.randint(0, 10, (256,), device=device))
        return m, opt, batch, lambda mod, b: nn.functional.cross_entropy(mod(b[0]), b[1])

    def conv() -> tuple:
        def block(i: int, o: int) -> nn.Module:
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
        m = nn.Sequential(block(3, 32), nn.MaxPool2d(2), block(32, 64), nn.MaxPool2d(2),
                          block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(128, 10)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        batch = (torch.randn(64, 3, 32, 32, device=device),
                 torch.randint(0, 10, (64,), device=device))
        return m, opt, batch, lambda mod, b: nn.functional.cross_entropy(mod(b[0]), b[1])

    def transformer() -> tuple:
        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(1000, 128)
                self.layers = nn.ModuleList(nn.TransformerEncoderLayer(
                    128, 4, 512, dropout=0.0, batch_first=True) for _ in range(3))
                self.head = nn.Linear(128, 1000)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                h = self.emb(x)
                for layer in self.layers:
                    h = layer(h)
                return self.head(h)
        m = Net().to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        batch = (torch.randint(0, 1000, (32, 64), device=device),
                 torch.randint(0, 1000, (32, 64), device=device))

        def step(mod: nn.Module, b: tuple) -> torch.Tensor:
            return nn.functional.cross_entropy(mod(b[0]).flatten(0, 1), b[1].flatten())
        return m, opt, batch, step

    def accum() -> tuple:
        m = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 10)).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=3e-4)
        batch = (torch.randn(64, 512, device=device), torch.randint(0, 10, (64,), device=device))
        return m, opt, batch, lambda mod, b: nn.functional.cross_entropy(mod(b[0]), b[1])

    return {"mlp": ("MLP tower, AdamW", mlp), "conv": ("convnet, SGD+momentum", conv),
            "transformer": ("transformer encoder, AdamW", transformer),
            "accum": ("MLP, Adam, bf16, 4 micro", accum)}


#: how a model's measured step runs where not as one fp32 batch: (autocast dtype, micro-batches)
_STEP = {"accum": ("bfloat16", 4)}


def _truth(model, opt, batch, step_fn, change, base, gpu: bool) -> int:  # type: ignore[no-untyped-def]
    """The changed job run for real on copies: MemTracker's peak (CPU) or the allocator's
    peak during the tracked step (after a warm-up one) above what the process held before
    the job's copies were made (GPU)."""
    import gc

    import torch

    from diagnose.memory.fake import fake_step

    if gpu:
        gc.collect()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
    m = fake_step(model, opt, batch, step_fn, change, base, fake=False)
    if not gpu:
        return m.tracked_peak_bytes
    return int(m.allocator_peak_bytes or 0) - before


def _fmt_change(ch: dict) -> str:
    from diagnose.memory.oom import describe

    return describe(ch)[:40]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="run on cuda:0 (truth: the allocator)")
    ap.add_argument("--models", default="mlp,conv,transformer,accum")
    ap.add_argument("--oom", action="store_true",
                    help="also induce an OOM and try the batch the explanation suggests")
    args = ap.parse_args()
    import torch

    from diagnose.memory.fake import Base
    from diagnose.memory.live import fake_what_ifs
    from diagnose.memory.tracker import StepSpec, run_step, track_step
    from diagnose.memory.whatif import scaled

    torch.manual_seed(0)
    device = "cuda" if args.gpu else "cpu"
    info = machine_info()
    print(f"# memory_whatif  {time.strftime('%Y-%m-%d %H:%M')}  device={device}  "
          f"torch {torch.__version__}  {ram_text(info)}  load {loadavg()}")
    print("# memory figures do not depend on the machine's load; times are not reported")
    head = (f"{'model':<27} {'change':<41} {'true MiB':>9} {'fake':>7} {'scaled':>7} "
            f"{'f.high':>7} {'sc.high':>8}")
    print(head)
    worst = {"fake": [], "scaled": []}
    for key in args.models.split(","):
        title, build = _models(device)[key]
        model, opt, batch, step_fn = build()
        amp, micro = _STEP.get(key, (None, 1))
        spec = StepSpec(amp_dtype=amp)
        run_step(model, opt, [batch] * micro, step_fn, spec)  # the optimizer's state
        pristine = copy.deepcopy((model, opt))  # one copy: the optimizer over its model
        m = track_step(model, opt, batch, step_fn, spec=spec, batches=[batch] * micro)
        prof = m.to_json()
        held = m.untracked_bytes  # the process' other tensors (GPU): not the job's
        base = Base.of(prof["step"])
        true0 = _truth(*pristine, batch, step_fn, {}, base, args.gpu)
        print(f"{title:<27} {'(measured step)':<41} {true0 / 2**20:>9.2f} "
              f"{(m.peak_bytes - held) / true0:>7.3f}")
        for w in fake_what_ifs(model, opt, batch, step_fn, prof):
            true = _truth(pristine[0], pristine[1], batch, step_fn, w.change, base, args.gpu)
            sc = scaled(prof, w.change)
            fake_r = ((w.peak_bytes or 0) - held) / true
            sc_r = ((sc.peak_bytes or 0) - held) / true if sc is not None else float("nan")
            high = ((sc.range[1] if sc is not None and sc.range else 0) - held) / true
            fhigh = ((w.range[1] if w.range else 0) - held) / true
            worst["fake"].append(fake_r)
            if sc is not None and not w.change.get("optimizer_class") and \
                    not w.change.get("amp_dtype"):
                worst["scaled"].append(sc_r)
            print(f"{'':<27} {_fmt_change(w.change):<41} {true / 2**20:>9.2f} {fake_r:>7.3f} "
                  f"{sc_r:>7.3f} {fhigh:>7.3f} {high:>8.3f}")
    for k, v in worst.items():
        if v:
            print(f"# {k}: pred/true from {min(v):.3f} to {max(v):.3f} over {len(v)} what-ifs")
    if args.oom:
        induced_oom(device)


def induced_oom(device: str) -> None:
    """The transformer at a batch that does not fit (CPU: an emulated limit; GPU: the caching
    allocator capped with set_per_process_memory_fraction): the explanation, then the
    suggested batch tried for real under the same cap."""
    import gc

    import torch

    from diagnose.memory import measure, track_step
    from diagnose.memory.tracker import run_step

    gc.collect()

    model, opt, batch, step_fn = _models(device)["transformer"][1]()
    run_step(model, opt, [batch], step_fn)
    free = track_step(*copy.deepcopy((model, opt)), batch, step_fn)
    held = free.untracked_bytes
    cap = held + int(0.7 * (free.peak_bytes - held))
    limit = None
    if device == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(cap / total, 0)
    else:
        limit = cap
    try:
        sec = measure(model, opt, batch, step_fn, budget_bytes=cap, limit_bytes=limit)
        ex = sec.get("oom_explanation")
        print(f"# induced OOM: cap {cap / 2**20:.1f} MiB, batch {prof_batch(batch)}: "
              f"{'caught' if ex else 'did not run out'}")
        for line in (ex or {}).get("lines", []):
            print(f"#   {line}")
        n = ((ex or {}).get("largest_batch") or {}).get("batch_size")
        if n:
            b = tuple(torch.cat([t] * -(-n // t.shape[0]))[:n] for t in batch)
            tried = track_step(*copy.deepcopy((model, opt)), b, step_fn, limit_bytes=limit)
            print(f"#   batch {n} tried under the same cap: "
                  f"{'out of memory' if tried.oom else 'fits'}, peak "
                  f"{tried.peak_bytes / 2**20:.1f} MiB")
    finally:
        if device == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, 0)


def prof_batch(batch: tuple) -> int:
    return int(batch[0].shape[0])


if __name__ == "__main__":
    main()
