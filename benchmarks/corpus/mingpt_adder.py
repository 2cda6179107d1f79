"""A GPT learning to add 2-digit numbers, minGPT's way: the dataset holds only a tensor of
problem indices, and each sample is made in Python in ``__getitem__`` (the index split into
a and b, a + b computed, the digits formatted into a string, reversed, turned back into
ints and into two small tensors with the prompt masked out of the target), in 4 DataLoader
workers drawing from a ``RandomSampler`` with replacement; the 'gpt-nano' GPT, AdamW with
weight-decay groups, gradient clipping at 1.0.

Adapted from karpathy/minGPT, projects/adder/adder.py with mingpt/model.py and
mingpt/trainer.py, at commit 37baab71b9abea1b76ab957409a1cc2fbfba8a26 (MIT; text in
licenses/karpathy_minGPT.txt).

Changed:
- the GPT, its ``configure_optimizers`` and ``Trainer.run`` (set-up and loop body) are
  those of :mod:`mingpt_chargpt` (copied in there from mingpt/model.py and
  mingpt/trainer.py), imported as the script imports the mingpt package; the trainer's
  DataLoader (batch 64, 4 workers, pin_memory=True even on the CPU), optimizer and
  clipping are kept, the device is ``pick_device`` instead of 'auto' (the same choice);
- no size was scaled: the script's config (gpt-nano, ndigit 2, batch 64) is kept;
- the batch-end callback (printing, and every 500 iterations an evaluation on the train
  and test splits and a checkpoint) is left out, and so the test split is not made;
- seeded with ``torch.manual_seed(3407)`` (the script's ``set_seed``), no work dir/logging.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset

from ._common import pick_device, run
from .mingpt_chargpt import CN, GPT, trainer_config, trainer_job


def get_config() -> CN:
    C = CN()
    # data
    C.data = AdditionDataset.get_default_config()
    # model
    C.model = GPT.get_default_config()
    C.model.model_type = 'gpt-nano'
    # trainer
    C.trainer = trainer_config()
    C.trainer.learning_rate = 5e-4  # the model is so small that we can go a bit faster
    return C


class AdditionDataset(Dataset):
    """
    Creates n-digit addition problems. For example, if n=2, then an example
    addition problem would be to add 85 + 50 = 135. This problem would be
    represented as the following string for the GPT:

    "8550531"

    This is because:
    - we are discarding the + and =, which are not necessary. We just encode the digits
      of the input numbers concatenated together.
    - the result 135 is encoded backwards to make the addition easier to learn for the
      GPT model, because of how the addition algorithm works.

    As one more example, the problem 6 + 39 = 45 would be encoded as:

    "0639054"

    where you will notice that we are padding with zeros to make sure that we always
    produce strings of the exact same size: n + n + (n + 1). When n=2, this is 7.
    At test time, we will feed in an addition problem by giving the first 2n digits,
    and hoping that the GPT model completes the sequence with the next (n+1) digits
    correctly.
    """

    @staticmethod
    def get_default_config():
        C = CN()
        C.ndigit = 2
        return C

    def __init__(self, config, split):
        self.config = config
        self.split = split  # train/test

        # split up all addition problems into either training data or test data
        ndigit = self.config.ndigit
        assert ndigit <= 3, "the lines below would be very memory inefficient, in future " \
            "maybe refactor to support"
        num = (10**ndigit)**2  # total number of possible addition problems with ndigit numbers
        rng = torch.Generator()
        rng.manual_seed(1337)
        perm = torch.randperm(num, generator=rng)
        num_test = min(int(num * 0.2), 500)  # 20% of the whole dataset, or only up to 500
        self.ixes = perm[:num_test] if split == 'test' else perm[num_test:]

    def get_vocab_size(self):
        return 10  # digits 0..9

    def get_block_size(self):
        # a,b,a+b, and +1 due to potential carry overflow,
        # but then also -1 because very last digit doesn't ever plug back
        # as there is no explicit <EOS> token to predict, it is implied
        return 3 * self.config.ndigit + 1 - 1

    def __len__(self):
        return self.ixes.nelement()

    def __getitem__(self, idx):
        ndigit = self.config.ndigit
        # given a problem index idx, first recover the associated a + b
        idx = self.ixes[idx].item()
        nd = 10**ndigit
        a = idx // nd
        b = idx % nd
        # calculate the "label" of the addition problem a + b
        c = a + b
        # encode the digits of a, b, c into strings
        astr = f'%0{ndigit}d' % a
        bstr = f'%0{ndigit}d' % b
        cstr = (f'%0{ndigit + 1}d' % c)[::-1]  # reverse c to make addition easier
        render = astr + bstr + cstr
        dix = [int(s) for s in render]  # convert each character to its token index
        # x will be input to GPT and y will be the associated expected outputs
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)  # predict the next token in the sequence
        y[:ndigit * 2 - 1] = -1  # we will only train in the output locations. -1 masks the loss
        return x, y


def make_job(device: Any = None) -> dict[str, Any]:
    dev = pick_device(device)
    config = get_config()
    torch.manual_seed(3407)

    # construct the train dataset
    train_dataset = AdditionDataset(config.data, split='train')

    # construct the model
    config.model.vocab_size = train_dataset.get_vocab_size()
    config.model.block_size = train_dataset.get_block_size()
    model = GPT(config.model)

    return trainer_job(config.trainer, model, train_dataset, dev,
                       ("tokenise", "in-memory", "workers", "workers>cpus", "transformer"))


def main(steps: int = 5) -> None:
    run(make_job, steps)


if __name__ == "__main__":
    main()
