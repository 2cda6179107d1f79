"""Input advice: making each sample cheaper to produce, which no setting of the loader does,
and making a loop's own batches in DataLoader workers.

The loader's settings are units of their own: :mod:`.workers` (how many workers, kept
alive, queue depth), :mod:`.threads` (torch's threads beside them), :mod:`.fetch` (one
indexing call per batch).
"""

from __future__ import annotations

from ..unit import Fix

FASTER_INPUT = Fix("faster_input", "Make each sample cheaper to produce", """
# before: the same costly work for every sample, every epoch (decode, parse, tokenise)
class DS(Dataset):
    def __getitem__(self, i):
        return augment(decode(read(self.paths[i])))
# after: the deterministic part once, cached; only the cheap random part per step
# (images on a GPU host can also be decoded there: NVIDIA DALI, torchvision.io.decode_jpeg)
class DS(Dataset):
    def __init__(self, paths):
        self.cache = [decode(read(p)) for p in paths]   # or a memory-mapped array on fast storage
    def __getitem__(self, i):
        return augment(self.cache[i])
""", category="input")

LOOP_BATCHES_IN_WORKERS = Fix(
    "loop_batches_in_workers", "Make the batches in DataLoader workers, off the training thread",
    """
# before: the loop makes each batch itself, on the training thread, between steps
for x, y in batches():  # your generator: tokenise, slice, build tensors
    ...
# after: DataLoader workers run the generator while the step trains
from torch.utils.data import DataLoader, IterableDataset

class Batches(IterableDataset):
    def __iter__(self):
        return batches()

# one worker runs the generator as the loop did: the same batches, in order. More workers
# each run a copy of their own: one that walks fixed data must then take its own share
# (get_worker_info().id of .num_workers), or every batch comes once a worker
loader = DataLoader(Batches(), batch_size=None, num_workers=1, persistent_workers=True)
for x, y in loader:
    ...
""", category="input")

#: The registered units of this module (a test checks that each one declared is here).
FIXES = (FASTER_INPUT, LOOP_BATCHES_IN_WORKERS)
