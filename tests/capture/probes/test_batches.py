"""A loader's batches as its fetcher makes them, whatever its batching
(diagnose/capture/probes/batches.py), and the probes that make them: real DataLoaders,
real forked workers."""

from __future__ import annotations

import random
import time

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, TensorDataset

from diagnose.capture.probes.batches import forked_batches, loader_batches
from diagnose.capture.probes.inprocess import time_inprocess_batch
from diagnose.capture.probes.send import time_worker_send
from diagnose.capture.probes.worker_batch import time_batches_in_turn, time_worker_batches


class _Rows(Dataset):
    """Rows fetched a batch at a time: ``ds[list of indices]`` (a store's one GET); 4 ms
    of waiting a GET in a DataLoader worker, 1 ms in the training process."""

    def __init__(self, n: int = 256) -> None:
        self.x = torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, 4)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx):
        from torch.utils.data import get_worker_info

        time.sleep(0.004 if get_worker_info() is not None else 0.001)
        return self.x[torch.as_tensor(idx)]


def _same(a, b) -> bool:
    return torch.equal(torch.as_tensor(a), torch.as_tensor(b))


def test_each_loader_shape_makes_the_batches_its_loader_makes():
    """A batch size: consecutive indices, item by item, collated. A batch sampler (one
    that buckets, say): its own batches, item by item. No automatic batching (a
    BatchSampler given as the sampler, ``batch_size=None``): each of the sampler's lists
    handed whole to ``dataset[...]``. In each, the first batch is the one a DataLoader
    given that key makes."""
    ds = TensorDataset(torch.arange(40.0))
    sized = loader_batches(DataLoader(ds, batch_size=8))
    assert sized is not None and sized.auto and sized.keys[1] == list(range(8, 16))
    assert len(sized.keys) == 5 and _same(sized.collate(sized.fetch(sized.key(6)))[0],
                                          torch.arange(8.0, 16.0))

    buckets = [[3, 1], [7, 5, 6], [0]]
    by_sampler = loader_batches(DataLoader(ds, batch_sampler=buckets))
    assert by_sampler is not None and by_sampler.auto
    assert by_sampler.keys == tuple(buckets)
    assert _same(by_sampler.collate(by_sampler.fetch(by_sampler.keys[1]))[0],
                 torch.tensor([7.0, 5.0, 6.0]))

    rows = _Rows()
    sampler = BatchSampler(RandomSampler(rows), 16, drop_last=True)
    loader = DataLoader(rows, sampler=sampler, batch_size=None)
    whole = loader_batches(loader)
    assert whole is not None and not whole.auto and len(whole.keys) == 16
    assert all(len(k) == 16 for k in whole.keys)
    made = whole.collate(whole.fetch(whole.keys[0]))
    assert made.shape == (16, 4)
    assert _same(made, next(iter(DataLoader(rows, sampler=[whole.keys[0]], batch_size=None))))


class _Buckets:
    """A batch sampler of its own: shuffles with its own generator, then cuts the indices
    sorted by bucket into batches of 2 to 5; counts its iterators."""

    def __init__(self, n: int, gen: torch.Generator | None = None) -> None:
        self.n, self.generator, self.iters = n, gen, 0

    def __iter__(self):
        self.iters += 1
        order = torch.randperm(self.n, generator=self.generator).tolist()
        at, size = 0, 2
        while at < self.n:
            yield sorted(order[at:at + size])
            at, size = at + size, 2 + (size - 1) % 4

    def __len__(self) -> int:
        return self.n // 3


