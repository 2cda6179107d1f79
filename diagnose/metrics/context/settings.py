"""The run's settings as the capture recorded them: the DataLoader's arguments, the
optimizer's kernels, the model, torch's threads and the CPUs, the collector's frozen
objects. Read as they are; a setting the context does not state is None."""

from __future__ import annotations

from typing import Any

from ...values import as_int, as_number
from .fields import as_bool, as_str, get

CATALOG: dict[str, tuple[str, str]] = {
    "dataloader_num_workers": (
        "count",
        "DataLoader num_workers (0: batches are loaded in the training process)",
    ),
    "dataloader_pin_memory": ("bool", "DataLoader pin_memory"),
    "dataloader_sampler_class": (
        "name", "the DataLoader's sampler class (RandomSampler, DistributedSampler, ...)"),
    "dataloader_batch_size": (
        "samples",
        "DataLoader batch_size (None with a custom batch_sampler)",
    ),
    "dataloader_persistent_workers": (
        "bool", "DataLoader persistent_workers; False where the loop made a new DataLoader "
        "each epoch (its workers start again however it is set)"),
    "dataloader_remade": (
        "count", "epochs the loop began on a new DataLoader made as the given one was (the "
        "same dataset, batch size, sampler class and workers); None where it made none, or "
        "where the session did not hook the loader"),
    "dataloader_epoch_batches": ("batches", "len(loader): the batches of one epoch"),
    "dataloader_last_batch_share": (
        "ratio", "the samples of an epoch's last batch over batch_size (1: a full batch, or "
        "drop_last): len(sampler), else len(dataset) under a SequentialSampler or "
        "RandomSampler, less the epoch's other batches; None where neither is known"),
    "dataloader_prefetch_factor": (
        "batches",
        "DataLoader prefetch_factor per worker (None when num_workers=0)",
    ),
    "dataloader_automatic_batching": (
        "bool", "the DataLoader batches its samples itself (a batch_size or a batch_sampler); "
        "False with batch_size=None: each of its sampler's keys goes to dataset[key] whole, "
        "the dataset makes the batch"),
    "dataloader_iterable": (
        "bool", "the loader's dataset is an IterableDataset: it splits its samples among the "
        "workers itself, so autofix leaves its workers and threads as they are"),
    "dataloader_dataset_getitems": (
        "bool", "the dataset has __getitems__ (the loader fetches a batch with one call)"),
    "dataloader_dataset_tensor_indexable": (
        "bool", "the loader's batches come out the same from one dataset[indices] call "
        "(a TensorDataset with the default collate)"),
    "cudnn_benchmark": ("bool", "torch.backends.cudnn.benchmark at capture time"),
    "optimizer_class": ("name", "class of the optimizer that stepped the model (e.g. 'AdamW')"),
    "optimizer_foreach": (
        "bool",
        "the optimizer runs foreach (multi-tensor) kernels, as torch resolves it",
    ),
    "optimizer_fused": ("bool", "the optimizer runs a fused kernel"),
    "torch_num_threads": ("count", "torch.get_num_threads() in the training process"),
    "thread_pool_beside_torch_threads": (
        "count", "the most threads of a native thread pool loaded in the training process that "
        "is not torch's own (numpy's BLAS, another OpenMP runtime; threadpoolctl): 0 where "
        "there is none"),
    "thread_pool_beside_torch": (
        "name", "that pool's library and kind, e.g. 'openblas (blas, libscipy_openblas)'"),
    "thread_pool_beside_torch_prefix": (
        "name", "that pool's library prefix, as threadpoolctl's threadpool_limits takes it"),
    "cpu_count": ("count", "CPUs the training process may use (os.sched_getaffinity)"),
    "cpu_quota_cpus": (
        "CPUs", "CPUs' worth of time the training process may use at once: its cgroup's CPU "
        "quota (a container's --cpus, a Kubernetes limit) where one is set under cpu_count, "
        "else cpu_count (a live capture)"),
    "model_param_count": ("count", "number of parameters (elements) of the model"),
    "model_param_dtype": ("name", "dtype holding most of the model's parameters (e.g. 'float32')"),
    "model_device": (
        "name",
        "device of the model's parameters ('cuda:0', 'cpu'; 'mixed' if several)",
    ),
    "model_is_dataparallel": ("bool", "the model is wrapped in nn.DataParallel"),
    "model_has_conv": ("bool", "the model has convolution layers"),
    "torch_version": ("name", "torch.__version__ of the captured run"),
    "gc_frozen_objects": (
        "count", "objects gc.freeze() had moved out of the collector's reach (0: none)"),
    "run_trainer": (
        "name", "the trainer whose callback drove the capture ('transformers': Hugging "
        "Face's Trainer, 'lightning'); None: the user's own loop"),
}


