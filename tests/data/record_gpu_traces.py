"""Record the small GPU traces in tests/data/gpu/ (needs a CUDA GPU and torch).

    python tests/data/record_gpu_traces.py DEST

Each workload runs a few warm-up iterations, then 5 profiled steps under
torch.profiler (CPU + CUDA activities, no shapes, no stacks); the trace is
written gzipped as DEST/<name>.pt.trace.json.gz.

- graph_decode: inference (no_grad) of a 16-block fp16 MLP stack at batch 1,
  captured once in a CUDA graph and replayed 8 times per step (a decode loop);
  the next token is read with .item() at the end of each step.
- eager_decode: the same decode loop without the graph (every kernel launched).
- compiled_train: training of an MLP under torch.compile (Triton kernels),
  fused AdamW.
- hidden_sync_train: fp32 training with large GEMMs; each step builds a
  16-float loss-weight tensor on the CPU and copies it with a plain .cuda()
  (pageable, blocking) after the forward pass has been queued.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

DEV = "cuda"


def _profile(name: str, dest: Path, step, warmup: int = 3) -> None:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    raw = dest / f"{name}.pt.trace.json"

    def ready(p):
        p.export_chrome_trace(str(raw))

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=5), on_trace_ready=ready) as prof:
        for _ in range(7):
            step()
            prof.step()
    torch.cuda.synchronize()
    with open(raw, "rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    print(name, Path(f"{raw}.gz").stat().st_size // 1024, "KiB", flush=True)


class Block(nn.Module):
    def __init__(self, d: int = 1024) -> None:
        super().__init__()
        self.up, self.down, self.norm = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def decode(dest: Path, graph: bool) -> None:
    model = nn.Sequential(*[Block() for _ in range(16)]).to(DEV).half().eval()
    x = torch.randn(1, 1024, device=DEV, dtype=torch.half)
    with torch.no_grad():
        if graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = model(x)

            def run():
                g.replay()
                return out
        else:
            def run():
                return model(x)

        def step():
            with torch.no_grad():
                for _ in range(8):
                    o = run()
                    tok = o[:, :64].argmax(-1)
                    x.mul_(0.999)
                tok.item()

        _profile("graph_decode" if graph else "eager_decode", dest, step)


def compiled_train(dest: Path) -> None:
    model = nn.Sequential(*[Block(512) for _ in range(4)]).to(DEV)
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(256, 512, device=DEV)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = cmodel(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    _profile("compiled_train", dest, step, warmup=4)


def hidden_sync_train(dest: Path) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    d = 2048
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.ReLU()) for _ in range(8)]).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2048, d, device=DEV)
    y = torch.randn(2048, d, device=DEV)
    weights = [1.0 + i / 16 for i in range(16)]

    def step():
        out = model(x)
        w = torch.tensor(weights).cuda()          # tiny pageable copy, queued behind the forward
        loss = ((out - y).pow(2).view(16, -1).mean(1) * w).sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    _profile("hidden_sync_train", dest, step)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gpu")
    out.mkdir(parents=True, exist_ok=True)
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    decode(out, graph=True)
    decode(out, graph=False)
    hidden_sync_train(out)
    compiled_train(out)
