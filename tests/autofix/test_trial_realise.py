"""A trial applies the fix units' realisations (diagnose/fixes/realise.py) and undoes every
process-wide setting it made: after the trial, after an error inside it, and after an error
while it was being set up."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from diagnose.autofix import trial as trial_mod  # noqa: E402
from diagnose.autofix.trial import Trial, TuneError, Workload, build_loader  # noqa: E402
from diagnose.fixes import REALISATIONS, CannotRealise, Realisation, TrainConfig  # noqa: E402


class _Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean(dim=(2, 3))


def _workload() -> Workload:
    torch.manual_seed(0)
    model = _Conv()
    data = TensorDataset(torch.randn(32, 3, 8, 8), torch.randint(0, 4, (32,)))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return Workload.from_user(model, DataLoader(data, batch_size=8), opt,
                              loss_fn=F.cross_entropy)


def test_process_wide_settings_are_set_in_the_trial_and_undone_after() -> None:
    w = _workload()
    cfg = TrainConfig.from_objects(w.loader, w.optimizer).replace(
        intra_op_threads=1, cudnn_benchmark=not torch.backends.cudnn.benchmark,
        channels_last=True, gc_freeze=True, grad_accum_steps=2)
    threads, flag = torch.get_num_threads(), torch.backends.cudnn.benchmark
    weight = w.model.conv.weight
    assert gc.get_freeze_count() == 0
    with Trial(w, cfg) as t:
        assert torch.get_num_threads() == 1 and torch.backends.cudnn.benchmark != flag
        assert gc.get_freeze_count() > 0
        assert weight.is_contiguous(memory_format=torch.channels_last)
        assert t.parts.micro_batches == 2
        t.step()
        # the optimizer's moments follow the relaid weight
        assert t.optimizer.state[weight]["exp_avg"].is_contiguous(
            memory_format=torch.channels_last)
    assert torch.get_num_threads() == threads and torch.backends.cudnn.benchmark == flag
    assert gc.get_freeze_count() == 0
    assert weight.is_contiguous() and w.model.conv.weight is weight


def test_settings_are_undone_after_an_error_in_the_trial_or_in_setting_them_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    w = _workload()
    cfg = TrainConfig.from_objects(w.loader, w.optimizer).replace(intra_op_threads=1)
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"), Trial(w, cfg):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == threads

    def refuse(cfg, model, optimizer):
        raise CannotRealise("this machine cannot")

    later = Realisation(("nothing",), process=refuse)
    monkeypatch.setattr(trial_mod, "REALISATIONS", (*REALISATIONS, later))
    with pytest.raises(TuneError, match="this machine cannot"), Trial(w, cfg):
        pass
    assert torch.get_num_threads() == threads  # the setting made before it was undone


def test_the_step_is_made_of_the_realisations_parts() -> None:
    w = _workload()
    cfg = TrainConfig.from_objects(w.loader, w.optimizer).replace(
        channels_last=True, zero_grad_set_to_none=False, non_blocking=True)
    t = Trial(w, cfg)
    assert t.parts.non_blocking and t.parts.zero_grad == {"set_to_none": False}
    x, y = t._place((torch.randn(2, 3, 8, 8), torch.zeros(2, dtype=torch.long)))
    assert x.is_contiguous(memory_format=torch.channels_last) and y.dim() == 1
    t.close()


def test_a_field_that_cannot_be_made_real_is_autofixs_error() -> None:
    w = _workload()
    from torch.utils.data import BatchSampler, SequentialSampler

    own = DataLoader(w.loader.dataset, batch_sampler=BatchSampler(
        SequentialSampler(w.loader.dataset), 8, False))
    with pytest.raises(TuneError, match="its own batch_sampler"):
        build_loader(own, TrainConfig(batch_size=4))
    with pytest.raises(TuneError, match="batched_fetch needs"):
        build_loader(own, TrainConfig(batched_fetch=True))


def test_a_mapping_batch_is_placed_and_keeps_its_type() -> None:
    """A batch that is a mapping but no dict (Hugging Face's BatchEncoding is a UserDict)
    has its tensors placed and stays that mapping; a plain dict stays a dict."""
    from collections import UserDict

    from diagnose.autofix.trial import to_device

    x = torch.randn(2, 3)
    got = to_device(UserDict({"input_ids": x, "n": 3}), "cpu", inputs=[lambda t: t * 2])
    assert type(got) is UserDict and torch.equal(got["input_ids"], x * 2) and got["n"] == 3
    plain = to_device({"x": x}, "cpu")
    assert type(plain) is dict and torch.equal(plain["x"], x)


def test_several_models_are_refused_with_what_to_do() -> None:
    """A new user passed a GAN's two models: "autofix needs a torch.nn.Module model (got
    list)" was clear but did not say such a loop is diagnosed only."""
    g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    opt = torch.optim.SGD([*g.parameters(), *d.parameters()], lr=0.1)
    with pytest.raises(TuneError, match="several models or optimizers .* is diagnosed, not "
                                        "autofixed"):
        Workload.from_user([g, d], DataLoader(data, batch_size=8), opt,
                           loss_fn=torch.nn.functional.mse_loss)
