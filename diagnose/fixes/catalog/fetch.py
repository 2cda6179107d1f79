"""The batched fetch: one ``dataset[indices]`` call per batch instead of a ``__getitem__`` per
sample and ``default_collate`` stacking the rows.

The model: the in-process fetch takes what one batched fetch took when the session timed
it after the loop, put at the loop's pace and less the loader's own work per batch that
the step keeps; the collector's pauses inside the loading go with it; the model's ops that
follow wake torch's thread pool sooner, as the session timed them after each kind of fetch.
A trial rebuilds the DataLoader to fetch so: a BatchSampler over the user's sampler hands
the dataset a list of indices, and torch's default_convert passes the batch on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...stepmodel.calibration import BATCHED_FETCH_MIN_SHARE, WAKE_RATIO_MAX
from ...stepmodel.graph import Graph, TaskKind
from ...stepmodel.host import loading_pauses, model_ops
from ...stepmodel.transforms import transform
from ..code import Setup, assign, call, loader_args, loader_call
from ..config import TrainConfig
from ..realise import CannotRealise, Kwargs, Realisation
from ..unit import Facts, Fix, cannot_tell


@transform(assumes={"input_batched_fetch_work_ratio": "the model's work after a batched "
                    "fetch costs what it costs after the per-sample one"})
def batched_fetch(g: Graph, change: Mapping[str, Any], facts: Facts) -> Graph | str:
    """The in-process fetch takes what one batch took from a loader fetching so when the
    capture timed it after the loop (``input_batched_fetch_ms``) instead of the fetch and
    collate the clock measured per batch (``input_fetch_ms`` + ``input_collate_ms``), less
    the loader's own work per batch outside them (the loop's wait for a batch,
    ``dataloader_wait_unprofiled_share`` of the step, beyond its fetch and collate), which
    the timing holds too and the step keeps. That timing is put on the loop's pace by the
    same batches fetched as the loop does, timed in turn with it
    (``input_batched_fetch_per_sample_ms``), against the loop's own median fetch and
    collate of a batch (``input_loading_median_ms``): the host's pace after the loop is
    not the loop's.

    The ops after the loading change too: a long single-threaded load leaves torch's
    thread pool asleep, and the model's work that follows pays for waking it. The session
    timed that work right after each kind of fetch (``input_batched_fetch_work_ratio``);
    the model's ops are that much shorter, at most :data:`WAKE_RATIO_MAX` (never longer:
    a ratio under 1 is the timing's noise)."""
    if facts.dataloader_dataset_tensor_indexable is False:
        return "does not apply: the dataset cannot hand over a batch in one indexing call"
    one, fetch_ms, collate_ms = (facts.input_batched_fetch_ms, facts.input_fetch_ms,
                                 facts.input_collate_ms)
    if one is None or fetch_ms is None or collate_ms is None:
        return _untimed(facts, one is None)
    fetch = g.is_kind(TaskKind.FETCH)
    if not fetch.any():
        return cannot_tell("the batches are not made in the training process")
    per_step = fetch_ms + collate_ms  # per unprofiled step: one batch a step
    if per_step <= 0:
        return cannot_tell("no time in the loader's fetch or collate")
    # the timing went through a loader's next(), whose own work (the sampler's indices,
    # the fetcher) the step keeps outside the fetch and collate: not counted twice
    share, mean = facts.dataloader_wait_unprofiled_share, facts.step_time_unprofiled_mean_ms
    own = max(0.0, share * mean - per_step) if share is not None and mean else 0.0
    each, loop = facts.input_batched_fetch_per_sample_ms, facts.input_loading_median_ms
    if each and loop and each > 0 and loop > 0:
        one *= loop / each
    one = max(one - own, BATCHED_FETCH_MIN_SHARE * one)
    # the fetch's tasks hold the loading the clock measured, less the collector's pauses a
    # gc.freeze applied before this took out of it
    held = 1.0 - (1.0 - g.loading_gc) * (loading_pauses(facts) or 0.0) / per_step
    out = g.scale(fetch, min(1.0, one / per_step) / max(held, 1e-3))
    # the collector's pauses inside the loading went with it (the batched fetch allocates
    # a few objects where the per-sample fetch made thousands): a gc.freeze after it has
    # none of them to remove
    out.loading_gc = 0.0
    wake = facts.input_batched_fetch_work_ratio
    if wake is not None and wake > 1.0:
        out = out.scale(model_ops(out), 1.0 / min(wake, WAKE_RATIO_MAX))
    return out


def _untimed(facts: Facts, batched: bool) -> str:
    """Why a batched fetch's inputs are missing: a saved trace has none; a live run's
    workers fetch out of the clock's sight; else the timing after the loop did not run."""
    if facts.cpu_count is None:
        return cannot_tell("one batched fetch and the loader's fetch and collate were not "
                "timed (a live capture times them)")
    if facts.dataloader_num_workers:
        return cannot_tell("the loader's workers fetch and collate where the step clock "
                "does not time them (it does with num_workers=0)")
    return cannot_tell("one batched fetch was not timed after the loop" if batched
                       else "the loop's fetch and collate were not timed")


