"""Every hand-set number the step model, the fixes' transforms and their predictions use.

One line each: what it is; where the number comes from; what goes wrong if it is off.
A quantity the capture can measure on the user's job is measured there, and the number
here is only its fallback. The runs behind a number are in benchmarks/NOTES.md, under the
constant's name.
"""

from __future__ import annotations

# ---------------------------------------------------------------- reading a trace into a graph
#: Host and device timestamps of one trace agree to about this (us): Kineto aligns the
#: clocks to a microsecond; too small breaks launch-to-kernel links at their ends.
CLOCK_EPS_US = 0.5
#: A kernel's launch-to-start latency on an idle stream (us) where no op of its kind shows
#: one: CUDA launches take a few us on current GPUs; wrong, each idle start moves by it.
LAUNCH_LATENCY_US = 5.0
#: A device op that starts more than this after its launch and its stream allowed (us) was
#: held by something the graph must explain (a dependency); the launch latency's own
#: scale; too small reads launch jitter as dependencies.
LATE_US = 5.0
#: A wait for a batch within max(this, READY_WAIT_SHARE x the shortest wait) of the
#: shortest one (us) found the batch ready (the hand-over's own time): the spread of a
#: ready hand-over; too large hides waits for batches still being made.
READY_WAIT_US = 50.0
READY_WAIT_SHARE = 0.1
#: A copy's API call that ends after this share of its copy ran waited for it (a blocking
#: copy): an asynchronous call returns before the copy starts; half tells the two apart.
BLOCKING_COPY_SHARE = 0.5
#: A host runtime call longer than max(SYNC_LONG_US, SYNC_LONG_RATIO x the typical call)
#: waited for the device, for the device op that ends within SYNC_END_US of it: launches
#: take a few us, waits far longer; too low reads slow launches as waits.
SYNC_LONG_US = 50.0
SYNC_LONG_RATIO = 5.0
SYNC_END_US = 20.0
#: Where this share of the launches or more returned just as a device op ended, the queue
#: stayed full and they all waited: a launch's own time is then what each took after its
#: op ended, not their median (a wait). A share of chance endings that high needs device
#: ops ending every SYNC_END_US; too low, a run of tiny kernels reads every launch as a wait.
FULL_QUEUE_SHARE = 0.9

# ---------------------------------------------------------------- the input pipeline
#: Worker-to-trainer hand-over rate (GB/s) of a batch's tensors through a new shared-memory
#: segment, where the capture did not time one (``input_worker_handover_ms``,
#: ``worker_transfer_gbps`` win); timed ~0.5 GB/s with the segment's setup on a 2-CPU host;
#: too low over-charges big batches, so workers are under-predicted for them.
SHM_GBPS = 0.5
#: A training process that kept less than this % of one core busy (host samples), where
#: no worker's batch was timed (WORKER_WAITS_SHARE), is waiting, not computing: its
#: loading is I/O, which a worker overlaps without a core of its own; set between "mostly
#: waits" and "about a core"; wrong, I/O loading is charged CPUs or CPU loading none.
IO_BOUND_PCT = 60.0
#: A worker's batch timed after the loop that wanted a CPU (ran or queued for one) under
#: this share of its time, in the turn that wanted one most, waits on files or the network.
#: CPU work wants one all through, less what a virtual machine's guest counts neither as
#: running nor as queued (seen up to half a batch on a shared host); loading that waits on
#: a read wants one for a sliver (under 0.1 where timed). Set under half; too high calls
#: CPU work waiting (more workers than CPUs offered), too low calls mixed loading CPU work
#: (as a capture without the timing does).
WORKER_WAITS_SHARE = 0.3
#: The most DataLoader workers a usable CPU is given for loading that waits (a worker's
#: batch on a CPU under WORKER_WAITS_SHARE of its time): a bound on the search, not a
#: prediction (the model predicts each count it tries). Each worker is a process with its own forked
#: copy of the dataset's objects; too low leaves waiting loaders short of workers, too high
#: offers counts whose memory the model does not weigh.
WAITING_WORKERS_PER_CPU = 4
#: An epoch that lasts this long (s) or more at the measured step starts its workers too
#: rarely to matter, whatever a start costs (seconds to minutes: imports, opening the
#: data): once a day is under a thousandth of the steps for a start of a minute. Too low,
#: a slow start every few hours (~1% of them) is called nothing; too high, an endless
#: sampler's loader is offered persistent workers it cannot use.
EPOCH_LONG_S = 86_400.0
#: A run whose waits for batches from workers reach this share of the step is taken as
#: loader-bound (its workers deliver one batch a step); below it their cost hides behind
#: the step; the share a rule calls a stall; too low reads a fed loop as loader-bound.
LOADER_BOUND_WAIT = 0.05
#: Of the in-process loading a step, at most this share is taken as the collector's pauses
#: added to a worker's batch (the rest is the batch itself); a guard so that a pause timing
#: larger than the loading it fell in cannot leave a batch costing nothing.
GC_PAUSE_SHARE_MAX = 0.9
#: The loop's pace against the session's timings after it (in-process batch), taken within
#: these bounds; outside them the timing was held up on its own (a busy CPU), not the
#: host's pace; too wide lets one slow timing rescale every worker's batch.
PACE_BOUNDS = (0.67, 1.5)
#: A worker's batch timed in turn with the in-process one that read at least this share of
#: it met the same slow host (both slowed alike): the pace is the host's; the spread of two
#: timings of one batch on a quiet host; too low takes a process's own stall for the host's.
WORKER_AGREES = 0.95
#: A run's waits for batches that came in bursts: one step waited at least this long (ms)
#: and ``BURST_RATIO`` x the median (+ ``BURST_FLOOR_MS``); the rule pack's IN003 measure;
#: a deeper queue is then not predicted (a mean rate cannot show what it absorbs).
BURST_WAIT_MS = 20.0
BURST_RATIO = 5.0
BURST_FLOOR_MS = 0.1
#: Threads' fallback (no timed one-thread forward): the training process's CPU less its
#: loading is read as its ops' threads only where in-process loading is under this share of
#: the step; above it the remainder is noise and torch's threads are taken as used.
THREADS_LOADING_MAX = 0.95
#: The most the model's ops are taken to gain from a batched fetch's shorter load (their
#: timing after each kind of fetch, ``input_batched_fetch_work_ratio``); the top of the
#: ratios timed in loops, timings above it were noise; too high over-predicts the fetch.
WAKE_RATIO_MAX = 1.35
#: A batched fetch timed after the loop keeps at least this share of itself after the
#: loader's own work per batch (counted in the step already) is taken out; a guard against a
#: noisy wait share that would leave the fetch costing nothing.
BATCHED_FETCH_MIN_SHARE = 0.5