def test_a_custom_samplers_keys_leave_the_loops_order_as_it_was():
    """A sampler torch does not own gives its first batches from a fresh iterator, drawn
    once per loader; the global RNG states and the sampler's own generator are put back,
    so the loop's next epoch has the order it would have had."""
    ds = TensorDataset(torch.arange(64.0))

    def loader() -> DataLoader:
        return DataLoader(ds, batch_sampler=_Buckets(64, torch.Generator().manual_seed(7)))

    probed, untouched = loader(), loader()
    torch.manual_seed(3)
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    got = loader_batches(probed)
    assert got is not None and got.auto and [len(k) for k in got.keys[:4]] == [2, 3, 4, 5]
    assert got.keys[0] == next(iter(untouched.batch_sampler))
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1]
    assert np.array_equal(np.random.get_state()[1], states[2])
    untouched = loader()
    assert list(probed.batch_sampler) == list(untouched.batch_sampler)
    probed.batch_sampler.iters = 0
    for n in (16, 2, 1):  # the probes after the loop each ask; drawn once
        assert loader_batches(probed, n) is not None
    assert probed.batch_sampler.iters == 0

    torch.manual_seed(3)  # one without a generator of its own draws from torch's
    plain = DataLoader(ds, batch_sampler=_Buckets(64))
    assert loader_batches(plain) is not None
    first = list(plain.batch_sampler)
    torch.manual_seed(3)
    assert first == list(plain.batch_sampler)


def test_torchs_own_samplers_give_keys_of_their_kind_without_being_drawn():
    """A BatchSampler over torch's Random or Sequential sampler (or either alone, batching
    off): keys of its batch size, consecutive or random from a generator of the probes'
    own (the same every time), and the sampler itself is not iterated (a random one
    permutes the whole dataset)."""
    from torch.utils.data import SequentialSampler

    from diagnose.capture.probes.batches import torch_keys

    rows = _Rows(100)
    assert torch_keys(BatchSampler(SequentialSampler(rows), 8, False), 100, 3) == (
        list(range(8)), list(range(8, 16)), list(range(16, 24)))
    assert torch_keys(SequentialSampler(rows), 100, 3) == (0, 1, 2)
    gen = torch.Generator().manual_seed(1)
    shuffled = BatchSampler(RandomSampler(rows, generator=gen), 8, False)
    state = gen.get_state()
    keys = torch_keys(shuffled, 100, 16)
    assert keys is not None and len(keys) == 16 and all(len(k) == 8 for k in keys)
    assert all(0 <= i < 100 for k in keys for i in k) and keys == torch_keys(shuffled, 100, 16)
    assert torch.equal(gen.get_state(), state)
    assert torch_keys(_Buckets(100), 100, 3) is None


def test_a_loader_without_automatic_batching_gets_the_probes_after_the_loop():
    """A BatchSampler given as the sampler (``batch_size=None``), the batched fetch's own
    shape: a worker's batch is timed in turn with this process's (4 ms of waiting against
    1 ms, and little of it on a CPU), alone and beside one a CPU, in this process, and
    what a real worker spends sending it."""
    rows = _Rows()
    loader = DataLoader(rows, sampler=BatchSampler(RandomSampler(rows), 16, drop_last=True),
                        batch_size=None)
    got = time_batches_in_turn(loader)
    assert got is not None
    worker, mine, on_cpu, _cpus = got
    assert 4.0 <= worker < 250.0 and 1.0 <= mine < 60.0 and worker > 2 * mine, got
    assert 0.0 <= on_cpu < 0.5 * worker, got
    alone = time_worker_batches(loader, 2)
    assert alone is not None and alone[0] >= 4.0
    assert (time_inprocess_batch(loader) or 0.0) >= 1.0
    sent = time_worker_send(loader)
    assert sent is None or sent >= 0.0  # None where the kernel does not say (schedstat)


def test_what_has_no_batches_to_make_gives_none():
    """An iterable dataset, an empty one, and a loader whose workers are spawned (for the
    probes that fork)."""
    import multiprocessing as mp

    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert loader_batches(DataLoader(Stream(), batch_size=2)) is None
    assert loader_batches(DataLoader(TensorDataset(torch.zeros(0)), batch_size=2)) is None
    spawned = DataLoader(TensorDataset(torch.zeros(8)), batch_size=2, num_workers=1,
                         multiprocessing_context=mp.get_context("spawn"))
    assert loader_batches(spawned) is not None and forked_batches(spawned) is None
