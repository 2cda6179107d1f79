"""What the committed corpus' jobs share: the cache their data is made into, the device,
and the job dict's shape.

Every job module has ``make_job(device=None)`` returning a dict with the keys of
benchmarks/jobs (``model``, ``loader``, ``optimizer``, ``loss_fn``) and more:

- ``model``: the ``nn.Module`` a user would hand to ``diagnose(model, loader)``;
  ``models``: every model, where the job has more than one (a GAN's two);
- ``loader``: the job's training ``DataLoader``, or None where it has none;
- ``optimizer``: its ``torch.optim`` optimizer, or None (a hand-written update; a job with
  two names the one stepped last);
- ``loss_fn`` ``(output, target) -> loss`` where batches are ``(x, y)`` and the step is
  ``loss_fn(model(x), y)``, else ``step_fn`` ``(model, batch) -> loss`` where one forward
  gives the loss (autofix's two forms); None where the step is more than that;
- ``train_step(batch)``: one whole training step as the job's loop body does it, moving
  the batch to ``device`` itself; returns the loss (a tensor);
- ``batches()``: an endless iterator over batches as the job makes them (with a loader:
  the loader, epoch after epoch);
- ``device``: CUDA where there is one (the job's GPU settings then apply), else CPU;
- ``covers``: what the job exercises (tags from :data:`COVERS`);
- ``marks_steps``: True where nothing in the loop tells a step's end, so that the loop
  calls ``d.step()`` (False for every job here: an optimizer step, or a backward followed
  by the weights written by hand, ends one).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

#: the tags a job's ``covers`` may use
COVERS = {
    "image-decode": "PIL decodes JPEG/PNG files per sample",
    "augment": "per-sample random crops, flips, noise",
    "tokenise": "text tokenised per sample in Python",
    "dict-collate": "dict samples and a custom collate_fn",
    "parse": "text rows parsed into numbers per sample",
    "features": "per-sample feature extraction with torch ops (a spectrogram)",
    "io-wait": "loading that waits on storage or the network, not on a CPU",
    "in-memory": "tensors held in memory, sliced or indexed per sample",
    "no-loader": "no DataLoader: batches sliced from tensors by the loop",
    "workers>cpus": "more DataLoader workers than a 2-CPU machine has",
    "workers": "DataLoader worker processes",
    "sampler": "a custom batch sampler",
    "two-models": "two models and two optimizers per step",
    "hand-update": "parameters updated by hand (no torch.optim)",
    "rnn": "recurrent model",
    "transformer": "attention model",
    "conv": "convolutional model",
    "mlp": "fully connected model",
}

#: bump to remake every job's cached data
DATA_VERSION = 3


def cache_dir(name: str, make: Callable[[Path], None]) -> Path:
    """The folder holding job ``name``'s data, made by ``make(folder)`` at first use.

    It lives under $TORCH_DIAGNOSE_CORPUS_CACHE, else $XDG_CACHE_HOME/torch-diagnose-corpus,
    else ~/.cache/torch-diagnose-corpus (the system's temporary folder where that cannot be
    written). ``make`` writes into a fresh folder that is then renamed into place, so a
    half-made folder is never used and two processes making it at once both end with one.
    """
    root = os.environ.get("TORCH_DIAGNOSE_CORPUS_CACHE")
    if root is None:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "torch-diagnose-corpus")
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
    except OSError:
        root = str(Path(tempfile.gettempdir()) / "torch-diagnose-corpus")
        Path(root).mkdir(parents=True, exist_ok=True)
    final = Path(root) / f"{name}-v{DATA_VERSION}"
    if final.is_dir():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        make(tmp)
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():  # not another process' folder: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def pick_device(device: Any = None) -> Any:
    """``device``, else CUDA where there is one, else the CPU."""
    import torch

    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def forever(loader: Iterable[Any]) -> Iterator[Any]:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def run(make_job: Callable[..., dict[str, Any]], steps: int) -> None:
    """A job's own loop for ``steps`` steps, printing its loss (each module's ``main``)."""
    job = make_job()
    batches = job["batches"]()
    try:
        for i in range(steps):
            loss = job["train_step"](next(batches))
            print(f"step {i}: loss {float(loss):.4f}")
    finally:
        batches.close()