# ---------------------------------------------------------------- copies and kernels
#: Pinned host-to-device bandwidth (GB/s) by CUDA compute capability major, where the
#: capture did not time a pinned copy: ~80% of the PCIe link those parts ship with (PCIe 3
#: x16 for V100/T4, 4 for A100, 5 for H100); wrong, pinning gains are off by the same ratio.
PINNED_GBPS = {7: 12.0, 8: 24.0, 9: 50.0}
#: Parameters one multi-tensor (foreach/fused) optimizer launch covers: torch's
#: multi_tensor_apply chunks tensor lists by depth, 110/64/48/36 per launch; too high
#: over-predicts the launches a foreach optimizer saves.
FOREACH_PARAMS_PER_LAUNCH = 64
#: Kernels a per-parameter Adam step launches per parameter (mul_, lerp_/add_, addcmul_,
#: sqrt, addcdiv_), to count parameters from launches; other optimizers launch fewer, which
#: over-counts their parameters and so the launches foreach leaves.
ADAM_KERNELS_PER_PARAM = 5.0
#: The fewest launches a multi-tensor optimizer step makes (one per kind of operation);
#: a floor so that a small model is not predicted to lose its optimizer's host time.
FOREACH_MIN_LAUNCHES = 4.0
#: Duration factor of fp32 memory-bound kernels under AMP (bf16/fp16 halve the bytes they
#: move); kernels bound by something else gain less, so this errs toward a larger gain.
AMP_MEMORY_BOUND_SCALE = 0.5

#: The usable CPUs' mean busy % (``host_cpu_mean_pct``) from which they are saturated and
#: workers are searched downward: busy most of the time, a worker more only takes CPU from
#: the rest; too low searches downward on CPUs that had room.
SATURATED_PCT = 85.0
#: The fixed point of CPUs shared by workers and torch's threads (host.worker_share): each
#: round moves the shares this part of the way to what the step gives (damped: undamped,
#: the shares can swing between two steps), for at most FIXED_POINT_ROUNDS rounds or until
#: the step moves less than FIXED_POINT_TOL of itself; numerical, not fitted.
FIXED_POINT_DAMPING = 0.5
FIXED_POINT_ROUNDS = 100
FIXED_POINT_TOL = 1e-4

#: A thread timing whose rounds spread more than this (median relative deviation) gives no
#: prediction that reads it: twice the spread at which the session times the threads again
#: (``AGAIN_NOISE``, 0.15: what a prediction within 15% can use), so the two timings
#: joined were still that noisy: something else held a CPU while they ran (its quiet work
#: is not read against the loop's either: ``host.loop_contention``). Too low, a quiet run
#: loses its threads split; too high, a disturbed timing gives a number.
THREADS_NOISE_MAX = 0.30