class BatchedFetch(Fix):
    """Fetch a whole batch with one ``dataset[indices]`` call: per-sample ``__getitem__`` and
    ``default_collate`` stacking the rows cost more than the training step on big batches
    of in-memory tensor rows."""

    def applies(self, config: TrainConfig, facts: Facts) -> bool:
        return facts.dataloader_dataset_tensor_indexable is True

    def unknown(self, facts: Facts) -> str | None:
        # a saved trace (no host: no CPU count) does not say; a live run without a
        # DataLoader's dataset does not have one to batch
        return ("whether the dataset hands over a batch in one indexing call (a plain "
                "TensorDataset)" if facts.dataloader_dataset_tensor_indexable is None
                and facts.cpu_count is None else None)

    def in_place(self, metrics: Mapping[str, Any]) -> str | None:
        facts = Facts.from_metrics(metrics)
        if metrics.get("dataloader_iterable") is True:
            return "an IterableDataset yields its samples itself: there are no indices to fetch"
        if facts.dataloader_automatic_batching is False:
            return ("in place already: with batch_size=None each of the sampler's keys goes to "
                    "dataset[key] whole, and the dataset makes the batch")
        if facts.dataloader_dataset_tensor_indexable is False:
            return ("the dataset is not a plain TensorDataset with the default collate, "
                    "which one indexing call can batch")
        return None

    def render(self, setup: Setup | None) -> str:
        spec = setup.loader if setup is not None else None
        bs = spec.batch_size if spec is not None and spec.batch_size else "batch_size"
        # the loader's own order: its sampler object, else shuffled or in turn
        ds = spec.dataset if spec is not None else "dataset"
        order = ("sampler" if spec is not None and spec.sampler
                 else f"RandomSampler({ds})" if spec is None or spec.shuffle
                 else f"SequentialSampler({ds})")
        drop = spec.drop_last if spec is not None else False
        before = (loader_call(spec, prefix=assign(spec)) if spec is not None
                  else "loader = DataLoader(dataset, ..., batch_size=batch_size, shuffle=True)")
        # every other argument of the user's call kept (workers, pinning, persistence,
        # prefetch...); batching moves into the sampler
        batches = f"BatchSampler({order}, batch_size={bs}, drop_last={drop})"
        after = call(assign(spec), "DataLoader", [
            a for a in loader_args(spec, override={"batch_size": "None", "sampler": batches})
            if not a.startswith(("shuffle=", "drop_last="))])
        classes = ", ".join(["BatchSampler"] + ([order.split("(")[0]] if "(" in order else []))
        return "\n".join([
            "# before: one __getitem__ per sample, then default_collate stacks the rows",
            before,
            "# after: one indexing call per batch (a TensorDataset takes a list of indices);",
            "# the batches are the same tensors. For your own Dataset, define",
            "# __getitems__(self, indices) returning the batch's samples in one go instead.",
            f"from torch.utils.data import {classes}",
            after])


BATCHED_FETCH = BatchedFetch(
    "batched_fetch", "Fetch each batch with one indexing call", category="input", auto=True,
    change={"batched_fetch": True}, transform=batched_fetch,
    needs="a TensorDataset-like dataset (rows indexed by a list of indices), torch's default "
          "collate and the DataLoader's own batch_size")

#: The registered units of this module (a test checks that each one declared is here).
FIXES = (BATCHED_FETCH,)


def batch_indexable(loader: Any) -> bool | None:
    """Whether ``loader``'s batches can be fetched with one ``dataset[indices]`` call and
    come out the same: a TensorDataset (or a subclass that keeps its ``__getitem__``), the
    loader's own batch_size, torch's default collate (indexing each tensor with the list
    of indices gives exactly what collating the rows one by one gives). None: no loader."""
    ds = getattr(loader, "dataset", None)
    if ds is None:
        return None
    try:
        from torch.utils.data import TensorDataset
        from torch.utils.data._utils.collate import default_collate
    except ImportError:  # pragma: no cover
        return None
    return (isinstance(ds, TensorDataset)
            and type(ds).__getitem__ is TensorDataset.__getitem__
            and getattr(loader, "batch_size", None) is not None
            and getattr(loader, "collate_fn", None) is default_collate)


def _one_call_per_batch(cfg: TrainConfig, orig: Any) -> Kwargs | None:
    """The batching of one ``dataset[indices]`` call per batch (None: not asked for)."""
    if not cfg.batched_fetch:
        return None
    if not batch_indexable(orig):
        raise CannotRealise("batched_fetch needs a TensorDataset-like dataset, torch's "
                            "default collate and the DataLoader's own batch_size")
    from torch.utils.data import BatchSampler

    return {"collate_fn": None,  # torch's default_convert: the dataset returns the batch
            "batch_size": None,
            "sampler": BatchSampler(orig.sampler, cfg.batch_size or orig.batch_size,
                                    orig.drop_last)}


#: How a trial makes this module's fields real.
REALISATIONS = (Realisation(("batched_fetch",), batching=_one_call_per_batch),)