def settings_metrics(ctx: dict[str, Any]) -> dict[str, object]:
    """The :data:`CATALOG` names from a context dict."""
    out: dict[str, object] = {}
    out["dataloader_num_workers"] = as_int(get(ctx, "dataloader", "num_workers"))
    out["dataloader_pin_memory"] = as_bool(get(ctx, "dataloader", "pin_memory"))
    out["dataloader_sampler_class"] = as_str(get(ctx, "dataloader", "sampler_class"))
    out["dataloader_batch_size"] = as_int(get(ctx, "dataloader", "batch_size"))
    out["dataloader_persistent_workers"] = as_bool(get(ctx, "dataloader", "persistent_workers"))
    out["dataloader_remade"] = as_int(get(ctx, "dataloader", "remade"))
    out["dataloader_prefetch_factor"] = as_int(get(ctx, "dataloader", "prefetch_factor"))
    out["dataloader_dataset_getitems"] = as_bool(get(ctx, "dataloader", "dataset_getitems"))
    out["dataloader_iterable"] = as_bool(get(ctx, "dataloader", "iterable_dataset"))
    out["dataloader_automatic_batching"] = as_bool(
        get(ctx, "dataloader", "automatic_batching"))
    out["dataloader_dataset_tensor_indexable"] = as_bool(
        get(ctx, "dataloader", "dataset_tensor_indexable"))
    out["dataloader_epoch_batches"] = as_int(get(ctx, "dataloader", "len"))
    out["dataloader_last_batch_share"] = _last_batch_share(ctx)
    out["cudnn_benchmark"] = as_bool(ctx.get("cudnn_benchmark"))
    out["optimizer_class"] = as_str(get(ctx, "optimizer", "class"))
    foreach = get(ctx, "optimizer", "foreach_effective")
    out["optimizer_foreach"] = as_bool(
        foreach if foreach is not None else get(ctx, "optimizer", "foreach")
    )
    fused = get(ctx, "optimizer", "fused_effective")
    out["optimizer_fused"] = as_bool(fused if fused is not None else get(ctx, "optimizer", "fused"))
    out["torch_num_threads"] = as_int(ctx.get("torch_num_threads"))
    out.update(_pool_beside_torch(ctx.get("thread_pools")))
    out["gc_frozen_objects"] = as_int(ctx.get("gc_frozen_objects"))
    out["run_trainer"] = as_str(ctx.get("trainer"))
    out["cpu_count"] = as_int(ctx.get("cpu_count"))
    n, quota = out["cpu_count"], as_number(ctx.get("cpu_quota"))
    out["cpu_quota_cpus"] = (None if "cpu_quota" not in ctx or not isinstance(n, int)
                             else quota if quota is not None and quota < n else float(n))
    out["model_param_count"] = as_int(get(ctx, "model", "param_count"))
    out["model_param_dtype"] = as_str(get(ctx, "model", "param_dtype"))
    out["model_device"] = as_str(get(ctx, "model", "device"))
    out["model_is_dataparallel"] = as_bool(get(ctx, "model", "is_dataparallel"))
    out["model_has_conv"] = as_bool(get(ctx, "model", "has_conv"))
    out["torch_version"] = as_str(ctx.get("torch_version"))
    return out


def _pool_beside_torch(pools: object) -> dict[str, object]:
    """The largest native thread pool of the training process that is not torch's own
    (``thread_pool_beside_torch*``); none recorded: None, none there: 0 threads."""
    if not isinstance(pools, list):
        return {}
    others = [p for p in pools if isinstance(p, dict) and p.get("torch") is False
              and as_int(p.get("num_threads")) is not None]
    if not others:
        return {"thread_pool_beside_torch_threads": 0}
    top = max(others, key=lambda p: as_int(p.get("num_threads")) or 0)
    return {"thread_pool_beside_torch_threads": as_int(top.get("num_threads")),
            "thread_pool_beside_torch": f"{top.get('internal_api')} ({top.get('user_api')}, "
                                        f"{top.get('prefix')})",
            "thread_pool_beside_torch_prefix": as_str(top.get("prefix"))}


#: samplers that draw each of the dataset's samples once an epoch (without num_samples)
_WHOLE_SAMPLERS = ("SequentialSampler", "RandomSampler")


def _last_batch_share(ctx: Any) -> float | None:
    """The epoch's last batch over a full one: the samples an epoch draws (``sampler_len``,
    else ``dataset_len`` under a sampler that draws each sample once) less the batches
    before the last; 1.0 with drop_last; None where the samples or the batches are not
    known, or they do not add up."""
    n, bs = as_int(get(ctx, "dataloader", "len")), as_int(get(ctx, "dataloader", "batch_size"))
    if not n or not bs or n <= 0 or bs <= 0:
        return None
    if get(ctx, "dataloader", "drop_last") is True:
        return 1.0
    samples = as_int(get(ctx, "dataloader", "sampler_len"))
    if samples is None and get(ctx, "dataloader", "sampler_class") in _WHOLE_SAMPLERS:
        samples = as_int(get(ctx, "dataloader", "dataset_len"))
    last = None if samples is None else samples - (n - 1) * bs
    return round(last / bs, 4) if last is not None and 0 < last <= bs else None
