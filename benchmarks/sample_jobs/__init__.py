"""The demo and the CPU samples as jobs (``make_job()`` as in benchmarks/jobs), so that the
benchmarks that check predictions and autofix cover them too (``--samples``).

- ``demo_mnist``: ``torch-diagnose demo``'s workload (MNIST tutorial, per-sample
  augmentation, ``num_workers=0``);
- ``sample_slow_loader``: samples/slow_loader.py (per-sample numpy decode + augment);
- ``sample_small_kernels``: samples/small_kernels.py (24 tiny blocks, batch 8);
- ``sample_healthy``: samples/healthy.py's CPU job (in-memory rows, a dense MLP): nothing
  to fix, so nothing may be kept.

samples/pageable_copy.py, sync_in_loop.py and oom.py plant GPU bottlenecks (pageable
copies, a sync in the user's own loop, device memory): they are GPU jobs.
"""
