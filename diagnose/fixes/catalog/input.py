"""Input advice: making each sample cheaper to produce, which no setting of the loader does.

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

#: The registered units of this module (a test checks that each one declared is here).
FIXES = (FASTER_INPUT,)
