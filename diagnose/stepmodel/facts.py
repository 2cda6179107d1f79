"""What the fixes, their transforms and the Predictor know about a run: one typed value.

:class:`Facts` holds one field per quantity, named as the metric that measures it (units in
the name, or in the comment beside it); None is "not known". :meth:`Facts.from_metrics`
reads a diagnosis' metrics (and what autofix measures on the live objects, which wins) and
is the only place a fact is read by name: each value of its field's type, or None (a bool
is no count, NaN is no time). A transform's ``sets`` names the fields a change sets, and
:meth:`Facts.replace` gives the facts after it.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..values import as_number
from .calibration import WORKER_WAITS_SHARE


@dataclass(frozen=True, slots=True)
class Facts:
    """The run as the predictions see it (module doc); every field None where not known."""

    # ---------------------------------------------------------------- the machine
    device_type: str | None = None  # the training device's type: "cuda", "cpu" (live)
    has_gpu: bool | None = None  # the trace has device activity
    device_cc_major: int | None = None  # CUDA compute capability, major
    cpu_count: int | None = None  # CPUs the process may use (its affinity), at least 1
    cpu_capacity: float | None = None  # CPUs' worth of work they did at once (the point)
    cpu_capacity_min: float | None = None  # CPUs: the least of the capacity timings
    cpu_capacity_max: float | None = None  # CPUs: the most of them
    host_cpu_mean_pct: float | None = None  # mean busy % over the usable CPUs
    proc_cpu_mean_pct: float | None = None  # the training process, % of one core
    step_others_cpus_unprofiled: float | None = None  # CPUs other processes held (clock)
    cpu_quota_cpus: float | None = None  # CPUs' worth the cgroup's quota allows (else cpu_count)
    bf16_supported: bool | None = None  # the device computes in bfloat16 (live)
    allow_compile: bool | None = None  # autofix may try torch.compile (live: opt-in)
    # ---------------------------------------------------------------- torch's threads
    torch_num_threads: int | None = None  # torch.get_num_threads(); a threads change sets it
    threads_one_thread_ratio: float | None = None  # forward+backward on 1 thread / on torch's
    threads_one_thread_ratio_min: float | None = None  # the least of its timings (busier)
    threads_noise_rel: float | None = None  # that timing's rounds' relative noise
    threads_loop_ratio: float | None = None  # the same of the loop's own steps (whole work)
    threads_spin_ms: float | None = None  # CPU ms an idle pool thread spins after an op
    model_work_quiet_ms: float | None = None  # forward+backward on torch's threads, quiet
    model_work_one_thread_ms: float | None = None  # the same on one thread, quiet
    forward_calls_unprofiled: int | None = None  # forward calls a timed step made
    forward_contention: float | None = None  # the loop's forward / the same alone (clock)
    forward_quiet_ms: float | None = None  # the first batch's forward alone (torch's threads)
    backward_contention: float | None = None  # the loop's backward / the same alone (clock)
    optimizer_values_outside_models: int | None = None  # stepped, of no model given
    optimizer_quiet_ms: float | None = None  # optimizer.step() alone, after the loop
    # the loop's forward and backward over the same work alone, set by the Predictor
    # from the run as captured (host.loop_contention); None once a change moves it
    loop_contention: float | None = None
    # the replayed window's step over the unprofiled step the predictions start from, set by
    # the Predictor: 1 where the calibration met it; a cost timed outside the window (after
    # the loop) enters the window's graph at this pace, as the ratio back to ms takes it off
    window_pace: float | None = None
    # ---------------------------------------------------------------- the model and step
    model_has_conv: bool | None = None  # convolution layers
    conv_kernel_ms_per_step: float | None = None  # cuDNN convolution kernels in the trace
    tensor_core_speedup: float | None = None  # ratio AMP gives fp32 GEMM/conv kernels
    cpu_autocast_ratio: float | None = None  # CPU model's work under autocast / in fp32
    cpu_autocast_noise_rel: float | None = None  # that timing's rounds' relative noise
    loop_own_work_unprofiled_ms: float | None = None  # the loop's work between steps (clock)
    oom: bool | None = None  # the configured batch does not fit
    step_count: int | None = None  # profiled steps
    step_time_median_ms: float | None = None  # profiled
    step_time_cv: float | None = None  # std / mean of the profiled steps
    step_time_unprofiled_mean_ms: float | None = None  # the session's clock
    step_time_unprofiled_mean_error: float | None = None  # the base mean's std error / mean
    step_time_steady_mean_ms: float | None = None  # the same, no epoch's start in the steps
    step_time_unprofiled_median_ms: float | None = None
    step_time_unprofiled_steps: int | None = None  # how many steps the clock timed
    device_step_ms: float | None = None  # the device's work a profiled step
    optimizer_unprofiled_ms: float | None = None  # optimizer.step() per unprofiled step
    graph_launches_per_step: float | None = None  # CUDA/HIP graph launches
    memcpy_h2d_bytes: float | None = None  # host-to-device bytes in the window
    memcpy_h2d_pinned_gbps: float | None = None  # a pinned copy's rate (no metric yet)
    # ---------------------------------------------------------------- the optimizer
    optimizer_fused: bool | None = None
    optimizer_foreach: bool | None = None
    fused_supported: bool | None = None  # the optimizer's class takes fused= (live)
    grad_accum_steps: int | None = None  # micro-batches a step (no metric: a change sets it)
    # ---------------------------------------------------------------- settings in place
    cudnn_benchmark: bool | None = None
    uses_compiled_code: bool | None = None
    uses_cuda_graphs: bool | None = None
    gc_frozen_objects: int | None = None  # objects gc.freeze() moved out of reach
    # ---------------------------------------------------------------- the DataLoader
    dataloader_num_workers: int | None = None  # num_workers; a workers change sets it
    dataloader_persistent_workers: bool | None = None  # False where made again each epoch
    dataloader_remade: int | None = None  # epochs begun on a new DataLoader made as the given
    dataloader_prefetch_factor: int | None = None  # batches each worker makes ahead
    dataloader_pin_memory: bool | None = None  # a pin_memory change sets it
    dataloader_batch_size: int | None = None  # samples; a batch change sets it
    dataloader_epoch_batches: int | None = None  # len(loader)
    dataloader_last_batch_share: float | None = None  # the epoch's last batch / a full one
    dataloader_batches_on_device: bool | None = None  # the dataset's batches are on the GPU
    dataloader_dataset_tensor_indexable: bool | None = None  # one dataset[indices] a batch
    dataloader_automatic_batching: bool | None = None  # False: dataset[key] makes the batch
    iterable_dataset: bool | None = None  # an IterableDataset (live)
    input_batch_bytes: float | None = None  # bytes of one batch's tensors
    dataloader_start_ms: float | None = None  # an epoch's start with the run's workers
    dataloader_epoch_boundary_ms: float | None = None  # such a step beyond a steady one
    dataloader_epoch_after_ms: float | None = None  # the k steps after it, beyond steady ones
    dataloader_epoch_gap_ms: float | None = None  # the loop's own work between epochs
    dataloader_wait_max_ms: float | None = None  # longest wait for a batch in a step
    dataloader_wait_median_ms: float | None = None
    dataloader_wait_unprofiled_share: float | None = None  # of the unprofiled step
    input_fetch_ms: float | None = None  # in-process fetch per unprofiled step
    input_collate_ms: float | None = None  # in-process collate per unprofiled step
    input_loading_median_ms: float | None = None  # the loop's fetch + collate of a batch
    input_inprocess_batch_ms: float | None = None  # one batch made in process, after the loop
    input_worker_batch_ms: float | None = None  # one batch made as a worker makes it
    input_worker_batch_cpu_ms: float | None = None  # of that, on or queued for a CPU
    input_worker_send_ms: float | None = None  # a worker's CPU sending each batch
    input_worker_handover_ms: float | None = None  # receiving one batch from a worker
    input_worker_start_ms: float | None = None  # starting one worker and its first batch
    input_worker_fork_ms: float | None = None  # of that, the fork
    input_worker_stop_ms: float | None = None  # an epoch's end with that worker
    input_worker_fork_copy_ms: float | None = None  # the model's work after a fork, beyond
    input_worker_fork_copy_ms_per_mib: float | None = None  # a MiB written after a fork
    input_worker_fork_copy_ms_per_mib_1thread: float | None = None  # the same, one thread
    input_worker_fork_copy_loop_ms: float | None = None  # the loop's steps after a fork
    input_worker_fork_copy_loop_noise_rel: float | None = None  # that timing's noise
    mem_model_states_bytes: int | None = None  # parameters, gradients, optimizer state
    input_worker_wait_ms: float | None = None  # waits for workers per unprofiled step
    dataloader_wait_steady_share: float | None = None  # the loader's wait / the steady steps
    input_batched_fetch_ms: float | None = None  # one batch by one dataset[indices]
    input_batched_fetch_per_sample_ms: float | None = None  # the same batches per sample
    input_batched_fetch_work_ratio: float | None = None  # the model's work after each kind
    input_batched_fetch_work_noise_rel: float | None = None  # that ratio's noise (its SE)
    worker_transfer_gbps: float | None = None  # a worker's hand-over rate (no metric yet)
    workers_count: int | None = None  # worker processes seen alive at once (host samples)
    workers_cpu_mean_pct: float | None = None  # per worker, % of one core
    # ---------------------------------------------------------------- the collector
    gc_pause_ms: float | None = None  # its pauses per unprofiled step
    gc_pause_full_ms: float | None = None  # of them, the full collections'
    gc_pause_loader_ms: float | None = None  # of gc_pause_ms, inside the loading
    gc_pause_full_loader_ms: float | None = None  # of gc_pause_full_ms, inside the loading

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any], live: Facts | None = None) -> Facts:
        """The facts in a diagnosis' ``metrics`` (by the fields' names; others ignored),
        each field overridden by ``live`` where it knows it (what autofix measured)."""
        kw = {name: read(metrics.get(name)) for name, read in _READ.items()}
        if live is not None:
            kw.update((n, v) for n in _READ if (v := getattr(live, n)) is not None)
        return cls(**kw)

    def replace(self, **changes: Any) -> Facts:
        """These facts with ``changes`` (field name -> value, each read as its type)."""
        unknown = set(changes) - set(_READ)
        if unknown:
            raise TypeError(f"Facts has no field {sorted(unknown)[0]!r}")
        return dataclasses.replace(self, **{k: _READ[k](v) for k, v in changes.items()})

    @property
    def convolutions(self) -> bool:
        """The model runs convolutions: as the live session saw its layers, else (a saved
        trace) where the trace holds convolution kernels."""
        if self.model_has_conv is not None:
            return self.model_has_conv
        return (self.conv_kernel_ms_per_step or 0.0) > 0

    @property
    def on_cuda(self) -> bool:
        """The training device is a CUDA one: as the live session saw it, else (a report,
        a saved trace) where the trace names a CUDA compute capability."""
        if self.device_type is not None:
            return self.device_type == "cuda"
        return self.device_cc_major is not None

    @property
    def worker_batch_on_cpu(self) -> float | None:
        """The share of a worker's batch spent on or queued for a CPU, as the session timed
        one (at most 1; the rest waits on files, the network or a sleep); None where not
        timed."""
        cpu, took = self.input_worker_batch_cpu_ms, self.input_worker_batch_ms
        return None if cpu is None or not took or took <= 0 else min(1.0, max(0.0, cpu / took))

    @property
    def worker_batch_waits(self) -> bool:
        """A worker's batch timed on or waiting for a CPU under
        :data:`~.calibration.WORKER_WAITS_SHARE` of its time: its loading waits, and
        workers overlap it without a CPU each."""
        on = self.worker_batch_on_cpu
        return on is not None and on < WORKER_WAITS_SHARE

    @property
    def epoch_boundary_per_step_ms(self) -> float | None:
        """An epoch's start as the clock saw it beyond a steady step
        (``dataloader_epoch_boundary_ms``), over the epoch's steps: where the run's workers
        start again at every epoch (not persistent) and the clock timed both steady steps
        (``step_time_steady_mean_ms``) and such a start; None otherwise."""
        k, n = self.dataloader_num_workers, self.dataloader_epoch_batches
        b = self.dataloader_epoch_boundary_ms
        if (not k or k <= 0 or self.dataloader_persistent_workers is True or b is None
                or self.step_time_steady_mean_ms is None or not n or n <= 0):
            return None
        return b / n

    @property
    def epoch_gap_per_step_ms(self) -> float:
        """The loop's own work between epochs (``dataloader_epoch_gap_ms``: an evaluation)
        over the epoch's steps, where the clock told it apart from an epoch's start
        (:attr:`epoch_boundary_per_step_ms`): part of every step, whatever changes; else 0
        (the step means hold it)."""
        n, gap = self.dataloader_epoch_batches, self.dataloader_epoch_gap_ms
        if self.epoch_boundary_per_step_ms is None or not gap or not n or n <= 0:
            return 0.0
        return gap / n

    @property
    def epoch_in_clock(self) -> bool:
        """The clock timed an epoch's worth of steps or more of workers that restart every
        epoch, yet told no epoch's start apart (a capture that marked none): its mean
        holds those starts at their own rate, and nothing is added for them."""
        n, steps = self.dataloader_epoch_batches, self.step_time_unprofiled_steps
        return (self.epoch_boundary_per_step_ms is None and bool(self.dataloader_num_workers)
                and self.dataloader_persistent_workers is not True and bool(n)
                and steps is not None and n is not None and steps >= n)


def _float(x: object) -> float | None:
    return as_number(x)


def _int(x: object) -> int | None:
    return int(x) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else None


def _bool(x: object) -> bool | None:
    return x if isinstance(x, bool) else None


def _str(x: object) -> str | None:
    return x if isinstance(x, str) else None


def _cpus(x: object) -> int | None:
    n = _int(x)
    return n if n is not None and n > 0 else None


_BY_TYPE: dict[str, Callable[[object], Any]] = {
    "float | None": _float, "int | None": _int, "bool | None": _bool, "str | None": _str}
#: field name -> how a value is read as that field's type (None where it is not one)
_READ: dict[str, Callable[[object], Any]] = {
    f.name: _cpus if f.name == "cpu_count" else _BY_TYPE[str(f.type)]
    for f in dataclasses.fields(Facts)}

#: Every field's name: the names :meth:`Facts.from_metrics` reads.
FIELDS: frozenset[str] = frozenset(_READ)

__all__ = ["FIELDS", "Facts"]
