"""Probes: short timings of the user's own model and loader that the step model takes as
measured inputs (diagnose.stepmodel), one module a kind.

The forward is timed in the loop (:class:`ForwardTimer`); everything else runs after the
loop, when no step is on the clock, and leaves the run as it was (RNG states, buffers,
thread count, no child process left). Each gives None where it does not apply.

- :mod:`.compute`: the model's work on torch's threads and on one thread
- :mod:`.precision`: the model's work under the loop's CPU autocast and in fp32
- :mod:`.after_fetch`: a batched fetch against a per-sample one, and the work after each
- :mod:`.capacity`: how many CPUs' worth of work the usable CPUs do at once
- :mod:`.batches`: a loader's batches as its fetcher makes them, whatever its batching
- :mod:`.inprocess`: a batch made by the training process itself
- :mod:`.worker_batch`: a batch made by a forked worker, in turn with this process
- :mod:`.handover`: receiving a batch from a worker; a worker's start and stop
- :mod:`.fork_copy`: the memory a step writes, copied after its workers' fork
- :mod:`.send`: what sending its batches costs a worker
- :mod:`.spin`: how long torch's idle threads spin after an op before they sleep
- :mod:`.settle`: the DataLoader's live workers left to fall idle first
- :mod:`.budget`: the probes' share of the capture's wall time, spent in order of need
"""

from .after_fetch import time_fetches, time_work_after_fetches
from .capacity import time_cpu_capacity, time_cpu_capacity_span
from .compute import ForwardTimer, time_threads
from .handover import holds_device_tensors, time_worker_handover
from .inprocess import time_inprocess_batch
from .send import time_worker_send
from .settle import wait_workers_idle
from .spin import time_spin
from .thread_timings import agreeing_threads, joined_threads, threads_ratio_span
from .worker_batch import paired_medians, time_batches_in_turn, time_worker_batches

__all__ = [
    "ForwardTimer",
    "holds_device_tensors",
    "paired_medians",
    "agreeing_threads",
    "joined_threads",
    "time_batches_in_turn",
    "time_cpu_capacity",
    "time_cpu_capacity_span",
    "time_fetches",
    "time_inprocess_batch",
    "threads_ratio_span",
    "time_threads",
    "time_work_after_fetches",
    "wait_workers_idle",
    "time_worker_batches",
    "time_worker_handover",
    "time_worker_send",
    "time_spin",
]