# ---------------------------------------------------------------- calibrating the replay
#: The host's work in a live capture is scaled within these bounds so that the replay gives
#: the unprofiled step: the profiler made profiled steps 1.0-1.4x the plain ones (2.0x on a
#: busy host), so removing it leaves at least half; scaling up covers pauses the window
#: missed. Too narrow leaves a calibration error; too wide hides a broken graph.
HOST_SCALE_MIN = 0.5
HOST_SCALE_MAX = 4.0
#: A replay further than this ratio from the unprofiled step is not calibrated (the graph
#: is taken as it is): such a gap is a model that does not fit the run, not profiler cost.
#: A change of workers is not read against the run's own settings past it either.
CALIBRATE_WITHIN = (0.2, 5.0)
#: The calibration stops within this share of the target step: a tenth of the capture's
#: usual step-to-step spread (a few %); numerical, not fitted.
CALIBRATE_TOL = 0.005

# ---------------------------------------------------------------- ranges
#: The model's own error on a change, beyond the capture's own noise: a range is widened on
#: each side, in log, by EFFECT_FLOOR + EFFECT_ERROR x |ln speedup|, for changes that move
#: CPU work between torch's threads and processes (``cpu``) and for the rest (``other``).
#: Each kind's pair holds the measured speedup in 90% of rows the fit has not seen, by split
#: conformal's rank, with the least median half-width (``benchmarks/range_fit.py`` over
#: corpus_rejudge's tune rows as this code predicts them, the probes' noise carried
#: through the replay; the CPU corpus runs and the tune half's H200 captures).
#: ``cpu``: 50 of 54 rows; a floor (a change predicted at 1.01x measured 1.3x).
#: ``other`` (loader settings that leave the workers' CPU share, the batched fetch, AMP):
#: 11 of 11 rows; a floor (prefetch_factor predicted at 1.00x measured 0.88-1.10x, AMP
#: at 1.00x measured 0.80x). Too small, ranges miss the measurement; too large, a sound
#: fix is said to be one that may not help.
EFFECT_FLOOR = {"cpu": 0.17, "other": 0.22}
EFFECT_ERROR = {"cpu": 0.0, "other": 0.0}

# ---------------------------------------------------------------- reading predictions
#: Configs (and a finding's fixes, and findings) predicted within this share of the best, or
#: whose range's fast end reaches within it, are a tie (one capture's model error is
#: larger), won by the loader with the most headroom; tied findings whose ranges' widths
#: lie within it of each other follow the rules' order; too small picks by noise.
TIE = 0.03
#: Two fixes of one finding whose points lie further apart than this (|ln| of their ratio)
#: are not a tie, whatever their ranges reach: the error of the predicted ratio of two
#: changes of one job, 90th percentile over the tune half's 66 pairs (benchmarks/
#: range_fit.py); the model orders such pairs right 9 times in 10, while each range also
#: holds the capture's noise, which the two share. Too small, the simpler fix no longer
#: leads where the model cannot order them; too large, a 1.05x leads a 1.28x.
FIXES_TIE = 0.183
#: A fix predicted below this speedup is not offered as the fix; the model's error on one
#: capture is a few %.
SLOWER = 0.98
#: A fix predicted below this speedup (and at least SLOWER) changes nothing that matters: it
#: goes after the fixes the model cannot tell.
HELPS = 1.02
#: From this share of the timed steps waiting for a CPU other processes held, a change of
#: CPU work (workers, threads) gets no number: its inputs were timed under a load the run
#: does not own (with a 50% wait, such predictions missed by several x; the committed
#: corpus' quiet captures wait under 2% for others); too low, a quiet run loses its
#: predictions; too high, a busy one prints a number the next hour will not keep. A wait
#: for the run's own workers is modelled, not withheld.
BUSY = 0.10

__all__ = ["ADAM_KERNELS_PER_PARAM", "AMP_MEMORY_BOUND_SCALE", "BATCHED_FETCH_MIN_SHARE",
           "BLOCKING_COPY_SHARE", "BURST_FLOOR_MS", "BURST_RATIO", "BURST_WAIT_MS", "BUSY",
           "CALIBRATE_TOL", "CALIBRATE_WITHIN", "CLOCK_EPS_US", "EFFECT_ERROR", "EFFECT_FLOOR",
           "FIXED_POINT_DAMPING", "FIXED_POINT_ROUNDS", "FIXED_POINT_TOL", "FOREACH_MIN_LAUNCHES",
           "FIXES_TIE", "FOREACH_PARAMS_PER_LAUNCH", "FULL_QUEUE_SHARE", "GC_PAUSE_SHARE_MAX", "HELPS", "HOST_SCALE_MAX",
           "EPOCH_LONG_S", "HOST_SCALE_MIN", "IO_BOUND_PCT", "LATE_US", "LAUNCH_LATENCY_US", "LOADER_BOUND_WAIT",
           "THREADS_NOISE_MAX",
           "PACE_BOUNDS", "PINNED_GBPS", "READY_WAIT_SHARE", "READY_WAIT_US", "SATURATED_PCT",
           "SHM_GBPS", "SLOWER", "SYNC_END_US", "SYNC_LONG_RATIO", "SYNC_LONG_US",
           "THREADS_LOADING_MAX", "TIE", "WAITING_WORKERS_PER_CPU", "WAKE_RATIO_MAX",
           "WORKER_AGREES", "WORKER_WAITS_SHARE"]
